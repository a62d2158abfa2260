//! The Kubernetes driver's live suite: the shared driver conformance suite
//! mounted against a **real cluster** (the one `KUBECONFIG`, the in-cluster
//! service account or `~/.kube/config` names), run by `scripts/test-k8s.sh`.
//!
//! It is not part of `cargo test` (`test = false` in Cargo.toml: no API
//! server can be installed on the CI machines), but `.ci/run` lints it by
//! name (`--all-targets` leaves `test = false` targets out), so it cannot
//! rot unseen. Without a
//! reachable cluster every check fails — it never skips.
//!
//! What it proves on a cluster that the in-process layers cannot: pods
//! really start as the non-root user with the security context rendered,
//! exec over the API's WebSocket streams, kills and reports exit codes,
//! tar over exec round-trips through a real kubelet, cleanup by label
//! leaves nothing, and a pod deleted from outside is `SANDBOX_LOST`.
//!
//! Variables: `ITERION_K8S_LIVE_IMAGE` (default `busybox:1.36`, pulled by
//! the cluster; it needs `sh`, `cat`, `tar`, `sleep`), and the driver's own
//! (`ITERION_SANDBOX_K8S_NAMESPACE`, requests and limits, timeouts).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use iterion_driver_k8s::KubeDriver;
use iterion_testkit::driver::ExternalKill;
use iterion_testkit::driver_conformance;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};

fn image() -> &'static str {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(|| {
        std::env::var("ITERION_K8S_LIVE_IMAGE").unwrap_or_else(|_| "busybox:1.36".to_owned())
    })
}

async fn driver() -> Arc<KubeDriver> {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    match KubeDriver::discover(&env).await {
        Ok(d) => Arc::new(d),
        Err(e) => panic!(
            "no reachable Kubernetes cluster ({e}); the live suite needs one (scripts/test-k8s.sh)"
        ),
    }
}

/// Delete the run's pod from outside, at once, as an eviction would.
fn external_kill() -> ExternalKill {
    Arc::new(|pod: String| -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let driver = driver().await;
            let pods: Api<Pod> = Api::namespaced(driver.client().clone(), driver.namespace());
            pods.delete(&pod, &DeleteParams::default().grace_period(0))
                .await
                .expect("delete the pod from outside");
        })
    })
}

driver_conformance!(cluster, driver(), image(), external_kill());
