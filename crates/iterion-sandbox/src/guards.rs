//! Guards that refuse a plan: sensitive bind sources, flag/line injection in
//! mount specs, image, user and workdir, bad env names/values, build
//! contexts escaping the workspace, docker `--mount` CSV parsing, the
//! kubernetes compatibility check and the noop file-secret gate.
//!
//! Every check here is lexical: paths are normalised as strings
//! (`/proc/../proc`, `//`, `/./`, trailing slashes) and never resolved
//! through the filesystem (facts §6.7). A spelling is only the first
//! gate: bind sources are judged again by their real path in
//! [`crate::binds`]. The one exception here is
//! [`check_build_context_symlinks`], a separate opt-in helper that
//! canonicalises existing paths.
//!
//! CONTRACT (drivers call this in `prepare`): keep the signature of
//! [`check_launch_plan`].

use std::path::{Path, PathBuf};

use iterion_core::plan::path_is_under;
use iterion_core::{
    ContainerPath, LaunchPlan, Mount, MountKind, MountOrigin, ReadBackPath, Spec, parse_size,
};

use crate::binds::{BindRole, HostBindSettings, check_spelling};

pub(crate) mod lexical;
pub use lexical::{GuardViolation, check_token, normalize_lexical};

/// Refuse a declared bind source whose spelling names a sensitive host
/// path (lexical only; [`crate::binds::judge_bind`] judges the real path).
pub fn check_bind_source(source: &str) -> Result<(), GuardViolation> {
    check_spelling(source, BindRole::Declared, &HostBindSettings::default()).map(|_| ())
}

/// Env names may not be empty nor contain `=`, CR, LF, NUL; values may not
/// contain CR, LF, NUL (facts §6.7). The value is never echoed.
pub fn check_env(name: &str, value: &str) -> Result<(), GuardViolation> {
    if name.is_empty() || name.contains(['=', '\r', '\n', '\0']) {
        return Err(GuardViolation::new(
            "env",
            &name.escape_debug().to_string(),
            "invalid variable name",
        ));
    }
    if value.contains(['\r', '\n', '\0']) {
        return Err(GuardViolation::new(
            "env",
            name,
            "value contains CR, LF or NUL",
        ));
    }
    Ok(())
}

fn check_container_path(field: &str, path: &str) -> Result<(), GuardViolation> {
    path.parse::<ContainerPath>().map(drop).map_err(|e| {
        GuardViolation::new(field, &path.escape_debug().to_string(), e.kind.to_string())
    })
}

/// Parse one docker `--mount` CSV string (`type=bind,source=/a,target=/b,readonly`)
/// into a typed [`Mount`] with origin [`MountOrigin::Workflow`]. Unknown
/// keys are refused (a key this parser does not understand is a key it
/// cannot vet, e.g. `bind-propagation=shared`). A source without a type is
/// a bind (facts §6.6). Bind sources go through [`check_bind_source`].
pub fn parse_docker_mount(spec: &str) -> Result<Mount, GuardViolation> {
    if spec.trim().is_empty() {
        return Err(GuardViolation::new("mount", spec, "empty mount spec"));
    }
    check_token("mount", spec)?;
    let mut kind: Option<MountKind> = None;
    let mut source: Option<String> = None;
    let mut target: Option<String> = None;
    let mut readonly = false;
    let mut size = None;
    for field in spec.split(',') {
        let field = field.trim();
        if field.is_empty() {
            continue;
        }
        let (key, value) = match field.split_once('=') {
            Some((k, v)) => (k.trim().to_ascii_lowercase(), Some(v.trim())),
            None => (field.to_ascii_lowercase(), None),
        };
        let need = |v: Option<&str>| {
            v.filter(|s| !s.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| GuardViolation::new("mount", spec, format!("{key} needs a value")))
        };
        match key.as_str() {
            "type" => {
                let word = need(value)?;
                kind = Some(MountKind::parse(&word).ok_or_else(|| {
                    GuardViolation::new("mount", spec, format!("unknown mount type {word:?}"))
                })?);
            }
            "source" | "src" => source = Some(need(value)?),
            "target" | "destination" | "dst" => {
                let t = need(value)?;
                let t = t.trim_end_matches('/');
                target = Some(if t.is_empty() {
                    "/".to_owned()
                } else {
                    t.to_owned()
                });
            }
            "readonly" | "ro" => {
                readonly = match value.map(str::to_ascii_lowercase).as_deref() {
                    None | Some("true") | Some("1") => true,
                    Some("false") | Some("0") => false,
                    Some(other) => {
                        return Err(GuardViolation::new(
                            "mount",
                            spec,
                            format!("readonly={other:?} is not a boolean"),
                        ));
                    }
                }
            }
            "size" | "tmpfs-size" => {
                let word = need(value)?;
                size = Some(
                    parse_size(&word)
                        .map_err(|e| GuardViolation::new("mount", spec, e.to_string()))?,
                );
            }
            // Harmless legacy macOS hint; accepted and ignored.
            "consistency" => {}
            other => {
                return Err(GuardViolation::new(
                    "mount",
                    spec,
                    format!("unknown mount option {other:?}"),
                ));
            }
        }
    }
    let target = target.ok_or_else(|| GuardViolation::new("mount", spec, "missing target"))?;
    check_container_path("mount target", &target)?;
    let kind = kind.unwrap_or(if source.is_some() {
        MountKind::Bind
    } else {
        MountKind::Volume
    });
    if kind == MountKind::Bind {
        match &source {
            Some(s) => check_bind_source(s)?,
            None => return Err(GuardViolation::new("mount", spec, "bind without source")),
        }
    } else if let Some(s) = &source {
        check_token("mount source", s)?;
    }
    Ok(Mount {
        kind,
        source,
        target,
        readonly,
        size,
        origin: MountOrigin::Workflow,
    })
}

/// The doctor's "spec safety" battery on a raw [`Spec`]: every mount
/// string, image, user, workspace folder, env entry and read-back path.
pub fn check_spec(spec: &Spec) -> Result<(), GuardViolation> {
    for raw in &spec.mounts {
        parse_docker_mount(raw)?;
    }
    if let Some(image) = &spec.image {
        check_image(image)?;
    }
    if let Some(user) = &spec.user {
        check_token("user", user)?;
    }
    if let Some(folder) = &spec.workspace_folder {
        check_container_path("workdir", folder)?;
    }
    for (k, v) in &spec.env {
        check_env(k, v)?;
    }
    // `spec.read_back` holds `ReadBackPath`s: parsed where the block was read.
    Ok(())
}

fn check_image(image: &str) -> Result<(), GuardViolation> {
    if image.trim().is_empty() {
        return Err(GuardViolation::new("image", image, "empty image reference"));
    }
    check_token("image", image)?;
    if image.contains(char::is_whitespace) {
        return Err(GuardViolation::new("image", image, "contains whitespace"));
    }
    Ok(())
}

/// A declared read-back path, judged by the one parser
/// ([`ReadBackPath`]: absolute, normalised as written, never `/` nor under
/// `/proc`, `/sys`, `/dev`; docs/reference/SPEC.md §4). Returns the path.
pub fn check_read_back_path(path: &str) -> Result<String, GuardViolation> {
    path.parse::<ReadBackPath>().map(String::from).map_err(|e| {
        GuardViolation::new(
            "read_back",
            &path.escape_debug().to_string(),
            e.kind.to_string(),
        )
    })
}

/// Check every guard on a finalized plan.
pub fn check_launch_plan(plan: &LaunchPlan) -> Result<(), GuardViolation> {
    if let Some(image) = &plan.image {
        check_image(image)?;
    }
    if let Some(user) = &plan.user {
        check_token("user", user)?;
    }
    check_container_path("workdir", &plan.workdir)?;
    for (k, v) in &plan.env {
        check_env(k, v)?;
    }
    for m in &plan.mounts {
        check_container_path("mount target", &m.target)?;
        match m.kind {
            // Judged by its role: the workspace may live under /root
            // (issue 14), a declared mount may not.
            MountKind::Bind => match &m.source {
                Some(s) => {
                    check_spelling(s, BindRole::of(m.origin), &HostBindSettings::default())?;
                }
                None => {
                    return Err(GuardViolation::new(
                        "mount",
                        &m.target,
                        "bind without source",
                    ));
                }
            },
            _ => {
                if let Some(s) = &m.source {
                    check_token("mount source", s)?;
                }
            }
        }
    }
    for decl in &plan.read_back {
        check_read_back_path(&decl.container_path)?;
    }
    if let Some(build) = &plan.build {
        check_token("build dockerfile", &build.dockerfile)?;
        check_token("build context", &build.context)?;
        for (k, v) in &build.args {
            check_env(k, v)?;
        }
    }
    Ok(())
}

/// Resolve a workspace-relative build path (`build.context`,
/// `build.dockerfile`) lexically against the workspace and refuse an
/// escape (facts §6.8). Absolute inputs are judged as they are.
pub fn check_build_path(
    workspace: &Path,
    field: &str,
    rel: &str,
) -> Result<PathBuf, GuardViolation> {
    check_token(field, rel)?;
    let ws = normalize_lexical(&workspace.to_string_lossy());
    let joined = if rel.starts_with('/') {
        rel.to_owned()
    } else {
        format!("{ws}/{rel}")
    };
    let resolved = normalize_lexical(&joined);
    if !path_is_under(&resolved, &ws) {
        return Err(GuardViolation::new(
            field,
            rel,
            "resolves outside the workspace",
        ));
    }
    Ok(PathBuf::from(resolved))
}

/// Symlink escape check, the one guard that touches the filesystem (kept
/// apart so every other guard stays lexical): canonicalise the resolved
/// path when it exists and refuse it when it lands outside the
/// canonicalised workspace. A path that does not exist yet passes here;
/// the build itself then fails on it.
pub fn check_build_context_symlinks(
    workspace: &Path,
    resolved: &Path,
) -> Result<(), GuardViolation> {
    let (Ok(ws), Ok(real)) = (workspace.canonicalize(), resolved.canonicalize()) else {
        return Ok(());
    };
    if real.starts_with(&ws) {
        Ok(())
    } else {
        Err(GuardViolation::new(
            "build context",
            &resolved.to_string_lossy(),
            "a symlink leads outside the workspace",
        ))
    }
}

/// Who asks the kubernetes compatibility question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeCheck {
    /// `Driver::prepare`: a missing user defaults to `1000:1000`.
    Engine,
    /// `doctor --strict` / pre-flight: a missing user fails.
    Doctor,
}

/// The uid every iterion sandbox image runs as.
pub const DEFAULT_KUBE_USER: &str = "1000:1000";

/// `kubernetes.ValidateSpec` (facts §5.3/§11.2): no build, an image, a
/// numeric user (runAsNonRoot), no host_state auto. Returns the effective
/// user.
pub fn check_kubernetes_spec(spec: &Spec, who: KubeCheck) -> Result<String, GuardViolation> {
    if spec.build.is_some() {
        return Err(GuardViolation::new(
            "build",
            "",
            "kubernetes cannot build images; pin a pre-built image",
        ));
    }
    if spec.image.as_deref().is_none_or(|i| i.trim().is_empty()) {
        return Err(GuardViolation::new(
            "image",
            "",
            "kubernetes requires image:",
        ));
    }
    if spec.host_state == Some(iterion_core::HostState::Auto) {
        return Err(GuardViolation::new(
            "host_state",
            "auto",
            "no host filesystem in a pod; set host_state: none",
        ));
    }
    match spec.user.as_deref().map(str::trim) {
        None | Some("") => match who {
            KubeCheck::Engine => Ok(DEFAULT_KUBE_USER.to_owned()),
            KubeCheck::Doctor => Err(GuardViolation::new(
                "user",
                "",
                "kubernetes needs a numeric user (defaults to 1000:1000 at run time)",
            )),
        },
        Some(user) => {
            let numeric = user
                .split(':')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                && user.split(':').count() <= 2;
            if numeric {
                Ok(user.to_owned())
            } else {
                Err(GuardViolation::new(
                    "user",
                    user,
                    "kubernetes needs a numeric uid[:gid] (runAsNonRoot)",
                ))
            }
        }
    }
}

/// The noop file-secret gate: `as: file` secrets are delivered by a mount,
/// so a host passthrough cannot carry them (hard error, facts §6.9 / seed).
pub fn check_noop_file_secrets(file_secret_count: usize) -> Result<(), GuardViolation> {
    if file_secret_count == 0 {
        Ok(())
    } else {
        Err(GuardViolation::new(
            "secrets",
            &file_secret_count.to_string(),
            "file secrets require a real sandbox driver (the mount is their delivery channel)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn plan() -> LaunchPlan {
        LaunchPlan {
            image: Some("iterion-sandbox-slim:local".into()),
            workdir: "/work".into(),
            ..LaunchPlan::default()
        }
    }

    #[test]
    fn normalizes_lexically() {
        for (input, want) in [
            ("/proc/../proc", "/proc"),
            ("//proc//", "/proc"),
            ("/./proc/./self", "/proc/self"),
            ("/../../etc/shadow", "/etc/shadow"),
            ("a/../..", ".."),
            ("/", "/"),
        ] {
            assert_eq!(normalize_lexical(input), want, "{input}");
        }
    }

    #[test]
    fn sensitive_sources_refused_in_every_spelling() {
        for src in [
            "/",
            "//",
            "/var/run/docker.sock",
            "/run/docker.sock/",
            "/var//run/podman/podman.sock",
            "/var/run/other.sock",
            "/proc",
            "/proc/../proc",
            "/proc/1/root",
            "/sys/",
            "/dev/sda",
            "/etc",
            "/etc/hosts",
            "/etc/shadow",
            "/etc/./gshadow",
            "/etc/sudoers.d/x",
            "/root",
            "/root/.ssh/id_rsa",
            "/boot//",
            "/home/u/.ssh",
            "/home/u/.ssh/id_rsa",
            "/home/u/.aws/credentials",
            "/home/u/.config/gcloud",
            "/home/u/.kube/..",
            "/x/.npmrc",
            "/x/.pypirc",
            "/x/.docker/config.json",
            "/x/.gnupg",
            "/x/.gcloud",
            "/x/.azure",
            "/var",
            "/var/lib",
            "/var/lib/docker/volumes",
            "/var/lib/containers/storage",
            "/tmp",
            "/tmp/../tmp",
            "/var/tmp",
            "proc",
            "relative/dir",
            "",
            "-v/etc",
            "/tmp\n/proc",
        ] {
            assert!(check_bind_source(src).is_err(), "{src:?} must be refused");
        }
    }

    #[test]
    fn ordinary_sources_pass() {
        for src in [
            "/home/u/project",
            "/tmp/x",
            "/srv/cache",
            "/opt/tools/bin",
            "/procfs",
            "/home/u/.sshx",
            "/root/project",
        ] {
            assert_eq!(check_bind_source(src), Ok(()), "{src}");
        }
    }

    #[test]
    fn the_workspace_is_judged_as_a_workspace() {
        let ws = |src: &str| {
            let mut p = plan();
            p.mounts.push(Mount {
                kind: MountKind::Bind,
                source: Some(src.into()),
                target: "/work".into(),
                readonly: false,
                size: None,
                origin: MountOrigin::Workspace,
            });
            check_launch_plan(&p)
        };
        // Issue 14: a project under /root, /etc or /run is still a project.
        for ok in [
            "/root/proj",
            "/etc/myproj",
            "/run/user/1000/proj",
            "/tmp/ws",
        ] {
            assert_eq!(ws(ok), Ok(()), "{ok}");
        }
        // `/home` is refused by the real-path judge, which knows the homes.
        for bad in [
            "/",
            "/root",
            "/etc",
            "/var",
            "/tmp",
            "/proc/self/cwd",
            "/root/.ssh/proj",
            "/var/lib/docker/x",
        ] {
            assert!(ws(bad).is_err(), "{bad} must be refused as a workspace");
        }
    }

    #[test]
    fn parses_docker_mount_csv() {
        let m = parse_docker_mount("type=bind,source=/a,target=/b/,readonly").expect("parse");
        assert_eq!(m.kind, MountKind::Bind);
        assert_eq!(m.source.as_deref(), Some("/a"));
        assert_eq!(m.target, "/b");
        assert!(m.readonly);
        let m = parse_docker_mount(" src = /a , dst = /b ").expect("parse");
        assert_eq!(m.kind, MountKind::Bind, "a source without type is a bind");
        let m = parse_docker_mount("type=tmpfs,target=/t,tmpfs-size=64MiB").expect("parse");
        assert_eq!(m.size, Some(iterion_core::ByteSize(64 << 20)));
        let m = parse_docker_mount("type=volume,source=cache,target=/c,ro=false").expect("parse");
        assert_eq!((m.kind, m.readonly), (MountKind::Volume, false));
    }

    #[test]
    fn refuses_bad_docker_mounts() {
        for spec in [
            "",
            "type=bind,source=/a,target=/b,bind-propagation=shared",
            "type=weird,target=/b",
            "source=/a",
            "type=bind,target=/b",
            "type=bind,source=/proc,target=/p",
            "source=/home/u/.ssh,target=/s",
            "-type=bind,source=/a,target=/b",
            "type=bind,source=/a,target=relative",
            "type=bind,source=/a,target=/b\r",
            "type=bind,source=/a,target=/b,readonly=maybe",
            "type=tmpfs,target=/t,size=lots",
        ] {
            assert!(
                parse_docker_mount(spec).is_err(),
                "{spec:?} must be refused"
            );
        }
    }

    #[test]
    fn env_rules() {
        assert!(check_env("A", "b c").is_ok());
        assert!(check_env("", "x").is_err());
        assert!(check_env("A=B", "x").is_err());
        assert!(check_env("A\n", "x").is_err());
        let err = check_env("TOKEN", "sec\nret").expect_err("refused");
        assert!(!err.to_string().contains("sec"), "value never echoed");
    }

    #[test]
    fn launch_plan_guards() {
        assert_eq!(check_launch_plan(&plan()), Ok(()));
        let mut p = plan();
        p.image = Some("--privileged".into());
        assert!(check_launch_plan(&p).is_err());
        let mut p = plan();
        p.user = Some("1000\n".into());
        assert!(check_launch_plan(&p).is_err());
        let mut p = plan();
        p.workdir = "-w".into();
        assert!(check_launch_plan(&p).is_err());
        let mut p = plan();
        p.workdir = "rel".into();
        assert!(check_launch_plan(&p).is_err());
        let mut p = plan();
        p.env = BTreeMap::from([("X".into(), "a\0".into())]);
        assert!(check_launch_plan(&p).is_err());
        let mut p = plan();
        p.mounts.push(Mount {
            kind: MountKind::Bind,
            source: Some("/sys/../sys/fs".into()),
            target: "/x".into(),
            readonly: true,
            size: None,
            origin: MountOrigin::Workflow,
        });
        assert!(check_launch_plan(&p).is_err());
        let mut p = plan();
        p.read_back.push(iterion_core::ReadBackDecl {
            container_path: "/dev/../dev/shm".into(),
            cap: iterion_core::ByteSize::DEFAULT_READBACK_CAP,
            origin: MountOrigin::ReadBack,
        });
        assert!(check_launch_plan(&p).is_err());
    }

    #[test]
    fn build_paths_stay_in_workspace() {
        let ws = Path::new("/w/repo");
        assert_eq!(
            check_build_path(ws, "context", "docker/.").expect("ok"),
            PathBuf::from("/w/repo/docker")
        );
        assert!(check_build_path(ws, "context", ".").is_ok());
        assert!(check_build_path(ws, "context", "../other").is_err());
        assert!(check_build_path(ws, "context", "a/../../..").is_err());
        assert!(check_build_path(ws, "context", "/etc").is_err());
        assert!(check_build_path(ws, "context", "/w/repo2").is_err());
    }

    #[test]
    fn symlink_escape_is_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).expect("mkdir");
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::os::unix::fs::symlink(&outside, ws.join("ctx")).expect("symlink");
        let resolved = check_build_path(&ws, "context", "ctx").expect("lexically fine");
        assert!(check_build_context_symlinks(&ws, &resolved).is_err());
        assert!(check_build_context_symlinks(&ws, &ws).is_ok());
    }

    #[test]
    fn kubernetes_compatibility() {
        let mut spec = Spec {
            image: Some("img".into()),
            host_state: Some(iterion_core::HostState::None),
            ..Spec::default()
        };
        assert_eq!(
            check_kubernetes_spec(&spec, KubeCheck::Engine).as_deref(),
            Ok(DEFAULT_KUBE_USER)
        );
        assert!(check_kubernetes_spec(&spec, KubeCheck::Doctor).is_err());
        spec.user = Some("1001:1001".into());
        assert!(check_kubernetes_spec(&spec, KubeCheck::Doctor).is_ok());
        spec.user = Some("iterion".into());
        assert!(check_kubernetes_spec(&spec, KubeCheck::Engine).is_err());
        spec.user = Some("1:2:3".into());
        assert!(check_kubernetes_spec(&spec, KubeCheck::Engine).is_err());
        spec.user = None;
        spec.host_state = Some(iterion_core::HostState::Auto);
        assert!(check_kubernetes_spec(&spec, KubeCheck::Engine).is_err());
        spec.host_state = None;
        spec.build = Some(iterion_core::BuildSpec::default());
        assert!(check_kubernetes_spec(&spec, KubeCheck::Engine).is_err());
        let no_image = Spec::default();
        assert!(check_kubernetes_spec(&no_image, KubeCheck::Engine).is_err());
    }

    #[test]
    fn noop_file_secret_gate() {
        assert!(check_noop_file_secrets(0).is_ok());
        assert!(check_noop_file_secrets(1).is_err());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn spelling() -> impl Strategy<Value = String> {
            let mut roots = crate::binds::SEALED_AREAS.to_vec();
            roots.extend_from_slice(crate::binds::ENGINE_AREAS);
            roots.extend_from_slice(&["/root/.ssh", "/root/.aws"]);
            let root = prop::sample::select(roots);
            let noise = prop::collection::vec(
                prop::sample::select(vec!["", "/", "/.", "//", "/x/..", "/./", "/a/b/../.."]),
                0..4,
            );
            let tail = prop::sample::select(vec!["", "/", "/sub", "/sub/", "//deep/.."]);
            (root, noise, tail).prop_map(|(root, noise, tail)| {
                // Spread noise between the root's components.
                let comps: Vec<&str> = root.split('/').filter(|c| !c.is_empty()).collect();
                let mut out = String::new();
                for (i, c) in comps.iter().enumerate() {
                    out.push('/');
                    out.push_str(c);
                    if let Some(n) = noise.get(i) {
                        out.push_str(n);
                    }
                }
                out.push_str(tail);
                out
            })
        }

        proptest! {
            #[test]
            fn no_sensitive_source_survives(src in spelling()) {
                prop_assert!(check_bind_source(&src).is_err(), "{src}");
                let csv = format!("type=bind,source={src},target=/x");
                prop_assert!(parse_docker_mount(&csv).is_err());
            }

            #[test]
            fn credential_component_anywhere_refused(
                pre in "(/[a-z]{1,6}){0,3}",
                comp in prop::sample::select(crate::binds::CREDENTIAL_NAMES.to_vec()),
                post in "(/[a-z]{1,6}){0,3}/?",
            ) {
                let src = format!("{pre}/{comp}{post}");
                prop_assert!(check_bind_source(&src).is_err(), "{src}");
            }

            #[test]
            fn mount_parser_never_panics(s in "\\PC{0,80}") {
                let _ = parse_docker_mount(&s);
            }

            #[test]
            fn normalize_is_idempotent(s in "[/a.]{0,30}") {
                let once = normalize_lexical(&s);
                prop_assert_eq!(normalize_lexical(&once), once.clone());
            }
        }
    }
}
