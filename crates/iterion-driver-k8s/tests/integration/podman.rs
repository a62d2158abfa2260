//! Layer (c), realism: the Pod the driver renders for a run, played by
//! `podman kube play` on the shared test Podman. Two swaps, each because
//! Podman is not a kubelet: the image is the local slim image, and `PATH`
//! is set (containerd gives an image without `PATH` a default one; Podman's
//! kube play does not, and PID 1 is `sh`). No Secret volume is played (the
//! trust test swaps its one for a host file).
//!
//! Proves: the pod starts as the non-root user of its securityContext, and
//! its emptyDir volumes (workspace, run files) are writable by that user
//! (the drain of what it writes goes through the real `iterion_readback`
//! drain in `podman_drain`). Does not prove: the exec WebSocket (Podman has
//! no Kubernetes API; its own exec stands in), seccomp/capability
//! enforcement as a kubelet applies it, resources, or NetworkPolicy.

use std::process::{Command, Output};

use iterion_driver_k8s::K8sSettings;
use iterion_driver_k8s::manifest::{RenderOptions, SecretFileValues, render};

use crate::support::*;

const POD: &str = "iterion-run-r20261129-podman";

pub fn podman(args: &[&str]) -> Output {
    let host = std::env::var("ITERION_TEST_PODMAN_HOST")
        .expect("ITERION_TEST_PODMAN_HOST (scripts/lib.sh) names the test Podman");
    Command::new("podman")
        .arg("--remote")
        .arg("--url")
        .arg(host)
        .args(args)
        .output()
        .expect("the podman CLI (scripts/setup.sh installs it)")
}

/// Removes the pod however the test ends.
pub struct Down(pub std::path::PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = podman(&["kube", "down", &self.0.to_string_lossy()]);
    }
}

#[test]
fn the_rendered_pod_runs_non_root_with_writable_empty_dirs() {
    let image =
        std::env::var("ITERION_TEST_SLIM_IMAGE").expect("ITERION_TEST_SLIM_IMAGE (scripts/lib.sh)");
    let plan = policy_plan(&spec(&image), "/work/repo");
    let settings = K8sSettings::default();
    let objects = render(
        &plan,
        &info("r20261129-podman"),
        &RenderOptions {
            namespace: "default",
            settings: &settings,
            store_scope: None,
            owner: None,
            redact: false,
        },
        &SecretFileValues::new(),
    )
    .expect("render");
    assert!(objects.secrets.is_empty() && objects.network_policy.is_none());
    let mut pod = serde_json::to_value(&objects.pod).expect("json");
    assert_eq!(pod["metadata"]["name"], POD);
    pod["spec"]["containers"][0]["env"]
        .as_array_mut()
        .expect("env")
        .push(serde_json::json!({"name": "PATH", "value": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}));
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("pod.json");
    std::fs::write(&file, serde_json::to_vec(&pod).expect("bytes")).expect("write");
    let _down = Down(file.clone());
    let played = podman(&["kube", "play", "--replace", &file.to_string_lossy()]);
    assert!(
        played.status.success(),
        "kube play: {}",
        String::from_utf8_lossy(&played.stderr)
    );
    let container = format!("{POD}-workload");
    let exec = |script: &str| -> Output { podman(&["exec", &container, "sh", "-c", script]) };

    let id = exec("id -u; id -g");
    assert_eq!(
        String::from_utf8_lossy(&id.stdout),
        "1000\n1000\n",
        "{id:?}"
    );

    let workdir = plan.workdir.clone();
    let wrote = exec(&format!(
        "echo ok > {workdir}/probe && cat {workdir}/probe && mkdir -p /iterion/artifact-files/sub && printf hello > /iterion/artifact-files/sub/a.txt"
    ));
    assert!(wrote.status.success(), "{wrote:?}");
    assert_eq!(String::from_utf8_lossy(&wrote.stdout), "ok\n");
}

/// Issue 17 on a pod: the trust directory the render lays for an
/// inspecting run, played by `podman kube play` with the CA's Secret key
/// swapped for a read-only host file at the same path. As
/// the pod's uid 1000, the runtime's two steps — read the image's bundle
/// with `KubeRun::export`'s tar, write `ca-bundle.pem` with
/// `KubeRun::import`'s tar — work, the projected CA is readable and cannot
/// be replaced, and the bundle keeps the image's roots. Does not prove: a
/// kubelet's subPath mount of a Secret key (Podman cannot play one: it
/// mounts a directory there), nor a TLS client trusting the
/// bundle (the Docker/Podman secret-egress e2e does that with curl).
#[test]
fn the_trust_dir_takes_the_bundle_as_the_non_root_user() {
    const TRUST_POD: &str = "iterion-run-r20261129-trust";
    let image =
        std::env::var("ITERION_TEST_SLIM_IMAGE").expect("ITERION_TEST_SLIM_IMAGE (scripts/lib.sh)");
    let mut plan = policy_plan(&spec(&image), "/work/repo");
    plan.egress = Some(egress());
    plan.egress_ca = Some(TEST_CA_PEM.to_owned());
    let settings = settings_with_runner();
    let objects = render(
        &plan,
        &info("r20261129-trust"),
        &RenderOptions {
            namespace: "default",
            settings: &settings,
            store_scope: None,
            owner: None,
            redact: false,
        },
        &SecretFileValues::new(),
    )
    .expect("render");
    let mut pod = serde_json::to_value(&objects.pod).expect("json");
    assert_eq!(pod["metadata"]["name"], TRUST_POD);
    // Podman is not a kubelet: no owner pod, no proxy Secret for the env.
    pod["metadata"]
        .as_object_mut()
        .expect("meta")
        .remove("ownerReferences");
    let container = &mut pod["spec"]["containers"][0];
    let env = container["env"].as_array_mut().expect("env");
    env.retain(|e| e.get("valueFrom").is_none());
    env.push(serde_json::json!({"name": "PATH", "value": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}));
    // The CA's Secret key becomes a read-only file from the host at the
    // same path (Podman's kube play serves neither Secret volumes without
    // Podman secrets nor subPath on a projected key: it mounts a directory).
    let dir = tempfile::tempdir().expect("tmp");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, TEST_CA_PEM).expect("write ca");
    for v in pod["spec"]["volumes"].as_array_mut().expect("volumes") {
        if v["name"] == "egress-ca" {
            *v = serde_json::json!({
                "name": "egress-ca",
                "hostPath": {"path": ca_file.to_string_lossy(), "type": "File"},
            });
        }
    }
    for m in pod["spec"]["containers"][0]["volumeMounts"]
        .as_array_mut()
        .expect("mounts")
    {
        if m["name"] == "egress-ca" {
            assert_eq!(m["subPath"], "ca.pem");
            assert_eq!(m["readOnly"], true);
            m.as_object_mut().expect("mount").remove("subPath");
        }
    }
    let file = dir.path().join("pod.json");
    std::fs::write(&file, serde_json::to_vec(&pod).expect("bytes")).expect("write");
    let _down = Down(file.clone());
    let played = podman(&["kube", "play", "--replace", &file.to_string_lossy()]);
    assert!(
        played.status.success(),
        "kube play: {}",
        String::from_utf8_lossy(&played.stderr)
    );
    let container = format!("{TRUST_POD}-workload");
    let exec = |script: &str| -> Output { podman(&["exec", &container, "sh", "-c", script]) };
    assert_eq!(String::from_utf8_lossy(&exec("id -u").stdout), "1000\n");
    let ca = exec("cat /etc/iterion-egress/ca.pem");
    assert_eq!(String::from_utf8_lossy(&ca.stdout), TEST_CA_PEM, "{ca:?}");
    let replaced = exec("echo forged > /etc/iterion-egress/ca.pem");
    assert!(!replaced.status.success(), "the projected CA is read-only");

    // Step 1, as KubeRun::export runs it: the image's roots.
    let system = podman(&[
        "exec",
        &container,
        "tar",
        "-C",
        "/etc/ssl/certs",
        "-cf",
        "-",
        "ca-certificates.crt",
    ]);
    assert!(system.status.success(), "{system:?}");
    let mut roots = String::new();
    let mut archive = tar::Archive::new(&system.stdout[..]);
    let mut entry = archive
        .entries()
        .expect("tar")
        .next()
        .expect("a member")
        .expect("entry");
    std::io::Read::read_to_string(&mut entry, &mut roots).expect("read");
    assert!(roots.contains("BEGIN CERTIFICATE"), "the image has roots");

    // Step 2, as KubeRun::import runs it: one file member, root-owned in
    // the archive as the runtime writes it, into the trust directory.
    let bundle = format!("{roots}{TEST_CA_PEM}");
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_uid(0);
    h.set_gid(0);
    h.set_mode(0o644);
    h.set_size(bundle.len() as u64);
    b.append_data(&mut h, "ca-bundle.pem", bundle.as_bytes())
        .expect("tar");
    let tarball = b.into_inner().expect("tar");
    let host = std::env::var("ITERION_TEST_PODMAN_HOST").expect("podman host");
    let mut child = std::process::Command::new("podman")
        .args(["--remote", "--url", &host, "exec", "-i", &container])
        .args(["tar", "-xf", "-", "-C", "/etc/iterion-egress"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("podman");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), &tarball).expect("stdin");
    let imported = child.wait_with_output().expect("wait");
    assert!(imported.status.success(), "untar as uid 1000: {imported:?}");
    let written = exec("cat /etc/iterion-egress/ca-bundle.pem");
    assert_eq!(String::from_utf8_lossy(&written.stdout), bundle);
    let listed = exec("ls /etc/iterion-egress | sort | tr '\\n' ' '");
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        "ca-bundle.pem ca.pem "
    );
}
