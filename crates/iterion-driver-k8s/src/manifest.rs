//! The objects one run creates, rendered as typed k8s-openapi structs from
//! the finalized [`LaunchPlan`]: per-run Secrets, a NetworkPolicy when the
//! egress proxy is active, and the one Pod. Pure: no IO, no clock, no
//! randomness, so `iterion sandbox manifests` and the driver print and
//! create the very same objects, and golden files pin every field.
//!
//! What a pod gets (facts §5.3, upstream notes "Kubernetes"):
//! - `restartPolicy: Never`, `automountServiceAccountToken: false`, service
//!   links off, no host network/PID/IPC, `runAsNonRoot` with the plan's
//!   numeric user (default 1000:1000) and `fsGroup`, seccomp `RuntimeDefault`;
//!   one container `workload` without privilege escalation and with every
//!   capability dropped, requests and limits always set.
//! - PID 1 is a shell that reaps orphans (`wait` is `waitpid(-1)`), the same
//!   reaper the docker driver uses on an engine without an init: `sleep
//!   infinity` as PID 1 would keep every orphaned zombie of every exec.
//! - Every kept mount of the plan is a volume: driver-owned storage (the
//!   copied-in workspace, run-files, declared read-back paths) is an
//!   `emptyDir`; a `tmpfs` is a memory-backed `emptyDir`; pvc, configmap and
//!   secret mounts are their volume kinds; file secrets are keys of a
//!   per-run Secret projected read-only at their path. A mount's `size=`
//!   becomes its `sizeLimit`, except on storage that holds a declared
//!   read-back path: the kubelet evicts the whole pod past a sizeLimit, and
//!   ADR-143 (R9) promises one dropped member instead, metered on the host,
//!   so that storage gets the run's disk bound (far above any read-back
//!   cap) rather than its own `size=`.
//! - With a proxy, the `*_PROXY` variables read a per-run Secret (the token
//!   never appears in the pod spec, nor in what the API server logs of it),
//!   and a NetworkPolicy admits only the runner's IP (`ITERION_POD_IP`):
//!   traffic that ignores the proxy is dropped on a CNI that enforces
//!   NetworkPolicy (facts §7.6). Not even cluster DNS ([`PodDns`], issue 31
//!   item 7): it recurses, a channel out of the pod; the proxy resolves
//!   every name and a `*_PROXY` client resolves none, so the policy admits
//!   no port 53 and the pod's resolver points at its own loopback (a
//!   lookup fails at once instead of timing out). Only an open run, which
//!   has no policy and reaches hosts itself, keeps the cluster's DNS.
//! - Bounded storage (issue 31 item 7): every `emptyDir` has a `sizeLimit`
//!   (its mount's `size=`, else the run's disk bound `ITERION_SANDBOX_DISK`,
//!   the very bound the engine path gives the writable layer; a
//!   memory-backed one, the memory limit), and the container an
//!   `ephemeral-storage` limit of that disk bound, which on a node covers
//!   its writable layer, its logs and its disk-backed `emptyDir`s together.
//! - When the proxy inspects (issue 17), the run's CA certificate (never
//!   its key) is a key of that Secret, projected read-only at
//!   `/etc/iterion-egress/ca.pem` inside a small writable emptyDir at
//!   `/etc/iterion-egress`, where the runtime adds the bundle with the
//!   image's roots as the pod's non-root user (it could not write `/etc`).
//!
//! It does not decide which mounts exist (`finalize_mounts_for_driver`
//! does) and it reads no file: secret file contents arrive as data.

use std::collections::BTreeMap;
use std::net::IpAddr;

use iterion_core::plan::{EGRESS_TRUST_CA, EGRESS_TRUST_DIR, path_is_under};
use iterion_core::{LaunchPlan, Mount, MountKind, MountOrigin, RunInfo};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    KeyToPath, PersistentVolumeClaimVolumeSource, Pod, PodDNSConfig, PodSecurityContext, PodSpec,
    ResourceRequirements, SeccompProfile, Secret, SecretKeySelector, SecretVolumeSource,
    SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};

use crate::error::K8sError;
use crate::settings::{K8sSettings, POD_IP_ENV, RunnerPod};

/// Label every object the driver creates carries.
pub const MANAGED_LABEL: &str = "iterion.io/managed";
/// Label naming the run (also the NetworkPolicy's pod selector).
pub const RUN_ID_LABEL: &str = "iterion.io/run-id";
/// Label carrying the friendly run name, when it is a valid label value.
pub const RUN_NAME_LABEL: &str = "iterion.io/run-name";
/// Label marking the sandbox pod (facts §5.4).
pub const COMPONENT_LABEL: &str = "iterion.io/component";
/// Value of [`COMPONENT_LABEL`] on the sandbox pod.
pub const COMPONENT_SANDBOX_RUN: &str = "sandbox-run";
/// Label naming the run store (a digest; see the docker driver's twin).
pub const STORE_LABEL: &str = "iterion.io/store";
/// Annotation naming the creating process (`<pid>:<start>@<host>`: not a
/// valid label value, so an annotation).
pub const OWNER_ANNOTATION: &str = "iterion.io/owner";
/// Annotation carrying the full friendly run name.
pub const RUN_NAME_ANNOTATION: &str = "iterion.io/run-name";
/// Annotation on the pod saying whether it resolves names ([`PodDns`]).
pub const DNS_ANNOTATION: &str = "iterion.io/dns";

/// Whether a run's pod resolves names itself (issue 31 item 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodDns {
    /// No DNS at all: the egress proxy resolves every name, a client of
    /// `HTTPS_PROXY` sends it names, and the NetworkPolicy admits only the
    /// runner. Cluster DNS recurses to any domain: a channel out.
    None,
    /// The cluster's DNS: an open run (no proxy, no NetworkPolicy) reaches
    /// hosts itself and needs their addresses.
    Cluster,
}

impl PodDns {
    /// What `plan` needs.
    pub fn of(plan: &LaunchPlan) -> PodDns {
        if plan.egress.is_some() {
            PodDns::None
        } else {
            PodDns::Cluster
        }
    }

    /// The annotation's value.
    pub fn as_str(self) -> &'static str {
        match self {
            PodDns::None => "none",
            PodDns::Cluster => "cluster",
        }
    }

    /// Why, in a sentence (`iterion sandbox manifests` prints it).
    pub fn reason(self) -> &'static str {
        match self {
            PodDns::None => {
                "the egress proxy resolves every name (HTTPS_PROXY clients need no DNS): the NetworkPolicy admits no DNS and the pod's resolver is its own loopback"
            }
            PodDns::Cluster => {
                "the network is open (no proxy, no NetworkPolicy): the pod resolves names through the cluster's DNS"
            }
        }
    }
}

/// The pod's resolver when it gets no DNS: its own loopback, where nothing
/// answers, so a lookup fails at once instead of waiting on a dropped
/// packet.
const NO_DNS_NAMESERVER: &str = "127.0.0.1";
/// The scheduler's share of the ephemeral-storage bound (the limit is the
/// bound; a request equal to it would reserve the whole bound on a node).
const EPHEMERAL_REQUEST_CAP: u64 = 1 << 30;

/// The one container of the pod.
pub const CONTAINER: &str = "workload";
/// Key of the proxy URL in the proxy Secret.
pub const PROXY_URL_KEY: &str = "url";
/// Key of the run's egress CA certificate in the proxy Secret.
pub const EGRESS_CA_KEY: &str = "ca.pem";
/// Volume of the writable trust directory (the runtime writes the bundle).
const TRUST_VOLUME: &str = "egress-trust";
/// Volume projecting the CA certificate from the proxy Secret.
const TRUST_CA_VOLUME: &str = "egress-ca";
/// Bound of the trust directory: a system bundle is read up to 8 MiB.
const TRUST_DIR_LIMIT: u64 = 16 << 20;
/// Mode of the projected CA: a public certificate, readable by any user.
const TRUST_CA_MODE: i32 = 0o444;
/// Placeholder that replaces every Secret value when rendering for display.
pub const REDACTED: &str = "<redacted>";
/// Default uid:gid of a pod whose plan names no user (the uid of the
/// published sandbox images; facts §5.3).
pub use iterion_sandbox::guards::DEFAULT_KUBE_USER;

/// PID 1: reaps every orphan, exits at once on TERM (fast deletes).
const PID1_REAPER: &str = "trap 'exit 0' TERM INT; while :; do sleep 2147483647 & wait $!; done";
/// `activeDeadlineSeconds` = the run's budget plus this margin (facts §5.3).
const DEADLINE_MARGIN_SECS: i64 = 30 * 60;
/// Grace the kubelet gives PID 1 on delete (its TERM trap exits at once).
const TERMINATION_GRACE_SECS: i64 = 5;
/// Mode of projected secret files: read-only, owner and `fsGroup`.
const SECRET_FILE_MODE: i32 = 0o440;

/// Everything a run creates, in creation order: Secrets, the
/// NetworkPolicy (before the pod, so no instant exists in which the pod
/// runs unconfined), then the Pod.
#[derive(Debug, Clone, PartialEq)]
pub struct RunObjects {
    /// Per-run Secrets (proxy endpoint, file secrets).
    pub secrets: Vec<Secret>,
    /// The egress confinement, when the proxy is active.
    pub network_policy: Option<NetworkPolicy>,
    /// The sandbox pod.
    pub pod: Pod,
}

impl RunObjects {
    /// The objects as JSON values, in creation order.
    pub fn to_values(&self) -> Result<Vec<serde_json::Value>, serde_json::Error> {
        let mut out = Vec::new();
        for s in &self.secrets {
            out.push(serde_json::to_value(s)?);
        }
        if let Some(np) = &self.network_policy {
            out.push(serde_json::to_value(np)?);
        }
        out.push(serde_json::to_value(&self.pod)?);
        Ok(out)
    }

    /// A `v1` List of the objects, as `kubectl --dry-run=client -o json`
    /// prints several objects.
    pub fn to_list(&self) -> Result<serde_json::Value, serde_json::Error> {
        Ok(serde_json::json!({
            "apiVersion": "v1",
            "kind": "List",
            "metadata": { "resourceVersion": "" },
            "items": self.to_values()?,
        }))
    }
}

/// Per-call knobs of [`render`].
#[derive(Debug, Clone)]
pub struct RenderOptions<'a> {
    /// Namespace of every object.
    pub namespace: &'a str,
    /// Operator settings (resources, runner IP and pod).
    pub settings: &'a K8sSettings,
    /// `iterion.io/store` label value.
    pub store_scope: Option<&'a str>,
    /// `iterion.io/owner` annotation value.
    pub owner: Option<&'a str>,
    /// Replace every Secret value with [`REDACTED`] (display only).
    pub redact: bool,
}

/// A mount's secret-file content, by container path.
pub type SecretFileValues = BTreeMap<String, Vec<u8>>;

/// `iterion-run-<run id>`: lower-case, `_` → `-`, at most 63 characters (a
/// DNS label, as a pod name must be); a longer id keeps a digest of the
/// whole id so two long ids sharing a prefix never share a pod.
pub fn pod_name(run_id: &str) -> String {
    let name = format!(
        "iterion-run-{}",
        run_id.to_ascii_lowercase().replace('_', "-")
    );
    if name.len() <= 63 {
        return name.trim_end_matches('-').to_owned();
    }
    // FNV-1a: stable across releases (names must match between a run and
    // the reaper of a later release).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in run_id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let digest = format!("{hash:016x}");
    let keep = 63 - digest.len() - 1;
    format!("{}-{digest}", name[..keep].trim_end_matches('-'))
}

/// Name of the Secret holding the proxy URL.
pub fn proxy_secret_name(run_id: &str) -> String {
    format!("{}-proxy", pod_name(run_id))
}

/// Name of the Secret holding the file secrets.
pub fn files_secret_name(run_id: &str) -> String {
    format!("{}-files", pod_name(run_id))
}

/// A valid label value: at most 63 of `[A-Za-z0-9._-]`, alphanumeric at
/// both ends.
pub fn is_label_value(s: &str) -> bool {
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && s.bytes().next().is_none_or(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_none_or(|b| b.is_ascii_alphanumeric())
}

/// The label selector of everything one run created.
pub fn run_selector(run_id: &str) -> String {
    format!("{MANAGED_LABEL}=true,{RUN_ID_LABEL}={run_id}")
}

fn metadata(
    name: String,
    info: &RunInfo,
    opts: &RenderOptions<'_>,
    extra_labels: &[(&str, &str)],
) -> ObjectMeta {
    let mut labels = BTreeMap::from([
        (MANAGED_LABEL.to_owned(), "true".to_owned()),
        (RUN_ID_LABEL.to_owned(), info.run_id.as_str().to_owned()),
    ]);
    for (k, v) in extra_labels {
        labels.insert((*k).to_owned(), (*v).to_owned());
    }
    if let Some(scope) = opts.store_scope.filter(|s| is_label_value(s)) {
        labels.insert(STORE_LABEL.to_owned(), scope.to_owned());
    }
    let mut annotations = BTreeMap::new();
    if let Some(run_name) = info.run_name.as_deref().filter(|n| !n.is_empty()) {
        if is_label_value(run_name) {
            labels.insert(RUN_NAME_LABEL.to_owned(), run_name.to_owned());
        }
        annotations.insert(RUN_NAME_ANNOTATION.to_owned(), run_name.to_owned());
    }
    if let Some(owner) = opts.owner {
        annotations.insert(OWNER_ANNOTATION.to_owned(), owner.to_owned());
    }
    ObjectMeta {
        name: Some(name),
        namespace: Some(opts.namespace.to_owned()),
        labels: Some(labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
        owner_references: opts.settings.runner.as_ref().map(|r| vec![owner_ref(r)]),
        ..ObjectMeta::default()
    }
}

/// Owned by the runner pod, not controlled by it: the garbage collector
/// removes the run's objects when the runner pod goes, and nothing else.
fn owner_ref(runner: &RunnerPod) -> OwnerReference {
    OwnerReference {
        api_version: "v1".to_owned(),
        kind: "Pod".to_owned(),
        name: runner.name.clone(),
        uid: runner.uid.clone(),
        controller: Some(false),
        block_owner_deletion: Some(false),
    }
}

/// The numeric `uid[:gid]` the pod runs as; the plan's user, or the
/// default. Root and names are refused (runAsNonRoot cannot check a name).
pub fn pod_user(plan: &LaunchPlan) -> Result<(i64, Option<i64>), K8sError> {
    let raw = plan
        .user
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .unwrap_or(DEFAULT_KUBE_USER);
    let unsupported = |reason| K8sError::Unsupported {
        what: format!("user {raw:?}"),
        reason,
    };
    let mut parts = raw.splitn(2, ':');
    let number = |s: Option<&str>| -> Option<i64> {
        s.filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))?
            .parse()
            .ok()
    };
    let uid = number(parts.next()).ok_or_else(|| {
        unsupported("a pod runs as a numeric uid[:gid] (runAsNonRoot cannot check a name)")
    })?;
    let gid = match parts.next() {
        None => None,
        Some(g) => Some(number(Some(g)).ok_or_else(|| {
            unsupported("a pod runs as a numeric uid[:gid] (runAsNonRoot cannot check a name)")
        })?),
    };
    if uid == 0 {
        return Err(unsupported(
            "a sandbox pod never runs as root (runAsNonRoot); name a non-zero uid",
        ));
    }
    Ok((uid, gid))
}

/// Render every object of one run. `secret_files` holds the content of each
/// secret-file mount by its container path (placeholders when `redact`).
pub fn render(
    plan: &LaunchPlan,
    info: &RunInfo,
    opts: &RenderOptions<'_>,
    secret_files: &SecretFileValues,
) -> Result<RunObjects, K8sError> {
    let run = info.run_id.as_str();
    let name = pod_name(run);
    let image = plan
        .image
        .clone()
        .filter(|i| !i.trim().is_empty())
        .ok_or_else(|| K8sError::Unsupported {
            what: "a plan without an image".to_owned(),
            reason: "kubernetes cannot build; pin a pre-built image (image:)",
        })?;
    if plan.build.is_some() {
        return Err(K8sError::Unsupported {
            what: "build:".to_owned(),
            reason: "kubernetes cannot build; build in CI and pin the image (image:)",
        });
    }
    let (uid, gid) = pod_user(plan)?;
    let value = |bytes: &[u8]| -> ByteString {
        if opts.redact {
            ByteString(REDACTED.as_bytes().to_vec())
        } else {
            ByteString(bytes.to_vec())
        }
    };

    let mut secrets = Vec::new();
    let mut env: BTreeMap<String, EnvVar> = plan
        .env
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                EnvVar {
                    name: k.clone(),
                    value: Some(v.clone()),
                    value_from: None,
                },
            )
        })
        .collect();
    let mut network_policy = None;
    if let Some(egress) = &plan.egress {
        let pod_ip = opts.settings.pod_ip.ok_or_else(|| K8sError::Setting {
            variable: POD_IP_ENV,
            value: String::new(),
            reason: "unset, but this run's egress goes through the proxy: the sandbox could not reach it and no NetworkPolicy could confine the pod (inject status.podIP through the downward API)".to_owned(),
        })?;
        let host = match pod_ip {
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
        };
        let url = format!("http://t:{}@{host}:{}", egress.token, egress.proxy_port);
        let secret_name = proxy_secret_name(run);
        let mut data = BTreeMap::from([(PROXY_URL_KEY.to_owned(), value(url.as_bytes()))]);
        if let Some(ca) = &plan.egress_ca {
            data.insert(EGRESS_CA_KEY.to_owned(), value(ca.as_bytes()));
        }
        secrets.push(Secret {
            metadata: metadata(secret_name.clone(), info, opts, &[]),
            type_: Some("Opaque".to_owned()),
            immutable: Some(true),
            data: Some(data),
            ..Secret::default()
        });
        // The proxy wins over the plan's own values (facts §5.3: upserted).
        for key in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"] {
            env.insert(
                key.to_owned(),
                EnvVar {
                    name: key.to_owned(),
                    value: None,
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: secret_name.clone(),
                            key: PROXY_URL_KEY.to_owned(),
                            optional: Some(false),
                        }),
                        ..EnvVarSource::default()
                    }),
                },
            );
        }
        // Cluster suffixes deliberately not exempted (facts §7.3).
        for key in ["NO_PROXY", "no_proxy"] {
            env.insert(
                key.to_owned(),
                EnvVar {
                    name: key.to_owned(),
                    value: Some("localhost,127.0.0.1".to_owned()),
                    value_from: None,
                },
            );
        }
        network_policy = Some(render_network_policy(&name, pod_ip, info, opts));
    }

    if plan.egress_ca.is_some() && plan.egress.is_none() {
        return Err(K8sError::Unsupported {
            what: "an egress CA without a proxy".to_owned(),
            reason: "the CA travels in the proxy's per-run Secret; only an inspecting proxy has one",
        });
    }
    let r = &opts.settings.resources;
    let (mut volumes, mut mounts, files) = render_volumes(plan, run, secret_files, r)?;
    if plan.egress_ca.is_some() {
        let (v, m) = trust_volumes(run);
        volumes.extend(v);
        mounts.extend(m);
    }
    if !files.is_empty() {
        secrets.push(Secret {
            metadata: metadata(files_secret_name(run), info, opts, &[]),
            type_: Some("Opaque".to_owned()),
            immutable: Some(true),
            data: Some(files.iter().map(|(k, v)| (k.clone(), value(v))).collect()),
            ..Secret::default()
        });
    }

    let mut requests = BTreeMap::from([
        ("cpu".to_owned(), r.requests_cpu.quantity()),
        ("memory".to_owned(), r.requests_memory.quantity()),
    ]);
    let mut limits = BTreeMap::from([
        ("cpu".to_owned(), r.limits_cpu.quantity()),
        ("memory".to_owned(), r.limits_memory.quantity()),
    ]);
    if let Some(disk) = plan.limits.writable_layer {
        limits.insert("ephemeral-storage".to_owned(), binary_quantity(disk.0));
        requests.insert(
            "ephemeral-storage".to_owned(),
            binary_quantity(disk.0.min(EPHEMERAL_REQUEST_CAP)),
        );
    }
    let resources = ResourceRequirements {
        requests: Some(requests),
        limits: Some(limits),
        ..ResourceRequirements::default()
    };
    let dns = PodDns::of(plan);
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(image),
        command: Some(vec![
            "sh".to_owned(),
            "-c".to_owned(),
            PID1_REAPER.to_owned(),
        ]),
        working_dir: Some(plan.workdir.clone()),
        env: (!env.is_empty()).then(|| env.into_values().collect()),
        resources: Some(resources),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: None,
            }),
            run_as_non_root: Some(true),
            run_as_user: Some(uid),
            run_as_group: gid,
            ..SecurityContext::default()
        }),
        volume_mounts: (!mounts.is_empty()).then_some(mounts),
        ..Container::default()
    };
    let active_deadline = info
        .max_duration
        .and_then(|d| i64::try_from(d.as_secs()).ok())
        .map(|s| s.saturating_add(DEADLINE_MARGIN_SECS));
    let mut pod_meta = metadata(
        name,
        info,
        opts,
        &[(COMPONENT_LABEL, COMPONENT_SANDBOX_RUN)],
    );
    pod_meta
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(DNS_ANNOTATION.to_owned(), dns.as_str().to_owned());
    let pod = Pod {
        metadata: pod_meta,
        spec: Some(PodSpec {
            dns_policy: (dns == PodDns::None).then(|| "None".to_owned()),
            dns_config: (dns == PodDns::None).then(|| PodDNSConfig {
                nameservers: Some(vec![NO_DNS_NAMESERVER.to_owned()]),
                options: None,
                searches: None,
            }),
            restart_policy: Some("Never".to_owned()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            host_network: Some(false),
            host_pid: Some(false),
            host_ipc: Some(false),
            active_deadline_seconds: active_deadline,
            termination_grace_period_seconds: Some(TERMINATION_GRACE_SECS),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(uid),
                run_as_group: gid,
                // 1000 when the plan names no group, as upstream.
                fs_group: Some(gid.unwrap_or(1000)),
                fs_group_change_policy: Some("OnRootMismatch".to_owned()),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".to_owned(),
                    localhost_profile: None,
                }),
                ..PodSecurityContext::default()
            }),
            containers: vec![container],
            volumes: (!volumes.is_empty()).then_some(volumes),
            ..PodSpec::default()
        }),
        status: None,
    };
    Ok(RunObjects {
        secrets,
        network_policy,
        pod,
    })
}

/// [`render`] for display (`iterion sandbox manifests`, the driver's dry
/// render): every Secret value, file secrets included, is [`REDACTED`].
pub fn render_for_display(
    plan: &LaunchPlan,
    info: &RunInfo,
    opts: &RenderOptions<'_>,
) -> Result<RunObjects, K8sError> {
    let placeholders: SecretFileValues = plan
        .mounts
        .iter()
        .filter(|m| m.origin == MountOrigin::SecretFile)
        .map(|m| (m.target.clone(), REDACTED.as_bytes().to_vec()))
        .collect();
    let opts = RenderOptions {
        redact: true,
        ..opts.clone()
    };
    render(plan, info, &opts, &placeholders)
}

fn render_network_policy(
    name: &str,
    pod_ip: IpAddr,
    info: &RunInfo,
    opts: &RenderOptions<'_>,
) -> NetworkPolicy {
    let cidr = match pod_ip {
        IpAddr::V4(ip) => format!("{ip}/32"),
        IpAddr::V6(ip) => format!("{ip}/128"),
    };
    let runner = || NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.clone(),
            except: None,
        }),
        ..NetworkPolicyPeer::default()
    };
    let labels = |pairs: &[(&str, &str)]| LabelSelector {
        match_labels: Some(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        match_expressions: None,
    };
    NetworkPolicy {
        metadata: metadata(name.to_owned(), info, opts, &[]),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(labels(&[
                (MANAGED_LABEL, "true"),
                (RUN_ID_LABEL, info.run_id.as_str()),
            ])),
            policy_types: Some(vec!["Egress".to_owned(), "Ingress".to_owned()]),
            // The runner, any port: the proxy's port is chosen at run time,
            // and the runner's per-run listeners live there too. Nothing
            // else, DNS included ([`PodDns::None`]).
            egress: Some(vec![NetworkPolicyEgressRule {
                to: Some(vec![runner()]),
                ports: None,
            }]),
            // Exec traffic goes through the API server and the kubelet, not
            // the pod network: nothing else needs to reach the pod.
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![runner()]),
                ports: None,
            }]),
        }),
    }
}

/// The trust directory (issue 17): a writable emptyDir at
/// `/etc/iterion-egress` for the bundle the runtime writes as the pod's
/// user, and the CA certificate projected read-only into it from the
/// proxy Secret (a file mount: the directory stays writable).
fn trust_volumes(run: &str) -> (Vec<Volume>, Vec<VolumeMount>) {
    let volumes = vec![
        Volume {
            name: TRUST_VOLUME.to_owned(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: None,
                size_limit: Some(binary_quantity(TRUST_DIR_LIMIT)),
            }),
            ..Volume::default()
        },
        Volume {
            name: TRUST_CA_VOLUME.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(proxy_secret_name(run)),
                items: Some(vec![KeyToPath {
                    key: EGRESS_CA_KEY.to_owned(),
                    path: EGRESS_CA_KEY.to_owned(),
                    mode: None,
                }]),
                default_mode: Some(TRUST_CA_MODE),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
    ];
    let mounts = vec![
        VolumeMount {
            name: TRUST_VOLUME.to_owned(),
            mount_path: EGRESS_TRUST_DIR.to_owned(),
            ..VolumeMount::default()
        },
        VolumeMount {
            name: TRUST_CA_VOLUME.to_owned(),
            mount_path: EGRESS_TRUST_CA.to_owned(),
            sub_path: Some(EGRESS_CA_KEY.to_owned()),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    ];
    (volumes, mounts)
}

/// Bytes as a Kubernetes quantity, in the largest binary unit that divides
/// them (`64Mi`), as an operator would write it.
fn binary_quantity(bytes: u64) -> k8s_openapi::apimachinery::pkg::api::resource::Quantity {
    const UNITS: [(&str, u64); 4] = [
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    let text = UNITS
        .iter()
        .find(|(_, f)| bytes >= *f && bytes.is_multiple_of(*f))
        .map_or_else(|| bytes.to_string(), |(u, f)| format!("{}{u}", bytes / f));
    k8s_openapi::apimachinery::pkg::api::resource::Quantity(text)
}

/// A DNS-label volume name from a prefix and a free-form source.
fn volume_name(index: usize, tag: &str, source: Option<&str>) -> String {
    let mut name = format!("{tag}-{index}");
    if let Some(src) = source {
        let cleaned: String = src
            .to_ascii_lowercase()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let cleaned = cleaned.trim_matches('-');
        if !cleaned.is_empty() {
            name.push('-');
            name.push_str(cleaned);
        }
    }
    name.truncate(63);
    name.trim_end_matches('-').to_owned()
}

type Rendered = (Vec<Volume>, Vec<VolumeMount>, BTreeMap<String, Vec<u8>>);

fn render_volumes(
    plan: &LaunchPlan,
    run: &str,
    secret_files: &SecretFileValues,
    resources: &crate::settings::Resources,
) -> Result<Rendered, K8sError> {
    // The bounds of an emptyDir without its own `size=`: the run's disk
    // bound on disk, the container's memory limit in memory.
    let disk_bound = plan.limits.writable_layer.map(|d| binary_quantity(d.0));
    let memory_bound = resources.limits_memory.quantity();
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    // R9: no sizeLimit on storage that holds a declared read-back path.
    let holds_read_back = |m: &Mount| {
        plan.read_back.iter().any(|d| {
            path_is_under(&d.container_path, &m.target)
                || path_is_under(&m.target, &d.container_path)
        })
    };
    for (i, m) in plan.mounts.iter().enumerate() {
        let size_limit = m
            .size
            .filter(|_| !holds_read_back(m))
            .map(|s| binary_quantity(s.0));
        let on_disk = size_limit.clone().or_else(|| disk_bound.clone());
        let in_memory = size_limit.clone().or_else(|| Some(memory_bound.clone()));
        let mut mount = VolumeMount {
            mount_path: m.target.clone(),
            read_only: m.readonly.then_some(true),
            ..VolumeMount::default()
        };
        let volume = match (m.kind, m.origin) {
            (MountKind::Bind, MountOrigin::SecretFile) => {
                let key = format!("file-{}", files.len());
                let content = secret_files
                    .get(&m.target)
                    .ok_or_else(|| K8sError::Unsupported {
                        what: format!("secret file {}", m.target),
                        reason: "its content was not supplied to the driver",
                    })?;
                files.insert(key.clone(), content.clone());
                mount.name = "secret-files".to_owned();
                mount.sub_path = Some(key);
                mount.read_only = Some(true);
                mounts.push(mount);
                continue;
            }
            (MountKind::Bind, _) => {
                return Err(K8sError::Unsupported {
                    what: format!(
                        "host bind {} -> {}",
                        m.source.as_deref().unwrap_or_default(),
                        m.target
                    ),
                    reason: "pods have no host filesystem; the policy drops host binds before the driver (use type=pvc with a PersistentVolumeClaim)",
                });
            }
            (MountKind::Volume, _) if m.source.is_some() => {
                return Err(K8sError::Unsupported {
                    what: format!(
                        "named volume {} at {}",
                        m.source.as_deref().unwrap_or_default(),
                        m.target
                    ),
                    reason: "kubernetes has no engine volumes (use type=pvc,source=<claim>)",
                });
            }
            (MountKind::Volume, origin) => {
                let name = match origin {
                    MountOrigin::Workspace => "workspace".to_owned(),
                    MountOrigin::RunFiles => "run-files".to_owned(),
                    MountOrigin::ReadBack => volume_name(i, "read-back", None),
                    _ => volume_name(i, "scratch", None),
                };
                Volume {
                    name,
                    empty_dir: Some(EmptyDirVolumeSource {
                        medium: None,
                        size_limit: on_disk,
                    }),
                    ..Volume::default()
                }
            }
            (MountKind::Tmpfs, _) => Volume {
                name: volume_name(i, "tmpfs", None),
                empty_dir: Some(EmptyDirVolumeSource {
                    medium: Some("Memory".to_owned()),
                    size_limit: in_memory,
                }),
                ..Volume::default()
            },
            (MountKind::Pvc, _) => Volume {
                name: volume_name(i, "pvc", m.source.as_deref()),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: m.source.clone().unwrap_or_default(),
                    read_only: m.readonly.then_some(true),
                }),
                ..Volume::default()
            },
            (MountKind::ConfigMap, _) => Volume {
                name: volume_name(i, "configmap", m.source.as_deref()),
                config_map: Some(ConfigMapVolumeSource {
                    name: m.source.clone().unwrap_or_default(),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            },
            (MountKind::Secret, _) => Volume {
                name: volume_name(i, "secret", m.source.as_deref()),
                secret: Some(SecretVolumeSource {
                    secret_name: m.source.clone(),
                    default_mode: Some(SECRET_FILE_MODE),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            },
        };
        if matches!(
            m.kind,
            MountKind::Pvc | MountKind::ConfigMap | MountKind::Secret
        ) && m.source.as_deref().is_none_or(str::is_empty)
        {
            return Err(K8sError::Unsupported {
                what: format!("a {:?} mount at {} without source", m.kind, m.target),
                reason: "name the claim, ConfigMap or Secret with source=",
            });
        }
        mount.name = volume.name.clone();
        volumes.push(volume);
        mounts.push(mount);
    }
    if !files.is_empty() {
        volumes.push(Volume {
            name: "secret-files".to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(files_secret_name(run)),
                default_mode: Some(SECRET_FILE_MODE),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    Ok((volumes, mounts, files))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_names_are_dns_labels() {
        assert_eq!(pod_name("r2026-abc"), "iterion-run-r2026-abc");
        assert_eq!(pod_name("a_b"), "iterion-run-a-b");
        let long = "a".repeat(63);
        let n = pod_name(&long);
        assert_eq!(n.len(), 63);
        assert_ne!(n, pod_name(&format!("{}b", "a".repeat(62))));
        assert!(
            n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        );
    }

    #[test]
    fn only_an_open_run_resolves_names_in_its_pod() {
        let open = LaunchPlan::default();
        assert_eq!(PodDns::of(&open), PodDns::Cluster);
        let proxied = LaunchPlan {
            egress: Some(iterion_core::plan::EgressAttachment {
                proxy_port: 1,
                token: "t".into(),
                enforce: true,
            }),
            ..LaunchPlan::default()
        };
        assert_eq!(PodDns::of(&proxied), PodDns::None);
        // Advisory egress goes through the proxy too.
        let advisory = LaunchPlan {
            egress: Some(iterion_core::plan::EgressAttachment {
                proxy_port: 1,
                token: "t".into(),
                enforce: false,
            }),
            ..LaunchPlan::default()
        };
        assert_eq!(PodDns::of(&advisory), PodDns::None);
    }

    #[test]
    fn sizes_as_quantities() {
        assert_eq!(binary_quantity(64 << 20).0, "64Mi");
        assert_eq!(binary_quantity(3 << 30).0, "3Gi");
        assert_eq!(binary_quantity(1000).0, "1000");
        assert_eq!(binary_quantity(1536).0, "1536");
        assert_eq!(binary_quantity(1 << 10).0, "1Ki");
    }

    #[test]
    fn label_values() {
        assert!(is_label_value("hello-world_1.0"));
        assert!(is_label_value(""));
        for bad in ["-x", "x-", "a b", "pid:1@host", &"a".repeat(64)] {
            assert!(!is_label_value(bad), "{bad}");
        }
    }

    #[test]
    fn users() {
        let plan = |u: Option<&str>| LaunchPlan {
            user: u.map(str::to_owned),
            ..LaunchPlan::default()
        };
        assert_eq!(pod_user(&plan(None)).expect("default"), (1000, Some(1000)));
        assert_eq!(pod_user(&plan(Some("1001"))).expect("uid"), (1001, None));
        assert_eq!(pod_user(&plan(Some("7:8"))).expect("uid:gid"), (7, Some(8)));
        for bad in ["root", "0", "0:0", "1000:staff", "-1", "1:2:3"] {
            assert!(pod_user(&plan(Some(bad))).is_err(), "{bad}");
        }
    }
}
