//! A snapshot of the environment the policy reads (the variables and
//! `argv[0]`), and its one parse into typed words ([`SandboxEnv`]), the
//! host kind's word among them ([`HostKind`], [`sandbox_host_override`]:
//! `host` detects the kind from this snapshot, so the type lives here and
//! the two files do not name each other). Pure functions take these
//! structs; only [`EnvSnapshot::from_process`] reads the real process
//! environment.

use std::collections::BTreeMap;
use std::fmt;

use iterion_core::{ByteSize, HostState, Mode, parse_size};

use crate::error::PolicyError;

/// Where iterion runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostKind {
    /// A developer machine or CI host.
    Local,
    /// The desktop app.
    Desktop,
    /// A cluster (runner pod).
    Cloud,
}

impl HostKind {
    /// Lower-case name (events, doctor).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Desktop => "desktop",
            Self::Cloud => "cloud",
        }
    }
}

impl fmt::Display for HostKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `ITERION_SANDBOX_HOST`'s words (`local`, `cloud`); empty or unset is no
/// override.
pub fn sandbox_host_override(env: &EnvSnapshot) -> Result<Option<HostKind>, String> {
    match env.sandbox_host.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("local") => Ok(Some(HostKind::Local)),
        Some(v) if v.eq_ignore_ascii_case("cloud") => Ok(Some(HostKind::Cloud)),
        Some(v) => Err(format!(
            "ITERION_SANDBOX_HOST: {v:?} is not a sandbox host kind (local, cloud)"
        )),
    }
}

/// The variables the sandbox policy reads (upstream names, SPEC §2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvSnapshot {
    /// `ITERION_SANDBOX_OVERRIDE` (tier 1, runner-side).
    pub sandbox_override: Option<String>,
    /// `ITERION_SANDBOX_DEFAULT` (tier 3).
    pub sandbox_default: Option<String>,
    /// `ITERION_SANDBOX_HOST_STATE`.
    pub host_state: Option<String>,
    /// `ITERION_SANDBOX_DEFAULT_IMAGE`.
    pub default_image: Option<String>,
    /// `ITERION_SANDBOX_READBACK_CAP`.
    pub readback_cap: Option<String>,
    /// `ITERION_SANDBOX_PREFLIGHT`.
    pub preflight: Option<String>,
    /// `ITERION_SANDBOX_PROVIDER_KEYS` (`placeholder` or `plain`).
    pub provider_keys: Option<String>,
    /// `ITERION_MODE`.
    pub iterion_mode: Option<String>,
    /// `ITERION_SANDBOX_HOST` (`local`/`cloud`): the sandbox host kind when
    /// it is not the deployment mode's (a cloud-mode runner on a VM with
    /// Docker or Podman sets `local`).
    pub sandbox_host: Option<String>,
    /// `KUBERNETES_SERVICE_HOST`.
    pub kubernetes_service_host: Option<String>,
    /// `ITERION_DESKTOP`.
    pub desktop: Option<String>,
    /// `ITERION_HOME`.
    pub iterion_home: Option<String>,
    /// `HOME`.
    pub home: Option<String>,
    /// `GOCACHE`.
    pub gocache: Option<String>,
    /// `GOMODCACHE`.
    pub gomodcache: Option<String>,
    /// `argv[0]` of the process (an `iterion-desktop` names the desktop
    /// host kind). Not a variable: [`EnvSnapshot::from_lookup`] leaves it
    /// unset.
    pub argv0: Option<String>,
}

impl EnvSnapshot {
    /// Names read by [`EnvSnapshot::from_lookup`].
    pub const NAMES: [&'static str; 15] = [
        "ITERION_SANDBOX_OVERRIDE",
        "ITERION_SANDBOX_DEFAULT",
        "ITERION_SANDBOX_HOST_STATE",
        "ITERION_SANDBOX_DEFAULT_IMAGE",
        "ITERION_SANDBOX_READBACK_CAP",
        "ITERION_SANDBOX_PREFLIGHT",
        "ITERION_SANDBOX_PROVIDER_KEYS",
        "ITERION_MODE",
        "ITERION_SANDBOX_HOST",
        "KUBERNETES_SERVICE_HOST",
        "ITERION_DESKTOP",
        "ITERION_HOME",
        "HOME",
        "GOCACHE",
        "GOMODCACHE",
    ];

    /// Build from any lookup (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        Self {
            sandbox_override: get("ITERION_SANDBOX_OVERRIDE"),
            sandbox_default: get("ITERION_SANDBOX_DEFAULT"),
            host_state: get("ITERION_SANDBOX_HOST_STATE"),
            default_image: get("ITERION_SANDBOX_DEFAULT_IMAGE"),
            readback_cap: get("ITERION_SANDBOX_READBACK_CAP"),
            preflight: get("ITERION_SANDBOX_PREFLIGHT"),
            provider_keys: get("ITERION_SANDBOX_PROVIDER_KEYS"),
            iterion_mode: get("ITERION_MODE"),
            sandbox_host: get("ITERION_SANDBOX_HOST"),
            kubernetes_service_host: get("KUBERNETES_SERVICE_HOST"),
            desktop: get("ITERION_DESKTOP"),
            iterion_home: get("ITERION_HOME"),
            home: get("HOME"),
            gocache: get("GOCACHE"),
            gomodcache: get("GOMODCACHE"),
            argv0: None,
        }
    }

    /// Build from a map of pairs.
    pub fn from_map(map: &BTreeMap<String, String>) -> Self {
        Self::from_lookup(|k| map.get(k).cloned())
    }

    /// Snapshot the real process environment and `argv[0]` (the one
    /// impure entry point).
    pub fn from_process() -> Self {
        Self {
            argv0: std::env::args().next(),
            ..Self::from_lookup(|k| std::env::var(k).ok())
        }
    }

    /// The same snapshot with `argv[0]` set.
    pub fn with_argv0(mut self, argv0: impl Into<String>) -> Self {
        self.argv0 = Some(argv0.into());
        self
    }
}

/// The environment as the sandbox policy reads it: the snapshot, with the
/// operator's words parsed once ([`SandboxEnv::parse`]). A value outside
/// its vocabulary is refused here, before anything else reads it, so the
/// precedence chain cannot fail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxEnv {
    /// What was read (host kind detection and the host snapshot read it).
    pub snapshot: EnvSnapshot,
    /// `ITERION_SANDBOX_OVERRIDE` (tier 1, CLI strength): `none` or `auto`.
    pub override_mode: Option<Mode>,
    /// `ITERION_SANDBOX_DEFAULT` (tier 3): `none` or `auto`.
    pub default_mode: Option<Mode>,
    /// `ITERION_SANDBOX_HOST_STATE`.
    pub host_state: Option<HostState>,
    /// `ITERION_SANDBOX_DEFAULT_IMAGE`, when not blank.
    pub default_image: Option<String>,
    /// `ITERION_SANDBOX_READBACK_CAP`, when not blank.
    pub readback_cap: Option<ByteSize>,
    /// `ITERION_SANDBOX_PROVIDER_KEYS`: how agents' provider keys reach a
    /// confined sandbox (default: as placeholders, issue 17 item 5).
    pub provider_keys: ProviderKeys,
}

/// How the provider keys of a run's agents reach its sandbox
/// (`ITERION_SANDBOX_PROVIDER_KEYS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProviderKeys {
    /// `placeholder` (the default): bound to their provider's HTTPS host
    /// wherever the run's proxy can put the value back.
    #[default]
    Placeholder,
    /// `plain`: the values themselves (an operator whose provider client
    /// pins certificates, or who inspects traffic another way).
    Plain,
}

impl SandboxEnv {
    /// Parse the operator's words of `snapshot`. The mode and host_state
    /// words are read case-insensitively and trimmed, blank meaning unset
    /// (facts §4: `iterion run` reads `ITERION_SANDBOX_DEFAULT` raw, the
    /// config loaders lower-case it); anything else is
    /// [`PolicyError::InvalidEnv`] naming the variable.
    pub fn parse(snapshot: &EnvSnapshot) -> Result<Self, PolicyError> {
        // Read by host detection; refused here when it is no host kind.
        sandbox_host_override(snapshot).map_err(|_| PolicyError::InvalidEnv {
            name: "ITERION_SANDBOX_HOST",
            value: snapshot.sandbox_host.clone().unwrap_or_default(),
            expected: "\"\", local or cloud",
        })?;
        Ok(Self {
            override_mode: mode_word(
                "ITERION_SANDBOX_OVERRIDE",
                snapshot.sandbox_override.as_deref(),
            )?,
            default_mode: mode_word(
                "ITERION_SANDBOX_DEFAULT",
                snapshot.sandbox_default.as_deref(),
            )?,
            host_state: host_state_word(snapshot.host_state.as_deref())?,
            default_image: snapshot
                .default_image
                .as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            readback_cap: match snapshot
                .readback_cap
                .as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
            {
                None => None,
                Some(raw) => Some(parse_size(raw).map_err(|_| PolicyError::InvalidEnv {
                    name: "ITERION_SANDBOX_READBACK_CAP",
                    value: raw.to_owned(),
                    expected: "a size (N, NKiB, NMiB, NGiB)",
                })?),
            },
            provider_keys: provider_keys_word(snapshot.provider_keys.as_deref())?,
            snapshot: snapshot.clone(),
        })
    }
}

fn provider_keys_word(value: Option<&str>) -> Result<ProviderKeys, PolicyError> {
    let Some(raw) = value else {
        return Ok(ProviderKeys::default());
    };
    match word(raw).as_str() {
        "" | "placeholder" => Ok(ProviderKeys::Placeholder),
        "plain" => Ok(ProviderKeys::Plain),
        _ => Err(PolicyError::InvalidEnv {
            name: "ITERION_SANDBOX_PROVIDER_KEYS",
            value: raw.to_owned(),
            expected: "\"\", placeholder or plain",
        }),
    }
}

fn word(raw: &str) -> String {
    raw.trim().to_ascii_lowercase()
}

fn mode_word(name: &'static str, value: Option<&str>) -> Result<Option<Mode>, PolicyError> {
    let Some(raw) = value else { return Ok(None) };
    match word(raw).as_str() {
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

fn host_state_word(value: Option<&str>) -> Result<Option<HostState>, PolicyError> {
    let Some(raw) = value else { return Ok(None) };
    match word(raw).as_str() {
        "" => Ok(None),
        "auto" => Ok(Some(HostState::Auto)),
        "none" => Ok(Some(HostState::None)),
        _ => Err(PolicyError::InvalidEnv {
            name: "ITERION_SANDBOX_HOST_STATE",
            value: raw.to_owned(),
            expected: "\"\", auto or none",
        }),
    }
}

/// `ITERION_SANDBOX_PREFLIGHT` ∈ {1, true, yes, on} (case-insensitive)
/// enables the strict pre-flight of `iterion run` (facts §11.3).
pub fn preflight_enabled(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_parse_once_and_bad_ones_name_their_variable() {
        let env = |k: &str, v: &str| {
            let (k, v) = (k.to_owned(), v.to_owned());
            EnvSnapshot::from_lookup(move |n| (n == k).then(|| v.clone()))
        };
        let parsed = SandboxEnv::parse(&env("ITERION_SANDBOX_DEFAULT", " NONE ")).expect("ok");
        assert_eq!(parsed.default_mode, Some(Mode::None));
        let parsed = SandboxEnv::parse(&env("ITERION_SANDBOX_OVERRIDE", "")).expect("ok");
        assert_eq!(parsed.override_mode, None);
        let parsed = SandboxEnv::parse(&env("ITERION_SANDBOX_HOST_STATE", "Auto")).expect("ok");
        assert_eq!(parsed.host_state, Some(HostState::Auto));
        let parsed = SandboxEnv::parse(&env("ITERION_SANDBOX_READBACK_CAP", "1MiB")).expect("ok");
        assert_eq!(parsed.readback_cap, Some(ByteSize(1024 * 1024)));
        assert_eq!(
            parsed.provider_keys,
            ProviderKeys::Placeholder,
            "the default"
        );
        let parsed =
            SandboxEnv::parse(&env("ITERION_SANDBOX_PROVIDER_KEYS", " Plain")).expect("ok");
        assert_eq!(parsed.provider_keys, ProviderKeys::Plain);
        for (name, bad) in [
            ("ITERION_SANDBOX_DEFAULT", "inline"),
            ("ITERION_SANDBOX_OVERRIDE", "yes"),
            ("ITERION_SANDBOX_HOST_STATE", "maybe"),
            ("ITERION_SANDBOX_READBACK_CAP", "lots"),
            ("ITERION_SANDBOX_PROVIDER_KEYS", "off"),
        ] {
            let e = SandboxEnv::parse(&env(name, bad)).expect_err(name);
            assert_eq!(e.code(), "SANDBOX_INVALID_ENV");
            assert!(e.to_string().contains(name), "{e}");
        }
    }

    #[test]
    fn preflight_words() {
        for on in ["1", "true", "YES", " on "] {
            assert!(preflight_enabled(Some(on)), "{on}");
        }
        for off in ["", "0", "false", "no", "off", "enabled"] {
            assert!(!preflight_enabled(Some(off)), "{off}");
        }
        assert!(!preflight_enabled(None));
    }
}
