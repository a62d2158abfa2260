//! The host processes a run starts outside its sandbox (MCP servers),
//! as the reaper knows them: [`HostProcesses`] is the
//! [`ProcessLedger`] the agent runner records them in — one per-run host
//! directory under `<state dir>/processes`, owner-marked like every
//! per-run directory ([`crate::owner::mark_owner`]), holding one record
//! per process (pid and its `/proc` start time) — and [`release`] is what
//! the reaper does to such a directory once the one predicate says the
//! run is over.
//!
//! A process is killed only when it is provably the run's: the recorded
//! leader when its pid still has the recorded start time (then its whole
//! process group, which it leads), and any process whose environment
//! carries the run's marker ([`MARKER_ENV`]`=<run id>`, set on every
//! process the runner starts and inherited by what they spawn — an
//! `npx`'s node child). It decides nothing about whether the run is over.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use iterion_core::RunId;
use iterion_core::agent::ProcessLedger;
use serde::{Deserialize, Serialize};

use crate::owner;

/// The environment entry marking a process as a run's.
pub const MARKER_ENV: &str = "ITERION_RUN_PROCESS";
/// Version of a process record.
const RECORD_VERSION: u32 = 1;

/// Where the per-run process directories live under a state dir.
pub fn root(state_dir: &Path) -> PathBuf {
    state_dir.join("processes")
}

/// One recorded process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRecord {
    /// Format version.
    pub version: u32,
    /// What it is (the MCP server's name).
    pub label: String,
    /// Its pid, leader of its own process group.
    pub pid: u32,
    /// Field 22 of its `/proc/<pid>/stat` when recorded.
    pub start_time: u64,
}

/// The ledger of `iterion run`: records under `root`.
#[derive(Debug, Clone)]
pub struct HostProcesses {
    root: PathBuf,
}

impl HostProcesses {
    /// Records under `root` (see [`root`]).
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    fn run_dir(&self, run: &RunId) -> io::Result<PathBuf> {
        private_dir(&self.root)?;
        let dir = self.root.join(run.as_str());
        if !dir.join(crate::owner::OWNER_MARKER).exists() {
            private_dir(&dir)?;
            crate::owner::mark_owner(&dir)?;
        }
        Ok(dir)
    }
}

/// A label as a file name (server names are DSL identifiers; anything
/// else is mapped, never used as a path).
fn file_of(label: &str) -> String {
    let safe: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("proc-{safe}.json")
}

/// `dir` exists, is a real directory of this user, mode 0700.
fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)?;
        }
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    let me = std::fs::metadata("/proc/self")?.uid();
    if !meta.is_dir() || meta.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is not a directory of this user", dir.display()),
        ));
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

impl ProcessLedger for HostProcesses {
    fn marker(&self, run: &RunId) -> (String, String) {
        (MARKER_ENV.to_owned(), run.to_string())
    }

    fn record(&self, run: &RunId, label: &str, pid: u32) -> io::Result<()> {
        let dir = self.run_dir(run)?;
        let start_time = owner::proc_start_time(pid)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the process is gone"))?;
        let record = ProcessRecord {
            version: RECORD_VERSION,
            label: label.to_owned(),
            pid,
            start_time,
        };
        let text = serde_json::to_vec(&record).map_err(io::Error::other)?;
        std::fs::write(dir.join(file_of(label)), text)
    }

    fn forget(&self, run: &RunId, label: &str) {
        let dir = self.root.join(run.as_str());
        let _ = std::fs::remove_file(dir.join(file_of(label)));
        // The directory goes with its last record.
        let left = std::fs::read_dir(&dir).map_or(0, |d| {
            d.flatten()
                .filter(|e| e.file_name() != crate::owner::OWNER_MARKER)
                .count()
        });
        if left == 0 {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// The records of a per-run process directory.
pub fn records(dir: &Path) -> Vec<ProcessRecord> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("proc-"))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice::<ProcessRecord>(&b).ok())
        .filter(|r| r.version == RECORD_VERSION)
        .collect()
}

/// The pids of live processes whose environment carries `run`'s marker.
pub fn marked_processes(run: &str) -> Vec<u32> {
    let needle = format!("{MARKER_ENV}={run}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|b| *b == 0)
                    .any(|entry| entry == needle.as_bytes())
            })
        })
        .collect()
}

/// End what the run left running (called by the reaper before it removes
/// a per-run directory whose run is provably over): the recorded leaders
/// still alive with their recorded start time, with their groups, and
/// every process carrying the run's marker. Returns the pids signalled.
pub fn release(dir: &Path, run: &str) -> Vec<u32> {
    let mut killed = Vec::new();
    for r in records(dir) {
        if matches!(owner::proc_start_time(r.pid), Ok(Some(t)) if t == r.start_time)
            && let Some(pid) = to_pid(r.pid)
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            killed.push(r.pid);
        }
    }
    for p in marked_processes(run) {
        if let Some(pid) = to_pid(p) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            killed.push(p);
        }
    }
    killed.sort_unstable();
    killed.dedup();
    killed
}

fn to_pid(pid: u32) -> Option<rustix::process::Pid> {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_process_is_recorded_found_and_released() {
        let root = tempfile::tempdir().expect("tempdir");
        let ledger = HostProcesses::new(root.path().join("processes"));
        let run = RunId::generate();
        let (k, v) = ledger.marker(&run);
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .env(&k, &v)
            .spawn()
            .expect("sleep");
        ledger.record(&run, "srv", child.id()).expect("record");
        let dir = root.path().join("processes").join(run.as_str());
        assert!(dir.join(crate::owner::OWNER_MARKER).exists());
        assert_eq!(records(&dir)[0].pid, child.id());
        assert_eq!(marked_processes(run.as_str()), [child.id()]);
        // Another run's marker is not this one.
        assert!(marked_processes(RunId::generate().as_str()).is_empty());
        let killed = release(&dir, run.as_str());
        assert_eq!(killed, [child.id()]);
        let status = child.wait().expect("wait");
        assert!(!status.success());
        ledger.forget(&run, "srv");
        assert!(!dir.exists());
    }

    #[test]
    fn a_stale_record_kills_nothing() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("r");
        std::fs::create_dir_all(&dir).expect("dir");
        let me = std::process::id();
        let stale = ProcessRecord {
            version: RECORD_VERSION,
            label: "x".into(),
            pid: me,
            // Not this process's start time: a recycled pid.
            start_time: 1,
        };
        std::fs::write(
            dir.join(file_of("x")),
            serde_json::to_vec(&stale).expect("json"),
        )
        .expect("write");
        assert!(release(&dir, "r-nobody").is_empty());
    }
}
