//! The run's private host directories: where `iterion run` keeps per-run
//! state (the run-files dir a bind serves, the mask), how the state dir is
//! held to be iterion's own, and their removal. The paths are planned here
//! ([`RunDirs`]) before the decision, which binds them; the booter creates
//! them when it executes it.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use iterion_core::RunId;

use crate::boot::BootError;

/// Where `iterion run` keeps per-run host state (run-files dirs): under
/// the temp dir, so a reboot clears what the reaper has not.
pub fn default_state_dir() -> PathBuf {
    std::env::temp_dir().join("iterion")
}

/// iterion's private per-run areas: the state dir and this user's
/// file-secret dir (when a memory filesystem for it exists). Bind sources
/// of iterion's own (run files, secret files) must lie under one; no other
/// bind may expose one.
pub fn private_state_dirs(state_dir: &Path, env: &BTreeMap<String, String>) -> Vec<PathBuf> {
    let mut dirs = vec![state_dir.to_path_buf()];
    dirs.extend(crate::secrets::secrets_root(env).ok());
    dirs
}

/// The board's directory ([`iterion_core::agent::board_root`], for the
/// directory this process runs in), when it exists: private like the run
/// store, so a bind that would expose it gets it masked and a declared
/// bind inside it is refused (issue 31 item 2). Not a managed root: no
/// bind source of iterion's own lies there.
pub fn board_dir(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    let get = |k: &str| env.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let cwd = std::env::current_dir().ok()?;
    iterion_core::agent::board_root(
        get("ITERION_STORE_DIR"),
        get("XDG_STATE_HOME"),
        get("HOME"),
        &cwd,
    )
    .filter(|d| d.is_dir())
}

/// Every directory whose children are per-run host directories the reaper
/// judges: the state dirs under `state_dir` and this user's file-secret
/// dirs (when a memory filesystem for them exists).
pub fn host_state_roots(state_dir: &Path, env: &BTreeMap<String, String>) -> Vec<PathBuf> {
    let mut roots = vec![state_dir.join("sandboxes"), crate::procs::root(state_dir)];
    roots.extend(crate::secrets::secrets_root(env).ok());
    roots
}

/// The host directories of one run, as planned: `<state>/sandboxes/<run>`
/// holding `artifact-files` and `mask`. The state dir is named by its real
/// path (the real path of its longest existing ancestor, when it does not
/// exist yet), so the planned paths are the ones the bind judge and the
/// driver's re-check will see once the booter has created them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunDirs {
    /// `<state>/sandboxes/<run>`.
    pub dir: PathBuf,
}

impl RunDirs {
    pub(crate) fn plan(state_dir: &Path, run: &RunId) -> Self {
        Self {
            dir: real_prefix(state_dir).join("sandboxes").join(run.as_str()),
        }
    }

    pub(crate) fn run_files(&self) -> PathBuf {
        self.dir.join("artifact-files")
    }

    /// The run's attachments, bound read-only where the driver binds
    /// (filled after the start from the run store).
    pub(crate) fn attachments(&self) -> PathBuf {
        self.dir.join("attachments")
    }

    pub(crate) fn mask(&self) -> PathBuf {
        self.dir.join("mask")
    }

    /// The record of a copy-based workspace's copy-in.
    pub(crate) fn workspace_manifest(&self) -> PathBuf {
        self.dir.join("workspace-manifest")
    }

    /// Create them: the state dir held private, the run's dir 0700 marked
    /// with this process as its owner, the run-files dir, and the empty
    /// read-only directory a mask binds over a private area.
    pub(crate) fn create(&self, state_dir: &Path) -> Result<(), BootError> {
        use std::os::unix::fs::PermissionsExt;
        let sandboxes = state_dir.join("sandboxes");
        ensure_private_dir(state_dir)?;
        ensure_private_dir(&sandboxes)?;
        let io = |source| BootError::Io {
            operation: format!("create {}", self.dir.display()),
            source,
        };
        std::fs::create_dir_all(self.run_files()).map_err(io)?;
        std::fs::create_dir_all(self.attachments()).map_err(io)?;
        crate::owner::mark_owner(&self.dir).map_err(io)?;
        // The run's files live here during the run: no other local user
        // reads them (the engine binds them as root; the sandbox sees only
        // the bind).
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
        let mask = self.mask();
        std::fs::create_dir_all(&mask).map_err(io)?;
        std::fs::set_permissions(&mask, std::fs::Permissions::from_mode(0o555)).map_err(io)?;
        // The decision bound these paths; what was created must be them
        // (the driver refuses a source that resolves elsewhere anyway).
        let real = self.dir.canonicalize().map_err(io)?;
        if real != self.dir {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("it resolves to {} (the state dir moved)", real.display()),
            )));
        }
        Ok(())
    }
}

/// `path` with its longest existing ancestor resolved to its real path
/// (reads only: nothing is created).
fn real_prefix(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Make `dir` exist and hold it to be iterion's own: the state dir sits in
/// the shared temp dir by default, where another local user could have
/// made it first — or a symlink of theirs — and would then control the
/// parent of every run's secret files and run files (rename them aside,
/// plant a bind source). Refused unless it is a real directory owned by
/// this process's user (in a sticky temp dir no one else can then replace
/// it); made 0700.
pub(crate) fn ensure_private_dir(dir: &Path) -> Result<(), BootError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |source| BootError::Io {
        operation: format!("use {} as iterion's private state dir", dir.display()),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let meta = std::fs::symlink_metadata(dir).map_err(io)?;
    let me = std::fs::metadata("/proc/self").map_err(io)?.uid();
    let kind = meta.file_type();
    if kind.is_symlink() || !kind.is_dir() || meta.uid() != me {
        let what = if kind.is_symlink() {
            "a symlink"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "not a directory"
        };
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "it is {what} owned by uid {}, not a directory of uid {me} (another user made it first?)",
                meta.uid()
            ),
        )));
    }
    if meta.permissions().mode() & 0o777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    }
    Ok(())
}

/// A per-run host directory removed when dropped, unless disarmed.
pub(crate) struct RemoveOnDrop(pub Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            remove_run_host_dir(&dir);
        }
    }
}

/// Remove a per-run host dir, detaching its run-files mount first (else
/// the removal empties the tmpfs and leaves it mounted).
pub(crate) fn remove_run_host_dir(dir: &Path) {
    crate::runfiles::release(&dir.join("artifact-files"));
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p)
            .expect("stat")
            .permissions()
            .mode()
            & 0o7777
    }

    #[test]
    fn the_state_dir_is_made_private() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let fresh = tmp.path().join("iterion");
        ensure_private_dir(&fresh).expect("fresh");
        assert_eq!(mode(&fresh), 0o700);
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        ensure_private_dir(&open).expect("ours");
        assert_eq!(mode(&open), 0o700);
    }

    #[test]
    fn a_state_dir_planted_by_someone_else_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let theirs = tmp.path().join("theirs");
        std::fs::create_dir(&theirs).expect("mkdir");
        let link = tmp.path().join("iterion");
        std::os::unix::fs::symlink(&theirs, &link).expect("symlink");
        let e = ensure_private_dir(&link).expect_err("a symlink");
        assert!(e.to_string().contains("a symlink"), "{e}");
        assert_eq!(e.code(), "SANDBOX_START_FAILED");
        // Another user's directory (the suite runs as root, as CI does).
        let me = std::fs::metadata("/proc/self").expect("self").uid();
        assert_eq!(me, 0, "this test gives a directory away: run it as root");
        std::os::unix::fs::chown(&theirs, Some(4242), Some(4242)).expect("chown");
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let e = ensure_private_dir(&theirs).expect_err("another user's");
        assert!(e.to_string().contains("owned by uid 4242"), "{e}");
        // Left as it was: nothing of theirs is touched.
        assert_eq!(mode(&theirs), 0o777);
    }

    /// The planned paths are the created ones, named by the state dir's
    /// real path (the decision binds them before they exist).
    #[test]
    fn run_dirs_are_created_where_they_were_planned() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        let via = tmp.path().join("via");
        std::os::unix::fs::symlink(&real, &via).expect("symlink");
        // Not made yet: planned under the real path of what exists.
        let state = via.join("iterion");
        let run = RunId::generate();
        let dirs = RunDirs::plan(&state, &run);
        assert!(dirs.dir.starts_with(real.canonicalize().expect("real")));
        dirs.create(&state).expect("created");
        assert!(dirs.run_files().is_dir());
        assert_eq!(mode(&dirs.mask()), 0o555);
        assert_eq!(mode(&dirs.dir), 0o700);
        remove_run_host_dir(&dirs.dir);
        assert!(!dirs.dir.exists());
    }
}
