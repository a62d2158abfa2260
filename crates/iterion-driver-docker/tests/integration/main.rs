//! Integration tests of the docker/podman driver against real engines:
//! the shared conformance suite mounted against dockerd, Podman and
//! dockerd in bindless mode, plus engine-specific checks (egress
//! confinement, build, pull, post_create, discovery).
//!
//! Needs `ITERION_TEST_DOCKER_HOST` and `ITERION_TEST_PODMAN_HOST` (run
//! `scripts/test.sh`); a missing or silent backend fails, never skips.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod engine;
mod support;

use std::sync::Arc;

use iterion_driver_docker::{BindsMode, DockerDriver, DockerSettings};
use iterion_testkit::driver_conformance;

pub use support::*;

driver_conformance!(
    dockerd,
    support::driver(Engine::Docker, DockerSettings::default()),
    support::BUSYBOX,
    support::external_kill(Engine::Docker)
);

driver_conformance!(
    podman,
    support::driver(Engine::Podman, DockerSettings::default()),
    support::BUSYBOX,
    support::external_kill(Engine::Podman)
);

driver_conformance!(
    dockerd_bindless,
    support::driver(
        Engine::Docker,
        DockerSettings {
            binds: BindsMode::None,
            ..DockerSettings::default()
        }
    ),
    support::BUSYBOX,
    support::external_kill(Engine::Docker)
);

driver_conformance!(
    dockerd_slim,
    support::driver(Engine::Docker, DockerSettings::default()),
    support::SLIM,
    support::external_kill(Engine::Docker)
);

driver_conformance!(
    podman_slim,
    support::driver(Engine::Podman, DockerSettings::default()),
    support::SLIM,
    support::external_kill(Engine::Podman)
);

#[allow(dead_code)]
fn _assert_send(d: Arc<DockerDriver>) -> Arc<dyn iterion_core::Driver> {
    d
}
