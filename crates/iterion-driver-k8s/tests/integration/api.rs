//! Layer (b): the API conversation. The real driver, through the real
//! kube-rs client, talks to [`crate::scripted::Server`] on loopback, which
//! checks every request's method, path, query and body in order and
//! answers with the bodies a real API server sends (objects, `Status`
//! errors 403/404/409/410/422, chunked watch streams that end at their
//! server-side timeout, exec over a `v5.channel.k8s.io` WebSocket).
//!
//! Does not prove: that a real API server, kubelet or container runtime
//! behaves as scripted (the scripts follow the API reference and the
//! bodies observed from real servers, but were written by hand), RBAC
//! evaluation, admission, or NetworkPolicy enforcement.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

use base64::Engine as _;
use hyper::Method;
use iterion_core::driver::NullObserver;
use iterion_core::{Driver, ExecRequest};
use iterion_driver_k8s::{K8sSettings, KubeDriver};
use serde_json::{Value, json};

use crate::scripted::{ExecScript, Reply, Server, Step};
use crate::support::*;

const NS: &str = "sbx";
const RUN: &str = "r20261129-api";
const POD: &str = "iterion-run-r20261129-api";

fn settings(extra: &[(&str, &str)]) -> K8sSettings {
    let mut env: BTreeMap<String, String> = [
        ("ITERION_POD_IP", "10.244.1.7"),
        ("ITERION_SANDBOX_K8S_APPLY_TIMEOUT", "2s"),
        ("ITERION_SANDBOX_K8S_POD_READY_TIMEOUT", "5s"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    for (k, v) in extra {
        env.insert((*k).to_owned(), (*v).to_owned());
    }
    K8sSettings::from_env(&env).expect("settings")
}

fn driver(server: &Server, settings: K8sSettings) -> KubeDriver {
    KubeDriver::with_client(server.client(NS), server.url.clone(), NS, settings)
}

fn path(kind: &str, name: Option<&str>) -> String {
    let base = match kind {
        "networkpolicies" => format!("/apis/networking.k8s.io/v1/namespaces/{NS}/{kind}"),
        _ => format!("/api/v1/namespaces/{NS}/{kind}"),
    };
    match name {
        Some(n) => format!("{base}/{n}"),
        None => base,
    }
}

fn object(kind: &str, name: &str) -> Value {
    let api = if kind == "NetworkPolicy" {
        "networking.k8s.io/v1"
    } else {
        "v1"
    };
    json!({"apiVersion": api, "kind": kind,
           "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "resourceVersion": "1"}})
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    let api = if kind == "NetworkPolicyList" {
        "networking.k8s.io/v1"
    } else {
        "v1"
    };
    json!({"apiVersion": api, "kind": kind, "metadata": {"resourceVersion": "9"}, "items": items})
}

/// A `Status` body as the API server writes it.
fn status(code: u16, reason: &str, message: &str, details: Value) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "details": details, "code": code})
}

/// What a DELETE of an object without a finalizer answers.
fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": {}})
}

fn not_found(kind: &str, name: &str) -> Value {
    status(
        404,
        "NotFound",
        &format!("{kind} \"{name}\" not found"),
        json!({"name": name, "kind": kind}),
    )
}

fn pod_status(version: &str, status: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": POD, "namespace": NS, "resourceVersion": version},
           "status": status})
}

fn ready_pod(version: &str) -> Value {
    pod_status(
        version,
        json!({"phase": "Running",
               "conditions": [{"type": "Ready", "status": "True"}],
               "containerStatuses": [{"name": "workload", "ready": true, "restartCount": 0,
                   "image": "img", "imageID": "", "state": {"running": {"startedAt": "2026-11-29T18:00:00Z"}}}]}),
    )
}

fn pending_pod(version: &str) -> Value {
    pod_status(
        version,
        json!({"phase": "Pending",
               "conditions": [{"type": "PodScheduled", "status": "True"}],
               "containerStatuses": [{"name": "workload", "ready": false, "restartCount": 0,
                   "image": "img", "imageID": "", "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
    )
}

fn event(kind: &str, obj: Value) -> Value {
    json!({"type": kind, "object": obj})
}

fn selector() -> String {
    format!("iterion.io/managed=true,iterion.io/run-id={RUN}")
}

/// The cleanup conversation of a run whose objects all exist: pods first
/// (deleted, then polled until gone), the NetworkPolicy only then, the
/// Secrets last.
fn cleanup_steps(secrets: &[&str], policy: bool) -> Vec<Step> {
    let mut steps = vec![
        Step::new(
            Method::GET,
            path("pods", None),
            Reply::Json(200, list("PodList", vec![object("Pod", POD)])),
        )
        .query("labelSelector", &selector()),
        Step::new(
            Method::DELETE,
            path("pods", Some(POD)),
            Reply::Json(200, object("Pod", POD)),
        )
        .check(|b| {
            (b["gracePeriodSeconds"] == 1 && b["propagationPolicy"] == "Background")
                .then_some(())
                .ok_or_else(|| format!("delete options {b}"))
        }),
        Step::new(
            Method::GET,
            path("pods", Some(POD)),
            Reply::Json(200, ready_pod("7")),
        ),
        Step::new(
            Method::GET,
            path("pods", Some(POD)),
            Reply::Json(404, not_found("pods", POD)),
        ),
    ];
    let policies = if policy {
        vec![object("NetworkPolicy", POD)]
    } else {
        vec![]
    };
    steps.push(
        Step::new(
            Method::GET,
            path("networkpolicies", None),
            Reply::Json(200, list("NetworkPolicyList", policies)),
        )
        .query("labelSelector", &selector()),
    );
    if policy {
        steps.push(Step::new(
            Method::DELETE,
            path("networkpolicies", Some(POD)),
            Reply::Json(200, success()),
        ));
    }
    steps.push(
        Step::new(
            Method::GET,
            path("secrets", None),
            Reply::Json(
                200,
                list(
                    "SecretList",
                    secrets.iter().map(|s| object("Secret", s)).collect(),
                ),
            ),
        )
        .query("labelSelector", &selector()),
    );
    for s in secrets {
        steps.push(Step::new(
            Method::DELETE,
            path("secrets", Some(s)),
            // Already gone (a second cleanup raced it): success.
            Reply::Json(404, not_found("secrets", s)),
        ));
    }
    steps
}

/// Serve `steps`, then prepare and start a proxied run that must fail.
async fn failed_start(
    steps: Vec<Step>,
    settings: K8sSettings,
    workspace: &std::path::Path,
) -> (Server, iterion_core::DriverError) {
    let server = Server::start(steps).await;
    let d = driver(&server, settings);
    let prepared = d
        .prepare(&proxied_plan(workspace), &NullObserver)
        .await
        .expect("prepare");
    let err = d
        .start(prepared, &run_info(workspace), &NullObserver)
        .await
        .err()
        .expect("the start must fail");
    (server, err)
}

/// The plan of a proxied run whose copy-based workspace is `workspace`
/// (the booter points the policy's copy at the judged real directory).
fn proxied_plan(workspace: &std::path::Path) -> iterion_core::LaunchPlan {
    let mut plan = policy_plan(&spec("registry.example.com/sbx:1"), "/work/repo");
    plan.egress = Some(egress());
    plan.user = Some("1000:1000".into());
    let copy = plan
        .workspace_copy
        .as_mut()
        .expect("a pod's workspace is copy-based");
    assert_eq!(
        copy.host, "/work/repo",
        "the policy names the bind's source"
    );
    copy.host = workspace.to_string_lossy().into_owned();
    plan
}

fn run_info(workspace: &std::path::Path) -> iterion_core::RunInfo {
    let mut i = info(RUN);
    i.host_workspace = workspace.to_string_lossy().into_owned();
    i
}

/// The whole start of a proxied run, in order: proxy Secret, NetworkPolicy
/// (before the pod: no instant where the pod runs unconfined), Pod, the
/// Ready wait (a get, a watch that ends at its server-side timeout, a
/// second watch from the last version that sees Ready), the workspace
/// copied in over exec as a tar on stdin after the environment header;
/// then an exec with stdout, stderr and a non-zero exit status; then the
/// cleanup by label.
#[tokio::test]
async fn a_proxied_run_from_create_to_cleanup() {
    let ws = tempfile::tempdir().expect("ws");
    std::fs::write(ws.path().join("hello.txt"), b"hi from the host").expect("write");
    let secret = format!("{POD}-proxy");
    let mut steps = vec![
        Step::new(
            Method::POST,
            path("secrets", None),
            Reply::Json(201, object("Secret", &secret)),
        )
        .check(move |b| {
            let url = b["data"]["url"].as_str().ok_or("no data.url")?;
            let url = base64::engine::general_purpose::STANDARD
                .decode(url)
                .map_err(|e| e.to_string())?;
            let want = format!("http://t:{}@10.244.1.7:41234", egress().token);
            (url == want.as_bytes())
                .then_some(())
                .ok_or_else(|| format!("proxy url {:?}", String::from_utf8_lossy(&url)))
        }),
        Step::new(
            Method::POST,
            path("networkpolicies", None),
            Reply::Json(201, object("NetworkPolicy", POD)),
        )
        .check(|b| {
            (b["spec"]["egress"][0]["to"][0]["ipBlock"]["cidr"] == "10.244.1.7/32")
                .then_some(())
                .ok_or_else(|| format!("policy {b}"))
        }),
        Step::new(
            Method::POST,
            path("pods", None),
            Reply::Json(201, pending_pod("3")),
        )
        .check(|b| {
            let spec = &b["spec"];
            let token = egress().token;
            if b.to_string().contains(&token) {
                return Err("the proxy token is in the pod spec".into());
            }
            (spec["automountServiceAccountToken"] == false
                && spec["securityContext"]["runAsNonRoot"] == true
                && spec["containers"][0]["securityContext"]["capabilities"]["drop"][0] == "ALL")
                .then_some(())
                .ok_or_else(|| format!("pod {b}"))
        }),
        Step::new(
            Method::GET,
            path("pods", Some(POD)),
            Reply::Json(200, pending_pod("3")),
        ),
        // The server ends the first watch (its timeoutSeconds): watch again.
        Step::new(
            Method::GET,
            path("pods", None),
            Reply::Watch(vec![event("MODIFIED", pending_pod("4"))]),
        )
        .query("watch", "true")
        .query("resourceVersion", "3")
        .query("fieldSelector", &format!("metadata.name={POD}")),
        Step::new(
            Method::GET,
            path("pods", None),
            Reply::Watch(vec![event("MODIFIED", ready_pod("5"))]),
        )
        .query("watch", "true")
        .query("resourceVersion", "4"),
        Step::new(
            Method::GET,
            path("pods", Some(&format!("{POD}/exec"))),
            Reply::Exec(ExecScript {
                expect_stdin: b"\n".to_vec(),
                read_stdin_to_eof: true,
                status: Some(json!({"metadata": {}, "status": "Success"})),
                ..ExecScript::default()
            }),
        )
        .query("container", "workload")
        .query("command", "tar")
        .query("command", "-xf"),
        Step::new(
            Method::GET,
            path("pods", Some(&format!("{POD}/exec"))),
            Reply::Exec(ExecScript {
                expect_stdin: b"GREETING=a\\nb\n\n".to_vec(),
                output: vec![(1, b"out\n".to_vec()), (2, b"err\n".to_vec())],
                status: Some(json!({"metadata": {}, "status": "Failure",
                    "message": "command terminated with non-zero exit code: exit status 3",
                    "reason": "NonZeroExitCode",
                    "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}})),
                ..ExecScript::default()
            }),
        )
        .query("command", "sh")
        .query("command", "/tmp"),
    ];
    steps.extend(cleanup_steps(&[&secret], true));
    let server = Server::start(steps).await;
    let d = driver(&server, settings(&[]));
    let prepared = d
        .prepare(&proxied_plan(ws.path()), &NullObserver)
        .await
        .expect("prepare");
    let run = d
        .start(prepared, &run_info(ws.path()), &NullObserver)
        .await
        .expect("start");

    let mut req = ExecRequest::new(["sh", "-c", "echo out; echo err >&2; exit 3"]);
    req.env.insert("GREETING".into(), "a\nb".into());
    req.env.insert("ITERION_EXEC_ID".into(), "forged".into());
    req.workdir = Some("/tmp".into());
    let mut session = run.exec(req).await.expect("exec");
    let out = iterion_core::driver::collect_output(
        session.as_mut(),
        iterion_core::driver::OutputLimits::default(),
        &mut |_| {},
    )
    .await
    .expect("output");
    assert_eq!(out.exit_code, 3);
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(out.stderr_tail, b"err\n");
    run.cleanup().await.expect("cleanup");
    server.finish();

    let seen = server.seen();
    // The workspace arrived as a tar after the environment header.
    let copy = &seen[6];
    assert_eq!(
        copy.stdin.first(),
        Some(&b'\n'),
        "an empty environment header"
    );
    let mut archive = tar::Archive::new(&copy.stdin[1..]);
    let names: Vec<String> = archive
        .entries()
        .expect("tar")
        .map(|e| {
            e.expect("entry")
                .path()
                .expect("path")
                .display()
                .to_string()
        })
        .collect();
    assert!(names.iter().any(|n| n.ends_with("hello.txt")), "{names:?}");
    let kinds: Vec<&Value> = seen[..3]
        .iter()
        .map(|r| &r.body.as_ref().expect("body")["kind"])
        .collect();
    assert_eq!(kinds, ["Secret", "NetworkPolicy", "Pod"], "creation order");
    // The launcher carries the marker and workdir; no value is in the URL.
    let argv = seen[7].commands();
    assert_eq!(argv[..2], ["sh", "-c"]);
    assert_eq!(argv[3], "iterion-exec");
    assert_eq!(argv[4].len(), 16, "a random marker: {argv:?}");
    assert_eq!(argv[5..7], ["/tmp", "0"], "workdir, stdin not wanted");
    assert_eq!(argv[7..], ["sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert!(!argv.iter().any(|a| a.contains("GREETING")), "{argv:?}");
    assert!(!argv.iter().any(|a| a.contains("forged")), "{argv:?}");
}

/// Issue 17 and the file secrets of issue 12, in the API conversation: an
/// inspecting run's proxy Secret carries the CA certificate beside the
/// URL, a file secret planned by the policy is read from its host file
/// into the files Secret, and the Pod projects both read-only and holds
/// neither value; cleanup removes both Secrets. Does not prove that a
/// kubelet mounts them (the podman layer plays the trust directory).
#[tokio::test]
async fn an_inspected_run_with_a_file_secret_creates_both_secrets() {
    let ws = tempfile::tempdir().expect("ws");
    let secrets_dir = tempfile::tempdir().expect("secrets");
    let token_file = secrets_dir.path().join("NPM_TOKEN");
    std::fs::write(&token_file, b"npm_from_the_host_file").expect("write");
    let mut mount = secret_file_mount("NPM_TOKEN");
    mount.source = Some(token_file.to_string_lossy().into_owned());
    let mut plan = policy_plan_with(
        &spec("registry.example.com/sbx:1"),
        "/work/repo",
        vec![mount],
    );
    plan.egress = Some(egress());
    plan.egress_ca = Some(TEST_CA_PEM.to_owned());
    plan.user = Some("1000:1000".into());
    plan.workspace_copy.as_mut().expect("copy").host = ws.path().to_string_lossy().into_owned();
    let proxy = format!("{POD}-proxy");
    let files = format!("{POD}-files");
    let decoded = |b: &Value, key: &str| -> Result<Vec<u8>, String> {
        let v = b["data"][key]
            .as_str()
            .ok_or_else(|| format!("no data.{key} in {b}"))?;
        base64::engine::general_purpose::STANDARD
            .decode(v)
            .map_err(|e| e.to_string())
    };
    let mut steps = vec![
        Step::new(
            Method::POST,
            path("secrets", None),
            Reply::Json(201, object("Secret", &proxy)),
        )
        .check(move |b| {
            (decoded(b, "ca.pem")? == TEST_CA_PEM.as_bytes() && decoded(b, "url").is_ok())
                .then_some(())
                .ok_or_else(|| format!("proxy secret {b}"))
        }),
        Step::new(
            Method::POST,
            path("secrets", None),
            Reply::Json(201, object("Secret", &files)),
        )
        .check(move |b| {
            (decoded(b, "file-0")? == b"npm_from_the_host_file")
                .then_some(())
                .ok_or_else(|| format!("files secret {b}"))
        }),
        Step::new(
            Method::POST,
            path("networkpolicies", None),
            Reply::Json(201, object("NetworkPolicy", POD)),
        ),
        Step::new(
            Method::POST,
            path("pods", None),
            Reply::Json(201, pending_pod("3")),
        )
        .check(|b| {
            let text = b.to_string();
            if text.contains("npm_from_the_host_file") || text.contains("MIIBfixture") {
                return Err("a Secret value is in the pod spec".into());
            }
            let mounts = b["spec"]["containers"][0]["volumeMounts"]
                .as_array()
                .ok_or("no mounts")?;
            let at = |p: &str| mounts.iter().find(|m| m["mountPath"] == p);
            let ca = at("/etc/iterion-egress/ca.pem").ok_or("no CA mount")?;
            let token = at("/run/iterion/secrets/NPM_TOKEN").ok_or("no secret mount")?;
            (ca["readOnly"] == true
                && token["readOnly"] == true
                && at("/etc/iterion-egress").is_some_and(|m| m.get("readOnly").is_none()))
            .then_some(())
            .ok_or_else(|| format!("mounts {mounts:?}"))
        }),
        Step::new(
            Method::GET,
            path("pods", Some(POD)),
            Reply::Json(200, ready_pod("4")),
        ),
        Step::new(
            Method::GET,
            path("pods", Some(&format!("{POD}/exec"))),
            Reply::Exec(ExecScript {
                expect_stdin: b"\n".to_vec(),
                read_stdin_to_eof: true,
                status: Some(json!({"metadata": {}, "status": "Success"})),
                ..ExecScript::default()
            }),
        )
        .query("command", "tar"),
    ];
    steps.extend(cleanup_steps(&[&proxy, &files], true));
    let server = Server::start(steps).await;
    let d = driver(&server, settings(&[]));
    let prepared = d.prepare(&plan, &NullObserver).await.expect("prepare");
    let run = d
        .start(prepared, &run_info(ws.path()), &NullObserver)
        .await
        .expect("start");
    assert!(run.egress_ca_placed(), "the runtime writes only the bundle");
    run.cleanup().await.expect("cleanup");
    server.finish();
}

/// RBAC denial on the first create: a typed engine error naming the verb
/// and resource, and the cleanup by label still runs (nothing left).
#[tokio::test]
async fn forbidden_is_typed_and_cleans_up() {
    let ws = tempfile::tempdir().expect("ws");
    let mut steps = vec![Step::new(
        Method::POST,
        path("secrets", None),
        Reply::Json(
            403,
            status(
                403,
                "Forbidden",
                "secrets is forbidden: User \"system:serviceaccount:sbx:runner\" cannot create resource \"secrets\" in API group \"\" in the namespace \"sbx\"",
                json!({"kind": "secrets"}),
            ),
        ),
    )];
    steps.extend(cleanup_steps(&[], false));
    // No pod was created: the pod list of the cleanup is empty.
    steps[1] = Step::new(
        Method::GET,
        path("pods", None),
        Reply::Json(200, list("PodList", vec![])),
    );
    steps.drain(2..5);
    let (server, err) = failed_start(steps, settings(&[]), ws.path()).await;
    assert_eq!(err.code(), "SANDBOX_ENGINE_ERROR", "{err}");
    let k = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<iterion_driver_k8s::K8sError>())
        .expect("a K8sError source");
    assert_eq!(k.code(), "K8S_FORBIDDEN");
    assert!(err.to_string().contains("kubernetes"), "{err}");
    server.finish();
}

/// The namespace does not exist (404 naming `namespaces`): the driver is
/// unavailable, with the reason.
#[tokio::test]
async fn a_missing_namespace_makes_the_driver_unavailable() {
    let ws = tempfile::tempdir().expect("ws");
    let mut steps = vec![Step::new(
        Method::POST,
        path("secrets", None),
        Reply::Json(
            404,
            status(
                404,
                "NotFound",
                "namespaces \"sbx\" not found",
                json!({"name": NS, "kind": "namespaces"}),
            ),
        ),
    )];
    // The cleanup's lists meet the same missing namespace: an empty answer
    // is what a real server gives for a label list there.
    steps.push(Step::new(
        Method::GET,
        path("pods", None),
        Reply::Json(200, list("PodList", vec![])),
    ));
    steps.push(Step::new(
        Method::GET,
        path("networkpolicies", None),
        Reply::Json(200, list("NetworkPolicyList", vec![])),
    ));
    steps.push(Step::new(
        Method::GET,
        path("secrets", None),
        Reply::Json(200, list("SecretList", vec![])),
    ));
    let (server, err) = failed_start(steps, settings(&[]), ws.path()).await;
    assert_eq!(err.code(), "SANDBOX_DRIVER_UNAVAILABLE", "{err}");
    assert!(err.to_string().contains("K8S_NAMESPACE_NOT_FOUND"), "{err}");
    server.finish();
}

/// A leftover of the same name (409) is deleted and the create retried
/// once; an object the API server calls invalid (422) is a spec refusal
/// carrying the server's field message.
#[tokio::test]
async fn conflict_is_retried_once_and_invalid_is_refused() {
    let ws = tempfile::tempdir().expect("ws");
    let secret = format!("{POD}-proxy");
    let conflict = status(
        409,
        "AlreadyExists",
        &format!("secrets \"{secret}\" already exists"),
        json!({"name": secret, "kind": "secrets"}),
    );
    let invalid = status(
        422,
        "Invalid",
        &format!(
            "Pod \"{POD}\" is invalid: spec.containers[0].resources.requests: Invalid value: \"4\": must be less than or equal to cpu limit of 2"
        ),
        json!({"name": POD, "kind": "Pod", "causes": [{"reason": "FieldValueInvalid", "field": "spec.containers[0].resources.requests"}]}),
    );
    let mut steps = vec![
        Step::new(
            Method::POST,
            path("secrets", None),
            Reply::Json(409, conflict),
        ),
        Step::new(
            Method::DELETE,
            path("secrets", Some(&secret)),
            Reply::Json(200, success()),
        ),
        Step::new(
            Method::GET,
            path("secrets", Some(&secret)),
            Reply::Json(404, not_found("secrets", &secret)),
        ),
        Step::new(
            Method::POST,
            path("secrets", None),
            Reply::Json(201, object("Secret", &secret)),
        ),
        Step::new(
            Method::POST,
            path("networkpolicies", None),
            Reply::Json(201, object("NetworkPolicy", POD)),
        ),
        Step::new(Method::POST, path("pods", None), Reply::Json(422, invalid)),
    ];
    let mut cleanup = cleanup_steps(&[&secret], true);
    cleanup[0] = Step::new(
        Method::GET,
        path("pods", None),
        Reply::Json(200, list("PodList", vec![])),
    );
    cleanup.drain(1..4);
    steps.extend(cleanup);
    let (server, err) = failed_start(steps, settings(&[]), ws.path()).await;
    assert_eq!(err.code(), "SANDBOX_SPEC_REFUSED", "{err}");
    assert!(
        err.to_string()
            .contains("must be less than or equal to cpu limit"),
        "{err}"
    );
    server.finish();
}

/// A watch whose version is too old (410 Gone in the stream) re-lists and
/// watches again from the fresh version; an image the kubelet cannot pull
/// is `SANDBOX_IMAGE_UNAVAILABLE` at once, not at the deadline.
#[tokio::test]
async fn gone_watch_relists_and_image_pull_failure_is_typed() {
    let ws = tempfile::tempdir().expect("ws");
    let secret = format!("{POD}-proxy");
    let pull_failed = pod_status(
        "12",
        json!({"phase": "Pending",
               "conditions": [{"type": "PodScheduled", "status": "True"}],
               "containerStatuses": [{"name": "workload", "ready": false, "restartCount": 0,
                   "image": "img", "imageID": "", "state": {"waiting": {"reason": "ImagePullBackOff",
                   "message": "Back-off pulling image \"registry.example.com/sbx:1\""}}}]}),
    );
    let mut steps = vec![
        Step::new(
            Method::POST,
            path("secrets", None),
            Reply::Json(201, object("Secret", &secret)),
        ),
        Step::new(
            Method::POST,
            path("networkpolicies", None),
            Reply::Json(201, object("NetworkPolicy", POD)),
        ),
        Step::new(
            Method::POST,
            path("pods", None),
            Reply::Json(201, pending_pod("3")),
        ),
        Step::new(
            Method::GET,
            path("pods", Some(POD)),
            Reply::Json(200, pending_pod("3")),
        ),
        Step::new(
            Method::GET,
            path("pods", None),
            Reply::Watch(vec![event(
                "ERROR",
                status(
                    410,
                    "Expired",
                    "too old resource version: 3 (11)",
                    json!({}),
                ),
            )]),
        )
        .query("resourceVersion", "3"),
        Step::new(
            Method::GET,
            path("pods", Some(POD)),
            Reply::Json(200, pending_pod("11")),
        ),
        Step::new(
            Method::GET,
            path("pods", None),
            Reply::WatchHang(vec![event("MODIFIED", pull_failed)]),
        )
        .query("resourceVersion", "11"),
    ];
    steps.extend(cleanup_steps(&[&secret], true));
    let (server, err) = failed_start(steps, settings(&[]), ws.path()).await;
    assert_eq!(err.code(), "SANDBOX_IMAGE_UNAVAILABLE", "{err}");
    assert!(err.to_string().contains("ImagePullBackOff"), "{err}");
    server.finish();
}

/// An API server that accepts the connection and never answers is bounded
/// by `ITERION_SANDBOX_K8S_APPLY_TIMEOUT`: a typed setup timeout naming the
/// variable, not a hung run.
#[tokio::test]
async fn a_hung_api_server_is_bounded_by_the_apply_timeout() {
    let ws = tempfile::tempdir().expect("ws");
    let steps = vec![
        Step::new(Method::POST, path("secrets", None), Reply::Hang),
        // The cleanup meets the same server: its first list is bounded too.
        Step::new(Method::GET, path("pods", None), Reply::Hang),
        Step::new(Method::GET, path("secrets", None), Reply::Hang),
    ];
    let started = tokio::time::Instant::now();
    let (server, err) = failed_start(
        steps,
        settings(&[("ITERION_SANDBOX_K8S_APPLY_TIMEOUT", "300ms")]),
        ws.path(),
    )
    .await;
    assert_eq!(err.code(), "SANDBOX_SETUP_TIMEOUT", "{err}");
    assert!(
        err.to_string()
            .contains("ITERION_SANDBOX_K8S_APPLY_TIMEOUT"),
        "{err}"
    );
    // Bounded: three calls of 300 ms, far from any default.
    assert!(started.elapsed() < Duration::from_secs(30));
    server.finish();
}

/// The start of a proxied run up to Ready and an empty workspace copied in.
fn started_steps(secret: &str) -> Vec<Step> {
    vec![
        Step::new(
            Method::POST,
            path("secrets", None),
            Reply::Json(201, object("Secret", secret)),
        ),
        Step::new(
            Method::POST,
            path("networkpolicies", None),
            Reply::Json(201, object("NetworkPolicy", POD)),
        ),
        Step::new(
            Method::POST,
            path("pods", None),
            Reply::Json(201, pending_pod("3")),
        ),
        Step::new(
            Method::GET,
            path("pods", Some(POD)),
            Reply::Json(200, ready_pod("4")),
        ),
        Step::new(
            Method::GET,
            path("pods", Some(&format!("{POD}/exec"))),
            Reply::Exec(ExecScript {
                expect_stdin: b"\n".to_vec(),
                read_stdin_to_eof: true,
                status: Some(json!({"metadata": {}, "status": "Success"})),
                ..ExecScript::default()
            }),
        )
        .query("command", "tar"),
    ]
}

fn exec_step(script: ExecScript) -> Step {
    Step::new(
        Method::GET,
        path("pods", Some(&format!("{POD}/exec"))),
        Reply::Exec(script),
    )
}

/// Cancellation: the exec stream cannot kill what it started, so `kill`
/// runs the kill script in a second exec, aimed at the first exec's
/// marker; the first exec then ends with the signal's exit status.
#[tokio::test]
async fn kill_targets_the_exec_marker_through_a_second_exec() {
    let ws = tempfile::tempdir().expect("ws");
    let secret = format!("{POD}-proxy");
    let hold = std::sync::Arc::new(tokio::sync::Notify::new());
    let mut steps = started_steps(&secret);
    steps.push(exec_step(ExecScript {
        expect_stdin: b"\n".to_vec(),
        output: vec![(1, b"started\n".to_vec())],
        hold: Some(hold.clone()),
        status: Some(
            json!({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": "command terminated with non-zero exit code: exit status 143",
            "details": {"causes": [{"reason": "ExitCode", "message": "143"}]}}),
        ),
        ..ExecScript::default()
    }));
    steps.push(
        exec_step(ExecScript {
            status: Some(json!({"metadata": {}, "status": "Success"})),
            ..ExecScript::default()
        })
        .query("command", "iterion-kill"),
    );
    steps.extend(cleanup_steps(&[&secret], true));
    let server = Server::start(steps).await;
    let d = driver(&server, settings(&[]));
    let prepared = d
        .prepare(&proxied_plan(ws.path()), &NullObserver)
        .await
        .expect("prepare");
    let run = d
        .start(prepared, &run_info(ws.path()), &NullObserver)
        .await
        .expect("start");
    let mut session = run
        .exec(ExecRequest::new(["sleep", "3600"]))
        .await
        .expect("exec");
    let first = session.next_chunk().await.expect("chunk").expect("ok");
    assert_eq!(first.data.as_ref(), b"started\n");
    session.kill().await.expect("kill");
    // What the kill script reported is the process's end: release it.
    hold.notify_one();
    assert_eq!(session.wait().await.expect("exit"), 143);
    run.cleanup().await.expect("cleanup");
    server.finish();
    let seen = server.seen();
    let exec = seen[5].commands();
    let kill = seen[6].commands();
    assert_eq!(kill[..2], ["sh", "-c"]);
    assert_eq!(kill[2], iterion_core::driver::EXEC_KILL_SCRIPT);
    assert_eq!(kill[4], format!("ITERION_EXEC_ID={}", exec[4]));
}

/// The ADR-143 drain: `export` is `tar -C parent -cf - base` over exec,
/// its stdout handed on as the archive; a path that does not exist is a
/// typed not-found, not an empty archive; a pod evicted mid-run answers
/// the exec with 404 and the run reads `SANDBOX_CONTAINER_GONE` (the
/// runtime's `SANDBOX_LOST`).
#[tokio::test]
async fn drain_over_exec_missing_paths_and_an_evicted_pod() {
    use futures_util::StreamExt;
    let ws = tempfile::tempdir().expect("ws");
    let secret = format!("{POD}-proxy");
    let mut tarball = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(5);
    header.set_mode(0o644);
    header.set_cksum();
    tarball
        .append_data(&mut header, "artifact-files/a.txt", &b"hello"[..])
        .expect("append");
    let tarball = tarball.into_inner().expect("tar");
    let mut steps = started_steps(&secret);
    steps.push(
        exec_step(ExecScript {
            expect_stdin: b"\n".to_vec(),
            output: vec![(1, tarball[..700].to_vec()), (1, tarball[700..].to_vec())],
            status: Some(json!({"metadata": {}, "status": "Success"})),
            ..ExecScript::default()
        })
        .query("command", "-C")
        .query("command", "/iterion")
        .query("command", "artifact-files"),
    );
    steps.push(exec_step(ExecScript {
        expect_stdin: b"\n".to_vec(),
        output: vec![(2, b"tar: nope: No such file or directory\n".to_vec())],
        status: Some(
            json!({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": "command terminated with non-zero exit code: exit status 2",
            "details": {"causes": [{"reason": "ExitCode", "message": "2"}]}}),
        ),
        ..ExecScript::default()
    }));
    steps.push(Step::new(
        Method::GET,
        path("pods", Some(&format!("{POD}/exec"))),
        Reply::Json(404, not_found("pods", POD)),
    ));
    steps.extend(cleanup_steps(&[&secret], true));
    let server = Server::start(steps).await;
    let d = driver(&server, settings(&[]));
    let prepared = d
        .prepare(&proxied_plan(ws.path()), &NullObserver)
        .await
        .expect("prepare");
    let run = d
        .start(prepared, &run_info(ws.path()), &NullObserver)
        .await
        .expect("start");
    let mut stream = run.export("/iterion/artifact-files").await.expect("export");
    let mut got = Vec::new();
    while let Some(chunk) = stream.next().await {
        got.extend_from_slice(&chunk.expect("chunk"));
    }
    assert_eq!(got, tarball);
    let missing = run.export("/nope").await.err().expect("missing");
    let io = std::error::Error::source(&missing)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .expect("an io source");
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound, "{missing}");
    let gone = run
        .exec(ExecRequest::new(["true"]))
        .await
        .err()
        .expect("gone");
    assert_eq!(gone.code(), "SANDBOX_CONTAINER_GONE", "{gone}");
    run.cleanup().await.expect("cleanup");
    server.finish();
}

/// The workspace export at teardown over exec (issue 12, issue 14 item
/// 2): the runtime's export reads the pod's workspace through the same
/// `tar -c` exec as the drain and writes it back onto the host through
/// `iterion-readback`'s host sink — the run's new file lands, the file it
/// deleted goes, a link it planted to `/etc/passwd` is declined by name —
/// and an export whose pod is gone is `sandbox_workspace_export_failed`
/// with `container_gone`, the host left as it was. This layer is the
/// scripted API server, not a cluster: it proves the conversation and
/// what the driver and the sink do with the answers, not what a real
/// kubelet's `tar` would send.
#[tokio::test]
async fn the_workspace_is_exported_back_over_exec_at_teardown() {
    let ws = tempfile::tempdir().expect("ws");
    std::fs::write(ws.path().join("keep.txt"), b"kept").expect("write");
    std::fs::write(ws.path().join("doomed.txt"), b"deleted in the pod").expect("write");
    let state = tempfile::tempdir().expect("state");
    let secret = format!("{POD}-proxy");
    let mut steps = started_steps(&secret);
    // What the pod holds at teardown: keep.txt as copied (the export
    // compares it to the copy's record by size, mode and mtime), a new
    // file, a planted link; doomed.txt deleted.
    let kept_meta = std::fs::metadata(ws.path().join("keep.txt")).expect("meta");
    let mut pod = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    pod.append_data(&mut h, "repo/", std::io::empty())
        .expect("dir");
    let mut h = tar::Header::new_gnu();
    h.set_mode(kept_meta.permissions().mode() & 0o777);
    h.set_mtime(kept_meta.mtime() as u64);
    h.set_size(4);
    pod.append_data(&mut h, "repo/keep.txt", &b"kept"[..])
        .expect("keep");
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o644);
    h.set_size(7);
    pod.append_data(&mut h, "repo/new.txt", &b"new one"[..])
        .expect("new");
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    pod.append_link(&mut h, "repo/passwd", "/etc/passwd")
        .expect("link");
    let pod = pod.into_inner().expect("tar");
    steps.push(
        exec_step(ExecScript {
            expect_stdin: b"\n".to_vec(),
            output: vec![(1, pod.clone())],
            status: Some(json!({"metadata": {}, "status": "Success"})),
            ..ExecScript::default()
        })
        .query("command", "tar")
        .query("command", "-C")
        .query("command", "/work")
        .query("command", "repo"),
    );
    // The second export finds the pod gone.
    steps.push(Step::new(
        Method::GET,
        path("pods", Some(&format!("{POD}/exec"))),
        Reply::Json(404, not_found("pods", POD)),
    ));
    steps.extend(cleanup_steps(&[&secret], true));
    let server = Server::start(steps).await;
    let d = driver(&server, settings(&[]));
    let mut plan = proxied_plan(ws.path());
    let copy = plan.workspace_copy.as_mut().expect("copy");
    copy.manifest = Some(state.path().join("manifest").to_string_lossy().into_owned());
    let copy = copy.clone();
    let prepared = d.prepare(&plan, &NullObserver).await.expect("prepare");
    let run = d
        .start(prepared, &run_info(ws.path()), &NullObserver)
        .await
        .expect("start");
    let options = iterion_readback::workspace::ExportOptions::default();
    let report = iterion_readback::workspace::export(&*run, &copy, options.clone()).await;
    assert_eq!(
        std::fs::read(ws.path().join("new.txt")).expect("new"),
        b"new one"
    );
    assert_eq!(
        std::fs::read(ws.path().join("keep.txt")).expect("keep"),
        b"kept"
    );
    assert!(!ws.path().join("doomed.txt").exists(), "{report:?}");
    assert!(std::fs::symlink_metadata(ws.path().join("passwd")).is_err());
    assert_eq!((report.files, report.deleted), (1, 1), "{report:?}");
    match report.events.as_slice() {
        [
            iterion_core::EventKind::SandboxWorkspaceExportFailed {
                reason,
                declined,
                driver,
                ..
            },
        ] => {
            assert_eq!(driver, "kubernetes");
            assert_eq!(reason, "archive_error");
            assert!(
                declined.iter().any(|d| d.contains("passwd")),
                "{declined:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    let before = std::fs::read_dir(ws.path()).expect("ls").count();
    let report = iterion_readback::workspace::export(&*run, &copy, options).await;
    assert_eq!(report.reason, Some("container_gone"), "{report:?}");
    assert_eq!(std::fs::read_dir(ws.path()).expect("ls").count(), before);
    run.cleanup().await.expect("cleanup");
    server.finish();
}

/// A labelled object of `run` as a list item.
fn labelled(kind: &str, name: &str, run: &str) -> Value {
    let mut o = object(kind, name);
    o["metadata"]["labels"] = json!({"iterion.io/managed": "true", "iterion.io/run-id": run});
    o
}

/// Issue 12 item 4: the reaper's side of the conversation. The driver
/// lists pods, NetworkPolicies and Secrets by the managed label, each
/// with its run id; the one fail-safe predicate
/// (`iterion_sandbox::reaper::reapable`, as `iterion_runtime::reap`
/// calls it) keeps every object of a run whose lease is held and reaps
/// those of a finished run: its pod is deleted and polled until gone,
/// then its NetworkPolicy and Secret, a Secret already gone (404) being
/// success. Nothing of the live run is touched (the script has no step
/// for it, so any such request fails the test). Does not prove the
/// runtime's lease and store lookups (its own reaper tests do) nor what
/// a real API server lists.
#[tokio::test]
async fn the_reaper_lists_every_kind_by_label_and_spares_a_live_run() {
    use iterion_core::Driver;
    use iterion_sandbox::reaper::{LeaseState, ReapVerdict, RunLookup, reapable};
    const LIVE: &str = "r20261129-live";
    let live_pod = "iterion-run-r20261129-live";
    let managed = "iterion.io/managed=true";
    let steps = vec![
        Step::new(
            Method::GET,
            path("pods", None),
            Reply::Json(
                200,
                list(
                    "PodList",
                    vec![labelled("Pod", live_pod, LIVE), labelled("Pod", POD, RUN)],
                ),
            ),
        )
        .query("labelSelector", managed),
        Step::new(
            Method::GET,
            path("networkpolicies", None),
            Reply::Json(
                200,
                list(
                    "NetworkPolicyList",
                    vec![
                        labelled("NetworkPolicy", live_pod, LIVE),
                        labelled("NetworkPolicy", POD, RUN),
                    ],
                ),
            ),
        )
        .query("labelSelector", managed),
        Step::new(
            Method::GET,
            path("secrets", None),
            Reply::Json(
                200,
                list(
                    "SecretList",
                    vec![
                        labelled("Secret", &format!("{live_pod}-proxy"), LIVE),
                        labelled("Secret", &format!("{POD}-proxy"), RUN),
                    ],
                ),
            ),
        )
        .query("labelSelector", managed),
        Step::new(
            Method::DELETE,
            path("pods", Some(POD)),
            Reply::Json(200, object("Pod", POD)),
        ),
        Step::new(
            Method::GET,
            path("pods", Some(POD)),
            Reply::Json(404, not_found("pods", POD)),
        ),
        Step::new(
            Method::DELETE,
            path("networkpolicies", Some(POD)),
            Reply::Json(200, success()),
        ),
        Step::new(
            Method::DELETE,
            path("secrets", Some(&format!("{POD}-proxy"))),
            Reply::Json(404, not_found("secrets", &format!("{POD}-proxy"))),
        ),
    ];
    let server = Server::start(steps).await;
    let d = driver(&server, settings(&[]));
    let found = d.list_managed().await.expect("list");
    let kinds: Vec<(String, String)> = found
        .iter()
        .map(|r| (format!("{:?}", r.kind), r.run_id.clone()))
        .collect();
    assert_eq!(found.len(), 6, "{kinds:?}");
    let mut reaped = Vec::new();
    for r in &found {
        // The live run's lease is held; the other run finished.
        let (lease, lookup) = if r.run_id == LIVE {
            (
                LeaseState::Held,
                RunLookup::Found(iterion_core::RunStatus::Running),
            )
        } else {
            (
                LeaseState::NotHeld,
                RunLookup::Found(iterion_core::RunStatus::Finished),
            )
        };
        match reapable(&r.run_id, lease, lookup) {
            ReapVerdict::Reap(_) => {
                d.remove_managed(r).await.expect("remove");
                reaped.push(r.name.clone());
            }
            ReapVerdict::Keep(why) => assert_eq!(r.run_id, LIVE, "{why}"),
        }
    }
    assert_eq!(
        reaped,
        [POD.to_owned(), POD.to_owned(), format!("{POD}-proxy")],
        "pod, policy, secret of the finished run only"
    );
    server.finish();
}

/// Issue 12 item 5: the doctor's RBAC rows. One `SelfSubjectAccessReview`
/// per permission the driver uses, in its namespace, in the driver's
/// order; the server allows most, denies `create pods/exec` with a reason
/// and refuses one review itself (403: the review API is not granted);
/// the summary names each. Does not prove what a real authorizer answers
/// for a given Role (only that the question is asked as it expects).
#[tokio::test]
async fn the_access_review_asks_each_permission_and_names_the_missing() {
    use iterion_driver_k8s::access::{Access, NEEDED, summarize};
    let review = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let answer = |allowed: bool, reason: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
               "metadata": {}, "spec": {},
               "status": {"allowed": allowed, "reason": reason}})
    };
    let steps: Vec<Step> = NEEDED
        .iter()
        .map(|p| {
            let reply = match (p.verb, p.subresource, p.resource) {
                ("create", Some("exec"), _) => {
                    Reply::Json(201, answer(false, "no RBAC policy matched"))
                }
                ("delete", None, "networkpolicies") => Reply::Json(
                    403,
                    status(
                        403,
                        "Forbidden",
                        "selfsubjectaccessreviews.authorization.k8s.io is forbidden",
                        json!({"kind": "selfsubjectaccessreviews"}),
                    ),
                ),
                _ => Reply::Json(201, answer(true, "")),
            };
            let want = *p;
            Step::new(Method::POST, review.to_owned(), reply).check(move |b| {
                let a = &b["spec"]["resourceAttributes"];
                let sub = a.get("subresource").and_then(Value::as_str);
                (b["kind"] == "SelfSubjectAccessReview"
                    && a["namespace"] == NS
                    && a["verb"] == want.verb
                    && a["resource"] == want.resource
                    && a["group"] == want.group
                    && sub == want.subresource)
                    .then_some(())
                    .ok_or_else(|| format!("review of {want}: {b}"))
            })
        })
        .collect();
    let server = Server::start(steps).await;
    let d = driver(&server, settings(&[]));
    let rows = d.review_access().await;
    server.finish();
    assert_eq!(rows.len(), NEEDED.len());
    let exec = rows
        .iter()
        .find(|r| r.permission.subresource == Some("exec"))
        .expect("exec row");
    assert_eq!(
        exec.access,
        Access::Denied {
            reason: "no RBAC policy matched".into()
        }
    );
    let s = summarize(NS, &rows);
    assert!(!s.ok && !s.unknown, "{s:?}");
    assert!(
        s.detail
            .starts_with("denied in namespace sbx: create pods/exec (no RBAC policy matched); not answered: delete networkpolicies: "),
        "{}",
        s.detail
    );
    assert!(s.detail.contains("forbidden"), "{}", s.detail);
}
