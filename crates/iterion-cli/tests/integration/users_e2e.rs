//! Issue 14 item 3 on the real dockerd and the real Podman: the run-files
//! dir, the driver's per-run volumes and the secret files belong to (or
//! are readable by) the user the sandbox runs as — root, a spec's
//! `user: "1000:1000"`, and an image whose default user is not root —
//! with host binds and on a bindless engine (where the workspace and the
//! run files are volumes the engine creates root-owned). In every case the
//! node writes its run file, the file is drained, and what it may write
//! (the workspace volume, its secret file) works.

use serde_json::Value;

use crate::support::{Engine, Sandbox, busybox, of_type};

const SECRET: &str = "e2e-users-s3cr3t-51d0";

/// `IMAGE_BLOCK` is the sandbox's image lines, `USER_LINE` its `user:` line
/// (or nothing), `SECRETS` the secrets block (or nothing).
const WORKFLOW: &str = r#"schema who:
  ids: string
  ws: string
  secret: string
  cap_bnd: string

SECRETS
tool who:
  command: `ws=no; printf 'by the tool' > "$PROJECT_DIR/by-tool.txt" 2>/dev/null && ws=yes; printf 'a report' > "$ITERION_ARTIFACT_FILES_DIR/report.txt"; sec=none; if [ -n "$DB_PASS_FILE" ]; then sec=unreadable; cat "$DB_PASS_FILE" >/dev/null 2>&1 && sec=readable; fi; printf '{"ids":"%s","ws":"%s","secret":"%s","cap_bnd":"%s"}' "$(id -u):$(id -g)" "$ws" "$sec" "$(awk '/^CapBnd/{print $2}' /proc/self/status)"`
  output: who

workflow users:
  sandbox:
IMAGE_BLOCK    host_state: none
USER_LINE  entry: who
  who -> done
"#;

const SECRETS_BLOCK: &str =
    "secrets:\n  db_pass:\n    value: \"${E2E_DB_PASS}\"\n    as: file\n    env: DB_PASS_FILE\n";

/// The image a case runs.
#[derive(Debug, Clone, Copy)]
enum Image {
    /// busybox, whose default user is root.
    Busybox,
    /// busybox with `USER 1001:1001`.
    NonRootDefault,
}

struct Outcome {
    ids: String,
    /// The bounding capability mask of the node's process.
    cap_bnd: u64,
    ws: String,
    secret: String,
    drained: bool,
}

fn run_case(engine: Engine, bindless: bool, image: Image, user: Option<&str>) -> Outcome {
    let mut sb = Sandbox::new(engine).with_env("E2E_DB_PASS", SECRET);
    if bindless {
        sb = sb.with_env("ITERION_SANDBOX_DOCKER_BINDS", "none");
    }
    let image_block = match image {
        Image::Busybox => format!("    image: \"{}\"\n", busybox()),
        Image::NonRootDefault => {
            sb.write(
                "Dockerfile",
                &format!("FROM {}\nUSER 1001:1001\n", busybox()),
            );
            "    build:\n      dockerfile: \"Dockerfile\"\n".to_owned()
        }
    };
    let text = WORKFLOW
        .replace("IMAGE_BLOCK", &image_block)
        .replace(
            "USER_LINE",
            &user
                .map(|u| format!("    user: \"{u}\"\n"))
                .unwrap_or_default(),
        )
        // A bindless engine refuses file secrets (no delivery channel).
        .replace("SECRETS", if bindless { "" } else { SECRETS_BLOCK });
    let file = sb.write("users.iter", &text);
    let r = sb.run(&file, &[]);
    let case = format!("{engine:?} bindless={bindless} {image:?} user={user:?}");
    assert_eq!(r.status(), "finished", "{case}: {}", r.stderr);
    let events = sb.events(&r.run_id());
    let out: &Value = &of_type(&events, "node_finished")[0]["data"]["output"];
    let field = |k: &str| out[k].as_str().unwrap_or_default().to_owned();
    let files = sb.files(&r.run_id());
    let drained = files["files"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f["path"] == "report.txt"));
    let got = sb.iterion(&["files", &r.run_id(), "--get", "report.txt"]);
    assert_eq!(
        drained,
        got.stdout == b"a report",
        "{case}: listing and content disagree: {files}"
    );
    Outcome {
        ids: field("ids"),
        cap_bnd: u64::from_str_radix(&field("cap_bnd"), 16)
            .unwrap_or_else(|_| panic!("{case}: CapBnd in {out}")),
        ws: field("ws"),
        secret: field("secret"),
        drained,
    }
}

/// The bounding mask of a root sandbox: exactly the driver's kept set.
fn root_caps() -> u64 {
    iterion_driver_docker::SANDBOX_CAPABILITIES
        .iter()
        .map(|c| match *c {
            "CHOWN" => 1u64 << 0,
            "DAC_OVERRIDE" => 1 << 1,
            "FOWNER" => 1 << 3,
            "FSETID" => 1 << 4,
            "KILL" => 1 << 5,
            "SETGID" => 1 << 6,
            "SETUID" => 1 << 7,
            "NET_BIND_SERVICE" => 1 << 10,
            other => panic!("no bit for {other}"),
        })
        .sum()
}

/// Bindless: the engine creates the workspace and run-files volumes; each
/// user writes both and its run file is drained.
#[test]
fn bindless_volumes_belong_to_the_user_the_sandbox_runs_as() {
    for engine in Engine::ALL {
        for (image, user, ids) in [
            (Image::Busybox, None, "0:0"),
            (Image::Busybox, Some("1000:1000"), "1000:1000"),
            (Image::NonRootDefault, None, "1001:1001"),
        ] {
            let case = format!("{engine:?} {image:?} {user:?}");
            let o = run_case(engine, true, image, user);
            assert_eq!(o.ids, ids, "{case}");
            assert!(o.drained, "{case}: the run file was not drained");
            assert_eq!(o.ws, "yes", "{case}: the workspace volume is not writable");
            assert_eq!(o.secret, "none", "{case}");
            if user.is_none() && matches!(image, Image::Busybox) {
                assert_eq!(o.cap_bnd, root_caps(), "{case}: {:#x}", o.cap_bnd);
            }
        }
    }
}

/// With host binds, iterion running as root in a root-owned checkout (the
/// quick start, CI): root's sandbox runs as root and writes the checkout,
/// under the seccomp guard (issue 19 item 4): the kept set without
/// `FSETID`. A spec user and an image whose default user is not root run
/// as themselves, get the run-files dir and their secret file, and hold
/// no capability (Podman would make them effective: root's checkout
/// writable through `DAC_OVERRIDE`).
#[test]
fn bound_run_files_and_secrets_belong_to_the_user_the_sandbox_runs_as() {
    let guarded = root_caps() & !(1 << 4);
    for engine in Engine::ALL {
        for (image, user, ids, ws, caps) in [
            (Image::Busybox, Some("1000:1000"), "1000:1000", "no", 0),
            (Image::NonRootDefault, None, "1001:1001", "no", 0),
            (Image::Busybox, None, "0:0", "yes", guarded),
        ] {
            let case = format!("{engine:?} {image:?} {user:?}");
            let o = run_case(engine, false, image, user);
            assert_eq!(o.ids, ids, "{case}");
            assert!(o.drained, "{case}: the run file was not drained");
            assert_eq!(o.secret, "readable", "{case}");
            // The checkout is root's: writable by root only.
            assert_eq!(o.ws, ws, "{case}");
            assert_eq!(o.cap_bnd, caps, "{case}: {:#x}", o.cap_bnd);
        }
    }
}
