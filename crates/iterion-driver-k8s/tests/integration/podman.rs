//! Layer (c), realism: the Pod the driver renders for a run, played by
//! `podman kube play` on the shared test Podman. Two swaps, each because
//! Podman is not a kubelet: the image is the local slim image, and `PATH`
//! is set (containerd gives an image without `PATH` a default one; Podman's
//! kube play does not, and PID 1 is `sh`). No Secret volume is used here.
//!
//! Proves: the pod starts as the non-root user of its securityContext, its
//! emptyDir volumes (workspace, run files) are writable by that user, and
//! the drain's archive command (`tar -C parent -cf - base`, as
//! `KubeRun::export` runs it over exec) yields members addressed by the
//! directory's basename. Does not prove: the exec WebSocket (Podman has
//! no Kubernetes API; its own exec stands in), seccomp/capability
//! enforcement as a kubelet applies it, resources, or NetworkPolicy.

use std::process::{Command, Output};

use iterion_driver_k8s::K8sSettings;
use iterion_driver_k8s::manifest::{RenderOptions, SecretFileValues, render};

use crate::support::*;

const POD: &str = "iterion-run-r20261129-podman";

fn podman(args: &[&str]) -> Output {
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
struct Down(std::path::PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = podman(&["kube", "down", &self.0.to_string_lossy()]);
    }
}

#[test]
fn the_rendered_pod_runs_non_root_with_writable_empty_dirs_and_drains() {
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

    let drained = podman(&[
        "exec",
        &container,
        "tar",
        "-C",
        "/iterion",
        "-cf",
        "-",
        "artifact-files",
    ]);
    assert!(drained.status.success(), "{drained:?}");
    let mut archive = tar::Archive::new(&drained.stdout[..]);
    let mut found = Vec::new();
    for entry in archive.entries().expect("tar") {
        let mut entry = entry.expect("entry");
        let path = entry.path().expect("path").display().to_string();
        let mut body = String::new();
        std::io::Read::read_to_string(&mut entry, &mut body).expect("read");
        found.push((path, body));
    }
    assert!(
        found
            .iter()
            .any(|(p, b)| p == "artifact-files/sub/a.txt" && b == "hello"),
        "{found:?}"
    );
}
