//! The local lease of a run: which process owns it, and whether that
//! process is still the same one (pid plus its `/proc` start time, so a
//! recycled pid is never mistaken for the owner), and the marker that
//! records it in a per-run host directory ([`mark_owner`]), read by the
//! reaper and the process registry.

use std::io;

use iterion_core::store::RunOwner;

/// Name of the owner marker in a per-run host directory.
pub const OWNER_MARKER: &str = ".iterion-owner";

/// Record this process as the owner of `dir`, a per-run host directory, so
/// a reaper tells a live run's directory from a leftover even when its own
/// store never knew the run (the directories of every store share a
/// root, as every store shares an engine).
pub fn mark_owner(dir: &std::path::Path) -> io::Result<()> {
    let owner = current_owner()?;
    let text = serde_json::to_vec(&owner).map_err(io::Error::other)?;
    std::fs::write(dir.join(OWNER_MARKER), text)
}

/// The host name as the kernel reports it (no DNS lookup).
pub fn hostname() -> io::Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/hostname")?
        .trim()
        .to_owned())
}

/// Field 22 of `/proc/PID/stat` (start time in clock ticks since boot).
/// `Ok(None)` when the process provably does not exist.
pub fn proc_start_time(pid: u32) -> io::Result<Option<u64>> {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    parse_start_time(&stat).map(Some)
}

/// Whether `pid` is a zombie (dead, not yet reaped by its parent).
pub fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(|st| st == "Z"))
        })
        .unwrap_or(false)
}

/// Parse the start time out of a `stat` line. The command name (field 2)
/// may contain spaces and parentheses, so fields are counted after the
/// last `)`.
fn parse_start_time(stat: &str) -> io::Result<u64> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed /proc stat line");
    let rest = stat.rsplit_once(')').ok_or_else(bad)?.1;
    // After ")" come fields 3.. ; start time is field 22 → index 19.
    rest.split_whitespace()
        .nth(19)
        .ok_or_else(bad)?
        .parse()
        .map_err(|_| bad())
}

/// The owner record of this process.
pub fn current_owner() -> io::Result<RunOwner> {
    let pid = std::process::id();
    let start_time = proc_start_time(pid)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "own /proc entry missing"))?;
    Ok(RunOwner {
        host: hostname()?,
        pid,
        start_time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_parens_and_spaces() {
        let line = "1234 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 777 20";
        assert_eq!(parse_start_time(line).expect("parse"), 777);
        assert!(parse_start_time("garbage").is_err());
    }

    #[test]
    fn own_owner_is_alive() {
        let me = current_owner().expect("owner");
        assert_eq!(proc_start_time(me.pid).expect("read"), Some(me.start_time));
    }
}
