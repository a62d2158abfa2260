//! Finding a cluster from an environment snapshot, in this order:
//! `KUBECONFIG` (a `:`-separated list, merged as kubectl merges it), the
//! in-cluster service account when `KUBERNETES_SERVICE_HOST` is set (a
//! runner pod), then `$HOME/.kube/config`. The namespace is
//! `ITERION_SANDBOX_K8S_NAMESPACE`, else the context's (or the service
//! account's), else `default`. Loading reads files only; the probe that
//! follows ([`crate::KubeDriver::discover`]) is the first network call.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::error::K8sError;

/// Where the configuration came from (doctor shows it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// One or more kubeconfig files, and the context in use.
    Kubeconfig {
        /// The files read, in order.
        paths: Vec<PathBuf>,
        /// The current context's name.
        context: String,
    },
    /// The pod's service account.
    InCluster,
}

impl ConfigSource {
    /// One line for doctor: `context NAME (FILES)` or `in-cluster`.
    pub fn describe(&self) -> String {
        match self {
            Self::InCluster => "in-cluster service account".to_owned(),
            Self::Kubeconfig { paths, context } => format!(
                "context {context} ({})",
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":")
            ),
        }
    }
}

/// A loaded configuration, before any network call.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// kube-rs configuration (cluster URL, credentials, TLS).
    pub config: kube::Config,
    /// Where it came from.
    pub source: ConfigSource,
}

fn no_config(reason: impl Into<String>, source: Option<kube::config::KubeconfigError>) -> K8sError {
    K8sError::NoConfig {
        reason: reason.into(),
        source,
    }
}

/// Load the configuration the environment points at.
pub async fn load_config(env: &BTreeMap<String, String>) -> Result<ClusterConfig, K8sError> {
    let get = |k: &str| env.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let paths: Vec<PathBuf> = match get("KUBECONFIG") {
        Some(list) => list
            .split(':')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect(),
        None if get("KUBERNETES_SERVICE_HOST").is_some() => {
            let config = kube::Config::incluster().map_err(|e| {
                no_config(
                    format!(
                        "KUBERNETES_SERVICE_HOST is set but the service account cannot be read: {e}"
                    ),
                    None,
                )
            })?;
            return Ok(ClusterConfig {
                config,
                source: ConfigSource::InCluster,
            });
        }
        None => match get("HOME") {
            Some(home) => vec![PathBuf::from(home).join(".kube").join("config")],
            None => {
                return Err(no_config(
                    "KUBECONFIG is unset, this is not a pod, and HOME is unset",
                    None,
                ));
            }
        },
    };
    let mut merged: Option<Kubeconfig> = None;
    let mut read = Vec::new();
    for path in &paths {
        // kubectl skips files of the list that do not exist.
        if !path.exists() {
            continue;
        }
        let one = Kubeconfig::read_from(path).map_err(|e| {
            no_config(
                format!("cannot read kubeconfig {}", path.display()),
                Some(e),
            )
        })?;
        merged = Some(match merged {
            None => one,
            Some(m) => m
                .merge(one)
                .map_err(|e| no_config("cannot merge the KUBECONFIG files", Some(e)))?,
        });
        read.push(path.clone());
    }
    let Some(kubeconfig) = merged else {
        return Err(no_config(
            format!(
                "no kubeconfig at {} and this is not a pod",
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":")
            ),
            None,
        ));
    };
    let context = kubeconfig.current_context.clone().unwrap_or_default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| no_config("the kubeconfig's current context is unusable", Some(e)))?;
    Ok(ClusterConfig {
        config,
        source: ConfigSource::Kubeconfig {
            paths: read,
            context,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    const KUBECONFIG: &str = r#"apiVersion: v1
kind: Config
current-context: test
clusters:
- name: c
  cluster:
    server: http://127.0.0.1:1
contexts:
- name: test
  context:
    cluster: c
    user: u
    namespace: sandboxes
users:
- name: u
  user:
    token: not-a-real-token
"#;

    #[tokio::test]
    async fn kubeconfig_list_context_and_namespace() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("config");
        std::fs::write(&file, KUBECONFIG).expect("write");
        let missing = dir.path().join("missing");
        let list = format!("{}:{}", missing.display(), file.display());
        let loaded = load_config(&env(&[("KUBECONFIG", &list)]))
            .await
            .expect("load");
        assert_eq!(loaded.config.default_namespace, "sandboxes");
        assert_eq!(loaded.config.cluster_url.to_string(), "http://127.0.0.1:1/");
        assert_eq!(
            loaded.source,
            ConfigSource::Kubeconfig {
                paths: vec![file.clone()],
                context: "test".into()
            }
        );
        // HOME fallback.
        std::fs::create_dir_all(dir.path().join(".kube")).expect("mkdir");
        std::fs::write(dir.path().join(".kube/config"), KUBECONFIG).expect("write");
        let home = dir.path().display().to_string();
        let loaded = load_config(&env(&[("HOME", &home)])).await.expect("home");
        assert_eq!(loaded.config.default_namespace, "sandboxes");
    }

    #[tokio::test]
    async fn nothing_to_load_is_a_typed_error() {
        let dir = tempfile::tempdir().expect("tmp");
        let home = dir.path().display().to_string();
        for e in [env(&[("HOME", &home)]), env(&[])] {
            let err = load_config(&e).await.expect_err("no config");
            assert_eq!(err.code(), "K8S_NO_CONFIG");
        }
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "{ not yaml: [").expect("write");
        let err = load_config(&env(&[("KUBECONFIG", &bad.display().to_string())]))
            .await
            .expect_err("malformed");
        assert_eq!(err.code(), "K8S_NO_CONFIG");
    }
}
