//! The four-tier precedence chain (facts §3.2), the one place the "which
//! mode, which knob spoke" decision lives, plus the two sibling chains for
//! `host_state` and the default image.
//!
//! The source label only *labels*: it rides events and `doctor`, and no
//! caller may key behaviour on it (seed, "the mode decides, the source only
//! labels"). Inputs are a plain struct; nothing here reads the process env.

use std::fmt;

use iterion_core::{HostState, Mode, Spec};

use crate::env::EnvSnapshot;
use crate::error::PolicyError;

/// The image `auto` falls back to: built locally by `scripts/images.sh`
/// (no registry exists here, so no `ghcr.io/...:<tag>` default).
pub const BUILTIN_DEFAULT_IMAGE: &str = "iterion-sandbox-slim:local";

/// Tier 4 as the product entry points (`iterion run`, the runner, the
/// server) install it; an engine built without it stays neutral.
pub const PRODUCT_GLOBAL_DEFAULT: Mode = Mode::Auto;

/// Which tier decided the mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModeSource {
    /// Tier 1: `--sandbox`.
    CliFlag,
    /// Tier 1: `ITERION_SANDBOX_OVERRIDE` (same strength as the flag).
    Override,
    /// Tier 2: the workflow-level `sandbox:` block.
    Workflow,
    /// Tier 2 over a tier-1 `auto` that yielded to an image/build block.
    WorkflowOverCliAuto,
    /// Tier 3: `ITERION_SANDBOX_DEFAULT`.
    EnvDefault,
    /// Tier 4: the global default the product entry point installs.
    GlobalDefault,
    /// Nothing spoke (a neutral engine): no sandbox.
    Unset,
}

impl ModeSource {
    /// Stable display string (facts §3.4 strings; tier 4 and the override
    /// get their own).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CliFlag => "cli flag --sandbox",
            Self::Override => "ITERION_SANDBOX_OVERRIDE",
            Self::Workflow => "workflow sandbox: block",
            Self::WorkflowOverCliAuto => "workflow sandbox: block (overrides --sandbox=auto)",
            Self::EnvDefault => "ITERION_SANDBOX_DEFAULT",
            Self::GlobalDefault => "global default (auto)",
            Self::Unset => "default (no sandbox)",
        }
    }
}

impl fmt::Display for ModeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which tier decided `host_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostStateSource {
    /// `--sandbox-host-state`.
    CliFlag,
    /// `sandbox.host_state` of the workflow block.
    Workflow,
    /// `ITERION_SANDBOX_HOST_STATE`.
    Env,
    /// Built-in `auto`.
    Default,
}

impl HostStateSource {
    /// Stable display string (facts §3.4).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CliFlag => "cli flag --sandbox-host-state",
            Self::Workflow => "workflow sandbox.host_state",
            Self::Env => "ITERION_SANDBOX_HOST_STATE",
            Self::Default => "default",
        }
    }
}

impl fmt::Display for HostStateSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which tier decided the default image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageSource {
    /// `--sandbox-default-image`.
    CliFlag,
    /// `ITERION_SANDBOX_DEFAULT_IMAGE`.
    Env,
    /// [`BUILTIN_DEFAULT_IMAGE`].
    Builtin,
}

impl ImageSource {
    /// Stable display string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CliFlag => "cli flag --sandbox-default-image",
            Self::Env => "ITERION_SANDBOX_DEFAULT_IMAGE",
            Self::Builtin => "default",
        }
    }
}

/// Everything the chain reads: flags, an env snapshot, the workflow block
/// and whether the product entry point installed its global default.
#[derive(Debug, Clone, Default)]
pub struct PrecedenceInputs<'a> {
    /// `--sandbox` (only `none`/`auto` are expressible).
    pub cli_sandbox: Option<Mode>,
    /// `--sandbox-host-state`.
    pub cli_host_state: Option<HostState>,
    /// `--sandbox-default-image`.
    pub cli_default_image: Option<String>,
    /// The environment.
    pub env: EnvSnapshot,
    /// The workflow-level block (node-level blocks are not a tier).
    pub workflow: Option<&'a Spec>,
    /// Tier 4, as installed by the entry point (`Some(Auto)` for the
    /// `iterion` binary); `None` keeps an engine neutral.
    pub global_default: Option<Mode>,
}

/// The winning mode and who spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedMode {
    /// The mode (never `Inline` from a CLI tier).
    pub mode: Mode,
    /// Label only.
    pub source: ModeSource,
}

fn env_mode(name: &'static str, value: Option<&str>) -> Result<Option<Mode>, PolicyError> {
    let Some(raw) = value else { return Ok(None) };
    match raw.trim().to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "none" => Ok(Some(Mode::None)),
        "auto" => Ok(Some(Mode::Auto)),
        _ => Err(PolicyError::InvalidEnv {
            name,
            value: raw.to_owned(),
            expected: "\"\", none or auto",
        }),
    }
}

/// Walk the four tiers. `none` at the winning tier is final; CLI `auto`
/// yields to a workflow block naming `image:` or `build:`.
pub fn resolve_mode(inputs: &PrecedenceInputs<'_>) -> Result<ResolvedMode, PolicyError> {
    let override_mode = env_mode(
        "ITERION_SANDBOX_OVERRIDE",
        inputs.env.sandbox_override.as_deref(),
    )?;
    let env_default = env_mode(
        "ITERION_SANDBOX_DEFAULT",
        inputs.env.sandbox_default.as_deref(),
    )?;
    // The CLI can say only none/auto; an `inline` or `inherit` there is not a word of tier 1.
    let cli = inputs
        .cli_sandbox
        .filter(|m| matches!(m, Mode::None | Mode::Auto))
        .map(|m| (m, ModeSource::CliFlag))
        .or(override_mode.map(|m| (m, ModeSource::Override)));
    let block_mode = inputs
        .workflow
        .map(|s| s.mode)
        .filter(|m| *m != Mode::Inherit);
    if let Some((mode, source)) = cli {
        // The block is the more specific statement of the same intent.
        if mode == Mode::Auto
            && let Some(block) = inputs.workflow.filter(|s| s.names_container())
        {
            let mode = if block.mode == Mode::Inherit {
                Mode::Inline
            } else {
                block.mode
            };
            return Ok(ResolvedMode {
                mode,
                source: ModeSource::WorkflowOverCliAuto,
            });
        }
        return Ok(ResolvedMode { mode, source });
    }
    if let Some(mode) = block_mode {
        return Ok(ResolvedMode {
            mode,
            source: ModeSource::Workflow,
        });
    }
    if let Some(mode) = env_default {
        return Ok(ResolvedMode {
            mode,
            source: ModeSource::EnvDefault,
        });
    }
    if let Some(mode) = inputs.global_default.filter(|m| *m != Mode::Inherit) {
        return Ok(ResolvedMode {
            mode,
            source: ModeSource::GlobalDefault,
        });
    }
    Ok(ResolvedMode {
        mode: Mode::Inherit,
        source: ModeSource::Unset,
    })
}

/// `--sandbox-host-state` > workflow > `ITERION_SANDBOX_HOST_STATE` > `auto`.
pub fn resolve_host_state(
    inputs: &PrecedenceInputs<'_>,
) -> Result<(HostState, HostStateSource), PolicyError> {
    if let Some(h) = inputs.cli_host_state {
        return Ok((h, HostStateSource::CliFlag));
    }
    if let Some(h) = inputs.workflow.and_then(|s| s.host_state) {
        return Ok((h, HostStateSource::Workflow));
    }
    if let Some(raw) = inputs.env.host_state.as_deref() {
        match raw.trim().to_ascii_lowercase().as_str() {
            "" => {}
            "auto" => return Ok((HostState::Auto, HostStateSource::Env)),
            "none" => return Ok((HostState::None, HostStateSource::Env)),
            _ => {
                return Err(PolicyError::InvalidEnv {
                    name: "ITERION_SANDBOX_HOST_STATE",
                    value: raw.to_owned(),
                    expected: "\"\", auto or none",
                });
            }
        }
    }
    Ok((HostState::Auto, HostStateSource::Default))
}

/// `--sandbox-default-image` > `ITERION_SANDBOX_DEFAULT_IMAGE` > built-in.
pub fn resolve_default_image(inputs: &PrecedenceInputs<'_>) -> (String, ImageSource) {
    let pick = |v: &Option<String>| {
        v.as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    if let Some(i) = pick(&inputs.cli_default_image) {
        return (i, ImageSource::CliFlag);
    }
    if let Some(i) = pick(&inputs.env.default_image) {
        return (i, ImageSource::Env);
    }
    (BUILTIN_DEFAULT_IMAGE.to_owned(), ImageSource::Builtin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_core::BuildSpec;

    #[derive(Debug, Clone, Copy)]
    enum Block {
        Absent,
        None,
        Auto,
        AutoWithImage,
        InlineImage,
        InlineBuild,
    }

    fn block(b: Block) -> Option<Spec> {
        let image = Some("img:1".to_owned());
        match b {
            Block::Absent => None,
            Block::None => Some(Spec::with_mode(Mode::None)),
            Block::Auto => Some(Spec::with_mode(Mode::Auto)),
            Block::AutoWithImage => Some(Spec {
                mode: Mode::Auto,
                image,
                ..Spec::default()
            }),
            Block::InlineImage => Some(Spec {
                mode: Mode::Inline,
                image,
                ..Spec::default()
            }),
            Block::InlineBuild => Some(Spec {
                mode: Mode::Inline,
                build: Some(BuildSpec::default()),
                ..Spec::default()
            }),
        }
    }

    /// Independent statement of the table of facts §3.2, used as the oracle.
    fn expected(
        cli: Option<Mode>,
        ovr: Option<&str>,
        b: Block,
        env: Option<&str>,
        global: Option<Mode>,
    ) -> (Mode, ModeSource) {
        let tier1 = cli.map(|m| (m, ModeSource::CliFlag)).or(match ovr {
            Some("none") => Some((Mode::None, ModeSource::Override)),
            Some("auto") => Some((Mode::Auto, ModeSource::Override)),
            _ => None,
        });
        let names = matches!(
            b,
            Block::AutoWithImage | Block::InlineImage | Block::InlineBuild
        );
        if let Some((m, s)) = tier1 {
            if m == Mode::Auto && names {
                let bm = match b {
                    Block::AutoWithImage => Mode::Auto,
                    _ => Mode::Inline,
                };
                return (bm, ModeSource::WorkflowOverCliAuto);
            }
            return (m, s);
        }
        match b {
            Block::Absent => {}
            Block::None => return (Mode::None, ModeSource::Workflow),
            Block::Auto | Block::AutoWithImage => return (Mode::Auto, ModeSource::Workflow),
            Block::InlineImage | Block::InlineBuild => return (Mode::Inline, ModeSource::Workflow),
        }
        match env {
            Some("none") => return (Mode::None, ModeSource::EnvDefault),
            Some("auto") => return (Mode::Auto, ModeSource::EnvDefault),
            _ => {}
        }
        match global {
            Some(m) => (m, ModeSource::GlobalDefault),
            None => (Mode::Inherit, ModeSource::Unset),
        }
    }

    #[test]
    fn every_precedence_combination() {
        let clis = [None, Some(Mode::None), Some(Mode::Auto)];
        let ovrs = [None, Some(""), Some("none"), Some("auto")];
        let blocks = [
            Block::Absent,
            Block::None,
            Block::Auto,
            Block::AutoWithImage,
            Block::InlineImage,
            Block::InlineBuild,
        ];
        let envs = [None, Some(""), Some("none"), Some("auto")];
        let globals = [None, Some(Mode::Auto)];
        let mut n = 0;
        for cli in clis {
            for ovr in ovrs {
                for b in blocks {
                    for env in envs {
                        for global in globals {
                            let spec = block(b);
                            let inputs = PrecedenceInputs {
                                cli_sandbox: cli,
                                env: EnvSnapshot {
                                    sandbox_override: ovr.map(str::to_owned),
                                    sandbox_default: env.map(str::to_owned),
                                    ..EnvSnapshot::default()
                                },
                                workflow: spec.as_ref(),
                                global_default: global,
                                ..PrecedenceInputs::default()
                            };
                            let got = resolve_mode(&inputs).expect("valid inputs");
                            let want = expected(cli, ovr, b, env, global);
                            assert_eq!(
                                (got.mode, got.source),
                                want,
                                "cli={cli:?} ovr={ovr:?} block={b:?} env={env:?} global={global:?}"
                            );
                            n += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(n, 3 * 4 * 6 * 4 * 2);
    }

    #[test]
    fn spot_checks_from_the_facts() {
        // CLI auto over a workflow `none` → auto (only image/build makes auto yield).
        let none = Spec::with_mode(Mode::None);
        let r = resolve_mode(&PrecedenceInputs {
            cli_sandbox: Some(Mode::Auto),
            workflow: Some(&none),
            ..PrecedenceInputs::default()
        })
        .expect("ok");
        assert_eq!((r.mode, r.source), (Mode::Auto, ModeSource::CliFlag));
        // Neutral engine, no block → no sandbox.
        let r = resolve_mode(&PrecedenceInputs::default()).expect("ok");
        assert!(!r.mode.is_active());
        assert_eq!(r.source.to_string(), "default (no sandbox)");
    }

    #[test]
    fn bad_env_words_are_typed_errors() {
        let inputs = PrecedenceInputs {
            env: EnvSnapshot {
                sandbox_default: Some("inline".into()),
                ..EnvSnapshot::default()
            },
            ..PrecedenceInputs::default()
        };
        assert!(matches!(
            resolve_mode(&inputs),
            Err(PolicyError::InvalidEnv { .. })
        ));
        let inputs = PrecedenceInputs {
            env: EnvSnapshot {
                host_state: Some("maybe".into()),
                ..EnvSnapshot::default()
            },
            ..PrecedenceInputs::default()
        };
        assert!(resolve_host_state(&inputs).is_err());
    }

    #[test]
    fn host_state_chain() {
        let wf = Spec {
            host_state: Some(HostState::None),
            ..Spec::default()
        };
        let env = EnvSnapshot {
            host_state: Some("auto".into()),
            ..EnvSnapshot::default()
        };
        let cases = [
            (
                Some(HostState::Auto),
                Some(&wf),
                env.clone(),
                (HostState::Auto, HostStateSource::CliFlag),
            ),
            (
                None,
                Some(&wf),
                env.clone(),
                (HostState::None, HostStateSource::Workflow),
            ),
            (
                None,
                None,
                env.clone(),
                (HostState::Auto, HostStateSource::Env),
            ),
            (
                None,
                None,
                EnvSnapshot {
                    host_state: Some("none".into()),
                    ..EnvSnapshot::default()
                },
                (HostState::None, HostStateSource::Env),
            ),
            (
                None,
                None,
                EnvSnapshot::default(),
                (HostState::Auto, HostStateSource::Default),
            ),
        ];
        for (cli, workflow, env, want) in cases {
            let inputs = PrecedenceInputs {
                cli_host_state: cli,
                workflow,
                env,
                ..PrecedenceInputs::default()
            };
            assert_eq!(resolve_host_state(&inputs).expect("ok"), want);
        }
    }

    #[test]
    fn default_image_chain() {
        let mut inputs = PrecedenceInputs::default();
        assert_eq!(
            resolve_default_image(&inputs),
            (BUILTIN_DEFAULT_IMAGE.into(), ImageSource::Builtin)
        );
        inputs.env.default_image = Some("env:img".into());
        assert_eq!(
            resolve_default_image(&inputs),
            ("env:img".into(), ImageSource::Env)
        );
        inputs.cli_default_image = Some("cli:img".into());
        assert_eq!(
            resolve_default_image(&inputs),
            ("cli:img".into(), ImageSource::CliFlag)
        );
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// `none` at the winning tier is final: nothing re-activates it.
            #[test]
            fn none_from_cli_wins_everywhere(
                b in 0usize..6, env in prop::option::of("(none|auto|)"), ovr in prop::option::of("(none|auto|)"),
                global in prop::option::of(Just(Mode::Auto)),
            ) {
                let blocks = [Block::Absent, Block::None, Block::Auto, Block::AutoWithImage, Block::InlineImage, Block::InlineBuild];
                let spec = block(blocks[b]);
                let inputs = PrecedenceInputs {
                    cli_sandbox: Some(Mode::None),
                    env: EnvSnapshot { sandbox_default: env, sandbox_override: ovr, ..EnvSnapshot::default() },
                    workflow: spec.as_ref(),
                    global_default: global,
                    ..PrecedenceInputs::default()
                };
                let r = resolve_mode(&inputs).expect("valid");
                prop_assert_eq!(r.mode, Mode::None);
                prop_assert_eq!(r.source, ModeSource::CliFlag);
            }
        }
    }
}
