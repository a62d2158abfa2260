//! [`K8sError`]: every way the Kubernetes driver fails, each with a stable
//! [`K8sError::code`], and the one mapping onto the driver seam's
//! [`DriverError`] (which decides the run's failure code through
//! `iterion_sandbox::classify::classify`).
//!
//! The mapping is the place where an API answer becomes a run outcome, so
//! it is kept here and nowhere else: a missing namespace or a cluster that
//! cannot be reached makes the driver unavailable; RBAC denial and other API
//! refusals are engine errors carrying this type as their source (the chain
//! keeps the code); an object the API server calls invalid (422) and a plan
//! the pod cannot express are spec refusals.

use std::time::Duration;

use iterion_core::{DriverError, DriverName};

/// Errors of the Kubernetes driver.
#[derive(Debug, thiserror::Error)]
pub enum K8sError {
    /// An operator variable cannot be honoured (silently dropping it could
    /// fail open: a pod without limits, a proxy nobody can reach).
    #[error("{variable}={value:?} is invalid: {reason}")]
    Setting {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// Why.
        reason: String,
    },
    /// No cluster configuration could be loaded (no kubeconfig, not in a
    /// pod, an unreadable or malformed file).
    #[error("no usable Kubernetes configuration: {reason}")]
    NoConfig {
        /// What was tried.
        reason: String,
        /// The loader's error, when there was one.
        #[source]
        source: Option<kube::config::KubeconfigError>,
    },
    /// The API server did not answer the probe in time, or refused the
    /// connection.
    #[error("the Kubernetes API at {endpoint} is unreachable: {reason}")]
    Unreachable {
        /// Cluster URL.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// RBAC denied a verb the driver needs.
    #[error(
        "RBAC denied {verb} {resource} in namespace {namespace}: {message} (grant the runner's service account the verbs listed in iterion's docs/kubernetes.md)"
    )]
    Forbidden {
        /// API verb.
        verb: &'static str,
        /// Resource.
        resource: &'static str,
        /// Namespace.
        namespace: String,
        /// The API server's message.
        message: String,
    },
    /// The namespace the driver works in does not exist.
    #[error(
        "namespace {namespace} does not exist (set ITERION_SANDBOX_K8S_NAMESPACE or the context's namespace)"
    )]
    NamespaceNotFound {
        /// Namespace.
        namespace: String,
    },
    /// The API server refused an object as invalid (422).
    #[error("the API server refused {kind} {name} as invalid: {message}")]
    Invalid {
        /// Object kind.
        kind: &'static str,
        /// Object name.
        name: String,
        /// The API server's message (names the field).
        message: String,
    },
    /// The plan asks for something a pod cannot be (a host bind, a named
    /// engine volume, an exec as another user).
    #[error("{what} is impossible on kubernetes: {reason}")]
    Unsupported {
        /// What was asked.
        what: String,
        /// Why, and what to use instead.
        reason: &'static str,
    },
    /// An API call failed otherwise.
    #[error("{operation} failed: {source}")]
    Api {
        /// The call.
        operation: &'static str,
        /// kube-rs's error (carries the API status).
        #[source]
        source: kube::Error,
    },
    /// A bounded phase ran out of time.
    #[error("{phase} did not finish within {}s (raise {variable})", timeout.as_secs())]
    Timeout {
        /// The phase.
        phase: &'static str,
        /// Its bound.
        timeout: Duration,
        /// The variable that sets the bound.
        variable: &'static str,
    },
    /// The pod could not be scheduled, or was still being created, when
    /// its start deadline passed (the cluster's own evidence).
    #[error("pod {pod} was not placed within {}s: {evidence}", timeout.as_secs())]
    Capacity {
        /// Pod name.
        pod: String,
        /// The ready bound.
        timeout: Duration,
        /// The last condition or container state the cluster reported.
        evidence: String,
    },
    /// The kubelet could not pull the image.
    #[error("image {image} cannot be pulled: {reason}")]
    ImagePull {
        /// Image reference.
        image: String,
        /// Kubelet's reason and message.
        reason: String,
    },
    /// The pod failed before it was ready (its container could not be
    /// created or exited).
    #[error("pod {pod} failed to start: {reason}")]
    PodFailed {
        /// Pod name.
        pod: String,
        /// Kubelet's reason and message.
        reason: String,
    },
    /// The pod is gone (deleted, evicted, its node lost) or no longer runs.
    #[error("pod {pod} is gone: {reason}")]
    PodGone {
        /// Pod name.
        pod: String,
        /// What the API said.
        reason: String,
    },
    /// The exec stream broke or answered something the protocol does not
    /// allow.
    #[error("exec in pod {pod}: {reason}")]
    Exec {
        /// Pod name.
        pod: String,
        /// What went wrong.
        reason: String,
    },
    /// Reading a host file the plan names (a secret file, the workspace).
    #[error("{operation}: {source}")]
    Io {
        /// What was being done.
        operation: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl K8sError {
    /// Stable code for users and scripts.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Setting { .. } => "K8S_SETTING_INVALID",
            Self::NoConfig { .. } => "K8S_NO_CONFIG",
            Self::Unreachable { .. } => "K8S_UNREACHABLE",
            Self::Forbidden { .. } => "K8S_FORBIDDEN",
            Self::NamespaceNotFound { .. } => "K8S_NAMESPACE_NOT_FOUND",
            Self::Invalid { .. } => "K8S_INVALID_OBJECT",
            Self::Unsupported { .. } => "K8S_UNSUPPORTED",
            Self::Api { .. } => "K8S_API_ERROR",
            Self::Timeout { .. } => "K8S_TIMEOUT",
            Self::Capacity { .. } => "K8S_CAPACITY",
            Self::ImagePull { .. } => "K8S_IMAGE_PULL",
            Self::PodFailed { .. } => "K8S_POD_FAILED",
            Self::PodGone { .. } => "K8S_POD_GONE",
            Self::Exec { .. } => "K8S_EXEC_ERROR",
            Self::Io { .. } => "K8S_IO_ERROR",
        }
    }

    /// The API status code of an [`K8sError::Api`] error, when the server
    /// answered one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api {
                source: kube::Error::Api(status),
                ..
            } => Some(status.code),
            _ => None,
        }
    }

    /// Map onto the driver seam (see the module doc for the rule).
    pub fn into_driver_error(self) -> DriverError {
        match self {
            Self::Setting { .. }
            | Self::NoConfig { .. }
            | Self::Unreachable { .. }
            | Self::NamespaceNotFound { .. } => DriverError::Unavailable {
                reason: format!("kubernetes: {self} ({})", self.code()),
            },
            Self::Invalid { .. } | Self::Unsupported { .. } => DriverError::SpecRefused {
                reason: format!("kubernetes: {self} ({})", self.code()),
            },
            Self::Timeout {
                phase,
                timeout,
                variable,
            } => DriverError::PhaseTimeout {
                phase,
                timeout,
                variable,
            },
            Self::Capacity { .. } => DriverError::Capacity {
                reason: self.to_string(),
            },
            Self::ImagePull { image, reason } => DriverError::ImageUnavailable { image, reason },
            Self::PodGone { pod, .. } => DriverError::ContainerGone { container: pod },
            Self::Io { operation, source } => DriverError::Io { operation, source },
            Self::Forbidden { .. }
            | Self::Api { .. }
            | Self::PodFailed { .. }
            | Self::Exec { .. } => DriverError::Engine {
                operation: "kubernetes",
                source: Box::new(self),
            },
        }
    }
}

impl From<K8sError> for DriverError {
    fn from(e: K8sError) -> Self {
        e.into_driver_error()
    }
}

/// The driver's name, for `Unsupported` errors.
pub(crate) const DRIVER: DriverName = DriverName::Kubernetes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_onto_the_seam() {
        let cases: Vec<(K8sError, &str)> = vec![
            (
                K8sError::NamespaceNotFound {
                    namespace: "x".into(),
                },
                "SANDBOX_DRIVER_UNAVAILABLE",
            ),
            (
                K8sError::Forbidden {
                    verb: "create",
                    resource: "pods",
                    namespace: "x".into(),
                    message: "no".into(),
                },
                "SANDBOX_ENGINE_ERROR",
            ),
            (
                K8sError::Invalid {
                    kind: "Pod",
                    name: "p".into(),
                    message: "bad".into(),
                },
                "SANDBOX_SPEC_REFUSED",
            ),
            (
                K8sError::Timeout {
                    phase: "apply",
                    timeout: Duration::from_secs(1),
                    variable: "V",
                },
                "SANDBOX_SETUP_TIMEOUT",
            ),
            (
                K8sError::Capacity {
                    pod: "p".into(),
                    timeout: Duration::from_secs(1),
                    evidence: "Unschedulable".into(),
                },
                "SANDBOX_CAPACITY",
            ),
            (
                K8sError::ImagePull {
                    image: "i".into(),
                    reason: "ErrImagePull".into(),
                },
                "SANDBOX_IMAGE_UNAVAILABLE",
            ),
            (
                K8sError::PodGone {
                    pod: "p".into(),
                    reason: "Evicted".into(),
                },
                "SANDBOX_CONTAINER_GONE",
            ),
        ];
        for (err, want) in cases {
            let code = err.code();
            let mapped = err.into_driver_error();
            assert_eq!(mapped.code(), want, "{code}");
        }
    }

    #[test]
    fn the_code_survives_in_the_source_chain() {
        let e: DriverError = K8sError::Forbidden {
            verb: "create",
            resource: "pods",
            namespace: "ns".into(),
            message: "denied".into(),
        }
        .into();
        let source = std::error::Error::source(&e).expect("source");
        let k = source.downcast_ref::<K8sError>().expect("a K8sError");
        assert_eq!(k.code(), "K8S_FORBIDDEN");
    }
}
