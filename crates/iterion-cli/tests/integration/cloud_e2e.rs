//! Host kind `cloud` (`ITERION_MODE=cloud`, issue 12 item 1): the
//! Kubernetes driver or nothing. Without a reachable cluster an inline run
//! is refused with `SANDBOX_DRIVER_UNAVAILABLE` (never a Docker engine that
//! happens to answer: the test's dockerd is reachable throughout), and
//! `iterion sandbox doctor` says why.
//!
//! Does not prove: a run on a real cluster (none can be installed here;
//! see docs/kubernetes.md).

use crate::support::{Engine, Sandbox, slim};

fn cloud(sb: Sandbox, kubeconfig: &std::path::Path) -> Sandbox {
    let home = sb.dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    sb.with_env("ITERION_MODE", "cloud")
        .with_env("KUBECONFIG", &kubeconfig.to_string_lossy())
        .with_env("HOME", &home.to_string_lossy())
        .with_env("KUBERNETES_SERVICE_HOST", "")
        .with_env("ITERION_SANDBOX_DOCTOR_TIMEOUT", "2s")
}

fn inline_workflow(sb: &Sandbox) -> std::path::PathBuf {
    sb.write(
        "cloud.iter",
        &format!(
            "tool probe:\n  command: `true`\n\nworkflow cloud_probe:\n  entry: probe\n  sandbox:\n    image: \"{}\"\n    host_state: none\n  probe -> done\n",
            slim()
        ),
    )
}

#[test]
fn without_a_cluster_an_inline_run_is_refused_not_run_on_docker() {
    let sb = Sandbox::new(Engine::Docker);
    let missing = sb.dir.path().join("no-such-kubeconfig");
    let sb = cloud(sb, &missing);
    let file = inline_workflow(&sb);
    let res = sb.run(&file, &[]);
    assert_eq!(res.code, Some(1), "{res:?}");
    assert_eq!(res.doc["status"], "failed", "{res:?}");
    assert_eq!(
        res.doc["failure_code"], "SANDBOX_DRIVER_UNAVAILABLE",
        "{res:?}"
    );
    let events = sb.events(&res.run_id());
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "sandbox_driver_selected"),
        "no driver may be selected: {events:?}"
    );

    let doctor = sb.iterion(&["sandbox", "doctor", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&doctor.stdout).expect("doctor json");
    assert_eq!(report["host"], "cloud", "{report}");
    assert_eq!(report["selected_driver"], "noop", "{report}");
    let why = report["driver_error"].as_str().unwrap_or_default();
    assert!(why.contains("kubernetes"), "{report}");
}

/// A kubeconfig naming an API server that refuses connections: the bounded
/// probe fails and the run is refused the same way.
#[test]
fn an_unreachable_api_server_is_the_same_refusal() {
    let sb = Sandbox::new(Engine::Docker);
    // A port nobody listens on: bind, note, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let kubeconfig = sb.dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    namespace: sbx\n    user: u\nusers:\n- name: u\n  user: {{}}\ncurrent-context: x\n"
        ),
    )
    .expect("kubeconfig");
    let sb = cloud(sb, &kubeconfig);
    let file = inline_workflow(&sb);
    let res = sb.run(&file, &[]);
    assert_eq!(res.code, Some(1), "{res:?}");
    assert_eq!(
        res.doc["failure_code"], "SANDBOX_DRIVER_UNAVAILABLE",
        "{res:?}"
    );
}
