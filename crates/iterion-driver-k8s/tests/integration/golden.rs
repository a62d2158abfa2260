//! Layer (a): every object the driver renders, pinned in JSON files under
//! `tests/golden/` (one file per object, in creation order). `.ci/run`
//! validates the same files with `kubernetes-validate --strict` against two
//! Kubernetes versions, so a field the API would refuse, or mistype, fails
//! CI.
//!
//! Does not prove: that a real API server admits the objects (admission
//! webhooks, PodSecurity levels, quotas), that a kubelet runs them, or that
//! a CNI enforces the NetworkPolicy. Set `ITERION_UPDATE_GOLDEN=1` to
//! rewrite the files after an intended change, and review the diff.

use std::collections::BTreeMap;
use std::path::PathBuf;

use iterion_core::plan::MountOrigin;
use iterion_core::{LaunchPlan, Mount, MountKind};
use iterion_driver_k8s::K8sSettings;
use iterion_driver_k8s::manifest::{RenderOptions, RunObjects, SecretFileValues, render};

use crate::support::*;

fn golden_dir(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(case)
}

fn file_name(i: usize, v: &serde_json::Value) -> String {
    format!(
        "{i:02}-{}-{}.json",
        v["kind"].as_str().expect("kind").to_ascii_lowercase(),
        v["metadata"]["name"].as_str().expect("name")
    )
}

/// Compare (or rewrite) the case's files.
fn check(case: &str, objects: &RunObjects) {
    let dir = golden_dir(case);
    let values = objects.to_values().expect("json");
    let update = std::env::var("ITERION_UPDATE_GOLDEN").is_ok_and(|v| v == "1");
    if update {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
    }
    let mut expected: Vec<String> = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let name = file_name(i, v);
        let text = format!("{}\n", serde_json::to_string_pretty(v).expect("pretty"));
        let path = dir.join(&name);
        if update {
            std::fs::write(&path, &text).expect("write golden");
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run with ITERION_UPDATE_GOLDEN=1 to create it)",
                path.display()
            )
        });
        assert_eq!(
            text,
            want,
            "{} differs from the render (ITERION_UPDATE_GOLDEN=1 rewrites it; review the diff)",
            path.display()
        );
        expected.push(name);
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .expect("golden dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    expected.sort();
    assert_eq!(present, expected, "stale golden files in {}", dir.display());
}

/// Issue 31 item 7: every emptyDir of the pod has a sizeLimit.
fn assert_every_empty_dir_bounded(pod: &serde_json::Value) {
    for v in pod["spec"]["volumes"].as_array().expect("volumes") {
        if let Some(e) = v.get("emptyDir") {
            assert!(
                e.get("sizeLimit").and_then(|l| l.as_str()).is_some(),
                "unbounded emptyDir {v}"
            );
        }
    }
}

/// Issue 31 item 7: the policy admits the runner and nothing else: no
/// port 53, no peer but the runner's address.
fn assert_no_dns_in_policy(np: &serde_json::Value) {
    let egress = np["spec"]["egress"].as_array().expect("egress");
    assert_eq!(egress.len(), 1, "{np}");
    assert!(egress[0].get("ports").is_none(), "{np}");
    let text = np.to_string();
    assert!(!text.contains("kube-dns") && !text.contains("53"), "{np}");
}

fn options<'a>(settings: &'a K8sSettings) -> RenderOptions<'a> {
    RenderOptions {
        namespace: "iterion-sandboxes",
        settings,
        store_scope: Some("5d3c0a9e1b2f4c6d"),
        owner: Some("4242:987654@iterion-runner-7d9f8-abcde"),
        redact: false,
    }
}

/// The common case: an image, the copied-in workspace, run-files on an
/// emptyDir, open networking, default user and resources.
#[test]
fn minimal_open_run() {
    let plan = policy_plan(&spec("iterion-sandbox-slim:local"), "/work/repo");
    let settings = K8sSettings::default();
    let objects = render(
        &plan,
        &info("r20261129-minimal"),
        &options(&settings),
        &SecretFileValues::new(),
    )
    .expect("render");
    assert!(
        objects.network_policy.is_none(),
        "open: no proxy, no policy"
    );
    assert!(objects.secrets.is_empty());
    // Open: the pod reaches hosts itself, so it keeps the cluster's DNS.
    let pod = serde_json::to_value(&objects.pod).expect("json");
    assert!(pod["spec"].get("dnsPolicy").is_none(), "{pod}");
    assert_eq!(pod["metadata"]["annotations"]["iterion.io/dns"], "cluster");
    assert_every_empty_dir_bounded(&pod);
    check("minimal", &objects);
}

/// Everything at once: a proxied run (Secret-backed proxy env and the
/// NetworkPolicy), a runner owner, a budget, a declared read-back path,
/// a sized tmpfs, pvc/configmap/secret mounts, a file secret, a numeric
/// user and operator resources.
#[test]
fn confined_run_with_every_mount_kind() {
    let mut s = spec(
        "registry.example.com/iterion/sandbox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    );
    s.user = Some("1001:1001".into());
    s.workspace_folder = Some("/workspace".into());
    s.read_back = vec!["/out".parse().expect("path")];
    s.env = BTreeMap::from([
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
        (
            "HTTPS_PROXY".to_owned(),
            "http://bypass.example:3128".to_owned(),
        ),
    ]);
    s.mounts = vec![
        "type=tmpfs,target=/scratch,size=64MiB".into(),
        "type=tmpfs,target=/out/cache,size=16MiB".into(),
        "type=pvc,source=go-cache,target=/home/iterion/go,readonly".into(),
        "type=configmap,source=tool-config,target=/etc/tool".into(),
        "type=secret,source=registry-creds,target=/run/creds".into(),
    ];
    let mut plan: LaunchPlan = policy_plan(&s, "/work/repo");
    plan.egress = Some(egress());
    plan.mounts.push(Mount {
        kind: MountKind::Bind,
        source: Some("/var/lib/iterion/secrets/r1/NPM_TOKEN".into()),
        target: "/run/iterion/secrets/NPM_TOKEN".into(),
        readonly: true,
        size: None,
        origin: MountOrigin::SecretFile,
    });
    let files: SecretFileValues = BTreeMap::from([(
        "/run/iterion/secrets/NPM_TOKEN".to_owned(),
        b"npm_not_a_real_token".to_vec(),
    )]);
    let settings = settings_with_runner();
    let mut run = info("r20261129-confined");
    run.max_duration = Some(BUDGET);
    let objects = render(&plan, &run, &options(&settings), &files).expect("render");

    // The facts the files pin, spelled out.
    let pod = serde_json::to_value(&objects.pod).expect("json");
    let spec = &pod["spec"];
    assert_eq!(spec["activeDeadlineSeconds"], 3600 + 1800);
    let env = spec["containers"][0]["env"].as_array().expect("env");
    let https = env
        .iter()
        .find(|e| e["name"] == "HTTPS_PROXY")
        .expect("proxy");
    assert!(
        https.get("value").is_none(),
        "the token never sits in the pod spec"
    );
    assert_eq!(https["valueFrom"]["secretKeyRef"]["key"], "url");
    let pod_text = pod.to_string();
    assert!(!pod_text.contains("not-a-real-token"), "token in the pod");
    assert!(
        !pod_text.contains("npm_not_a_real_token"),
        "secret in the pod"
    );
    let volumes = spec["volumes"].as_array().expect("volumes");
    let by_path = |p: &str| {
        let m = spec["containers"][0]["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .find(|m| m["mountPath"] == p)
            .unwrap_or_else(|| panic!("no mount at {p}"))
            .clone();
        let v = volumes
            .iter()
            .find(|v| v["name"] == m["name"])
            .expect("volume")
            .clone();
        (m, v)
    };
    let (_, scratch) = by_path("/scratch");
    assert_eq!(scratch["emptyDir"]["sizeLimit"], "64Mi");
    // R9: storage of a declared read-back path is not cut at its own
    // size= (the pod would be evicted, not one member dropped); it gets
    // the run's bound instead: the memory limit in memory, the disk bound
    // on disk (issue 31 item 7: no emptyDir is unbounded).
    let limits = &spec["containers"][0]["resources"]["limits"];
    let (_, cache) = by_path("/out/cache");
    assert_eq!(cache["emptyDir"]["sizeLimit"], limits["memory"], "{cache}");
    let (_, out) = by_path("/out");
    assert_eq!(out["emptyDir"]["sizeLimit"], "20Gi", "{out}");
    assert_every_empty_dir_bounded(&pod);
    assert_eq!(limits["ephemeral-storage"], "20Gi");
    assert_eq!(
        spec["containers"][0]["resources"]["requests"]["ephemeral-storage"],
        "1Gi"
    );
    // No DNS: the proxy resolves names.
    assert_eq!(spec["dnsPolicy"], "None");
    assert_eq!(
        spec["dnsConfig"]["nameservers"],
        serde_json::json!(["127.0.0.1"])
    );
    assert_eq!(pod["metadata"]["annotations"]["iterion.io/dns"], "none");
    let (m, v) = by_path("/run/iterion/secrets/NPM_TOKEN");
    assert_eq!(m["readOnly"], true);
    assert_eq!(v["secret"]["defaultMode"], 0o440);
    let np = objects.network_policy.as_ref().expect("policy");
    let np = serde_json::to_value(np).expect("json");
    assert_eq!(
        np["spec"]["egress"][0]["to"][0]["ipBlock"]["cidr"],
        "10.244.1.7/32"
    );
    assert_eq!(
        np["spec"]["ingress"][0]["from"][0]["ipBlock"]["cidr"],
        "10.244.1.7/32"
    );
    assert_no_dns_in_policy(&np);
    check("confined", &objects);
}

/// Issue 17 and the file secrets of issue 12 on a pod: an inspecting run's
/// CA certificate is a key of the proxy Secret, projected read-only at
/// `/etc/iterion-egress/ca.pem` inside a writable emptyDir (where the
/// runtime writes the bundle as the pod's user), and a workflow's file
/// secret, planned by the policy and kept by `finalize_mounts_for_driver`,
/// is a key of the files Secret projected read-only at its path. Does not
/// prove that a kubelet mounts a file over a path inside another volume
/// (the podman layer plays it) nor that the bundle is written (the podman
/// layer does it as uid 1000).
#[test]
fn inspected_run_with_a_file_secret() {
    let mut plan = policy_plan_with(
        &spec("iterion-sandbox-slim:local"),
        "/work/repo",
        vec![secret_file_mount("NPM_TOKEN")],
    );
    plan.egress = Some(egress());
    plan.egress_ca = Some(TEST_CA_PEM.to_owned());
    let files: SecretFileValues = BTreeMap::from([(
        "/run/iterion/secrets/NPM_TOKEN".to_owned(),
        b"npm_not_a_real_token".to_vec(),
    )]);
    let settings = settings_with_runner();
    let objects = render(
        &plan,
        &info("r20261129-inspected"),
        &options(&settings),
        &files,
    )
    .expect("render");
    let proxy = serde_json::to_value(&objects.secrets[0]).expect("json");
    assert_eq!(
        base64_decode(proxy["data"]["ca.pem"].as_str().expect("ca.pem")),
        TEST_CA_PEM.as_bytes()
    );
    let files_secret = serde_json::to_value(&objects.secrets[1]).expect("json");
    assert_eq!(
        base64_decode(files_secret["data"]["file-0"].as_str().expect("file")),
        b"npm_not_a_real_token"
    );
    let pod = serde_json::to_value(&objects.pod).expect("json");
    let text = pod.to_string();
    assert!(
        !text.contains("MIIBfixture"),
        "the CA is in the Secret only"
    );
    let container = &pod["spec"]["containers"][0];
    let mount = |p: &str| {
        container["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .find(|m| m["mountPath"] == p)
            .unwrap_or_else(|| panic!("no mount at {p}: {container}"))
            .clone()
    };
    let volume = |n: &serde_json::Value| {
        pod["spec"]["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find(|v| &v["name"] == n)
            .expect("volume")
            .clone()
    };
    let dir = mount("/etc/iterion-egress");
    assert!(dir.get("readOnly").is_none(), "the bundle is written there");
    assert_eq!(volume(&dir["name"])["emptyDir"]["sizeLimit"], "16Mi");
    let ca = mount("/etc/iterion-egress/ca.pem");
    assert_eq!(ca["readOnly"], true);
    assert_eq!(ca["subPath"], "ca.pem");
    let ca_volume = volume(&ca["name"]);
    assert_eq!(
        ca_volume["secret"]["secretName"],
        "iterion-run-r20261129-inspected-proxy"
    );
    assert_eq!(ca_volume["secret"]["items"][0]["key"], "ca.pem");
    let token = mount("/run/iterion/secrets/NPM_TOKEN");
    assert_eq!(token["readOnly"], true);
    assert_eq!(
        volume(&token["name"])["secret"]["secretName"],
        "iterion-run-r20261129-inspected-files"
    );
    let np = serde_json::to_value(objects.network_policy.as_ref().expect("policy")).expect("json");
    assert_no_dns_in_policy(&np);
    assert_every_empty_dir_bounded(&serde_json::to_value(&objects.pod).expect("json"));
    check("inspected", &objects);

    // The display render (`iterion sandbox manifests`) redacts every value,
    // the public certificate included, as kubectl shows Secrets.
    let shown = iterion_driver_k8s::manifest::render_for_display(
        &plan,
        &info("r20261129-inspected"),
        &options(&settings),
    )
    .expect("display");
    let shown = shown.to_list().expect("list").to_string();
    assert!(!shown.contains("MIIBfixture") && !shown.contains("npm_not_a_real_token"));
}

/// A runner on an IPv6 pod network: the proxy URL brackets the address and
/// the policy admits a /128.
#[test]
fn ipv6_runner() {
    let mut plan = policy_plan(&spec("iterion-sandbox-slim:local"), "/work/repo");
    plan.egress = Some(egress());
    let env: BTreeMap<String, String> =
        BTreeMap::from([("ITERION_POD_IP".to_owned(), "fd00:10:244::7".to_owned())]);
    let settings = K8sSettings::from_env(&env).expect("settings");
    let objects = render(
        &plan,
        &info("r20261129-ipv6"),
        &options(&settings),
        &SecretFileValues::new(),
    )
    .expect("render");
    let secret = serde_json::to_value(&objects.secrets[0]).expect("json");
    let url = String::from_utf8(base64_decode(secret["data"]["url"].as_str().expect("url")))
        .expect("utf8");
    assert!(url.starts_with("http://t:"), "{url}");
    assert!(url.ends_with("@[fd00:10:244::7]:41234"), "{url}");
    let np = serde_json::to_value(objects.network_policy.as_ref().expect("np")).expect("json");
    assert_eq!(
        np["spec"]["egress"][0]["to"][0]["ipBlock"]["cidr"],
        "fd00:10:244::7/128"
    );
    let np = serde_json::to_value(objects.network_policy.as_ref().expect("policy")).expect("json");
    assert_no_dns_in_policy(&np);
    assert_every_empty_dir_bounded(&serde_json::to_value(&objects.pod).expect("json"));
    check("ipv6", &objects);
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("base64")
}

/// What a pod cannot be is refused by the render, with the reason.
#[test]
fn impossible_plans_are_refused_with_the_reason() {
    let settings = K8sSettings::default();
    let base = policy_plan(&spec("iterion-sandbox-slim:local"), "/work/repo");
    let cases: Vec<(&str, LaunchPlan, &str)> = vec![
        (
            "host bind",
            {
                let mut p = base.clone();
                p.mounts.push(Mount {
                    kind: MountKind::Bind,
                    source: Some("/data".into()),
                    target: "/data".into(),
                    readonly: false,
                    size: None,
                    origin: MountOrigin::Workflow,
                });
                p
            },
            "pods have no host filesystem",
        ),
        (
            "named volume",
            {
                let mut p = base.clone();
                p.mounts.push(Mount {
                    kind: MountKind::Volume,
                    source: Some("cache".into()),
                    target: "/cache".into(),
                    readonly: false,
                    size: None,
                    origin: MountOrigin::Workflow,
                });
                p
            },
            "no engine volumes",
        ),
        (
            "root",
            {
                let mut p = base.clone();
                p.user = Some("0".into());
                p
            },
            "never runs as root",
        ),
        (
            "user name",
            {
                let mut p = base.clone();
                p.user = Some("iterion".into());
                p
            },
            "numeric",
        ),
        (
            "proxy without ITERION_POD_IP",
            {
                let mut p = base.clone();
                p.egress = Some(egress());
                p
            },
            "ITERION_POD_IP",
        ),
        (
            "no image",
            {
                let mut p = base.clone();
                p.image = None;
                p
            },
            "image",
        ),
        (
            "egress CA without a proxy",
            {
                let mut p = base.clone();
                p.egress_ca = Some(TEST_CA_PEM.to_owned());
                p
            },
            "without a proxy",
        ),
    ];
    for (name, plan, needle) in cases {
        let err = render(
            &plan,
            &info("r20261129-refused"),
            &options(&settings),
            &SecretFileValues::new(),
        )
        .expect_err(name);
        assert!(err.to_string().contains(needle), "{name}: {err}");
        let mapped: iterion_core::DriverError = err.into();
        assert!(
            matches!(
                mapped.code(),
                "SANDBOX_SPEC_REFUSED" | "SANDBOX_DRIVER_UNAVAILABLE"
            ),
            "{name}: {}",
            mapped.code()
        );
    }
}
