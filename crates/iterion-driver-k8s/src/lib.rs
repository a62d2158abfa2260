//! The Kubernetes sandbox driver of iterion, on kube-rs and k8s-openapi:
//! one pod per run in the namespace of the current context, beside the
//! runner (facts §5.3, ADR-143).
//!
//! It owns: finding a cluster ([`discovery`]: `KUBECONFIG`, the in-cluster
//! service account, `~/.kube/config`; a bounded probe), the typed objects
//! of one run ([`manifest`]: per-run Secrets, the NetworkPolicy, the Pod —
//! also what `iterion sandbox manifests` prints), their lifecycle (create,
//! wait for Ready with the cluster's evidence classified into capacity,
//! image and spec failures, delete by label), exec over the API's WebSocket
//! with stdin, streamed stdout/stderr, exit codes and a kill that reaches
//! the process, tar over exec for the workspace copy and the ADR-143 drain
//! of the emptyDir read-back paths, the listing/removal the reaper needs,
//! and the review of its own RBAC that the doctor shows ([`access`]). It
//! does not decide policy (which mounts survive, which mode runs,
//! whether an orphan is reapable: `iterion-sandbox`), and it never falls
//! back to another driver.
//!
//! What it needs from the cluster (RBAC, in the working namespace): pods
//! (create, get, list, watch, delete), pods/exec (create), secrets and
//! networkpolicies (create, list, delete). NetworkPolicy enforcement needs
//! a CNI that honours it (Calico, Cilium…); kind's default CNI does not.
//!
//! Environment (read by [`K8sSettings::from_env`]): see [`settings`].

pub mod access;
mod api;
pub mod discovery;
mod driver;
pub mod error;
mod exec;
pub mod manifest;
pub mod quantity;
mod run;
pub mod settings;

pub use driver::{KubeDriver, capabilities};
pub use error::K8sError;
pub use exec::KubeExec;
pub use run::KubeRun;
pub use settings::K8sSettings;
