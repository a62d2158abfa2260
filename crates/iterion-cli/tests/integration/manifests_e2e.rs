//! `iterion sandbox manifests FILE [-o yaml|json]` (issue 12 item 5): the
//! binary prints the objects the Kubernetes driver would create for a
//! workflow, through the same policy steps as a run, with every Secret
//! value redacted, and refuses what a pod cannot be with exit 2.
//!
//! Does not prove: that a cluster admits the objects (the driver's golden
//! files are schema-validated by `scripts/k8s-validate.sh`), nor anything
//! about a run; no cluster is contacted.

use serde_json::Value;

use crate::support::{Engine, Sandbox, slim};

fn workflow(body: &str) -> String {
    format!(
        "tool probe:\n  command: `true`\n\nworkflow manifests_probe:\n  entry: probe\n  sandbox:\n{body}  probe -> done\n"
    )
}

fn manifests(sb: &Sandbox, file: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let file = file.to_string_lossy().into_owned();
    let mut args = vec!["sandbox", "manifests", file.as_str()];
    args.extend_from_slice(extra);
    let mut cmd = sb.command(&args);
    cmd.env("KUBECONFIG", sb.dir.path().join("no-kubeconfig"))
        .env_remove("ITERION_SANDBOX_K8S_NAMESPACE");
    cmd.output().expect("spawn iterion")
}

#[test]
fn a_proxied_workflow_prints_secret_policy_and_pod_redacted() {
    let sb = Sandbox::new(Engine::Docker).with_env("ITERION_POD_IP", "10.244.1.7");
    let body = format!(
        "    image: \"{}\"\n    host_state: none\n    network:\n      mode: allowlist\n      rules: [\"example.com\"]\n",
        slim()
    );
    let file = sb.write("proxied.iter", &workflow(&body));
    let out = manifests(&sb, &file, &["-o", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let list: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().expect("items");
    let kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["Secret", "NetworkPolicy", "Pod"]);
    // No kubeconfig and no override: the namespace kubectl would use.
    for item in items {
        assert_eq!(item["metadata"]["namespace"], "default", "{item}");
        assert_eq!(item["metadata"]["labels"]["iterion.io/managed"], "true");
    }
    // The proxy URL (token included) never leaves the Secret, redacted here.
    let secret = &items[0];
    assert_eq!(
        secret["data"]["url"], "PHJlZGFjdGVkPg==",
        "base64 of <redacted>"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("http://t:"), "a proxy URL leaked: {text}");
    let policy = &items[1]["spec"];
    assert_eq!(
        policy["egress"][0]["to"][0]["ipBlock"]["cidr"],
        "10.244.1.7/32"
    );
    // Issue 31 item 7: no DNS out of the pod, and the command says so.
    assert_eq!(
        policy["egress"].as_array().map(Vec::len),
        Some(1),
        "{policy}"
    );
    assert!(!policy.to_string().contains("53"), "DNS admitted: {policy}");
    assert!(
        stderr.contains("dns: none: the egress proxy resolves every name"),
        "{stderr}"
    );
    assert_eq!(
        items[2]["metadata"]["annotations"]["iterion.io/dns"],
        "none"
    );
    let pod = &items[2]["spec"];
    assert_eq!(pod["dnsPolicy"], "None");
    // Bounded storage: every emptyDir, and the container.
    for v in pod["volumes"].as_array().expect("volumes") {
        if let Some(e) = v.get("emptyDir") {
            assert!(e["sizeLimit"].is_string(), "unbounded emptyDir {v}");
        }
    }
    assert_eq!(
        pod["containers"][0]["resources"]["limits"]["ephemeral-storage"],
        "20Gi"
    );
    assert_eq!(pod["containers"][0]["image"], slim());
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["securityContext"]["runAsUser"], 1000);
    assert_eq!(pod["securityContext"]["fsGroup"], 1000);

    // YAML is the default, and says the same.
    let yaml = manifests(&sb, &file, &[]);
    assert_eq!(yaml.status.code(), Some(0));
    let yaml = String::from_utf8_lossy(&yaml.stdout);
    for needle in [
        "apiVersion: v1",
        "kind: List",
        "kind: NetworkPolicy",
        "kind: Pod",
    ] {
        assert!(yaml.contains(needle), "{needle} missing from:\n{yaml}");
    }
}

#[test]
fn what_a_pod_cannot_be_is_refused_with_exit_2() {
    let sb = Sandbox::new(Engine::Docker);
    // A proxied run without ITERION_POD_IP: no address for the proxy and
    // no NetworkPolicy could confine the pod.
    let body = format!(
        "    image: \"{}\"\n    host_state: none\n    network:\n      mode: allowlist\n      rules: [\"example.com\"]\n",
        slim()
    );
    let file = sb.write("no-ip.iter", &workflow(&body));
    let out = manifests(&sb, &file, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("ITERION_POD_IP"), "{stderr}");
    assert!(out.stdout.is_empty());

    // A bad quantity is named, not defaulted.
    let open = format!("    image: \"{}\"\n    host_state: none\n", slim());
    let file = sb.write("open.iter", &workflow(&open));
    let mut cmd = sb.command(&["sandbox", "manifests", file.to_str().unwrap()]);
    cmd.env("ITERION_SANDBOX_K8S_LIMITS_MEMORY", "lots");
    let out = cmd.output().expect("spawn");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(
        stderr.contains("ITERION_SANDBOX_K8S_LIMITS_MEMORY"),
        "{stderr}"
    );
}

/// Issues 17 and 12 through the binary: a workflow with a secret bound to
/// an egress host (so the proxy inspects) and a file secret prints the
/// proxy Secret with the CA's key beside the URL (both redacted), the
/// files Secret, and a Pod projecting each read-only — the CA inside the
/// writable trust directory. Before, the file secret refused the
/// workflow on Kubernetes and the bound secret could not be served there.
/// Does not prove a run (no cluster) nor the values (minted at start).
#[test]
fn bound_and_file_secrets_show_their_secrets_and_projections() {
    let sb = Sandbox::new(Engine::Docker)
        .with_env("ITERION_POD_IP", "10.244.1.7")
        .with_env("KEY", "manifests-bound-value-0123456789")
        .with_env("TOKEN", "manifests-file-value-0123456789");
    let text = format!(
        "secrets:\n  KEY:\n    egress: [\"api.example.com\"]\n  TOKEN:\n    as: file\n\n{}",
        workflow(&format!(
            "    mode: inline\n    image: \"{}\"\n    host_state: none\n    network:\n      mode: allowlist\n      rules: [\"api.example.com\"]\n",
            slim()
        ))
    );
    let file = sb.write("secrets.iter", &text);
    let out = manifests(&sb, &file, &["-o", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        !printed.contains("value-0123456789"),
        "a value leaked: {printed}"
    );
    let list: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let items = list["items"].as_array().expect("items");
    let kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["Secret", "Secret", "NetworkPolicy", "Pod"]);
    assert_eq!(items[0]["data"]["ca.pem"], "PHJlZGFjdGVkPg==");
    assert_eq!(items[0]["data"]["url"], "PHJlZGFjdGVkPg==");
    assert_eq!(items[1]["data"]["file-0"], "PHJlZGFjdGVkPg==");
    let mounts = items[3]["spec"]["containers"][0]["volumeMounts"]
        .as_array()
        .expect("mounts");
    let ca = mounts
        .iter()
        .find(|m| m["mountPath"] == "/etc/iterion-egress/ca.pem")
        .expect("the CA is projected");
    assert_eq!(ca["readOnly"], true);
    assert!(
        mounts
            .iter()
            .any(|m| m["mountPath"] == "/etc/iterion-egress" && m.get("readOnly").is_none()),
        "{mounts:?}"
    );
    assert!(
        mounts
            .iter()
            .any(|m| m["name"] == "secret-files" && m["readOnly"] == true),
        "{mounts:?}"
    );
}
