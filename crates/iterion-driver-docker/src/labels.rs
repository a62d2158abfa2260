//! The `iterion.io/*` labels every resource the driver creates carries,
//! and the owner lease one of them holds: how the reaper and the listing
//! know what is ours, whose run it is and whether its creator still lives.

use std::collections::HashMap;

use iterion_core::RunInfo;

/// Label every resource the driver creates carries.
pub const MANAGED_LABEL: &str = "iterion.io/managed";
/// Label naming the run.
pub const RUN_ID_LABEL: &str = "iterion.io/run-id";
/// Label carrying the friendly run name.
pub const RUN_NAME_LABEL: &str = "iterion.io/run-name";
/// Label naming the process that created the resource
/// (`<pid>:<start time>@<host>`, the same lease a local run records), so
/// the reaper of a run using ANOTHER store keeps it while that process
/// lives instead of judging it "run absent" (two projects' `.iterion`
/// stores on one engine, or concurrent tests with private stores).
pub const OWNER_LABEL: &str = "iterion.io/owner";

/// This process as an owner label value; `None` when `/proc` cannot say
/// (then no label: the reaper falls back to the store alone).
fn own_owner_label() -> Option<String> {
    static OWNER: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    OWNER
        .get_or_init(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
            let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
            let start = stat.rsplit_once(')')?.1.split_whitespace().nth(19)?;
            start.parse::<u64>().ok()?;
            Some(format!("{}:{start}@{}", std::process::id(), host.trim()))
        })
        .clone()
}

/// Parse an [`OWNER_LABEL`] value.
pub(crate) fn parse_owner(value: &str) -> Option<iterion_core::store::RunOwner> {
    let (lease, host) = value.split_once('@')?;
    let (pid, start) = lease.split_once(':')?;
    Some(iterion_core::store::RunOwner {
        host: host.to_owned(),
        pid: pid.parse().ok()?,
        start_time: start.parse().ok()?,
    })
}

pub(crate) fn owner_of(
    labels: Option<&HashMap<String, String>>,
) -> Option<iterion_core::store::RunOwner> {
    labels?.get(OWNER_LABEL).and_then(|v| parse_owner(v))
}

/// Label naming the run store that owns the run (a stable digest, never
/// the store's address: a PostgreSQL URL carries a password).
pub const STORE_LABEL: &str = "iterion.io/store";

/// The engine-side filter of everything managed (plus one more label).
pub(crate) fn label_filter(extra: Option<String>) -> HashMap<String, Vec<String>> {
    let mut labels = vec![format!("{MANAGED_LABEL}=true")];
    labels.extend(extra);
    HashMap::from([("label".to_owned(), labels)])
}

/// The labels of every resource of one run (`store_scope`: the store the
/// driver is scoped to, see `DockerDriver::with_store_scope`).
pub(crate) fn run_labels(info: &RunInfo, store_scope: Option<&str>) -> HashMap<String, String> {
    let mut labels = HashMap::from([
        (MANAGED_LABEL.to_owned(), "true".to_owned()),
        (RUN_ID_LABEL.to_owned(), info.run_id.as_str().to_owned()),
    ]);
    if let Some(scope) = store_scope {
        labels.insert(STORE_LABEL.to_owned(), scope.to_owned());
    }
    if let Some(name) = &info.run_name {
        labels.insert(RUN_NAME_LABEL.to_owned(), name.clone());
    }
    if let Some(owner) = own_owner_label() {
        labels.insert(OWNER_LABEL.to_owned(), owner);
    }
    labels
}

/// `iterion-<run id>` truncated to 64 characters (facts §5.3).
pub(crate) fn container_name(run: &str) -> String {
    let mut name = format!("iterion-{run}");
    name.truncate(64);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_label_round_trips() {
        let own = own_owner_label().expect("linux /proc");
        let owner = parse_owner(&own).expect("parse");
        assert_eq!(owner.pid, std::process::id());
        assert!(!owner.host.is_empty());
        assert_eq!(
            parse_owner("12:345@box-1"),
            Some(iterion_core::store::RunOwner {
                host: "box-1".into(),
                pid: 12,
                start_time: 345
            })
        );
        for bad in ["", "12@h", "x:1@h", "1:y@h", "1:2"] {
            assert_eq!(parse_owner(bad), None, "{bad}");
        }
    }

    #[test]
    fn names_truncate() {
        assert_eq!(container_name(&"a".repeat(63)).len(), 64);
    }
}
