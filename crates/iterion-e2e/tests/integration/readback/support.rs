//! Test scaffolding for the driver side (a `SandboxRun` serving prepared or
//! generated tar streams) and archive builders, including hostile ones.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use iterion_core::driver::DriverError;
use iterion_core::plan::RUN_FILES_CONTAINER_DIR;
use iterion_core::{
    ByteSize, ByteStream, DriverName, ExecRequest, ExecSession, MountOrigin, ReadBackDecl,
    SandboxRun,
};

/// How one container path answers `export`.
#[derive(Clone)]
pub enum Source {
    /// A prepared archive, served in chunks of the given size.
    Bytes(Bytes, usize),
    /// A generator (lazy, for archives too big to hold).
    Generated(Arc<dyn Fn() -> ByteStream + Send + Sync>),
    /// The container is gone.
    Gone,
    /// A prefix, then a stream that never ends nor yields.
    Hang(Bytes),
}

/// A sandbox whose `export` serves prepared tar streams, and whose
/// `list_dir` answers the listings it was given (others are unsupported).
pub struct ServedRun {
    pub sources: BTreeMap<String, Source>,
    pub listings: BTreeMap<String, Vec<Vec<u8>>>,
    /// Every path `export` was asked for, in order.
    pub exported: std::sync::Mutex<Vec<String>>,
}

impl ServedRun {
    pub fn new() -> Self {
        Self {
            sources: BTreeMap::new(),
            listings: BTreeMap::new(),
            exported: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub fn serve(mut self, path: &str, source: Source) -> Self {
        self.sources.insert(path.to_owned(), source);
        self
    }

    pub fn listing(mut self, path: &str, names: &[&[u8]]) -> Self {
        self.listings
            .insert(path.to_owned(), names.iter().map(|n| n.to_vec()).collect());
        self
    }

    pub fn exported(&self) -> Vec<String> {
        self.exported
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[async_trait]
impl SandboxRun for ServedRun {
    fn driver(&self) -> DriverName {
        DriverName::Kubernetes
    }
    fn container(&self) -> &str {
        "served"
    }
    fn workdir(&self) -> &str {
        "/workspace"
    }
    async fn exec(&self, _request: ExecRequest) -> Result<Box<dyn ExecSession>, DriverError> {
        Err(DriverError::Unsupported {
            driver: DriverName::Kubernetes,
            feature: "exec",
        })
    }
    async fn list_dir(&self, container_path: &str) -> Result<Vec<Vec<u8>>, DriverError> {
        self.listings
            .get(container_path)
            .cloned()
            .ok_or(DriverError::Unsupported {
                driver: DriverName::Kubernetes,
                feature: "directory listing",
            })
    }
    async fn export(&self, container_path: &str) -> Result<ByteStream, DriverError> {
        self.exported
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(container_path.to_owned());
        match self.sources.get(container_path) {
            Some(Source::Bytes(bytes, chunk)) => {
                let chunk = (*chunk).max(1);
                let chunks: Vec<Result<Bytes, std::io::Error>> = (0..bytes.len())
                    .step_by(chunk)
                    .map(|i| Ok(bytes.slice(i..(i + chunk).min(bytes.len()))))
                    .collect();
                Ok(Box::pin(futures_util::stream::iter(chunks)))
            }
            Some(Source::Generated(make)) => Ok(make()),
            Some(Source::Hang(prefix)) => {
                let prefix = futures_util::stream::iter([Ok(prefix.clone())]);
                Ok(Box::pin(prefix.chain(futures_util::stream::pending())))
            }
            Some(Source::Gone) | None => Err(DriverError::ContainerGone {
                container: "served".into(),
            }),
        }
    }
    async fn import(&self, _dir: &str, _archive: ByteStream) -> Result<(), DriverError> {
        Ok(())
    }
    async fn is_alive(&self) -> Result<bool, DriverError> {
        Ok(true)
    }
    async fn cleanup(&self) -> Result<(), DriverError> {
        Ok(())
    }
}

pub fn run_files(cap: u64) -> ReadBackDecl {
    ReadBackDecl {
        container_path: RUN_FILES_CONTAINER_DIR.into(),
        cap: ByteSize(cap),
        origin: MountOrigin::RunFiles,
    }
}

pub fn declared(path: &str, cap: u64) -> ReadBackDecl {
    ReadBackDecl {
        container_path: path.into(),
        cap: ByteSize(cap),
        origin: MountOrigin::ReadBack,
    }
}

pub const MIB: u64 = 1024 * 1024;

/// Archive builder over raw headers, so hostile members can be written that a
/// well-behaved tar library refuses to produce.
#[derive(Default)]
pub struct Archive {
    pub bytes: Vec<u8>,
}

fn pad(out: &mut Vec<u8>) {
    let rem = out.len() % 512;
    if rem != 0 {
        out.resize(out.len() + 512 - rem, 0);
    }
}

/// One raw header (GNU format, names ≤ 100 bytes) with checksum.
pub fn header(name: &[u8], typeflag: u8, size: u64, link: &[u8]) -> [u8; 512] {
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o644);
    h.set_size(size);
    h.set_mtime(0);
    let bytes = h.as_mut_bytes();
    let n = name.len().min(100);
    bytes[..n].copy_from_slice(&name[..n]);
    bytes[156] = typeflag;
    let l = link.len().min(100);
    bytes[157..157 + l].copy_from_slice(&link[..l]);
    h.set_cksum();
    let mut out = [0u8; 512];
    out.copy_from_slice(h.as_bytes());
    out
}

impl Archive {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn raw(mut self, name: &[u8], typeflag: u8, data: &[u8], link: &[u8]) -> Self {
        self.bytes
            .extend_from_slice(&header(name, typeflag, data.len() as u64, link));
        self.bytes.extend_from_slice(data);
        pad(&mut self.bytes);
        self
    }

    pub fn dir(self, name: &str) -> Self {
        self.raw(name.as_bytes(), b'5', b"", b"")
    }

    pub fn file(self, name: &str, data: &[u8]) -> Self {
        self.raw(name.as_bytes(), b'0', data, b"")
    }

    /// A member whose header claims `size` bytes, followed by `body` only.
    pub fn claim(mut self, name: &[u8], typeflag: u8, size: u64, body: &[u8]) -> Self {
        self.bytes
            .extend_from_slice(&header(name, typeflag, size, b""));
        self.bytes.extend_from_slice(body);
        self
    }

    /// A GNU `L` long name in front of a member.
    pub fn gnu_long(self, name: &[u8], typeflag: u8, data: &[u8]) -> Self {
        let mut long = name.to_vec();
        long.push(0);
        self.raw(b"././@LongLink", b'L', &long, b"")
            .raw(b"placeholder", typeflag, data, b"")
    }

    /// A PAX `path` record in front of a member.
    pub fn pax_path(self, name: &[u8], typeflag: u8, data: &[u8]) -> Self {
        let mut record = b" path=".to_vec();
        record.extend_from_slice(name);
        record.push(b'\n');
        // The length counts its own digits.
        let mut len = record.len() + 1;
        while format!("{len}").len() + record.len() != len {
            len += 1;
        }
        let mut pax = format!("{len}").into_bytes();
        pax.extend_from_slice(&record);
        self.raw(b"PaxHeaders/x", b'x', &pax, b"")
            .raw(b"placeholder", typeflag, data, b"")
    }

    /// An old-GNU sparse member claiming `real_size` once expanded, with one
    /// sparse-map extension block (all zeros: it must not read as the end).
    pub fn gnu_sparse(mut self, name: &[u8], real_size: u64) -> Self {
        let mut h = header(name, b'S', 0, b"");
        h[482] = 1;
        let mut field = [0u8; 12];
        field[0] = 0x80;
        field[4..].copy_from_slice(&real_size.to_be_bytes());
        h[483..495].copy_from_slice(&field);
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        self.bytes.extend_from_slice(&h);
        self.bytes.extend_from_slice(&[0u8; 512]);
        self
    }

    pub fn finish(mut self) -> Bytes {
        self.bytes.extend_from_slice(&[0u8; 1024]);
        Bytes::from(self.bytes)
    }

    pub fn unfinished(self) -> Bytes {
        Bytes::from(self.bytes)
    }
}

/// A lazily generated archive of `count` members named by `name(i)` with
/// `size` bytes each of filler, `per_chunk` members per stream chunk.
pub fn generated(
    count: u64,
    size: usize,
    per_chunk: u64,
    name: fn(u64) -> String,
) -> Arc<dyn Fn() -> ByteStream + Send + Sync> {
    Arc::new(move || {
        let stream = futures_util::stream::unfold(0u64, move |i| async move {
            if i > count {
                return None;
            }
            if i == count {
                return Some((Ok(Bytes::from(vec![0u8; 1024])), i + 1));
            }
            let end = (i + per_chunk).min(count);
            let mut buf = Vec::with_capacity(((end - i) as usize) * (512 + size + 512));
            for j in i..end {
                buf.extend_from_slice(&header(name(j).as_bytes(), b'0', size as u64, b""));
                buf.resize(buf.len() + size, b'x');
                pad(&mut buf);
            }
            Some((Ok(Bytes::from(buf)), end))
        });
        Box::pin(stream) as ByteStream
    })
}

/// A member claiming `size` bytes whose data never ends (zeros forever,
/// after `prefix`): a drain that reads past it never finishes.
pub fn endless_member(prefix: Bytes, name: &'static [u8], size: u64) -> Source {
    Source::Generated(Arc::new(move || {
        let mut head = prefix.to_vec();
        head.extend_from_slice(&header(name, b'0', size, b""));
        let zeros = futures_util::stream::repeat_with(|| Ok(Bytes::from(vec![0u8; 64 * 1024])));
        Box::pin(futures_util::stream::iter([Ok(Bytes::from(head))]).chain(zeros)) as ByteStream
    }))
}

/// A runtime for proptest bodies.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
        .block_on(f)
}

pub fn short_timeout() -> Duration {
    Duration::from_millis(300)
}
