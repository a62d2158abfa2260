//! [`KubeRun`]: the live pod of one run — exec, tar out (drains) and tar
//! in (the workspace copy) over exec, liveness, and the idempotent cleanup
//! that deletes everything carrying the run's label.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use iterion_core::driver::{OutputLimits, collect_output};
use iterion_core::{
    ByteStream, DriverError, DriverName, DriverObserver, ExecRequest, ExecSession, OutputStream,
    SandboxRun,
};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;

use crate::api::{Calls, bounded, classify};
use crate::error::{DRIVER, K8sError};
use crate::exec::{KubeExec, valid_env_name};
use crate::manifest::run_selector;
use crate::settings::K8sSettings;

/// How long a cleanup waits for the pod to be gone before it removes the
/// NetworkPolicy that confines it.
const POD_GONE_WITHIN: Duration = Duration::from_secs(30);

/// The cluster side every driver call and every run shares.
#[derive(Clone)]
pub(crate) struct Cluster {
    pub(crate) client: kube::Client,
    pub(crate) namespace: String,
    pub(crate) settings: K8sSettings,
    pub(crate) reporter: Arc<dyn DriverObserver>,
}

impl Cluster {
    pub(crate) fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub(crate) fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub(crate) fn policies(&self) -> Api<NetworkPolicy> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub(crate) fn calls<'a, K>(&'a self, api: &'a Api<K>, resource: &'static str) -> Calls<'a, K> {
        Calls {
            api,
            namespace: &self.namespace,
            resource,
            timeout: self.settings.apply_timeout,
        }
    }

    /// Delete every object of `run_id` by label: pods first, and the
    /// NetworkPolicy only once no pod of the run is left (a pod is never
    /// unconfined while it runs), then the Secrets. Every kind is tried;
    /// the first failure is returned after the rest was attempted.
    pub(crate) async fn delete_run(&self, run_id: &str) -> Result<(), K8sError> {
        let selector = run_selector(run_id);
        let mut first_err: Option<K8sError> = None;
        let pods = self.pods();
        let pod_calls = self.calls(&pods, "pods");
        let mut pods_gone = true;
        match pod_calls.list(&selector).await {
            Ok(items) => {
                for pod in items {
                    let name = pod.metadata.name.unwrap_or_default();
                    let gone = match pod_calls.delete(&name).await {
                        Ok(()) => pod_calls.wait_gone(&name, POD_GONE_WITHIN).await,
                        Err(e) => Err(e),
                    };
                    if let Err(e) = gone {
                        pods_gone = false;
                        first_err.get_or_insert(e);
                    }
                }
            }
            Err(e) => {
                pods_gone = false;
                first_err.get_or_insert(e);
            }
        }
        if pods_gone {
            let policies = self.policies();
            let calls = self.calls(&policies, "networkpolicies");
            if let Err(e) = delete_listed(&calls, &selector).await {
                first_err.get_or_insert(e);
            }
        } else {
            self.reporter.log(
                OutputStream::System,
                &format!("kept the NetworkPolicy of run {run_id}: its pod is not gone yet"),
            );
        }
        let secrets = self.secrets();
        let calls = self.calls(&secrets, "secrets");
        if let Err(e) = delete_listed(&calls, &selector).await {
            first_err.get_or_insert(e);
        }
        match first_err {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

async fn delete_listed<K>(calls: &Calls<'_, K>, selector: &str) -> Result<(), K8sError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    for item in calls.list(selector).await? {
        calls
            .delete(&item.meta().name.clone().unwrap_or_default())
            .await?;
    }
    Ok(())
}

/// The live sandbox pod of one run.
#[derive(Clone)]
pub struct KubeRun {
    cluster: Cluster,
    pod: String,
    run_id: String,
    workdir: String,
    uid: i64,
}

impl std::fmt::Debug for KubeRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeRun")
            .field("namespace", &self.cluster.namespace)
            .field("pod", &self.pod)
            .field("workdir", &self.workdir)
            .finish_non_exhaustive()
    }
}

impl KubeRun {
    pub(crate) fn new(
        cluster: Cluster,
        pod: String,
        run_id: String,
        workdir: String,
        uid: i64,
    ) -> Self {
        Self {
            cluster,
            pod,
            run_id,
            workdir,
            uid,
        }
    }

    /// The namespace the pod lives in.
    pub fn namespace(&self) -> &str {
        &self.cluster.namespace
    }

    async fn start_exec(
        &self,
        argv: &[String],
        request: &ExecRequest,
    ) -> Result<KubeExec, DriverError> {
        if argv.is_empty() {
            return Err(DriverError::SpecRefused {
                reason: "exec with an empty argv".to_owned(),
            });
        }
        if let Some(user) = request
            .user
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty())
        {
            let uid = user.split(':').next().and_then(|u| u.parse::<i64>().ok());
            if uid != Some(self.uid) {
                return Err(K8sError::Unsupported {
                    what: format!("exec as user {user:?}"),
                    reason: "a pod's processes all run as the pod's user (no root to switch from)",
                }
                .into());
            }
        }
        // Invalid names are skipped, as on the docker driver (facts §5.3).
        let env = request
            .env
            .iter()
            .filter(|(k, _)| valid_env_name(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let workdir = request.workdir.as_deref().unwrap_or(&self.workdir);
        KubeExec::start(
            self.cluster.pods(),
            &self.pod,
            workdir,
            argv,
            &env,
            request.attach_stdin || request.keep_stdin_open,
        )
        .await
    }
}

fn split_path(container_path: &str) -> (String, String) {
    let trimmed = container_path.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        None | Some((_, "")) => ("/".to_owned(), ".".to_owned()),
        Some(("", base)) => ("/".to_owned(), base.to_owned()),
        Some((parent, base)) => (parent.to_owned(), base.to_owned()),
    }
}

#[async_trait]
impl SandboxRun for KubeRun {
    fn driver(&self) -> DriverName {
        DRIVER
    }

    fn container(&self) -> &str {
        &self.pod
    }

    fn workdir(&self) -> &str {
        &self.workdir
    }

    fn egress_ca_placed(&self) -> bool {
        // The render places every CA a plan carries (the proxy Secret,
        // projected into the trust emptyDir); a plan without one never
        // asks.
        true
    }

    async fn exec(&self, request: ExecRequest) -> Result<Box<dyn ExecSession>, DriverError> {
        let argv = request.argv.clone();
        Ok(Box::new(self.start_exec(&argv, &request).await?))
    }

    async fn export(&self, container_path: &str) -> Result<ByteStream, DriverError> {
        // `tar -C parent -c basename`: the archive's top entry is the
        // basename, as the Engine API's archive endpoint answers, which is
        // what the read-back parser addresses members by.
        let (parent, base) = split_path(container_path);
        let argv: Vec<String> = ["tar", "-C", &parent, "-cf", "-", &base]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let mut session = self.start_exec(&argv, &ExecRequest::default()).await?;
        // Peek: a path that does not exist ends with no output and a
        // non-zero exit, which is a typed error rather than an empty archive.
        let mut stderr = Vec::new();
        let first = loop {
            match session.next_chunk().await {
                None => break None,
                Some(Err(e)) => return Err(e),
                Some(Ok(c)) if c.stream == OutputStream::Stdout && !c.data.is_empty() => {
                    break Some(c.data);
                }
                Some(Ok(c)) => {
                    if stderr.len() < 4096 {
                        stderr.extend_from_slice(&c.data);
                    }
                }
            }
        };
        let Some(first) = first else {
            let code = session.wait().await?;
            let said = String::from_utf8_lossy(&stderr).trim().to_owned();
            let kind = if code != 0 && said.contains("No such file") {
                std::io::ErrorKind::NotFound
            } else {
                std::io::ErrorKind::Other
            };
            return Err(DriverError::Io {
                operation: format!("export {container_path}"),
                source: std::io::Error::new(kind, format!("tar exited {code}: {said}")),
            });
        };
        let path = container_path.to_owned();
        let stream = futures_util::stream::unfold(
            (Some(first), Some(session), path),
            |(pending, session, path)| async move {
                if let Some(data) = pending {
                    return Some((Ok(data), (None, session, path)));
                }
                let mut session = session?;
                loop {
                    match session.next_chunk().await {
                        Some(Ok(c)) if c.stream == OutputStream::Stdout => {
                            return Some((Ok(c.data), (None, Some(session), path)));
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => {
                            let err = std::io::Error::other(e.to_string());
                            return Some((Err(err), (None, None, path)));
                        }
                        None => break,
                    }
                }
                // The end of the archive is only good if tar says so.
                match session.wait().await {
                    Ok(0) => None,
                    Ok(code) => {
                        let err = std::io::Error::other(format!(
                            "tar of {path} exited with {code}; the archive may be incomplete"
                        ));
                        Some((Err(err), (None, None, path)))
                    }
                    Err(e) => Some((
                        Err(std::io::Error::other(e.to_string())),
                        (None, None, path),
                    )),
                }
            },
        );
        Ok(Box::pin(stream))
    }

    async fn import(&self, container_dir: &str, archive: ByteStream) -> Result<(), DriverError> {
        if !container_dir.starts_with('/') {
            return Err(DriverError::SpecRefused {
                reason: format!("import into a relative path {container_dir:?}"),
            });
        }
        let argv: Vec<String> = ["tar", "-xf", "-", "-C", container_dir]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let request = ExecRequest {
            attach_stdin: true,
            ..ExecRequest::default()
        };
        let mut session = self.start_exec(&argv, &request).await?;
        let mut archive = archive;
        let mut feed_error = None;
        while let Some(chunk) = archive.next().await {
            match chunk {
                Ok(data) => session.write_stdin(data).await?,
                Err(source) => {
                    feed_error = Some(source);
                    break;
                }
            }
        }
        if let Some(source) = feed_error {
            let _ = session.kill().await;
            return Err(DriverError::Io {
                operation: format!("read the archive for {container_dir}"),
                source,
            });
        }
        session.close_stdin().await?;
        let out = collect_output(&mut session, OutputLimits::default(), &mut |_| {}).await?;
        if out.exit_code != 0 {
            return Err(DriverError::Io {
                operation: format!("untar into {container_dir}"),
                source: std::io::Error::other(format!(
                    "tar exited {}: {}",
                    out.exit_code,
                    String::from_utf8_lossy(&out.stderr_tail).trim()
                )),
            });
        }
        Ok(())
    }

    async fn is_alive(&self) -> Result<bool, DriverError> {
        let pods = self.cluster.pods();
        let got = bounded(self.cluster.settings.apply_timeout, pods.get_opt(&self.pod))
            .await?
            .map_err(|e| {
                classify(
                    e,
                    "get pod",
                    "get",
                    "pods",
                    &self.cluster.namespace,
                    &self.pod,
                )
            })?;
        Ok(got.is_some_and(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().is_some_and(|s| {
                    s.phase.as_deref() == Some("Running")
                        && s.container_statuses
                            .iter()
                            .flatten()
                            .all(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()))
                })
        }))
    }

    async fn cleanup(&self) -> Result<(), DriverError> {
        self.cluster
            .delete_run(&self.run_id)
            .await
            .map_err(DriverError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_paths() {
        assert_eq!(
            split_path("/iterion/artifact-files"),
            ("/iterion".to_owned(), "artifact-files".to_owned())
        );
        assert_eq!(split_path("/out/"), ("/".to_owned(), "out".to_owned()));
        assert_eq!(split_path("/"), ("/".to_owned(), ".".to_owned()));
    }
}
