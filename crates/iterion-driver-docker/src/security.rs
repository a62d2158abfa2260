//! What a sandbox container may do beyond its limits: its capability set,
//! its seccomp profile under the host-root guard and, when its egress is
//! confined, IPv6 off inside it. One home, read by the container create and
//! by `doctor` (docs/threat-model.md lists the same set).
//!
//! Why not the engine's default set (issue 19, item 2): dockerd keeps
//! `NET_RAW` (a container hand-built IPv6 frames over `AF_PACKET` to the
//! host) and `MKNOD` (a device node left on a host bind); both engines keep
//! `SETFCAP` (a file capability written on a host bind, usable by any local
//! user — `no-new-privileges` only protects the container itself),
//! `SETPCAP`, `SYS_CHROOT` and, on dockerd, `AUDIT_WRITE`, none of which an
//! agent's tools need. What stays is what package managers and build tools
//! running as root need — chown, permission and ownership overrides,
//! switching users — plus binding ports below 1024 and signalling processes
//! of another uid inside the container.

use std::collections::HashMap;

use iterion_core::plan::HostRootGuard;
use iterion_core::{DriverError, DriverName};

/// The capabilities a sandbox keeps; every other one is dropped.
pub const SANDBOX_CAPABILITIES: [&str; 8] = [
    // Package managers and tar extraction as root: chown files,
    // override permission and ownership checks, keep setgid bits of
    // directories whose group differs.
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    // apt drops to `_apt`, su-like tools switch users.
    "SETGID",
    "SETUID",
    // Signal a process of another uid inside the container.
    "KILL",
    // A dev server on port 80 inside the sandbox (reachable by nothing
    // outside it).
    "NET_BIND_SERVICE",
];

/// The `CapAdd` list of a container create (after `CapDrop: ["ALL"]`),
/// by the plan's host-root guard (issue 19 item 4):
///
/// - a non-root user on a host bind gets none — the pinned identity, and
///   under the seccomp guard the spec's or image's own non-root user:
///   Podman puts added capabilities in a non-root user's *effective* set,
///   and `CHOWN` + `FOWNER` there let it chown a copy to root and set its
///   setuid bit on the bind (`DAC_OVERRIDE` would let it write root's
///   checkout). dockerd only bounds a non-root user by them; both engines
///   agree once nothing is added;
/// - root under the seccomp guard loses `FSETID` as well, so writing into
///   an existing setuid file on a bind clears its bit (`MKNOD` and
///   `SETFCAP` are never in the set);
/// - otherwise the whole set.
pub(crate) fn capabilities(guard: HostRootGuard, non_root_user: bool) -> Vec<String> {
    let dropped: &[&str] = match guard {
        HostRootGuard::NonRootUser => return Vec::new(),
        HostRootGuard::RootSeccomp if non_root_user => return Vec::new(),
        HostRootGuard::RootSeccomp => &["FSETID"],
        HostRootGuard::Unneeded => &[],
    };
    SANDBOX_CAPABILITIES
        .iter()
        .filter(|c| !dropped.contains(c))
        .map(|c| format!("CAP_{c}"))
        .collect()
}

/// The `seccomp=` security option of a sandbox under the host-root guard,
/// and the file it names when the engine wants a path.
pub(crate) struct SeccompOption {
    /// `seccomp=<profile JSON>` (dockerd) or `seccomp=<path>` (Podman).
    pub(crate) value: String,
    /// Podman's compat API reads the profile from a file at create (it
    /// takes the value as a path, as its CLI does; measured on 4.3): kept
    /// until the create is done, then removed.
    _file: Option<tempfile::NamedTempFile>,
}

/// The seccomp option `guard` needs on `engine`, or `None` (the engine's
/// own default profile).
pub(crate) fn seccomp_option(
    guard: HostRootGuard,
    engine: DriverName,
) -> Result<Option<SeccompOption>, DriverError> {
    if guard != HostRootGuard::RootSeccomp {
        return Ok(None);
    }
    let profile =
        iterion_sandbox::seccomp::guard_profile().map_err(|e| DriverError::GuardUnavailable {
            reason: e.to_string(),
        })?;
    if engine != DriverName::Podman {
        return Ok(Some(SeccompOption {
            value: format!("seccomp={profile}"),
            _file: None,
        }));
    }
    let io = |source| DriverError::Io {
        operation: "write the sandbox's seccomp profile for Podman".to_owned(),
        source,
    };
    // 0600 in the temp dir, made with O_EXCL: no other local user can
    // plant or swap it before the engine reads it.
    let mut file = tempfile::Builder::new()
        .prefix("iterion-seccomp-")
        .suffix(".json")
        .tempfile()
        .map_err(io)?;
    std::io::Write::write_all(&mut file, profile.as_bytes()).map_err(io)?;
    let value = format!("seccomp={}", file.path().display());
    Ok(Some(SeccompOption {
        value,
        _file: Some(file),
    }))
}

/// The sysctls of a confined container: no IPv6 on any of its interfaces
/// (Podman leaves it on, so ordinary sockets reached the bridge's
/// link-local address). The host-side rules close it too; this removes
/// the stack the attack needs.
pub(crate) fn ipv6_off_sysctls() -> HashMap<String, String> {
    [
        "net.ipv6.conf.all.disable_ipv6",
        "net.ipv6.conf.default.disable_ipv6",
    ]
    .into_iter()
    .map(|k| (k.to_owned(), "1".to_owned()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capability_set_follows_the_host_root_guard() {
        assert!(capabilities(HostRootGuard::NonRootUser, true).is_empty());
        assert!(capabilities(HostRootGuard::RootSeccomp, true).is_empty());
        let all: Vec<String> = SANDBOX_CAPABILITIES
            .iter()
            .map(|c| format!("CAP_{c}"))
            .collect();
        assert_eq!(capabilities(HostRootGuard::Unneeded, false), all);
        let guarded = capabilities(HostRootGuard::RootSeccomp, false);
        assert_eq!(guarded.len(), all.len() - 1);
        assert!(!guarded.contains(&"CAP_FSETID".to_owned()));
        for never in ["CAP_MKNOD", "CAP_SETFCAP"] {
            assert!(!all.contains(&never.to_owned()));
        }
    }

    #[test]
    fn the_seccomp_option_is_content_for_dockerd_and_a_path_for_podman() {
        assert!(
            seccomp_option(HostRootGuard::Unneeded, DriverName::Docker)
                .expect("none")
                .is_none()
        );
        let docker = seccomp_option(HostRootGuard::RootSeccomp, DriverName::Docker)
            .expect("built")
            .expect("some");
        let json = docker.value.strip_prefix("seccomp=").expect("prefix");
        let profile: serde_json::Value = serde_json::from_str(json).expect("json");
        assert_eq!(profile["defaultAction"], "SCMP_ACT_ERRNO");
        let podman = seccomp_option(HostRootGuard::RootSeccomp, DriverName::Podman)
            .expect("built")
            .expect("some");
        let path = podman
            .value
            .strip_prefix("seccomp=")
            .expect("prefix")
            .to_owned();
        let on_disk = std::fs::read_to_string(&path).expect("file");
        assert_eq!(on_disk, json);
        drop(podman);
        assert!(
            !std::path::Path::new(&path).exists(),
            "removed after create"
        );
    }
}
