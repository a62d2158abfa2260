//! The four-tier precedence chain (facts §3.2), the one place the "which
//! mode, which knob spoke" decision lives, plus the two sibling chains for
//! `host_state` and the default image.
//!
//! The source label only *labels*: it rides events and `doctor`, and no
//! caller may key behaviour on it (seed, "the mode decides, the source only
//! labels"). Inputs are a plain struct of parsed words
//! ([`crate::env::SandboxEnv`]), so the chain cannot fail; nothing here
//! reads the process env. Its one caller is the sandbox decision
//! ([`crate::decision::decide`]).

use std::fmt;

use iterion_core::{HostState, Mode, Spec};

use crate::env::SandboxEnv;

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

/// The CLI's sandbox knobs of one run (tier 1 and its siblings), as the
/// entry point parsed them, plus tier 4 as it installs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxFlags {
    /// `--sandbox` (only `none`/`auto` are expressible).
    pub sandbox: Option<Mode>,
    /// `--sandbox-host-state`.
    pub host_state: Option<HostState>,
    /// `--sandbox-default-image`.
    pub default_image: Option<String>,
    /// Tier 4 as the product entry point installs it (`Some(Auto)` for the
    /// `iterion` binary: [`PRODUCT_GLOBAL_DEFAULT`]); `None` keeps an
    /// engine neutral.
    pub global_default: Option<Mode>,
}

/// Everything the chain reads: the flags, the parsed environment and the
/// workflow block.
#[derive(Debug, Clone, Copy)]
pub struct PrecedenceInputs<'a> {
    /// The CLI's knobs and tier 4.
    pub flags: &'a SandboxFlags,
    /// The operator's words.
    pub env: &'a SandboxEnv,
    /// The workflow-level block (node-level blocks are not a tier).
    pub workflow: Option<&'a Spec>,
}

/// The winning mode and who spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResolvedMode {
    /// The mode (never `Inline` from a CLI tier).
    pub mode: Mode,
    /// Label only.
    pub source: ModeSource,
}

/// Walk the four tiers. `none` at the winning tier is final; CLI `auto`
/// yields to a workflow block naming `image:` or `build:`.
pub fn resolve_mode(inputs: &PrecedenceInputs<'_>) -> ResolvedMode {
    // The CLI can say only none/auto; an `inline` or `inherit` there is not a word of tier 1.
    let cli = inputs
        .flags
        .sandbox
        .filter(|m| matches!(m, Mode::None | Mode::Auto))
        .map(|m| (m, ModeSource::CliFlag))
        .or(inputs.env.override_mode.map(|m| (m, ModeSource::Override)));
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
            return ResolvedMode {
                mode,
                source: ModeSource::WorkflowOverCliAuto,
            };
        }
        return ResolvedMode { mode, source };
    }
    if let Some(mode) = block_mode {
        return ResolvedMode {
            mode,
            source: ModeSource::Workflow,
        };
    }
    if let Some(mode) = inputs.env.default_mode {
        return ResolvedMode {
            mode,
            source: ModeSource::EnvDefault,
        };
    }
    if let Some(mode) = inputs.flags.global_default.filter(|m| *m != Mode::Inherit) {
        return ResolvedMode {
            mode,
            source: ModeSource::GlobalDefault,
        };
    }
    ResolvedMode {
        mode: Mode::Inherit,
        source: ModeSource::Unset,
    }
}

/// `--sandbox-host-state` > workflow > `ITERION_SANDBOX_HOST_STATE` > `auto`.
pub fn resolve_host_state(inputs: &PrecedenceInputs<'_>) -> (HostState, HostStateSource) {
    if let Some(h) = inputs.flags.host_state {
        return (h, HostStateSource::CliFlag);
    }
    if let Some(h) = inputs.workflow.and_then(|s| s.host_state) {
        return (h, HostStateSource::Workflow);
    }
    if let Some(h) = inputs.env.host_state {
        return (h, HostStateSource::Env);
    }
    (HostState::Auto, HostStateSource::Default)
}

/// `--sandbox-default-image` > `ITERION_SANDBOX_DEFAULT_IMAGE` > built-in.
pub fn resolve_default_image(inputs: &PrecedenceInputs<'_>) -> (String, ImageSource) {
    let flag = inputs
        .flags
        .default_image
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    if let Some(i) = flag {
        return (i.to_owned(), ImageSource::CliFlag);
    }
    if let Some(i) = &inputs.env.default_image {
        return (i.clone(), ImageSource::Env);
    }
    (BUILTIN_DEFAULT_IMAGE.to_owned(), ImageSource::Builtin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EnvSnapshot;
    use iterion_core::BuildSpec;

    /// The chain over raw words, parsed as the entry point parses them.
    fn chain(
        flags: &SandboxFlags,
        env: EnvSnapshot,
        workflow: Option<&Spec>,
    ) -> (
        ResolvedMode,
        (HostState, HostStateSource),
        (String, ImageSource),
    ) {
        let env = SandboxEnv::parse(&env).expect("valid words");
        let inputs = PrecedenceInputs {
            flags,
            env: &env,
            workflow,
        };
        (
            resolve_mode(&inputs),
            resolve_host_state(&inputs),
            resolve_default_image(&inputs),
        )
    }

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
                            let flags = SandboxFlags {
                                sandbox: cli,
                                global_default: global,
                                ..SandboxFlags::default()
                            };
                            let snapshot = EnvSnapshot {
                                sandbox_override: ovr.map(str::to_owned),
                                sandbox_default: env.map(str::to_owned),
                                ..EnvSnapshot::default()
                            };
                            let got = chain(&flags, snapshot, spec.as_ref()).0;
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
        let flags = SandboxFlags {
            sandbox: Some(Mode::Auto),
            ..SandboxFlags::default()
        };
        let r = chain(&flags, EnvSnapshot::default(), Some(&none)).0;
        assert_eq!((r.mode, r.source), (Mode::Auto, ModeSource::CliFlag));
        // Neutral engine, no block → no sandbox.
        let r = chain(&SandboxFlags::default(), EnvSnapshot::default(), None).0;
        assert!(!r.mode.is_active());
        assert_eq!(r.source.to_string(), "default (no sandbox)");
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
            let flags = SandboxFlags {
                host_state: cli,
                ..SandboxFlags::default()
            };
            assert_eq!(chain(&flags, env, workflow).1, want);
        }
    }

    #[test]
    fn default_image_chain() {
        let mut flags = SandboxFlags::default();
        let mut env = EnvSnapshot::default();
        assert_eq!(
            chain(&flags, env.clone(), None).2,
            (BUILTIN_DEFAULT_IMAGE.into(), ImageSource::Builtin)
        );
        env.default_image = Some("env:img".into());
        assert_eq!(
            chain(&flags, env.clone(), None).2,
            ("env:img".into(), ImageSource::Env)
        );
        flags.default_image = Some("cli:img".into());
        assert_eq!(
            chain(&flags, env, None).2,
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
                let flags = SandboxFlags { sandbox: Some(Mode::None), global_default: global, ..SandboxFlags::default() };
                let env = EnvSnapshot { sandbox_default: env, sandbox_override: ovr, ..EnvSnapshot::default() };
                let r = chain(&flags, env, spec.as_ref()).0;
                prop_assert_eq!(r.mode, Mode::None);
                prop_assert_eq!(r.source, ModeSource::CliFlag);
            }
        }
    }
}
