//! Backends and helpers shared by the integration tests.

use std::sync::Arc;

use bollard::query_parameters::KillContainerOptions;
use iterion_driver_docker::{DockerDriver, DockerSettings};
use iterion_testkit::driver::ExternalKill;

pub const BUSYBOX: &str = "iterion-test/busybox:local";
pub const SLIM: &str = "iterion-sandbox-slim:local";

#[derive(Debug, Clone, Copy)]
pub enum Engine {
    Docker,
    Podman,
}

impl Engine {
    pub fn variable(self) -> &'static str {
        match self {
            Self::Docker => "ITERION_TEST_DOCKER_HOST",
            Self::Podman => "ITERION_TEST_PODMAN_HOST",
        }
    }

    pub fn endpoint(self) -> String {
        let var = self.variable();
        match std::env::var(var) {
            Ok(v) if !v.is_empty() => v,
            _ => panic!("{var} is not set: run scripts/test.sh (it starts the real engines)"),
        }
    }
}

pub async fn driver(engine: Engine, settings: DockerSettings) -> Arc<DockerDriver> {
    let endpoint = engine.endpoint();
    // Many checks run at once; the 3 s production probe is too tight for
    // podman under that load.
    let settings = DockerSettings {
        probe_timeout: std::time::Duration::from_secs(60),
        ..settings
    };
    match DockerDriver::connect(&endpoint, settings).await {
        Ok(d) => Arc::new(d),
        Err(e) => panic!(
            "{} = {endpoint} does not answer ({e}): run scripts/test.sh",
            engine.variable()
        ),
    }
}

pub fn external_kill(engine: Engine) -> ExternalKill {
    Arc::new(move |container: String| {
        Box::pin(async move {
            let d = driver(engine, DockerSettings::default()).await;
            d.client()
                .kill_container(
                    &container,
                    Some(KillContainerOptions {
                        signal: "SIGKILL".to_owned(),
                    }),
                )
                .await
                .expect("kill container");
        })
    })
}
