//! Who a sandbox runs as (issue 19 item 4). On an engine where container
//! uid 0 is host uid 0 (rootful Docker or Podman without user namespaces),
//! whatever the sandbox writes on a writable host bind is owned by the uid
//! it runs as: container root left setuid-root binaries and device nodes in
//! the user's checkout. So a sandbox with a writable host bind never runs
//! as uid 0 or gid 0 there: it runs as the invoking user when that is not
//! root (what it writes stays the user's), else as the workspace's owner
//! (`sudo iterion run` in a user's checkout), else as the dedicated
//! unprivileged [`SANDBOX_UID`] (a root-owned checkout is then read-only to
//! the sandbox). A non-root process without capabilities (no
//! `no-new-privileges` escape) cannot chown to root, cannot mknod a device
//! and can only set the setuid bit on files it owns: the class is
//! impossible, not the one example. A spec naming root is refused there.
//!
//! On an engine that maps container users into a user namespace (rootless,
//! dockerd `userns-remap`) container root is an unprivileged host uid
//! already, and nothing is changed. Without a writable host bind nothing a
//! sandbox writes lands on the host, and nothing is changed either.
//!
//! This module decides ([`decide_identity`]) and judges what the engine
//! really gave ([`check_credentials`] over [`parse_status`]); the driver
//! resolves user names in the image, hands its storage to the identity and
//! verifies it before the first exec. It does not decide binds (`binds`).

use iterion_core::driver::UidMapping;
use iterion_core::{EventKind, LaunchPlan, MountKind};

use crate::guards::GuardViolation;

/// The unprivileged uid (and gid) a sandbox runs as when iterion runs as
/// root in a root-owned workspace: in the range Debian reserves and never
/// allocates (65000–65533), so no host account owns what it writes; the
/// "nonroot" user of distroless images.
pub const SANDBOX_UID: u32 = 65532;

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
    /// Whether the sandbox must run as a non-root identity the driver
    /// verifies before the first exec.
    pub must_not_be_root: bool,
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

/// Who the sandbox runs as (see the module doc for the rule).
pub fn decide_identity(inputs: &IdentityInputs<'_>) -> Result<IdentityDecision, GuardViolation> {
    let keep = |must: bool| IdentityDecision {
        user: inputs.spec_user.map(str::to_owned),
        events: Vec::new(),
        must_not_be_root: must,
    };
    if !inputs.mapping.root_is_host_root() || !inputs.writable_host_binds {
        return Ok(keep(false));
    }
    let (uid, gid) = inputs.invoker;
    if let Some(user) = inputs.spec_user.map(str::trim).filter(|u| !u.is_empty()) {
        if names_root(user) {
            return Err(refuse(
                user,
                "a sandbox with a writable host bind may not run as root on this engine \
                 (container root is host root: what it writes there would be host root's, \
                 setuid bits and device nodes included); name an unprivileged user or drop the binds",
            ));
        }
        let mut decision = keep(true);
        let spec_uid = user.split(':').next().and_then(|s| s.parse::<u32>().ok());
        if inputs.host_state_auto && uid != 0 && spec_uid.is_some_and(|s| s != uid) {
            decision.events.push(EventKind::SandboxUidMismatchWarning {
                spec_user: user.to_owned(),
                host_uid: uid,
            });
        }
        return Ok(decision);
    }
    let (chosen, reason) = if uid != 0 {
        (
            (uid, gid),
            "spec names no user: run as the invoking user, so what the sandbox writes on host binds stays the user's",
        )
    } else if let Some(owner) = inputs.workspace_owner.filter(|(u, g)| *u != 0 && *g != 0) {
        (
            owner,
            "iterion runs as root: run as the workspace's owner, never as host root",
        )
    } else {
        (
            (SANDBOX_UID, SANDBOX_UID),
            "iterion runs as root in a root-owned workspace: run as the unprivileged sandbox uid (the workspace is read-only to it)",
        )
    };
    Ok(IdentityDecision {
        user: Some(format!("{}:{}", chosen.0, chosen.1)),
        events: vec![EventKind::SandboxUserRemap {
            uid: chosen.0,
            gid: chosen.1,
            reason: reason.to_owned(),
        }],
        must_not_be_root: true,
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
    fn never_host_root_with_a_writable_bind() {
        // Root in a root-owned checkout: the dedicated uid.
        assert_eq!(user_of(&inputs()).as_deref(), Some("65532:65532"));
        // Root in a user's checkout (sudo): the owner.
        let i = IdentityInputs {
            workspace_owner: Some((1000, 1000)),
            ..inputs()
        };
        assert_eq!(user_of(&i).as_deref(), Some("1000:1000"));
        // An owner whose group is root's is not taken.
        let i = IdentityInputs {
            workspace_owner: Some((1000, 0)),
            ..inputs()
        };
        assert_eq!(user_of(&i).as_deref(), Some("65532:65532"));
        // A user running iterion: that user, whoever owns the checkout.
        let i = IdentityInputs {
            invoker: (1001, 1001),
            workspace_owner: Some((1000, 1000)),
            ..inputs()
        };
        let d = decide_identity(&i).expect("decided");
        assert_eq!(d.user.as_deref(), Some("1001:1001"));
        assert!(d.must_not_be_root);
        assert_eq!(d.events[0].name(), "sandbox_user_remap");
    }

    #[test]
    fn a_spec_naming_root_is_refused_and_others_are_kept() {
        for root in ["0", "root", "0:0", "00", "1000:0", "root:staff", " 0 "] {
            let i = IdentityInputs {
                spec_user: Some(root),
                ..inputs()
            };
            assert!(decide_identity(&i).is_err(), "{root}");
        }
        for ok in ["1000", "1000:1000", "vscode", "node:node", "10"] {
            let i = IdentityInputs {
                spec_user: Some(ok),
                ..inputs()
            };
            let d = decide_identity(&i).expect("kept");
            assert_eq!(d.user.as_deref(), Some(ok));
            assert!(d.must_not_be_root, "names are verified by the driver");
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
                ..inputs()
            },
        ] {
            let d = decide_identity(&i).expect("kept");
            assert_eq!(d.user.as_deref(), Some("root"));
            assert!(!d.must_not_be_root);
            assert!(d.events.is_empty());
        }
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
