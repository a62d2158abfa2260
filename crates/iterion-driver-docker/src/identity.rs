//! The driver's half of the host-root guard (issue 19 item 4). When a
//! plan keeps a writable host bind on an engine where container root is
//! host root, the policy (`iterion_sandbox::identity`) has decided its
//! guard. Under the seccomp guard (root in a root-owned workspace) the
//! create carries the profile and the cut capability set (`security.rs`)
//! and the sandbox is verified before the first exec: a seccomp filter,
//! none of `FSETID`, `MKNOD`, `SETFCAP`, and a setuid chmod on a file of its
//! own refused — else the run is refused (`SANDBOX_GUARD_UNAVAILABLE`).
//! Under the non-root guard the policy has named an unprivileged user;
//! here that user is
//!
//! 1. resolved to a numeric `uid:gid` before create (a name through the
//!    image's own `/etc/passwd` and `/etc/group`, read from a container
//!    that is created and removed without ever starting — a name that is
//!    root in the image is refused), and the container created with it (an
//!    explicit group also keeps the engine from adding the image's
//!    supplementary groups);
//! 2. handed the storage it must write: the managed host dirs of the run
//!    (run files, secret files) are chowned to it when iterion runs as
//!    root, and the volumes the driver created get their root owned by it
//!    (a tar of directory entries uploaded before the first exec);
//! 3. verified, before post_create or any node runs, by reading
//!    `/proc/self/status` from an exec with only the shell's builtins: no
//!    uid or gid 0 anywhere, and exactly the identity asked for.
//!
//! A sandbox without a pinned identity (a bindless engine, an engine that
//! maps users itself) runs as the user the spec resolves (`user:`,
//! `remoteUser`, the image's own); when that user is not root it is handed
//! the driver's volumes the same way (issue 14 item 3).
//!
//! It decides nothing: the rule and the checks are the policy's.

use std::os::unix::fs::MetadataExt;

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateContainerOptions, DownloadFromContainerOptions, RemoveContainerOptions,
};
use futures_util::StreamExt;
use iterion_core::driver::{OutputLimits, collect_output};
use iterion_core::{DriverError, ExecRequest, LaunchPlan, MountKind, MountOrigin, SandboxRun};
use iterion_sandbox::identity::{
    Credentials, GUARD_PROBE_SUBCOMMAND, HostRootGuard, check_credentials, check_root_guard,
    has_writable_host_bind, names_root, parse_guard_status, parse_status, resolve_user,
};

use crate::engine::{Engine, engine_err};

/// The numeric identity a sandbox runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

impl Identity {
    /// The engine's `User` value: an explicit group, so no supplementary
    /// group of the image's is added.
    pub(crate) fn user(self) -> String {
        format!("{}:{}", self.uid, self.gid)
    }
}

/// Bound of what is read of an image's `/etc/passwd` or `/etc/group`.
const ACCOUNT_FILE_CAP: usize = 1 << 20;

/// The probe of a plan without iterion's static binary bound in: reads the
/// confinement of the exec and tries a setuid chmod on a file of its own
/// in the container's `/tmp` (never on a bind); the seccomp guard must
/// refuse it. `[ -u ]` is a builtin; `chmod` is the image's, so an image
/// without it (or without a writable `/tmp`) cannot be verified. With the
/// binary bound (`MountOrigin::RunnerBinary`), `iterion __guard-probe`
/// reports the same lines from any image.
const GUARD_SCRIPT: &str = "while IFS= read -r l; do case \"$l\" in Seccomp:*|CapEff:*|CapPrm:*|CapBnd:*) echo \"$l\";; esac; done < /proc/self/status; p=/tmp/.iterion-guard-probe-$$; if : > \"$p\"; then chmod 4700 \"$p\" 2>/dev/null; r=$?; if [ -u \"$p\" ]; then b=set; else b=clear; fi; rm -f \"$p\" 2>/dev/null; echo \"Probe: $r $b\"; fi";

/// Reads the credentials of the exec with shell builtins only (any image
/// that runs tool nodes has a POSIX `sh`).
const STATUS_SCRIPT: &str = "while IFS= read -r l; do case \"$l\" in Uid:*|Gid:*|Groups:*) echo \"$l\";; esac; done < /proc/self/status";

fn refused(reason: impl Into<String>) -> DriverError {
    DriverError::SpecRefused {
        reason: reason.into(),
    }
}

/// Step 1's answer: the identity to pin the container to (the non-root
/// guard), and the non-root identity the sandbox will run as, which gets
/// the run's host dirs (under either guard).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Resolved {
    pub(crate) pinned: Option<Identity>,
    pub(crate) runs_as: Option<Identity>,
}

/// Step 1: who `plan` runs as under its host-root guard (a plan needing a
/// guard and naming none is refused).
pub(crate) async fn resolve(
    driver: &Engine,
    image: &str,
    plan: &LaunchPlan,
    labels: &std::collections::HashMap<String, String>,
) -> Result<Resolved, DriverError> {
    let spec_user = plan
        .user
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty());
    match plan.limits.host_root_guard {
        HostRootGuard::NonRootUser => {}
        HostRootGuard::RootSeccomp => {
            // Root needs nothing handed over; the spec's or the image's
            // non-root user gets the run's host dirs, as it would pinned.
            let user = match spec_user {
                Some(u) => u.to_owned(),
                None => image_user(driver, image).await?,
            };
            if user.is_empty() || names_root(&user) {
                return Ok(Resolved::default());
            }
            let (uid, gid) = numeric_user(driver, image, &user, labels).await?;
            let id = Identity { uid, gid };
            return Ok(Resolved {
                pinned: None,
                runs_as: (uid != 0 && gid != 0).then_some(id),
            });
        }
        HostRootGuard::Unneeded => {
            // The policy decides the guard; a plan that reaches the driver
            // without one where it is needed was never judged.
            let mapping = driver.host_footprint().await.uid_mapping;
            if mapping.root_is_host_root() && has_writable_host_bind(plan) {
                return Err(DriverError::GuardUnavailable {
                    reason: "the plan keeps a writable host bind on an engine where container root is host root, and names no host-root guard".to_owned(),
                });
            }
            return Ok(Resolved::default());
        }
    }
    let user = spec_user.ok_or_else(|| {
        refused(
            "the plan keeps a writable host bind but names no user: the image's default may be root, which is host root on this engine",
        )
    })?;
    if names_root(user) {
        return Err(refused(format!(
            "user {user:?} is root, which is host root on this engine, and the plan keeps a writable host bind"
        )));
    }
    let (uid, gid) = numeric_user(driver, image, user, labels).await?;
    if check_credentials(&Credentials {
        uids: vec![uid],
        gids: vec![gid],
        groups: Vec::new(),
    })
    .is_err()
    {
        return Err(refused(format!(
            "user {user:?} is {uid}:{gid} in image {image}: root, which is host root on this engine, and the plan keeps a writable host bind"
        )));
    }
    let id = Identity { uid, gid };
    Ok(Resolved {
        pinned: Some(id),
        runs_as: Some(id),
    })
}

/// `user` as a numeric `uid:gid`: a name through the image's own accounts.
async fn numeric_user(
    driver: &Engine,
    image: &str,
    user: &str,
    labels: &std::collections::HashMap<String, String>,
) -> Result<(u32, u32), DriverError> {
    let numeric = user
        .split_once(':')
        .and_then(|(u, g)| Some((u.parse::<u32>().ok()?, g.parse::<u32>().ok()?)));
    if let Some(pair) = numeric {
        return Ok(pair);
    }
    // The group file only matters for a group given by name.
    let group_named = user
        .split_once(':')
        .is_some_and(|(_, g)| g.trim().parse::<u32>().is_err());
    let (passwd, group) = image_accounts(driver, image, labels, group_named).await?;
    resolve_user(user, &passwd, &group).ok_or_else(|| {
        refused(format!(
            "user {user:?} is not defined in image {image} (its /etc/passwd and /etc/group)"
        ))
    })
}

/// The image's own default user (`USER`), empty for root.
async fn image_user(driver: &Engine, image: &str) -> Result<String, DriverError> {
    let inspected = driver
        .client()
        .inspect_image(image)
        .await
        .map_err(engine_err("inspect image"))?;
    Ok(inspected
        .config
        .and_then(|c| c.user)
        .unwrap_or_default()
        .trim()
        .to_owned())
}

/// The image's `/etc/passwd` (and `/etc/group` when asked), read from one
/// container that is created and removed without ever starting (a missing
/// file reads as empty).
async fn image_accounts(
    driver: &Engine,
    image: &str,
    labels: &std::collections::HashMap<String, String>,
    with_group: bool,
) -> Result<(String, String), DriverError> {
    let created = driver
        .client()
        .create_container(
            None::<CreateContainerOptions>,
            ContainerCreateBody {
                image: Some(image.to_owned()),
                entrypoint: Some(vec!["true".to_owned()]),
                cmd: Some(Vec::new()),
                labels: Some(labels.clone()),
                network_disabled: Some(true),
                ..ContainerCreateBody::default()
            },
        )
        .await
        .map_err(engine_err("create container"))?;
    let passwd = container_file(driver, &created.id, image, "/etc/passwd").await;
    let group = match (&passwd, with_group) {
        (Ok(_), true) => container_file(driver, &created.id, image, "/etc/group").await,
        _ => Ok(String::new()),
    };
    remove_quiet(driver, &created.id).await;
    Ok((passwd?, group?))
}

/// One file of a created container (empty when it has no such file).
async fn container_file(
    driver: &Engine,
    container: &str,
    image: &str,
    path: &str,
) -> Result<String, DriverError> {
    let mut stream = driver.client().download_from_container(
        container,
        Some(DownloadFromContainerOptions {
            path: path.to_owned(),
        }),
    );
    let mut tar_bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(b) => {
                tar_bytes.extend_from_slice(&b);
                if tar_bytes.len() > ACCOUNT_FILE_CAP + 4096 {
                    break;
                }
            }
            Err(e) if crate::engine::status_of(&e) == Some(404) => return Ok(String::new()),
            Err(e) => return Err(engine_err("download archive")(e)),
        }
    }
    let io = |source| DriverError::Io {
        operation: format!("read {path} of {image}"),
        source,
    };
    let mut archive = tar::Archive::new(std::io::Cursor::new(tar_bytes));
    for entry in archive.entries().map_err(io)? {
        let mut entry = entry.map_err(io)?;
        if entry.header().entry_type().is_file() {
            let mut text = String::new();
            std::io::Read::read_to_string(
                &mut std::io::Read::take(&mut entry, ACCOUNT_FILE_CAP as u64),
                &mut text,
            )
            .map_err(io)?;
            return Ok(text);
        }
    }
    Ok(String::new())
}

async fn remove_quiet(driver: &Engine, id: &str) {
    let _ = driver
        .client()
        .remove_container(
            id,
            Some(RemoveContainerOptions {
                force: true,
                v: true,
                link: false,
            }),
        )
        .await;
}

/// Whether this process runs as root (it may then give files away).
fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Step 2, host side (before create): the run's managed host dirs the
/// sandbox writes (run files, scratch) and the secret files it reads
/// become the identity's. A non-root iterion made them its own already;
/// it cannot give them away (the identity is then that user unless the
/// spec pinned another, as before).
pub(crate) fn hand_over_host(plan: &LaunchPlan, id: Identity) -> Result<(), DriverError> {
    if !running_as_root() {
        return Ok(());
    }
    for m in plan.mounts.iter().filter(|m| m.kind == MountKind::Bind) {
        let own = matches!(
            m.origin,
            MountOrigin::RunFiles | MountOrigin::Scratch | MountOrigin::SecretFile
        );
        if let (true, Some(source)) = (own, m.source.as_deref()) {
            std::os::unix::fs::chown(source, Some(id.uid), Some(id.gid)).map_err(|source| {
                DriverError::Io {
                    operation: format!("hand {} to the sandbox user", m.target),
                    source,
                }
            })?;
        }
    }
    Ok(())
}

/// Steps 2 (volumes) and 3, after start and before any other exec.
///
/// With a pinned identity its volumes are handed over and the credentials
/// verified. Without one (no writable host bind — a bindless engine — or an
/// engine that maps users itself) the sandbox runs as the user the spec
/// resolves: its `user:`, a devcontainer's `remoteUser`, or else the
/// image's own. The engine creates the driver's volumes (the bindless
/// workspace, the run-files and read-back volumes) owned by root, so a
/// non-root user could not write its run files (issue 14 item 3): that user
/// is learnt from the same builtins-only exec (the engine's own answer, no
/// name to resolve) and, when not root, handed those volumes.
///
/// Returns who the sandbox runs as, when known (the owner a copy-based
/// workspace's files get).
pub(crate) async fn settle(
    run: &dyn SandboxRun,
    plan: &LaunchPlan,
    pinned: Option<Identity>,
) -> Result<Option<Identity>, DriverError> {
    let volumes: Vec<&str> = plan
        .mounts
        .iter()
        .filter(|m| m.kind == MountKind::Volume && m.source.is_none() && !m.readonly)
        .map(|m| m.target.trim_start_matches('/'))
        .filter(|t| !t.is_empty())
        .collect();
    if plan.limits.host_root_guard == HostRootGuard::RootSeccomp {
        verify_root_guard(run, plan).await?;
    }
    let Some(id) = pinned else {
        if volumes.is_empty() {
            return Ok(None);
        }
        // An image without `sh` (an agent's, not a tool's) cannot say who
        // it runs as: its volumes stay as the engine made them, which is
        // all a sandbox could get before (nothing of the host is at stake).
        let Ok(creds) = sandbox_credentials(run).await else {
            return Ok(None);
        };
        let (Some(&uid), Some(&gid)) = (creds.uids.get(1), creds.gids.get(1)) else {
            return Ok(None);
        };
        if uid != 0 || gid != 0 {
            hand_over_volumes(run, &volumes, Identity { uid, gid }).await?;
        }
        return Ok(Some(Identity { uid, gid }));
    };
    hand_over_volumes(run, &volumes, id).await?;
    let creds = sandbox_credentials(run).await?;
    check_credentials(&creds).map_err(|v| refused(v.to_string()))?;
    if creds.uids.iter().any(|u| *u != id.uid) || creds.gids.iter().any(|g| *g != id.gid) {
        return Err(refused(format!(
            "the engine ran the sandbox as uids {:?} gids {:?}, not {}",
            creds.uids,
            creds.gids,
            id.user()
        )));
    }
    Ok(Some(id))
}

/// The seccomp guard is in effect in the sandbox (issue 19 item 4): a
/// filter, none of the dropped capabilities, a setuid chmod refused. The
/// static `iterion` bound in for the claw runner probes when the plan has
/// it (any image, issue 31 item 9), else the image's shell and `chmod`.
async fn verify_root_guard(run: &dyn SandboxRun, plan: &LaunchPlan) -> Result<(), DriverError> {
    let probe = plan
        .mounts
        .iter()
        .find(|m| m.origin == MountOrigin::RunnerBinary && m.kind == MountKind::Bind);
    let request = match probe {
        Some(m) => ExecRequest::new([m.target.as_str(), GUARD_PROBE_SUBCOMMAND]),
        None => ExecRequest::new(["sh", "-c", GUARD_SCRIPT]),
    };
    let out = run_bounded(run, request).await?;
    let text = String::from_utf8_lossy(&out.stdout);
    let unavailable = |reason: String| DriverError::GuardUnavailable { reason };
    let status = parse_guard_status(&text).ok_or_else(|| {
        unavailable(format!(
            "could not read the sandbox's confinement (exit {}): {}",
            out.exit_code,
            String::from_utf8_lossy(&out.stderr_tail)
        ))
    })?;
    check_root_guard(&status).map_err(|v| unavailable(v.to_string()))
}

/// The driver-created volume roots become `id`'s (a tar of directory
/// entries uploaded through the archive API, which keeps their owners).
async fn hand_over_volumes(
    run: &dyn SandboxRun,
    volumes: &[&str],
    id: Identity,
) -> Result<(), DriverError> {
    if volumes.is_empty() {
        return Ok(());
    }
    let tar = ownership_tar(volumes, id).map_err(|source| DriverError::Io {
        operation: "build the volume ownership archive".to_owned(),
        source,
    })?;
    run.import(
        "/",
        Box::pin(futures_util::stream::once(async move {
            Ok(bytes::Bytes::from(tar))
        })),
    )
    .await
}

/// The credentials an exec of the sandbox runs with, as its
/// `/proc/self/status` shows them.
async fn sandbox_credentials(run: &dyn SandboxRun) -> Result<Credentials, DriverError> {
    let out = run_script(run, STATUS_SCRIPT).await?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_status(&text).ok_or_else(|| {
        refused(format!(
            "could not read the sandbox's credentials (exit {}): {}",
            out.exit_code,
            String::from_utf8_lossy(&out.stderr_tail)
        ))
    })
}

/// One `sh -c` exec of the sandbox, its output bounded.
async fn run_script(
    run: &dyn SandboxRun,
    script: &str,
) -> Result<iterion_core::driver::ExecOutput, DriverError> {
    run_bounded(run, ExecRequest::new(["sh", "-c", script])).await
}

/// One exec of the sandbox, its output bounded.
async fn run_bounded(
    run: &dyn SandboxRun,
    request: ExecRequest,
) -> Result<iterion_core::driver::ExecOutput, DriverError> {
    let mut session = run.exec(request).await?;
    collect_output(
        session.as_mut(),
        OutputLimits {
            stdout: 4096,
            stderr_tail: 1024,
        },
        &mut |_| {},
    )
    .await
}

/// Directory entries owned by `id`, one per driver-created volume root.
fn ownership_tar(dirs: &[&str], id: Identity) -> std::io::Result<Vec<u8>> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut builder = tar::Builder::new(Vec::new());
    for dir in dirs {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_uid(u64::from(id.uid));
        header.set_gid(u64::from(id.gid));
        header.set_mtime(now);
        header.set_size(0);
        builder.append_data(&mut header, format!("{dir}/"), std::io::empty())?;
    }
    builder.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ownership_archive_names_each_volume_root() {
        let tar = ownership_tar(
            &["out", "iterion/artifact-files"],
            Identity {
                uid: 4242,
                gid: 4343,
            },
        )
        .expect("tar");
        let mut archive = tar::Archive::new(std::io::Cursor::new(tar));
        let got: Vec<(String, u64, u64)> = archive
            .entries()
            .expect("entries")
            .map(|e| {
                let e = e.expect("entry");
                let h = e.header();
                (
                    e.path().expect("path").to_string_lossy().into_owned(),
                    h.uid().expect("uid"),
                    h.gid().expect("gid"),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("out/".to_owned(), 4242, 4343),
                ("iterion/artifact-files/".to_owned(), 4242, 4343)
            ]
        );
    }
}
