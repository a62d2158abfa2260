//! Layer (c), realism of the ADR-143 drain: the Pod the driver renders,
//! played by `podman kube play`, written to as its non-root user, then
//! drained by `iterion_readback::drain` — the runtime's real drain, its
//! bounded tar parser, member judging and caps — over the very archive
//! command `KubeRun::export` runs over exec (`tar -C parent -cf - base`),
//! here through `podman exec` (Podman has no Kubernetes API).
//!
//! Proves: the image's `tar`, run as uid 1000 in the pod's emptyDir,
//! yields an archive the drain accepts whole (files and nested
//! directories stored with their content) and judges as it must (a
//! symlink declined, never followed). Does not prove: the exec WebSocket
//! (the api layer scripts it), a kubelet, nor a real store (the one here
//! keeps files in memory; the stores have their own conformance suite).

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use iterion_core::driver::{ExecRequest, ExecSession};
use iterion_core::event::{EventDraft, EventRecord};
use iterion_core::store::*;
use iterion_core::{ByteStream, DriverError, DriverName, RunId, RunStore, SandboxRun};
use iterion_driver_k8s::K8sSettings;
use iterion_driver_k8s::manifest::{RenderOptions, SecretFileValues, render};

use crate::podman::{Down, podman};
use crate::support::*;

/// The played pod's container, read through `KubeRun::export`'s argv.
struct PodmanRun {
    container: String,
}

fn unsupported(feature: &'static str) -> DriverError {
    DriverError::Unsupported {
        driver: DriverName::Kubernetes,
        feature,
    }
}

#[async_trait]
impl SandboxRun for PodmanRun {
    fn driver(&self) -> DriverName {
        DriverName::Kubernetes
    }
    fn container(&self) -> &str {
        &self.container
    }
    fn workdir(&self) -> &str {
        "/work/repo"
    }
    async fn exec(&self, _: ExecRequest) -> Result<Box<dyn ExecSession>, DriverError> {
        Err(unsupported("exec (the drain never execs)"))
    }
    async fn export(&self, container_path: &str) -> Result<ByteStream, DriverError> {
        let path = std::path::Path::new(container_path);
        let parent = path
            .parent()
            .map_or("/".into(), |p| p.display().to_string());
        let base = path
            .file_name()
            .map(|b| b.to_string_lossy().into_owned())
            .unwrap_or_default();
        let out = podman(&[
            "exec",
            &self.container,
            "tar",
            "-C",
            &parent,
            "-cf",
            "-",
            &base,
        ]);
        if !out.status.success() {
            return Err(DriverError::Io {
                operation: format!("export {container_path}"),
                source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()),
            });
        }
        // In two chunks, split mid-header: the parser must not care.
        let (a, b) = out.stdout.split_at(out.stdout.len().min(700));
        let chunks = vec![
            Ok(bytes::Bytes::copy_from_slice(a)),
            Ok(bytes::Bytes::copy_from_slice(b)),
        ];
        Ok(Box::pin(futures_util::stream::iter(chunks)))
    }
    async fn import(&self, _: &str, _: ByteStream) -> Result<(), DriverError> {
        Err(unsupported("import"))
    }
    async fn is_alive(&self) -> Result<bool, DriverError> {
        Ok(true)
    }
    async fn cleanup(&self) -> Result<(), DriverError> {
        Ok(())
    }
}

/// Run files and the drain record in memory; nothing else.
#[derive(Default)]
struct FilesOnly {
    files: Mutex<BTreeMap<String, Vec<u8>>>,
    drain: Mutex<Option<DrainRecord>>,
}

fn not_here() -> StoreError {
    StoreError::Io {
        operation: "a drain-only test store".into(),
        source: std::io::Error::from(std::io::ErrorKind::Unsupported),
    }
}

#[async_trait]
impl RunStore for FilesOnly {
    fn describe(&self) -> String {
        "memory (run files only)".into()
    }
    async fn create_run(&self, _: NewRun) -> Result<RunRecord, StoreError> {
        Err(not_here())
    }
    async fn load_run(&self, _: &RunId) -> Result<Option<RunRecord>, StoreError> {
        Ok(None)
    }
    async fn list_runs(&self, _: PageRequest) -> Result<Page<RunRecord>, StoreError> {
        Err(not_here())
    }
    async fn transition(&self, _: &RunId, _: Transition) -> Result<RunRecord, StoreError> {
        Err(not_here())
    }
    async fn reopen_run(&self, _: &RunId, _: Reopen) -> Result<RunRecord, StoreError> {
        Err(not_here())
    }
    async fn submit_run(&self, _: NewRun, _: Submission) -> Result<RunRecord, StoreError> {
        Err(not_here())
    }
    async fn load_submission(&self, _: &RunId) -> Result<Option<Submission>, StoreError> {
        Ok(None)
    }
    async fn claim_run(&self, _: &RunId, _: Claim) -> Result<RunRecord, StoreError> {
        Err(not_here())
    }
    async fn record_admission(
        &self,
        _: &RunId,
        _: Admission,
        _: Option<u64>,
    ) -> Result<RunRecord, StoreError> {
        Err(not_here())
    }
    async fn append_event(
        &self,
        _: &RunId,
        _: EventDraft,
        _: Option<u64>,
    ) -> Result<EventRecord, StoreError> {
        Err(not_here())
    }
    async fn events_after(
        &self,
        _: &RunId,
        _: u64,
        _: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        Ok(Vec::new())
    }
    fn follow_events(&self, _: &RunId, _: u64) -> StoreStream<EventRecord> {
        Box::pin(futures_util::stream::empty())
    }
    async fn append_logs(&self, _: &RunId, _: Vec<NewLogLine>) -> Result<u64, StoreError> {
        Err(not_here())
    }
    async fn logs_after(&self, _: &RunId, _: u64, _: usize) -> Result<Vec<LogLine>, StoreError> {
        Ok(Vec::new())
    }
    fn follow_logs(&self, _: &RunId, _: u64) -> StoreStream<LogLine> {
        Box::pin(futures_util::stream::empty())
    }
    async fn put_file(
        &self,
        _: &RunId,
        path: &RunFilePath,
        content: ByteStream,
        cap: u64,
    ) -> Result<PutOutcome, StoreError> {
        use futures_util::StreamExt;
        let mut content = content;
        let mut data = Vec::new();
        let mut check = FileCheck::new();
        while let Some(chunk) = content.next().await {
            let chunk = chunk.map_err(|e| StoreError::Io {
                operation: "read a drained member".into(),
                source: e,
            })?;
            check.update(&chunk);
            data.extend_from_slice(&chunk);
            if data.len() as u64 > cap {
                return Ok(PutOutcome::CapExceeded {
                    read: data.len() as u64,
                    cap,
                });
            }
        }
        let record = RunFileRecord {
            path: path.clone(),
            size: data.len() as u64,
            sha256: String::new(),
            stored_at: time::OffsetDateTime::UNIX_EPOCH,
        };
        self.files
            .lock()
            .expect("files")
            .insert(path.as_str().to_owned(), data);
        Ok(PutOutcome::Stored(record))
    }
    async fn list_files(&self, _: &RunId) -> Result<Vec<RunFileRecord>, StoreError> {
        Ok(Vec::new())
    }
    async fn get_file(&self, _: &RunId, _: &RunFilePath) -> Result<ByteStream, StoreError> {
        Err(not_here())
    }
    async fn set_drain(&self, _: &RunId, drain: DrainRecord) -> Result<(), StoreError> {
        *self.drain.lock().expect("drain") = Some(drain);
        Ok(())
    }
    async fn get_drain(&self, _: &RunId) -> Result<Option<DrainRecord>, StoreError> {
        Ok(self.drain.lock().expect("drain").clone())
    }
    async fn put_attachment(
        &self,
        _: &RunId,
        _: &iterion_core::attachment::AttachmentName,
        _: &iterion_core::attachment::AttachmentFile,
        _: ByteStream,
        _: u64,
    ) -> Result<iterion_core::attachment::AttachmentPut, StoreError> {
        Err(not_here())
    }
    async fn list_attachments(
        &self,
        _: &RunId,
    ) -> Result<Vec<iterion_core::attachment::AttachmentRecord>, StoreError> {
        Ok(Vec::new())
    }
    async fn get_attachment(
        &self,
        _: &RunId,
        _: &iterion_core::attachment::AttachmentName,
    ) -> Result<ByteStream, StoreError> {
        Err(not_here())
    }
}

#[tokio::test]
async fn the_real_drain_reads_the_pods_run_files_as_written_by_uid_1000() {
    const POD: &str = "iterion-run-r20261129-drain";
    let image =
        std::env::var("ITERION_TEST_SLIM_IMAGE").expect("ITERION_TEST_SLIM_IMAGE (scripts/lib.sh)");
    let plan = policy_plan(&spec(&image), "/work/repo");
    assert!(
        !plan.read_back.is_empty(),
        "the run-files dir is a declared read-back path: {plan:?}"
    );
    let settings = K8sSettings::default();
    let objects = render(
        &plan,
        &info("r20261129-drain"),
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
    let wrote = podman(&[
        "exec",
        &container,
        "sh",
        "-c",
        "cd /iterion/artifact-files && mkdir -p deep/er && printf hello > a.txt \
         && printf nested > deep/er/b.txt && ln -s /etc/passwd leak && id -u",
    ]);
    assert!(wrote.status.success(), "{wrote:?}");
    assert_eq!(String::from_utf8_lossy(&wrote.stdout), "1000\n");

    let run = PodmanRun { container };
    let store = FilesOnly::default();
    let run_id = RunId::parse("r20261129-drain").expect("id");
    let report = iterion_readback::drain(
        &run,
        &store,
        &run_id,
        &plan.read_back,
        iterion_readback::DrainOptions::default(),
    )
    .await;
    assert_eq!(report.files, 2, "{report:?}");
    assert_eq!(report.declined_count, 1, "the symlink: {report:?}");
    let files = store.files.lock().expect("files").clone();
    // The run-files dir's members land at the root of the run's file area.
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["a.txt", "deep/er/b.txt"],
        "the symlink is never followed"
    );
    assert_eq!(files["a.txt"], b"hello");
    assert_eq!(files["deep/er/b.txt"], b"nested");
    let drained = store
        .drain
        .lock()
        .expect("drain")
        .clone()
        .expect("recorded");
    assert_eq!(drained.status, report.status);
}
