//! The bound of a run's run-files directory on the host (issue 19 #5: 5 GB
//! written there without a quota). A bind-capable driver serves the
//! directory from the host (ADR-143: "the bind is that storage"), so the
//! bound is the host's: a `nosuid`, `nodev` tmpfs mounted over the per-run
//! directory before the sandbox starts, of [`size_for`] the read-back cap.
//! Not the cap itself: the drain's contract is that a member over the cap
//! is declined by name (and tmpfs counts whole pages), so the bound leaves
//! room past the cap and only stops the flood. What is written counts
//! against the container's memory limit too (tmpfs pages are charged to
//! their writer).
//!
//! Mounting needs `CAP_SYS_ADMIN` (root, which egress confinement needs
//! too). Without it the directory stays unbounded and the booter says so
//! (`sandbox_limit_unenforced`); doctor reports which it will be.
//!
//! It does not decide the cap (the policy's `ReadBackDecl` does) nor drain
//! anything (`iterion-readback` does).

use std::path::Path;

use iterion_core::ByteSize;

/// Source name the mounts carry (what `mount` shows).
const SOURCE: &str = "iterion-run-files";

/// The bound for a read-back cap: twice the cap, and at least 64 MiB past
/// it.
pub fn size_for(cap: ByteSize) -> ByteSize {
    ByteSize(cap.0.saturating_add(cap.0.max(64 << 20)))
}

/// Whether this process may mount the bound (doctor's forecast; a run
/// tries and reports what happened).
pub fn host_can_bound() -> Result<(), String> {
    match rustix::process::geteuid().is_root() {
        true => Ok(()),
        false => Err(
            "mounting the bounding tmpfs needs root (CAP_SYS_ADMIN): run-files dirs are unbounded here"
                .to_owned(),
        ),
    }
}

/// Mount a bounded tmpfs over `dir` (an empty, just-created directory).
/// `Err` says why the directory stays unbounded.
pub fn bound(dir: &Path, size: ByteSize) -> Result<(), String> {
    use rustix::mount::{MountFlags, mount};
    let data = std::ffi::CString::new(format!("size={},mode=0755", size.0))
        .map_err(|e| format!("tmpfs options: {e}"))?;
    mount(
        SOURCE,
        dir,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        Some(data.as_c_str()),
    )
    .map_err(|e| match e {
        rustix::io::Errno::PERM | rustix::io::Errno::ACCESS => format!(
            "mounting a {size} tmpfs on {} needs root (CAP_SYS_ADMIN): {e}",
            dir.display()
        ),
        e => format!("cannot mount a {size} tmpfs on {}: {e}", dir.display()),
    })
}

/// Whether the bounded filesystem at `dir` is full (less than 64 KiB
/// left): the bound was hit. `None` when `dir` is no such mount.
pub fn full(dir: &Path, size: ByteSize) -> Option<bool> {
    let st = rustix::fs::statvfs(dir).ok()?;
    let total = st.f_blocks.saturating_mul(st.f_frsize);
    // Only our own mount has exactly the bound's size.
    if total == 0 || total.abs_diff(size.0) > st.f_frsize {
        return None;
    }
    Some(st.f_bavail.saturating_mul(st.f_frsize) < 64 * 1024)
}

/// Detach the mount at `dir`, if there is one (never following a link):
/// before the directory is removed, by the teardown or the reaper.
pub fn release(dir: &Path) {
    use rustix::mount::{UnmountFlags, unmount};
    let _ = unmount(dir, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_leaves_room_past_the_cap() {
        let mib = |n: u64| ByteSize(n << 20);
        assert_eq!(size_for(mib(256)), mib(512));
        assert_eq!(size_for(mib(8)), mib(72));
        assert_eq!(size_for(ByteSize(2048)), ByteSize(2048 + (64 << 20)));
        assert_eq!(size_for(ByteSize(u64::MAX)), ByteSize(u64::MAX));
    }

    #[test]
    fn a_directory_that_is_not_our_mount_is_neither_full_nor_released() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(full(dir.path(), ByteSize(1 << 20)), None);
        release(dir.path());
        assert!(dir.path().is_dir());
    }
}
