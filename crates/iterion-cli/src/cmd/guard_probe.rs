//! `iterion __guard-probe`: run inside a sandbox (the static binary bound
//! in for the claw runner), it reports what the host-root guard's check
//! reads (`iterion_sandbox::identity::parse_guard_status`): the `Seccomp:`
//! and capability lines of its own `/proc/self/status`, and how a setuid
//! chmod on a file of its own went. The file is an in-memory one
//! (`memfd_create`), so the probe needs no `chmod` program and no writable
//! directory in the image; the chmod is tried through each call the guard's
//! seccomp profile filters (`fchmod` on the descriptor, `chmod` and
//! `fchmodat` on its `/proc/self/fd` path). It judges nothing: the driver
//! does, on the host.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;

use rustix::fs::{AtFlags, CWD, MemfdFlags, Mode};

use crate::exit::Exit;

/// The mode tried: setuid, owner-only.
const SETUID_MODE: u32 = 0o4700;

/// Print the report on stdout; fail (exit 1) only when the status file
/// cannot be read.
pub(crate) fn run() -> Exit {
    let status = match std::fs::read_to_string("/proc/self/status") {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot read /proc/self/status: {e}");
            return Exit::Failure;
        }
    };
    let mut report = String::new();
    for line in status.lines() {
        if ["Seccomp:", "CapEff:", "CapPrm:", "CapBnd:"]
            .iter()
            .any(|p| line.starts_with(p))
        {
            report.push_str(line);
            report.push('\n');
        }
    }
    match setuid_probe() {
        Ok(line) => report.push_str(&line),
        Err(e) => {
            // No `Probe:` line: the guard counts that as unverified.
            eprintln!("error: the setuid probe could not run: {e}");
        }
    }
    let mut out = std::io::stdout().lock();
    if out
        .write_all(report.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        return Exit::Failure;
    }
    Exit::Success
}

/// `Probe: <status> <set|clear>` (status 0 when any call succeeded, else
/// the errno of the first refusal) and `Probe-calls:` naming each call's
/// outcome.
fn setuid_probe() -> std::io::Result<String> {
    let fd = rustix::fs::memfd_create("iterion-guard-probe", MemfdFlags::CLOEXEC)?;
    let file = std::fs::File::from(fd);
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file));
    let mode = Mode::from_raw_mode(SETUID_MODE);
    let outcomes: [(&str, Result<(), i32>); 3] = [
        (
            "fchmod",
            file.set_permissions(std::fs::Permissions::from_mode(SETUID_MODE))
                .map_err(|e| e.raw_os_error().unwrap_or(-1)),
        ),
        (
            "chmod",
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(SETUID_MODE))
                .map_err(|e| e.raw_os_error().unwrap_or(-1)),
        ),
        (
            "fchmodat",
            rustix::fs::chmodat(CWD, path.as_str(), mode, AtFlags::empty())
                .map_err(|e| e.raw_os_error()),
        ),
    ];
    let set = file.metadata()?.permissions().mode() & 0o4000 != 0;
    let status = if outcomes.iter().any(|(_, r)| r.is_ok()) {
        0
    } else {
        outcomes.iter().find_map(|(_, r)| r.err()).unwrap_or(-1)
    };
    let calls: Vec<String> = outcomes
        .iter()
        .map(|(name, r)| match r {
            Ok(()) => format!("{name}=ok"),
            Err(errno) => format!("{name}=errno{errno}"),
        })
        .collect();
    Ok(format!(
        "Probe: {status} {}\nProbe-calls: {}\n",
        if set { "set" } else { "clear" },
        calls.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use iterion_sandbox::identity::{GUARD_PROBE_SUBCOMMAND, check_root_guard, parse_guard_status};

    #[test]
    fn the_subcommand_is_the_one_the_driver_execs() {
        let cli = crate::cli::Cli::try_parse_from(["iterion", GUARD_PROBE_SUBCOMMAND])
            .expect("the driver's subcommand parses");
        assert!(matches!(cli.command, crate::cli::Command::GuardProbe));
    }

    #[test]
    fn outside_the_guard_the_probe_reports_the_setuid_bit_set() {
        // This process has no guard: the setuid mode goes through on its
        // own in-memory file, and the report says so (the driver refuses).
        let probe = super::setuid_probe().expect("memfd");
        assert!(
            probe.starts_with("Probe: 0 set\n")
                && probe.contains("Probe-calls: fchmod=ok chmod=ok fchmodat=ok"),
            "{probe}"
        );
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let report = parse_guard_status(&format!("{status}{probe}")).expect("parsed");
        assert_eq!(report.probe, Some((0, true)));
        let refused = check_root_guard(&report).expect_err("no guard here");
        assert!(!refused.to_string().contains("GuardStatus"), "{refused}");
    }
}
