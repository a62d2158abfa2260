//! What a sandbox container may do beyond its limits: its capability set
//! and, when its egress is confined, IPv6 off inside it. One home, read by
//! the container create and by `doctor` (the README lists the same set).
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

/// The `CapAdd` list of a container create (after `CapDrop: ["ALL"]`).
///
/// A sandbox the driver runs as a pinned non-root identity (issue 19 item
/// 4: a writable host bind on an engine where container root is host root)
/// gets none: Podman puts added capabilities in a non-root user's
/// *effective* set, and `CHOWN` + `FOWNER` there let it chown a copy to
/// root and set its setuid bit on the bind — the very artefact the
/// identity exists to prevent. dockerd only bounds a non-root user by them;
/// both engines agree once nothing is added.
pub(crate) fn capabilities(pinned_non_root: bool) -> Vec<String> {
    if pinned_non_root {
        return Vec::new();
    }
    SANDBOX_CAPABILITIES
        .iter()
        .map(|c| format!("CAP_{c}"))
        .collect()
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
    fn a_pinned_non_root_sandbox_is_given_no_capability() {
        assert!(capabilities(true).is_empty());
        assert_eq!(
            capabilities(false),
            SANDBOX_CAPABILITIES
                .iter()
                .map(|c| format!("CAP_{c}"))
                .collect::<Vec<_>>()
        );
    }
}
