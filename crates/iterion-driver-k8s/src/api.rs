//! The API calls the driver makes, each bounded and each failure
//! classified once ([`classify`]): create with one retry over a leftover of
//! the same name, delete (gone is success), list by label, and the wait for
//! a pod to be Ready over a watch that survives its server-side timeout and
//! a `410 Gone` (re-list, then watch again from the fresh version).

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use futures_util::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::error::K8sError;
use crate::settings::{APPLY_TIMEOUT_ENV, POD_READY_TIMEOUT_ENV};

/// Longest single watch request (API servers cap watches near 5–10 min).
const WATCH_SLICE_SECS: u64 = 290;
/// Poll interval while waiting for a deleted pod to disappear.
const GONE_POLL: Duration = Duration::from_millis(200);

/// Classify an API error of `verb` on `resource` (see [`K8sError`]).
pub(crate) fn classify(
    e: kube::Error,
    operation: &'static str,
    verb: &'static str,
    resource: &'static str,
    namespace: &str,
    name: &str,
) -> K8sError {
    if let kube::Error::Api(status) = &e {
        match status.code {
            403 => {
                return K8sError::Forbidden {
                    verb,
                    resource,
                    namespace: namespace.to_owned(),
                    message: status.message.clone(),
                };
            }
            404 if status
                .details
                .as_ref()
                .is_some_and(|d| d.kind == "namespaces")
                || status.message.starts_with("namespaces ") =>
            {
                return K8sError::NamespaceNotFound {
                    namespace: namespace.to_owned(),
                };
            }
            422 => {
                return K8sError::Invalid {
                    kind: kind_of(resource),
                    name: name.to_owned(),
                    message: status.message.clone(),
                };
            }
            _ => {}
        }
    }
    K8sError::Api {
        operation,
        source: e,
    }
}

fn kind_of(resource: &'static str) -> &'static str {
    match resource {
        "pods" => "Pod",
        "secrets" => "Secret",
        "networkpolicies" => "NetworkPolicy",
        _ => resource,
    }
}

/// The HTTP status of an API error.
pub(crate) fn status_of(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Bound one API call by `ITERION_SANDBOX_K8S_APPLY_TIMEOUT`: a hung API
/// server must not hang the run.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    fut: impl Future<Output = T>,
) -> Result<T, K8sError> {
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| K8sError::Timeout {
            phase: "kubernetes API call",
            timeout,
            variable: APPLY_TIMEOUT_ENV,
        })
}

/// Namespace-scoped calls on one kind, bounded by the apply timeout.
pub(crate) struct Calls<'a, K> {
    pub(crate) api: &'a Api<K>,
    pub(crate) namespace: &'a str,
    pub(crate) resource: &'static str,
    pub(crate) timeout: Duration,
}

impl<K> Calls<'_, K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    /// Create `obj`. A leftover of the same name (409: a retried start of
    /// the same run id) is deleted and the create retried once.
    pub(crate) async fn create(&self, obj: &K) -> Result<(), K8sError> {
        let name = obj.meta().name.clone().unwrap_or_default();
        let post = PostParams::default();
        let first = bounded(self.timeout, self.api.create(&post, obj)).await?;
        match first {
            Ok(_) => return Ok(()),
            Err(e) if status_of(&e) == Some(409) => {}
            Err(e) => {
                return Err(classify(
                    e,
                    "create",
                    "create",
                    self.resource,
                    self.namespace,
                    &name,
                ));
            }
        }
        self.delete(&name).await?;
        self.wait_gone(&name, self.timeout).await?;
        bounded(self.timeout, self.api.create(&post, obj))
            .await?
            .map(|_| ())
            .map_err(|e| classify(e, "create", "create", self.resource, self.namespace, &name))
    }

    /// Delete by name; already gone is success.
    pub(crate) async fn delete(&self, name: &str) -> Result<(), K8sError> {
        // One second of grace: PID 1 exits on TERM at once; a pod that
        // ignored it is killed rather than left running unobserved.
        let params = DeleteParams {
            grace_period_seconds: Some(1),
            ..DeleteParams::background()
        };
        match bounded(self.timeout, self.api.delete(name, &params)).await? {
            Ok(_) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(e) => Err(classify(
                e,
                "delete",
                "delete",
                self.resource,
                self.namespace,
                name,
            )),
        }
    }

    /// Poll until `name` no longer exists, at most `within`.
    pub(crate) async fn wait_gone(&self, name: &str, within: Duration) -> Result<(), K8sError> {
        let deadline = Instant::now() + within;
        loop {
            match bounded(self.timeout, self.api.get_opt(name)).await? {
                Ok(None) => return Ok(()),
                Ok(Some(_)) => {}
                Err(e) => {
                    return Err(classify(
                        e,
                        "get",
                        "get",
                        self.resource,
                        self.namespace,
                        name,
                    ));
                }
            }
            if Instant::now() >= deadline {
                return Err(K8sError::Timeout {
                    phase: "deletion",
                    timeout: within,
                    variable: APPLY_TIMEOUT_ENV,
                });
            }
            tokio::time::sleep(GONE_POLL).await;
        }
    }

    /// Every object matching `selector`.
    pub(crate) async fn list(&self, selector: &str) -> Result<Vec<K>, K8sError> {
        let params = ListParams::default().labels(selector);
        bounded(self.timeout, self.api.list(&params))
            .await?
            .map(|l| l.items)
            .map_err(|e| classify(e, "list", "list", self.resource, self.namespace, ""))
    }
}

/// Where a starting pod stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PodProgress {
    /// Ready: execs may start.
    Ready,
    /// Still on its way; the evidence, for a capacity verdict at the deadline.
    Pending {
        /// Whether the evidence says the pod is not placed or still being
        /// created (a capacity problem past the deadline).
        capacity: bool,
        /// The cluster's words.
        evidence: String,
    },
}

/// Judge a pod during its start: ready, pending, or failed for good.
pub(crate) fn judge(pod: &Pod, image: &str) -> Result<PodProgress, K8sError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    if pod.metadata.deletion_timestamp.is_some() {
        return Err(K8sError::PodGone {
            pod: name,
            reason: "deleted while starting".to_owned(),
        });
    }
    let Some(status) = &pod.status else {
        return Ok(PodProgress::Pending {
            capacity: false,
            evidence: "no status yet".to_owned(),
        });
    };
    let phase = status.phase.as_deref().unwrap_or("Pending");
    if matches!(phase, "Failed" | "Succeeded") {
        let why = [status.reason.as_deref(), status.message.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(": ");
        return Err(K8sError::PodFailed {
            pod: name,
            reason: format!(
                "phase {phase}{}",
                if why.is_empty() {
                    String::new()
                } else {
                    format!(" ({why})")
                }
            ),
        });
    }
    for cs in status.container_statuses.iter().flatten() {
        let state = cs.state.as_ref();
        if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
            let reason = w.reason.clone().unwrap_or_default();
            let message = w.message.clone().unwrap_or_default();
            let said = format!("{reason}: {message}");
            match reason.as_str() {
                "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "ErrImageNeverPull" => {
                    return Err(K8sError::ImagePull {
                        image: image.to_owned(),
                        reason: said,
                    });
                }
                // A pod the kubelet will never run as written (a non-root
                // image check, a missing key): a spec problem, not capacity.
                "CreateContainerConfigError" => {
                    return Err(K8sError::Invalid {
                        kind: "Pod",
                        name,
                        message: said,
                    });
                }
                "CreateContainerError" | "RunContainerError" | "CrashLoopBackOff" => {
                    return Err(K8sError::PodFailed {
                        pod: name,
                        reason: said,
                    });
                }
                _ => {}
            }
        }
        if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
            return Err(K8sError::PodFailed {
                pod: name,
                reason: format!(
                    "PID 1 exited with {} ({})",
                    t.exit_code,
                    t.reason.clone().unwrap_or_default()
                ),
            });
        }
    }
    let condition = |kind: &str| status.conditions.iter().flatten().find(|c| c.type_ == kind);
    if condition("Ready").is_some_and(|c| c.status == "True") {
        return Ok(PodProgress::Ready);
    }
    if let Some(c) = condition("PodScheduled").filter(|c| c.status == "False") {
        return Ok(PodProgress::Pending {
            capacity: true,
            evidence: format!(
                "not scheduled: {}: {}",
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default()
            ),
        });
    }
    let waiting = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|cs| cs.state.as_ref()?.waiting.as_ref()?.reason.clone())
        .next();
    Ok(match waiting {
        Some(reason) => PodProgress::Pending {
            capacity: matches!(reason.as_str(), "ContainerCreating" | "PodInitializing"),
            evidence: format!("container waiting: {reason}"),
        },
        None => PodProgress::Pending {
            capacity: phase == "Pending",
            evidence: format!("phase {phase}"),
        },
    })
}

/// Wait until the pod is Ready, at most `timeout`. Past the deadline, the
/// last evidence decides: unscheduled or still being created is
/// [`K8sError::Capacity`]; anything else a plain timeout.
pub(crate) async fn wait_ready(
    pods: &Api<Pod>,
    namespace: &str,
    name: &str,
    image: &str,
    timeout: Duration,
    call_timeout: Duration,
) -> Result<(), K8sError> {
    let deadline = Instant::now() + timeout;
    let mut last = PodProgress::Pending {
        capacity: false,
        evidence: "no answer from the API server yet".to_owned(),
    };
    let outcome = tokio::time::timeout_at(deadline, async {
        loop {
            // List (a get) for the current state and version, then watch.
            let pod = bounded(call_timeout, pods.get_opt(name))
                .await?
                .map_err(|e| classify(e, "get pod", "get", "pods", namespace, name))?
                .ok_or_else(|| K8sError::PodGone {
                    pod: name.to_owned(),
                    reason: "deleted while starting".to_owned(),
                })?;
            last = judge(&pod, image)?;
            if last == PodProgress::Ready {
                return Ok(());
            }
            let mut version = pod.metadata.resource_version.clone().unwrap_or_default();
            loop {
                let left = deadline.saturating_duration_since(Instant::now()).as_secs();
                let slice = u32::try_from(left.clamp(1, WATCH_SLICE_SECS)).unwrap_or(1);
                let params = WatchParams::default()
                    .fields(&format!("metadata.name={name}"))
                    .timeout(slice);
                let stream = match pods.watch(&params, &version).await {
                    Ok(s) => s,
                    // The version is too old: list again.
                    Err(e) if status_of(&e) == Some(410) => break,
                    Err(e) => {
                        return Err(classify(e, "watch pod", "watch", "pods", namespace, name));
                    }
                };
                let mut stream = Box::pin(stream);
                let mut relist = false;
                while let Some(event) = stream
                    .try_next()
                    .await
                    .map_err(|e| classify(e, "watch pod", "watch", "pods", namespace, name))?
                {
                    match event {
                        WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                            if let Some(v) = &p.metadata.resource_version {
                                version = v.clone();
                            }
                            last = judge(&p, image)?;
                            if last == PodProgress::Ready {
                                return Ok(());
                            }
                        }
                        WatchEvent::Deleted(_) => {
                            return Err(K8sError::PodGone {
                                pod: name.to_owned(),
                                reason: "deleted while starting".to_owned(),
                            });
                        }
                        WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                        WatchEvent::Error(s) if s.code == 410 => {
                            relist = true;
                            break;
                        }
                        WatchEvent::Error(s) => {
                            return Err(classify(
                                kube::Error::Api(s),
                                "watch pod",
                                "watch",
                                "pods",
                                namespace,
                                name,
                            ));
                        }
                    }
                }
                // The server ended the watch (its timeout): watch again
                // from the last version seen, unless it was too old.
                if relist {
                    break;
                }
            }
        }
    })
    .await;
    match outcome {
        Ok(result) => result,
        Err(_) => Err(match last {
            PodProgress::Pending {
                capacity: true,
                evidence,
            } => K8sError::Capacity {
                pod: name.to_owned(),
                timeout,
                evidence,
            },
            _ => K8sError::Timeout {
                phase: "pod ready",
                timeout,
                variable: POD_READY_TIMEOUT_ENV,
            },
        }),
    }
}
