//! What of the host an engine owns (its socket, its data root) and how it
//! maps container users, learnt once when the driver connects, and the
//! driver's half of the bind judgement: the sources of a plan re-checked
//! by real path in `prepare` and immediately before the container is
//! created (issue 19 item 1). The verdict itself lives in
//! `iterion_sandbox::binds`; this module only feeds it what the engine
//! said.

use std::time::Duration;

use bollard::Docker;
use iterion_core::driver::{HostFootprint, UidMapping};
use iterion_core::{DriverError, LaunchPlan};
use iterion_sandbox::binds::{HostBindSettings, recheck_plan_binds};

use crate::endpoint::Endpoint;

/// Bound of the `/info` question (Podman 4.3 takes one to three seconds
/// to answer it here).
const INFO_TIMEOUT: Duration = Duration::from_secs(20);

/// Ask a local engine where its data lives and whether it remaps users.
/// A remote engine binds no path of ours: its footprint stays empty. An
/// engine that does not answer `/info` keeps its socket and the worst-case
/// mapping (never a guess that fails open).
pub(crate) async fn probe(docker: &Docker, endpoint: &Endpoint) -> HostFootprint {
    let Endpoint::Unix(socket) = endpoint else {
        return HostFootprint::default();
    };
    let mut footprint = HostFootprint {
        paths: vec![socket.clone()],
        uid_mapping: UidMapping::Identity,
    };
    if let Ok(Ok(info)) = tokio::time::timeout(INFO_TIMEOUT, docker.info()).await {
        footprint
            .paths
            .extend(info.docker_root_dir.filter(|d| d.starts_with('/')));
        footprint.uid_mapping = uid_mapping(info.security_options.as_deref().unwrap_or_default());
    }
    footprint
}

/// `name=rootless` (rootless Docker or Podman) or `name=userns` (dockerd
/// `userns-remap`) in the engine's security options.
pub(crate) fn uid_mapping(options: &[String]) -> UidMapping {
    let has = |name: &str| {
        options
            .iter()
            .any(|o| o.split(',').any(|kv| kv == format!("name={name}")))
    };
    if has("rootless") {
        UidMapping::Rootless
    } else if has("userns") {
        UidMapping::Remapped
    } else {
        UidMapping::Identity
    }
}

/// The driver's re-check of every bind source of `plan`.
pub(crate) fn recheck_binds(
    plan: &LaunchPlan,
    footprint: &HostFootprint,
) -> Result<(), DriverError> {
    let settings = HostBindSettings::capture(|k| std::env::var(k).ok())
        .with_engine_paths(footprint.paths.iter().cloned());
    recheck_plan_binds(plan, &settings).map_err(|v| DriverError::SpecRefused {
        reason: v.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn security_options_name_the_mapping() {
        let opts = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            uid_mapping(&opts(&["name=seccomp,profile=default"])),
            UidMapping::Identity
        );
        assert_eq!(
            uid_mapping(&opts(&["name=seccomp,profile=default", "name=userns"])),
            UidMapping::Remapped
        );
        assert_eq!(
            uid_mapping(&opts(&["name=rootless", "name=seccomp,profile=default"])),
            UidMapping::Rootless
        );
        assert_eq!(uid_mapping(&[]), UidMapping::Identity);
    }
}
