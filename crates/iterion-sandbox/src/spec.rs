//! Spec construction after the mode is picked (facts §3.3, seed step 7):
//! inline from the workflow block; auto from the repo devcontainer FUSED
//! with the workflow block, else the default image. Returns the events to
//! emit as data; the runtime emits them.
//!
//! Fusion: the repo file wins on container fields (image/build/user/
//! workspace folder/post_create), workflow env wins per key, a deny class
//! strips repo env keys (`sandbox_env_denied`), the operator overlay is
//! merged last. A devcontainer-derived spec with no usable `network:`
//! block is defaulted to allowlist + `iterion-default`
//! (`sandbox_network_defaulted`).

use std::collections::BTreeMap;

use iterion_core::{BuildSpec, EventKind, Mode, NetPreset, NetworkMode, Spec};

use crate::devcontainer::Devcontainer;
use crate::error::PolicyError;
use crate::guards::check_spec;

/// The preset a devcontainer-derived spec defaults to.
pub const DEFAULT_PRESET: NetPreset = NetPreset::IterionDefault;

/// Where the spec came from (labels the `auto` source suffix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecOrigin {
    /// The workflow block.
    Inline,
    /// The repo devcontainer at this path, fused with the block.
    Devcontainer {
        /// File path.
        path: String,
    },
    /// No devcontainer: the default (or the block's own) image.
    DefaultImage {
        /// The image.
        image: String,
    },
}

/// The built spec and the events its construction produced.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltSpec {
    /// The spec to plan mounts from.
    pub spec: Spec,
    /// Where it came from.
    pub origin: SpecOrigin,
    /// Events to emit (`sandbox_env_denied`, `sandbox_network_defaulted`).
    pub events: Vec<EventKind>,
}

/// The `source` label including the auto suffix of facts §3.4.
pub fn source_label(source: &str, origin: &SpecOrigin) -> String {
    match origin {
        SpecOrigin::Inline => source.to_owned(),
        SpecOrigin::Devcontainer { path } => format!("{source} ({path})"),
        SpecOrigin::DefaultImage { image } => format!("{source} (default image: {image})"),
    }
}

/// Whether a repo-supplied env key is in the deny class: keys that would
/// redirect the agent's traffic, loader, shell or credentials. A checked-out
/// PR controls the devcontainer file, so these never come from it.
pub fn env_key_denied(key: &str) -> bool {
    let k = key.to_ascii_uppercase();
    const EXACT: &[&str] = &[
        "PATH",
        "HOME",
        "SHELL",
        "ENV",
        "BASH_ENV",
        "PROMPT_COMMAND",
        "IFS",
        "NODE_OPTIONS",
        "NODE_EXTRA_CA_CERTS",
        "NODE_TLS_REJECT_UNAUTHORIZED",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_ASKPASS",
        "SSH_AUTH_SOCK",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PERL5OPT",
        "RUBYOPT",
        "CLAUDE_CONFIG_DIR",
        "CODEX_HOME",
    ];
    EXACT.contains(&k.as_str())
        || k.starts_with("LD_")
        || k.starts_with("DYLD_")
        || k.ends_with("_PROXY")
        || k.starts_with("ITERION_")
        || k.starts_with("GIT_CONFIG")
        || k.ends_with("_BASE_URL")
        || k.starts_with("ANTHROPIC_")
        || k.starts_with("OPENAI_")
}

/// `Spec.Validate` for an active spec: exactly one of image/build, an
/// absolute workspace folder, every guard.
pub fn validate_spec(spec: &Spec) -> Result<(), PolicyError> {
    let invalid = |r: &str| {
        Err(PolicyError::InvalidSpec {
            reason: r.to_owned(),
        })
    };
    match (
        spec.names_container(),
        spec.image.is_some() && spec.build.is_some(),
    ) {
        (false, _) => return invalid("set one of image and build"),
        (true, true) => return invalid("image and build are exclusive"),
        _ => {}
    }
    if let Some(Err(e)) = spec
        .workspace_folder
        .as_deref()
        .map(str::parse::<iterion_core::ContainerPath>)
    {
        return invalid(&format!("workspace_folder: {}", e.kind));
    }
    check_spec(spec)?;
    Ok(())
}

/// Inputs of [`build_spec`].
#[derive(Debug, Clone, Default)]
pub struct SpecInputs<'a> {
    /// The winning mode (active).
    pub mode: Mode,
    /// The workflow-level block, when written.
    pub workflow: Option<&'a Spec>,
    /// The repo devcontainer, when found (auto only).
    pub devcontainer: Option<(&'a str, &'a Devcontainer)>,
    /// The resolved default image.
    pub default_image: &'a str,
    /// The operator's environment overlay, merged last.
    pub operator_env: BTreeMap<String, String>,
    /// For the `sandbox_env_denied` payload.
    pub run_id: &'a str,
    /// Host environment for `${localEnv:NAME}` (only allowlisted names are
    /// ever read from it, see [`iterion_core::hostvars::local_env_allowed`]).
    pub local_env: BTreeMap<String, String>,
    /// Host workspace path for `${localWorkspaceFolder}`.
    pub workspace: &'a str,
}

/// Expand `${localEnv:NAME[:default]}`, `${localWorkspaceFolder}` and
/// `${localWorkspaceFolderBasename}`; leave every other `${…}` (e.g.
/// `${containerEnv:…}`) as written. The allowlist and the rules live in
/// [`iterion_core::hostvars`], shared with the DSL.
pub fn expand_host_vars(
    text: &str,
    local_env: &BTreeMap<String, String>,
    workspace: &str,
) -> String {
    iterion_core::hostvars::expand_host_vars(
        text,
        &|name| local_env.get(name).cloned(),
        std::path::Path::new(workspace),
    )
}

/// Build the spec for an active mode.
pub fn build_spec(inputs: &SpecInputs<'_>) -> Result<BuiltSpec, PolicyError> {
    let empty = Spec::default();
    let block = inputs.workflow.unwrap_or(&empty);
    let mut events = Vec::new();
    let (mut spec, origin) = match inputs.mode {
        Mode::Inline => {
            if inputs.workflow.is_none() {
                return Err(PolicyError::InvalidSpec {
                    reason: "inline mode needs a sandbox: block".into(),
                });
            }
            (block.clone(), SpecOrigin::Inline)
        }
        Mode::Auto => match inputs.devcontainer {
            Some((path, dc)) => {
                let (spec, denied) = fuse(block, dc);
                if !denied.is_empty() {
                    events.push(EventKind::SandboxEnvDenied {
                        keys: denied,
                        source: path.to_owned(),
                        run_id: inputs.run_id.to_owned(),
                    });
                }
                (
                    spec,
                    SpecOrigin::Devcontainer {
                        path: path.to_owned(),
                    },
                )
            }
            None => {
                let mut spec = block.clone();
                if !spec.names_container() {
                    spec.image = Some(inputs.default_image.to_owned());
                }
                let image = spec.image.clone().unwrap_or_else(|| "build".to_owned());
                (spec, SpecOrigin::DefaultImage { image })
            }
        },
        Mode::None | Mode::Inherit => {
            return Err(PolicyError::InvalidSpec {
                reason: format!("mode {:?} builds no spec", inputs.mode),
            });
        }
    };
    spec.mode = inputs.mode;
    spec = iterion_core::hostvars::expand_spec(
        &spec,
        &|name| inputs.local_env.get(name).cloned(),
        std::path::Path::new(inputs.workspace),
    );
    for (k, v) in &inputs.operator_env {
        spec.env.insert(k.clone(), v.clone());
    }
    if let SpecOrigin::Devcontainer { path } = &origin {
        let usable = spec.network.as_ref().is_some_and(|n| n.mode.is_some());
        if !usable {
            let mut net = spec.network.take().unwrap_or_default();
            net.mode = Some(NetworkMode::Allowlist);
            let preset = *net.preset.get_or_insert(DEFAULT_PRESET);
            events.push(EventKind::SandboxNetworkDefaulted {
                mode: NetworkMode::Allowlist,
                preset,
                source: path.clone(),
            });
            spec.network = Some(net);
        }
    }
    validate_spec(&spec)?;
    Ok(BuiltSpec {
        spec,
        origin,
        events,
    })
}

/// Fuse a repo devcontainer with the workflow block. Returns the spec and
/// the denied repo env keys (sorted).
fn fuse(block: &Spec, dc: &Devcontainer) -> (Spec, Vec<String>) {
    let mut spec = block.clone();
    // Container fields: the repo file wins; the block fills what it leaves.
    if dc.image.is_some() || dc.dockerfile.is_some() {
        spec.image = dc.image.clone();
        // Paths in the file are relative to its own directory; the build
        // guards then resolve them against the workspace (facts §6.8).
        let rel = |p: &str| {
            if dc.dir.is_empty() || p.starts_with('/') {
                p.to_owned()
            } else {
                format!("{}/{p}", dc.dir)
            }
        };
        spec.build = dc.dockerfile.as_ref().map(|df| BuildSpec {
            dockerfile: Some(rel(df)),
            context: Some(rel(dc.context.as_deref().unwrap_or("."))),
            args: dc.build_args.clone(),
        });
    }
    if dc.user.is_some() {
        spec.user = dc.user.clone();
    }
    if dc.workspace_folder.is_some() {
        spec.workspace_folder = dc.workspace_folder.clone();
    }
    if dc.post_create.is_some() {
        spec.post_create = dc.post_create.clone();
    }
    let mut denied = Vec::new();
    let mut env = BTreeMap::new();
    for (k, v) in &dc.env {
        if env_key_denied(k) {
            denied.push(k.clone());
        } else {
            env.insert(k.clone(), v.clone());
        }
    }
    // Workflow env wins per key (the operator wrote it, not the PR).
    env.extend(block.env.clone());
    spec.env = env;
    // Repo mounts are screened by the guards later, never trusted.
    let mut mounts = block.mounts.clone();
    mounts.extend(dc.mounts.iter().cloned());
    spec.mounts = mounts;
    (spec, denied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_core::NetworkSpec;

    fn dc() -> Devcontainer {
        Devcontainer {
            image: Some("repo:img".into()),
            env: BTreeMap::from([
                ("PATH".into(), "/evil".into()),
                ("LD_PRELOAD".into(), "/x.so".into()),
                ("ANTHROPIC_BASE_URL".into(), "http://evil".into()),
                ("https_proxy".into(), "http://evil".into()),
                ("KEEP".into(), "repo".into()),
                ("SHARED".into(), "repo".into()),
            ]),
            user: Some("dev".into()),
            mounts: vec!["type=volume,source=c,target=/c".into()],
            ..Devcontainer::default()
        }
    }

    #[test]
    fn auto_fuses_devcontainer_with_block() {
        let block = Spec {
            mode: Mode::Auto,
            image: Some("block:img".into()),
            user: Some("blockuser".into()),
            env: BTreeMap::from([
                ("SHARED".into(), "workflow".into()),
                ("PATH".into(), "/wf/bin:/usr/bin".into()),
            ]),
            read_back: vec!["/out".parse().expect("path")],
            ..Spec::default()
        };
        let dc = dc();
        let overlay = BTreeMap::from([("KEEP".into(), "operator".into())]);
        let built = build_spec(&SpecInputs {
            mode: Mode::Auto,
            workflow: Some(&block),
            devcontainer: Some(("/r/.devcontainer/devcontainer.json", &dc)),
            default_image: "default:img",
            operator_env: overlay,
            run_id: "run-1",
            ..SpecInputs::default()
        })
        .expect("built");
        assert_eq!(
            built.spec.image.as_deref(),
            Some("repo:img"),
            "repo wins on container fields"
        );
        assert_eq!(built.spec.user.as_deref(), Some("dev"));
        assert_eq!(
            built.spec.env["SHARED"], "workflow",
            "workflow wins per key"
        );
        assert_eq!(
            built.spec.env["PATH"], "/wf/bin:/usr/bin",
            "workflow may set PATH; the repo may not"
        );
        assert_eq!(built.spec.env["KEEP"], "operator", "overlay last");
        assert!(!built.spec.env.contains_key("LD_PRELOAD"));
        assert!(!built.spec.env.contains_key("https_proxy"));
        assert_eq!(built.spec.read_back[0].as_str(), "/out");
        insta::assert_json_snapshot!(
            "fused_events",
            serde_json::to_value(&built.events).expect("ser")
        );
        assert_eq!(
            source_label("global default (auto)", &built.origin),
            "global default (auto) (/r/.devcontainer/devcontainer.json)"
        );
    }

    #[test]
    fn usable_network_block_is_kept() {
        let block = Spec {
            mode: Mode::Auto,
            network: Some(NetworkSpec {
                mode: Some(NetworkMode::Denylist),
                ..NetworkSpec::default()
            }),
            ..Spec::default()
        };
        let dc = dc();
        let built = build_spec(&SpecInputs {
            mode: Mode::Auto,
            workflow: Some(&block),
            devcontainer: Some(("p", &dc)),
            default_image: "d",
            operator_env: BTreeMap::new(),
            run_id: "r",
            ..SpecInputs::default()
        })
        .expect("built");
        assert_eq!(
            built.spec.network.and_then(|n| n.mode),
            Some(NetworkMode::Denylist)
        );
        assert!(
            built
                .events
                .iter()
                .all(|e| e.name() != "sandbox_network_defaulted")
        );
    }

    #[test]
    fn auto_without_devcontainer_uses_default_image_and_stays_open() {
        let built = build_spec(&SpecInputs {
            mode: Mode::Auto,
            default_image: "iterion-sandbox-slim:local",
            operator_env: BTreeMap::new(),
            ..SpecInputs::default()
        })
        .expect("built");
        assert_eq!(
            built.spec.image.as_deref(),
            Some("iterion-sandbox-slim:local")
        );
        assert_eq!(built.spec.network, None, "no block: open, no proxy (seeds)");
        assert!(built.events.is_empty());
        assert_eq!(
            source_label("x", &built.origin),
            "x (default image: iterion-sandbox-slim:local)"
        );
    }

    #[test]
    fn inline_from_block_and_validation() {
        let block = Spec {
            mode: Mode::Inline,
            image: Some("i".into()),
            ..Spec::default()
        };
        let built = build_spec(&SpecInputs {
            mode: Mode::Inline,
            workflow: Some(&block),
            operator_env: BTreeMap::new(),
            ..SpecInputs::default()
        })
        .expect("built");
        assert_eq!(built.origin, SpecOrigin::Inline);
        let bad = Spec {
            mode: Mode::Inline,
            ..Spec::default()
        };
        assert!(
            build_spec(&SpecInputs {
                mode: Mode::Inline,
                workflow: Some(&bad),
                operator_env: BTreeMap::new(),
                ..SpecInputs::default()
            })
            .is_err()
        );
        let hostile = Spec {
            mode: Mode::Inline,
            image: Some("i".into()),
            mounts: vec!["source=/proc,target=/p".into()],
            ..Spec::default()
        };
        assert!(matches!(
            build_spec(&SpecInputs {
                mode: Mode::Inline,
                workflow: Some(&hostile),
                operator_env: BTreeMap::new(),
                ..SpecInputs::default()
            }),
            Err(PolicyError::Guard(_))
        ));
        assert!(
            build_spec(&SpecInputs {
                mode: Mode::Inline,
                operator_env: BTreeMap::new(),
                ..SpecInputs::default()
            })
            .is_err()
        );
    }

    #[test]
    fn host_vars_expand_only_allowlisted_names() {
        let env = BTreeMap::from([
            ("USER".to_owned(), "dev".to_owned()),
            ("LC_ALL".to_owned(), "C".to_owned()),
            ("AWS_SECRET_ACCESS_KEY".to_owned(), "s3cr3t".to_owned()),
        ]);
        let ws = "/home/dev/repo";
        for (input, want) in [
            ("${localEnv:USER}", "dev"),
            ("${localEnv:LC_ALL}", "C"),
            ("${localEnv:AWS_SECRET_ACCESS_KEY}", ""),
            ("${localEnv:AWS_SECRET_ACCESS_KEY:none}", "none"),
            ("${localEnv:MISSING:x:y}", "x:y"),
            (
                "src=${localWorkspaceFolder},dst=/w/${localWorkspaceFolderBasename}",
                "src=/home/dev/repo,dst=/w/repo",
            ),
            ("${containerEnv:PATH}:/x", "${containerEnv:PATH}:/x"),
            ("${unterminated", "${unterminated"),
        ] {
            assert_eq!(expand_host_vars(input, &env, ws), want, "{input}");
        }
        let block = Spec {
            mode: Mode::Inline,
            image: Some("img:${localEnv:VARIANT:slim}".into()),
            env: BTreeMap::from([("LEAK".into(), "${localEnv:AWS_SECRET_ACCESS_KEY}".into())]),
            ..Spec::default()
        };
        let built = build_spec(&SpecInputs {
            mode: Mode::Inline,
            workflow: Some(&block),
            local_env: env,
            workspace: ws,
            ..SpecInputs::default()
        })
        .expect("built");
        assert_eq!(built.spec.image.as_deref(), Some("img:slim"));
        assert_eq!(built.spec.env["LEAK"], "");
    }

    #[test]
    fn deny_class() {
        for k in [
            "PATH",
            "LD_PRELOAD",
            "ANTHROPIC_BASE_URL",
            "HTTPS_PROXY",
            "no_proxy",
            "ALL_PROXY",
            "ITERION_ARTIFACT_FILES_DIR",
            "OPENAI_API_KEY",
        ] {
            assert!(env_key_denied(k), "{k}");
        }
        for k in ["RUST_LOG", "NODE_ENV", "LANG"] {
            assert!(!env_key_denied(k), "{k}");
        }
    }
}

#[cfg(test)]
mod fusion_props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever its case, a deny-class key from the repo file never
        /// reaches the spec, and is always reported.
        #[test]
        fn denied_repo_keys_never_survive(
            key in prop::sample::select(vec!["PATH", "ld_preload", "Https_Proxy", "ANTHROPIC_BASE_URL", "no_proxy", "ITERION_X", "NODE_OPTIONS"]),
            value in "[ -~]{0,16}",
        ) {
            let dc = Devcontainer {
                image: Some("i".into()),
                env: BTreeMap::from([(key.to_owned(), value)]),
                ..Devcontainer::default()
            };
            let built = build_spec(&SpecInputs {
                mode: Mode::Auto,
                devcontainer: Some(("p", &dc)),
                ..SpecInputs::default()
            })
            .expect("built");
            prop_assert!(!built.spec.env.contains_key(key));
            let reported = built.events.iter().any(|e| matches!(e, EventKind::SandboxEnvDenied { keys, .. } if keys.iter().any(|k| k == key)));
            prop_assert!(reported);
        }
    }
}
