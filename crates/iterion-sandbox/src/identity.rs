//! Who a sandbox runs as, and what keeps it from leaving host-root
//! artefacts on the host (issue 19 item 4). On an engine where container
//! uid 0 is host uid 0 (rootful Docker or Podman without user namespaces),
//! whatever the sandbox writes on a writable host bind is owned by the uid
//! it runs as: container root left setuid-root binaries and device nodes in
//! the user's checkout. The guard is one of ([`HostRootGuard`]):
//!
//! - the invoking user when that is not root (what the sandbox writes stays
//!   the user's), or the workspace's owner when iterion runs as root in
//!   someone's checkout (`sudo iterion run`): a pinned non-root `uid:gid`
//!   holding no capability. A non-root process without capabilities (and
//!   `no-new-privileges`) cannot chown to root, cannot mknod a device and
//!   can only set the setuid bit on files it owns. A spec naming root is
//!   refused there (it would be host root in someone else's checkout);
//! - root, when iterion runs as root in a root-owned workspace (the quick
//!   start, CI): a checkout read-only to its own agent is no default, so
//!   the files are host root's, and what makes them harmless is that none
//!   can be setuid/setgid (the seccomp profile of `crate::seccomp`), a
//!   device (`MKNOD` dropped) or carry file capabilities (`SETFCAP`
//!   dropped), and that writing an existing setuid file clears its bit
//!   (`FSETID` dropped).
//!
//! On an engine that maps container users into a user namespace (rootless,
//! dockerd `userns-remap`) container root is an unprivileged host uid
//! already, and nothing is changed. Without a writable host bind nothing a
//! sandbox writes lands on the host, and nothing is changed either.
//!
//! This module decides ([`decide_identity`]) and judges what the engine
//! really gave ([`check_credentials`] over [`parse_status`],
//! [`check_root_guard`] over [`parse_guard_status`]); the driver resolves
//! user names in the image, hands its storage to the identity, applies the
//! guard and verifies it before the first exec. It does not decide binds
//! (`binds`).

use iterion_core::driver::UidMapping;
pub use iterion_core::plan::HostRootGuard;
use iterion_core::{EventKind, LaunchPlan, MountKind};

use crate::guards::GuardViolation;

/// What the decision needs to know about the host and the plan.
#[derive(Debug, Clone, Copy)]
pub struct IdentityInputs<'a> {
    /// The user the spec names (`uid[:gid]` or a name), if any.
    pub spec_user: Option<&'a str>,
    /// The invoking process's uid and gid.
    pub invoker: (u32, u32),
    /// Owner uid and gid of the workspace directory, when known.
    pub workspace_owner: Option<(u32, u32)>,
    /// How the selected engine maps container uids.
    pub mapping: UidMapping,
    /// Whether the plan keeps a writable host bind.
    pub writable_host_binds: bool,
    /// Whether host_state binds are laid (a user pinned apart from the
    /// invoker then cannot write them: warned).
    pub host_state_auto: bool,
}

/// The decision: the user to run as (`None`: the image's own) and the
/// events that say why.
#[derive(Debug, Clone, PartialEq)]
pub struct IdentityDecision {
    /// `uid:gid`, the spec's own user, or `None`.
    pub user: Option<String>,
    /// `sandbox_user_remap`, `sandbox_uid_mismatch_warning`.
    pub events: Vec<EventKind>,
    /// What keeps host-root artefacts off the host binds; the driver
    /// applies it and verifies it before the first exec.
    pub guard: HostRootGuard,
    /// Why this user and this guard (doctor).
    pub reason: &'static str,
}

/// What a guard does, in the words `doctor` and docs/host-binds.md use (`binds`:
/// whether the engine binds host paths at all).
pub fn protection(guard: HostRootGuard, binds: bool) -> &'static str {
    match (guard, binds) {
        (HostRootGuard::Unneeded, false) => "no host binds (bindless)",
        (HostRootGuard::Unneeded, true) => "user namespace of the engine",
        (HostRootGuard::NonRootUser, _) => {
            "unprivileged sandbox user, no capabilities, no-new-privileges; verified before the first exec"
        }
        (HostRootGuard::RootSeccomp, _) => {
            "root, setuid/setgid and device creation blocked by seccomp (MKNOD, SETFCAP, FSETID dropped), no-new-privileges; verified before the first exec"
        }
    }
}

/// Whether a plan keeps a bind of the host filesystem it can write.
pub fn has_writable_host_bind(plan: &LaunchPlan) -> bool {
    plan.mounts
        .iter()
        .any(|m| m.kind == MountKind::Bind && !m.readonly)
}

/// Whether a user string names uid 0 or gid 0 without looking at an image
/// (`0`, `root`, `0:5`, `1000:0`, `root:root`…). A name is judged by the
/// driver once resolved in the image.
pub fn names_root(user: &str) -> bool {
    let mut parts = user.trim().splitn(2, ':');
    let uid = parts.next().unwrap_or_default().trim();
    let gid = parts.next().map(str::trim);
    let root = |s: &str| s == "root" || (!s.is_empty() && s.bytes().all(|b| b == b'0'));
    root(uid) || gid.is_some_and(root)
}

fn refuse(user: &str, reason: impl Into<String>) -> GuardViolation {
    GuardViolation {
        field: "user".to_owned(),
        value: user.to_owned(),
        reason: reason.into(),
    }
}

/// Who the sandbox runs as and under which guard (see the module doc).
pub fn decide_identity(inputs: &IdentityInputs<'_>) -> Result<IdentityDecision, GuardViolation> {
    let keep = |guard: HostRootGuard, reason: &'static str| IdentityDecision {
        user: inputs.spec_user.map(str::to_owned),
        events: Vec::new(),
        guard,
        reason,
    };
    if !inputs.writable_host_binds {
        return Ok(keep(
            HostRootGuard::Unneeded,
            "no writable host bind: nothing the sandbox writes lands on the host",
        ));
    }
    if !inputs.mapping.root_is_host_root() {
        return Ok(keep(
            HostRootGuard::Unneeded,
            "the engine maps container users into a user namespace",
        ));
    }
    let (uid, gid) = inputs.invoker;
    let owner = inputs.workspace_owner.filter(|(u, g)| *u != 0 && *g != 0);
    if uid == 0 && owner.is_none() {
        // Root's own checkout: root may write it, and the seccomp guard
        // makes what it writes harmless, whoever the spec names.
        return Ok(keep(
            HostRootGuard::RootSeccomp,
            "iterion runs as root in a root-owned workspace: the sandbox may write it as root",
        ));
    }
    if let Some(user) = inputs.spec_user.map(str::trim).filter(|u| !u.is_empty()) {
        if names_root(user) {
            return Err(refuse(
                user,
                "a sandbox with a writable host bind may not run as root in a workspace that is not root's \
                 (container root is host root on this engine: what it writes there would be host root's); \
                 name an unprivileged user or drop the binds",
            ));
        }
        let mut decision = keep(
            HostRootGuard::NonRootUser,
            "the spec's own user, verified unprivileged before the first exec",
        );
        let spec_uid = user.split(':').next().and_then(|s| s.parse::<u32>().ok());
        if inputs.host_state_auto && uid != 0 && spec_uid.is_some_and(|s| s != uid) {
            decision.events.push(EventKind::SandboxUidMismatchWarning {
                spec_user: user.to_owned(),
                host_uid: uid,
            });
        }
        return Ok(decision);
    }
    let (chosen, reason) = match owner {
        Some(owner) if uid == 0 => (
            owner,
            "iterion runs as root: run as the workspace's owner, never as host root",
        ),
        _ => (
            (uid, gid),
            "spec names no user: run as the invoking user, so what the sandbox writes on host binds stays the user's",
        ),
    };
    Ok(IdentityDecision {
        user: Some(format!("{}:{}", chosen.0, chosen.1)),
        events: vec![EventKind::SandboxUserRemap {
            uid: chosen.0,
            gid: chosen.1,
            reason: reason.to_owned(),
        }],
        guard: HostRootGuard::NonRootUser,
        reason,
    })
}

/// The credentials of a process, as `/proc/<pid>/status` shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// Real, effective, saved and filesystem uids.
    pub uids: Vec<u32>,
    /// Real, effective, saved and filesystem gids.
    pub gids: Vec<u32>,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// Parse the `Uid:`, `Gid:` and `Groups:` lines of a `/proc/*/status`
/// text; `None` when a line is missing or unreadable.
pub fn parse_status(text: &str) -> Option<Credentials> {
    let ids = |rest: &str| -> Option<Vec<u32>> {
        rest.split_whitespace().map(|w| w.parse().ok()).collect()
    };
    let mut creds = Credentials::default();
    let (mut seen_uid, mut seen_gid, mut seen_groups) = (false, false, false);
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Uid:") {
            creds.uids = ids(rest)?;
            seen_uid = true;
        } else if let Some(rest) = line.strip_prefix("Gid:") {
            creds.gids = ids(rest)?;
            seen_gid = true;
        } else if let Some(rest) = line.strip_prefix("Groups:") {
            creds.groups = ids(rest)?;
            seen_groups = true;
        }
    }
    (seen_uid && seen_gid && seen_groups && !creds.uids.is_empty() && !creds.gids.is_empty())
        .then_some(creds)
}

/// Refuse credentials that include uid 0 or gid 0 anywhere (real,
/// effective, saved, filesystem, supplementary): a sandbox process that
/// holds any of them could create host-root files on a bind.
pub fn check_credentials(creds: &Credentials) -> Result<(), GuardViolation> {
    let shown = format!(
        "uids {:?} gids {:?} groups {:?}",
        creds.uids, creds.gids, creds.groups
    );
    if creds.uids.contains(&0) || creds.gids.contains(&0) || creds.groups.contains(&0) {
        return Err(refuse(
            &shown,
            "the sandbox process holds uid or gid 0 on an engine where that is host root",
        ));
    }
    Ok(())
}

/// The capabilities the host-root guard drops beyond the usual cut set,
/// by bit number: `FSETID` (writing a setuid file keeps its bit), `MKNOD`
/// (device nodes) and `SETFCAP` (file capabilities).
pub const ROOT_GUARD_DROPPED: [(&str, u32); 3] = [("FSETID", 4), ("MKNOD", 27), ("SETFCAP", 31)];

/// What a sandbox process shows of its confinement: the `Seccomp:` mode
/// and capability sets of `/proc/self/status`, and the outcome of the
/// setuid probe (the exit status of `chmod 4700` on a file of its own and
/// whether the bit was set anyway).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardStatus {
    /// `Seccomp:` (2: a filter is applied).
    pub seccomp: Option<u32>,
    /// `CapEff:`.
    pub cap_eff: u64,
    /// `CapPrm:`.
    pub cap_prm: u64,
    /// `CapBnd:`.
    pub cap_bnd: u64,
    /// `Probe: <exit> <set|clear>`.
    pub probe: Option<(i64, bool)>,
}

/// Parse the `Seccomp:`, `CapEff:`, `CapPrm:`, `CapBnd:` and `Probe:`
/// lines; `None` when a capability line is missing or unreadable.
pub fn parse_guard_status(text: &str) -> Option<GuardStatus> {
    let mut status = GuardStatus::default();
    let mut seen = 0;
    let hex = |rest: &str| u64::from_str_radix(rest.trim(), 16).ok();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Seccomp:") {
            status.seccomp = rest.trim().parse().ok();
        } else if let Some(rest) = line.strip_prefix("CapEff:") {
            status.cap_eff = hex(rest)?;
            seen += 1;
        } else if let Some(rest) = line.strip_prefix("CapPrm:") {
            status.cap_prm = hex(rest)?;
            seen += 1;
        } else if let Some(rest) = line.strip_prefix("CapBnd:") {
            status.cap_bnd = hex(rest)?;
            seen += 1;
        } else if let Some(rest) = line.strip_prefix("Probe:") {
            let mut words = rest.split_whitespace();
            let exit = words.next().and_then(|w| w.parse().ok());
            let set = match words.next() {
                Some("set") => Some(true),
                Some("clear") => Some(false),
                _ => None,
            };
            status.probe = exit.zip(set);
        }
    }
    (seen == 3).then_some(status)
}

/// The hidden subcommand of the static `iterion` that reports a sandbox's
/// confinement from inside it (`iterion __guard-probe`): the `Seccomp:` and
/// capability lines of its `/proc/self/status`, then `Probe: <status>
/// <set|clear>` for a setuid chmod tried on an in-memory file of its own
/// (no `chmod` program, no writable directory needed, so any image works).
pub const GUARD_PROBE_SUBCOMMAND: &str = "__guard-probe";

/// Capability names by bit number (`capability.h`), for saying which a
/// sandbox holds.
const CAP_NAMES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The capabilities of a set, by name (`none` when empty; an unknown bit
/// by number).
fn cap_words(set: u64) -> String {
    let names: Vec<String> = (0..64u32)
        .filter(|bit| set & (1u64 << bit) != 0)
        .map(|bit| {
            CAP_NAMES
                .get(bit as usize)
                .map_or_else(|| format!("capability {bit}"), |n| (*n).to_owned())
        })
        .collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

impl std::fmt::Display for GuardStatus {
    /// What the sandbox showed, in words: its seccomp mode, the
    /// capabilities it holds and how the setuid probe went.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.seccomp {
            Some(0) => f.write_str("no seccomp filter")?,
            Some(1) => f.write_str("seccomp in strict mode, not a filter")?,
            Some(2) => f.write_str("a seccomp filter")?,
            Some(n) => write!(f, "seccomp mode {n}")?,
            None => f.write_str("no seccomp mode shown")?,
        }
        if self.cap_eff == self.cap_prm && self.cap_prm == self.cap_bnd {
            write!(
                f,
                "; capabilities (effective, permitted and bounding): {}",
                cap_words(self.cap_eff)
            )?;
        } else {
            write!(
                f,
                "; effective capabilities: {}; permitted: {}; bounding: {}",
                cap_words(self.cap_eff),
                cap_words(self.cap_prm),
                cap_words(self.cap_bnd)
            )?;
        }
        let bit = |set: bool| {
            if set {
                "the setuid bit was set"
            } else {
                "the setuid bit stayed clear"
            }
        };
        match self.probe {
            None => f.write_str("; the setuid probe did not run"),
            Some((0, set)) => write!(f, "; a setuid chmod succeeded ({})", bit(set)),
            Some((code @ (126 | 127), _)) => {
                write!(
                    f,
                    "; the setuid probe found no chmod to run (status {code})"
                )
            }
            Some((code, set)) => write!(
                f,
                "; a setuid chmod was refused (status {code}, {})",
                bit(set)
            ),
        }
    }
}

/// Why the host-root guard is not in effect in a sandbox, with what the
/// sandbox showed, in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (the sandbox showed {status})")]
pub struct RootGuardNotInEffect {
    /// Which part of the guard is missing.
    pub reason: String,
    /// What the sandbox showed.
    pub status: GuardStatus,
}

/// Refuse a sandbox the host-root guard is not in effect on: no seccomp
/// filter, a dropped capability still held (effective, permitted or
/// bounding), or a setuid chmod that was not refused by the filter (it
/// succeeded, set the bit, or could not be tried: no probe is no proof).
pub fn check_root_guard(status: &GuardStatus) -> Result<(), RootGuardNotInEffect> {
    let fail = |reason: String| RootGuardNotInEffect {
        reason,
        status: status.clone(),
    };
    if status.seccomp != Some(2) {
        return Err(fail(
            "no seccomp filter is in effect in the sandbox (Seccomp: 2 expected)".to_owned(),
        ));
    }
    for (name, bit) in ROOT_GUARD_DROPPED {
        let mask = 1u64 << bit;
        if (status.cap_eff | status.cap_prm | status.cap_bnd) & mask != 0 {
            return Err(fail(format!("the sandbox still holds CAP_{name}")));
        }
    }
    match status.probe {
        Some((exit, false)) if exit != 0 && exit != 126 && exit != 127 => Ok(()),
        Some((_, true)) | Some((0, _)) => Err(fail(
            "a setuid chmod succeeded in the sandbox: the seccomp guard is not in effect"
                .to_owned(),
        )),
        _ => Err(fail(
            "the setuid probe could not run in the sandbox: the guard cannot be verified"
                .to_owned(),
        )),
    }
}

/// A user resolved against an image's `/etc/passwd` and `/etc/group`:
/// `uid[:gid]` or `name[:group]`. A uid without a group takes its passwd
/// entry's group, or its own number when it has none (never the engine's
/// fallback, gid 0). `None` when a name is unknown to the image.
pub fn resolve_user(user: &str, passwd: &str, group: &str) -> Option<(u32, u32)> {
    let mut parts = user.trim().splitn(2, ':');
    let u = parts.next().unwrap_or_default().trim();
    let g = parts.next().map(str::trim).filter(|g| !g.is_empty());
    let entries: Vec<Vec<&str>> = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() >= 4)
        .collect();
    let (uid, passwd_gid) = match u.parse::<u32>() {
        Ok(uid) => (
            uid,
            entries
                .iter()
                .find(|f| f[2].parse::<u32>().ok() == Some(uid))
                .and_then(|f| f[3].parse::<u32>().ok()),
        ),
        Err(_) => {
            let f = entries.iter().find(|f| f[0] == u)?;
            (f[2].parse().ok()?, f[3].parse().ok())
        }
    };
    let gid = match g {
        None => passwd_gid.unwrap_or(uid),
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => group
                .lines()
                .map(|l| l.split(':').collect::<Vec<_>>())
                .find(|f| f.len() >= 3 && f[0] == g)?
                .get(2)?
                .parse()
                .ok()?,
        },
    };
    Some((uid, gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>() -> IdentityInputs<'a> {
        IdentityInputs {
            spec_user: None,
            invoker: (0, 0),
            workspace_owner: Some((0, 0)),
            mapping: UidMapping::Identity,
            writable_host_binds: true,
            host_state_auto: false,
        }
    }

    fn user_of(i: &IdentityInputs<'_>) -> Option<String> {
        decide_identity(i).expect("decided").user
    }

    #[test]
    fn root_in_its_own_checkout_runs_as_root_under_the_seccomp_guard() {
        for owner in [Some((0, 0)), Some((1000, 0)), Some((0, 1000)), None] {
            let i = IdentityInputs {
                workspace_owner: owner,
                ..inputs()
            };
            let d = decide_identity(&i).expect("decided");
            assert_eq!(d.user, None, "{owner:?}: the image's own user");
            assert_eq!(d.guard, HostRootGuard::RootSeccomp);
            assert!(d.events.is_empty());
        }
        // A spec naming root or another user keeps it, under the guard.
        for user in ["root", "0:0", "1000"] {
            let i = IdentityInputs {
                spec_user: Some(user),
                ..inputs()
            };
            let d = decide_identity(&i).expect("kept");
            assert_eq!(d.user.as_deref(), Some(user));
            assert_eq!(d.guard, HostRootGuard::RootSeccomp);
        }
        assert!(
            protection(HostRootGuard::RootSeccomp, true)
                .starts_with("root, setuid/setgid and device creation blocked by seccomp")
        );
    }

    #[test]
    fn never_host_root_in_someone_elses_checkout() {
        // Root in a user's checkout (sudo): the owner.
        let i = IdentityInputs {
            workspace_owner: Some((1000, 1000)),
            ..inputs()
        };
        let d = decide_identity(&i).expect("decided");
        assert_eq!(d.user.as_deref(), Some("1000:1000"));
        assert_eq!(d.guard, HostRootGuard::NonRootUser);
        // A user running iterion: that user, whoever owns the checkout.
        let i = IdentityInputs {
            invoker: (1001, 1001),
            workspace_owner: Some((1000, 1000)),
            ..inputs()
        };
        let d = decide_identity(&i).expect("decided");
        assert_eq!(d.user.as_deref(), Some("1001:1001"));
        assert_eq!(d.guard, HostRootGuard::NonRootUser);
        assert_eq!(d.events[0].name(), "sandbox_user_remap");
        // Even in a root-owned checkout: a user cannot write it anyway.
        let i = IdentityInputs {
            invoker: (1001, 1001),
            ..inputs()
        };
        assert_eq!(user_of(&i).as_deref(), Some("1001:1001"));
    }

    #[test]
    fn a_spec_naming_root_is_refused_and_others_are_kept() {
        for invoker in [(0, 0), (1001, 1001)] {
            for root in ["0", "root", "0:0", "00", "1000:0", "root:staff", " 0 "] {
                let i = IdentityInputs {
                    spec_user: Some(root),
                    invoker,
                    workspace_owner: Some((1000, 1000)),
                    ..inputs()
                };
                assert!(decide_identity(&i).is_err(), "{root} {invoker:?}");
            }
        }
        for ok in ["1000", "1000:1000", "vscode", "node:node", "10"] {
            let i = IdentityInputs {
                spec_user: Some(ok),
                invoker: (1001, 1001),
                ..inputs()
            };
            let d = decide_identity(&i).expect("kept");
            assert_eq!(d.user.as_deref(), Some(ok));
            assert_eq!(
                d.guard,
                HostRootGuard::NonRootUser,
                "names are verified by the driver"
            );
        }
        let i = IdentityInputs {
            spec_user: Some("1000:1000"),
            invoker: (1001, 1001),
            host_state_auto: true,
            ..inputs()
        };
        let d = decide_identity(&i).expect("kept");
        assert_eq!(d.events[0].name(), "sandbox_uid_mismatch_warning");
    }

    #[test]
    fn nothing_changes_without_a_writable_bind_or_on_a_shifting_engine() {
        for i in [
            IdentityInputs {
                writable_host_binds: false,
                spec_user: Some("root"),
                invoker: (1001, 1001),
                ..inputs()
            },
            IdentityInputs {
                mapping: UidMapping::Rootless,
                spec_user: Some("root"),
                ..inputs()
            },
            IdentityInputs {
                mapping: UidMapping::Remapped,
                spec_user: Some("root"),
                workspace_owner: Some((1000, 1000)),
                ..inputs()
            },
        ] {
            let d = decide_identity(&i).expect("kept");
            assert_eq!(d.user.as_deref(), Some("root"));
            assert_eq!(d.guard, HostRootGuard::Unneeded);
            assert!(d.events.is_empty());
        }
    }

    #[test]
    fn the_root_guard_is_judged_from_status_and_probe() {
        // dockerd's cut set minus FSETID: CHOWN DAC_OVERRIDE FOWNER KILL
        // SETGID SETUID NET_BIND_SERVICE.
        let good = "Seccomp:\t2\nCapEff:\t00000000000004eb\nCapPrm:\t00000000000004eb\nCapBnd:\t00000000000004eb\nProbe: 1 clear\n";
        let status = parse_guard_status(good).expect("parsed");
        assert_eq!(status.seccomp, Some(2));
        assert!(check_root_guard(&status).is_ok(), "{status:?}");
        for bad in [
            // No filter.
            "Seccomp:\t0\nCapEff:\t0\nCapPrm:\t0\nCapBnd:\t0\nProbe: 1 clear\n",
            // FSETID (bit 4) held.
            "Seccomp:\t2\nCapEff:\t00000000000004fb\nCapPrm:\t0\nCapBnd:\t0\nProbe: 1 clear\n",
            // MKNOD (bit 27) in the bounding set.
            "Seccomp:\t2\nCapEff:\t0\nCapPrm:\t0\nCapBnd:\t0000000008000000\nProbe: 1 clear\n",
            // SETFCAP (bit 31) permitted.
            "Seccomp:\t2\nCapEff:\t0\nCapPrm:\t0000000080000000\nCapBnd:\t0\nProbe: 1 clear\n",
            // The chmod went through, or set the bit, or never ran.
            "Seccomp:\t2\nCapEff:\t0\nCapPrm:\t0\nCapBnd:\t0\nProbe: 0 clear\n",
            "Seccomp:\t2\nCapEff:\t0\nCapPrm:\t0\nCapBnd:\t0\nProbe: 1 set\n",
            "Seccomp:\t2\nCapEff:\t0\nCapPrm:\t0\nCapBnd:\t0\nProbe: 127 clear\n",
            "Seccomp:\t2\nCapEff:\t0\nCapPrm:\t0\nCapBnd:\t0\n",
        ] {
            let status = parse_guard_status(bad).expect("parsed");
            assert!(check_root_guard(&status).is_err(), "{bad}");
        }
        assert_eq!(parse_guard_status("Seccomp:\t2\nCapEff:\tzz\n"), None);
        assert_eq!(parse_guard_status("Seccomp:\t2\n"), None);
    }

    #[test]
    fn the_guard_refusal_says_what_the_sandbox_showed_in_words() {
        // dockerd's default set (FSETID, MKNOD, SETFCAP among them) and a
        // chmod that went through: the words, never a debug struct.
        let status = parse_guard_status(
            "Seccomp:\t2\nCapEff:\t00000000a80425fb\nCapPrm:\t00000000a80425fb\nCapBnd:\t00000000a80425fb\nProbe: 0 set\n",
        )
        .expect("parsed");
        let error = check_root_guard(&status)
            .expect_err("FSETID held")
            .to_string();
        assert_eq!(
            error,
            "the sandbox still holds CAP_FSETID (the sandbox showed a seccomp filter; \
             capabilities (effective, permitted and bounding): CHOWN, DAC_OVERRIDE, FOWNER, \
             FSETID, KILL, SETGID, SETUID, SETPCAP, NET_BIND_SERVICE, NET_RAW, SYS_CHROOT, \
             MKNOD, AUDIT_WRITE, SETFCAP; a setuid chmod succeeded (the setuid bit was set))"
        );
        let status =
            parse_guard_status("Seccomp:\t0\nCapEff:\t0\nCapPrm:\t0\nCapBnd:\t0000000000000001\n")
                .expect("parsed");
        let error = check_root_guard(&status)
            .expect_err("no filter")
            .to_string();
        assert_eq!(
            error,
            "no seccomp filter is in effect in the sandbox (Seccomp: 2 expected) \
             (the sandbox showed no seccomp filter; effective capabilities: none; \
             permitted: none; bounding: CHOWN; the setuid probe did not run)"
        );
        let status = parse_guard_status(
            "Seccomp:\t2\nCapEff:\t0\nCapPrm:\t0\nCapBnd:\t0\nProbe: 127 clear\n",
        )
        .expect("parsed");
        let error = check_root_guard(&status).expect_err("no chmod").to_string();
        assert!(
            error.starts_with("the setuid probe could not run in the sandbox")
                && error.ends_with("the setuid probe found no chmod to run (status 127))"),
            "{error}"
        );
        assert!(
            !error.contains("GuardStatus") && !error.contains("Some("),
            "{error}"
        );
    }

    #[test]
    fn status_lines_are_judged() {
        let status = "Name:\tsh\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\t1000 \n";
        let creds = parse_status(status).expect("parsed");
        assert_eq!(creds.uids, vec![1000; 4]);
        assert!(check_credentials(&creds).is_ok());
        for bad in [
            "Uid:\t0\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\nGroups:\n",
            "Uid:\t1000\t1000\t0\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\n",
            "Uid:\t1000\t1000\t1000\t1000\nGid:\t0\t0\t0\t0\nGroups:\n",
            "Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\t1000 0\n",
        ] {
            let creds = parse_status(bad).expect("parsed");
            assert!(check_credentials(&creds).is_err(), "{bad}");
        }
        assert_eq!(parse_status("Uid:\t1000\n"), None);
        assert_eq!(parse_status("Uid:\tx\nGid:\t1\nGroups:\n"), None);
    }

    #[test]
    fn users_resolve_in_the_image() {
        let passwd = "root:x:0:0:root:/root:/bin/sh\nvscode:x:1000:1001::/home/vscode:/bin/sh\nadmin:x:0:0::/:/bin/sh\n";
        let group = "root:x:0:\nstaff:x:50:\ndev:x:1001:vscode\n";
        assert_eq!(resolve_user("vscode", passwd, group), Some((1000, 1001)));
        assert_eq!(
            resolve_user("vscode:staff", passwd, group),
            Some((1000, 50))
        );
        assert_eq!(resolve_user("1000", passwd, group), Some((1000, 1001)));
        assert_eq!(resolve_user("4242", passwd, group), Some((4242, 4242)));
        assert_eq!(resolve_user("4242:7", passwd, group), Some((4242, 7)));
        // A name that is root in this image resolves to 0 (and is refused).
        assert_eq!(resolve_user("admin", passwd, group), Some((0, 0)));
        assert_eq!(resolve_user("ghost", passwd, group), None);
        assert_eq!(resolve_user("vscode:nogroup", passwd, group), None);
        assert!(names_root("root") && names_root("0:0") && !names_root("1000:1000"));
    }
}
