//! Workflow secrets at run time (seed step 14, facts §6.9): resolve each
//! declared secret's value from the host environment, hand `as: env`
//! values to every exec (never to the container's create-time env, which
//! `docker inspect` shows for the container's lifetime), write `as: file`
//! values to 0600 files in a private 0700 per-run directory on a memory
//! filesystem (never a disk), bound read-only into the sandbox and taken
//! off the host as soon as the container has mounted them, and hand the
//! values to the redactor (`iterion_core::redact`).
//!
//! It does not decide whether the run is sandboxed (the booter does) nor
//! refresh rotated secrets mid-run (no refresher interface yet). A value is
//! never put in an error, an event, argv or the run log.
//!
//! `value:` is read as a host-side template: each `${VAR}` is replaced by
//! the host variable (unset → the secret is missing); no `value:` reads the
//! host variable named like the secret. A missing non-optional secret
//! refuses the run before any container starts.
//!
//! Where file secrets cannot travel (the booter applies this): a degraded
//! `auto` drops them and says so (`sandbox_skipped.file_secrets_dropped`);
//! an explicit opt-out (`none`, or nothing asked) runs on the noop driver,
//! so the noop file-secret gate refuses it — nothing "dropped" them, and
//! running without a declared secret would fail later and obscurely; a
//! driver without host binds (bindless docker) refuses too, since the bind
//! is the file's only delivery channel here.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use iterion_core::plan::SECRETS_CONTAINER_DIR;
use iterion_core::{Mount, MountKind, MountOrigin, RunId};

pub use iterion_core::redact::{REDACTED, Redactor};
use iterion_dsl::ir::{SecretDecl, SecretDelivery};

/// Why the run's secrets could not be made ready. Messages name the
/// secret, never its value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// A non-optional secret has no value on the host.
    #[error("secret {name:?} is required but {source_var} is not set on the host")]
    Missing {
        /// The secret.
        name: String,
        /// The host variable read.
        source_var: String,
    },
    /// A secret's name, `env:` or `mount_path:` is unusable.
    #[error("secret {name:?}: {reason}")]
    Invalid {
        /// The secret.
        name: String,
        /// Why.
        reason: String,
    },
    /// No memory filesystem to hold file secrets (they never go to disk).
    #[error("file secrets need a memory filesystem on the host: {reason}")]
    NoMemoryFs {
        /// What was tried.
        reason: String,
    },
    /// Writing a secret file failed.
    #[error("secret {name:?}: {operation}: {source}")]
    Io {
        /// The secret.
        name: String,
        /// What was being done.
        operation: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl SecretError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Missing { .. } => "SECRET_MISSING",
            Self::Invalid { .. } => "SECRET_INVALID",
            Self::NoMemoryFs { .. } => "SECRET_NO_MEMORY_FS",
            Self::Io { .. } => "SECRET_IO",
        }
    }
}

/// One resolved `as: file` secret (value still in memory, not yet written).
#[derive(Clone)]
pub struct FileSecret {
    /// The secret's name.
    pub name: String,
    /// Absolute container path.
    pub container_path: String,
    /// `env:` naming a variable that holds the container path.
    pub path_env: Option<String>,
    value: String,
}

#[cfg(test)]
impl FileSecret {
    /// What the file holds: the value, or a bound secret's placeholder.
    pub(crate) fn content(&self) -> &str {
        &self.value
    }
}

impl std::fmt::Debug for FileSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSecret")
            .field("name", &self.name)
            .field("container_path", &self.container_path)
            .field("path_env", &self.path_env)
            .finish_non_exhaustive()
    }
}

/// The run's secrets, resolved on the host.
#[derive(Clone, Default)]
pub struct ResolvedSecrets {
    /// `as: env` secrets: variable → value, for every exec.
    pub env: BTreeMap<String, String>,
    /// `as: file` secrets.
    pub files: Vec<FileSecret>,
    /// The secrets bound to egress hosts, each with its run's placeholder
    /// (`crate::secret_egress`); delivered plain until
    /// [`ResolvedSecrets::with_placeholders`] swaps them.
    pub bound: Vec<crate::secret_egress::BoundSecret>,
}

impl std::fmt::Debug for ResolvedSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedSecrets")
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("files", &self.files)
            .field("bound", &self.bound)
            .finish()
    }
}

impl ResolvedSecrets {
    /// The masker of every value (env and file) and its common encodings.
    pub fn redactor(&self) -> Redactor {
        self.redactor_with(&[])
    }

    /// A redactor for these secrets and `extra` values (the agents'
    /// provider keys).
    pub fn redactor_with(&self, extra: &[String]) -> Redactor {
        let redactor = Redactor::new(
            self.env
                .values()
                .chain(self.files.iter().map(|f| &f.value))
                .chain(self.bound.iter().map(|b| b.value()))
                .chain(extra),
        );
        if redactor.masks_everything() {
            tracing::warn!("secret matcher could not be built; masking all output");
        }
        redactor
    }

    /// The same secrets with every bound one delivered as its placeholder,
    /// in env and file form alike (the decision said the run can put the
    /// value back, `SandboxPlan::secret_placeholders`).
    pub fn with_placeholders(mut self) -> Self {
        for b in &self.bound {
            match &b.delivery {
                crate::secret_egress::Delivered::Env(var) => {
                    if let Some(v) = self.env.get_mut(var) {
                        *v = b.placeholder().to_owned();
                    }
                }
                crate::secret_egress::Delivered::File(name) => {
                    if let Some(f) = self.files.iter_mut().find(|f| &f.name == name) {
                        f.value = b.placeholder().to_owned();
                    }
                }
                // Never among a workflow's secrets: the agents carry them.
                crate::secret_egress::Delivered::Agent(_) => {}
            }
        }
        self
    }
}

fn valid_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Expand `${VAR}` references of `value` from `host`. `Ok(None)` when a
/// referenced variable is unset; the name of the first unset one is
/// returned for the error.
fn expand(value: &str, host: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let var = &after[..end];
        match host.get(var) {
            Some(v) => out.push_str(v),
            None => return Err(var.to_owned()),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Resolve `decls` against the host environment. A missing non-optional
/// secret is refused; a missing optional one is left out.
pub fn resolve(
    decls: &[SecretDecl],
    host: &BTreeMap<String, String>,
) -> Result<ResolvedSecrets, SecretError> {
    let mut out = ResolvedSecrets::default();
    for d in decls {
        let invalid = |reason: String| SecretError::Invalid {
            name: d.name.clone(),
            reason,
        };
        let value = match &d.value {
            None => host.get(&d.name).cloned().ok_or_else(|| d.name.clone()),
            Some(v) => expand(v, host),
        };
        let value = match value {
            Ok(v) => v,
            Err(_) if d.optional => continue,
            Err(var) => {
                return Err(SecretError::Missing {
                    name: d.name.clone(),
                    source_var: var,
                });
            }
        };
        if let Some(env) = &d.env
            && !valid_env_name(env)
        {
            return Err(invalid(format!("env {env:?} is not a variable name")));
        }
        if !d.egress.is_empty() {
            out.bound.push(crate::secret_egress::BoundSecret::mint(
                d,
                &value,
                match d.delivery {
                    SecretDelivery::Env => crate::secret_egress::Delivered::Env(
                        d.env.clone().unwrap_or_else(|| d.name.clone()),
                    ),
                    SecretDelivery::File => crate::secret_egress::Delivered::File(d.name.clone()),
                },
            ));
        }
        match d.delivery {
            SecretDelivery::Env => {
                let var = d.env.clone().unwrap_or_else(|| d.name.clone());
                if !valid_env_name(&var) {
                    return Err(invalid(format!("{var:?} is not a variable name; set env:")));
                }
                out.env.insert(var, value);
            }
            SecretDelivery::File => {
                if !d
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
                    || d.name.starts_with('.')
                {
                    return Err(invalid(
                        "a file secret's name must be a plain file name".into(),
                    ));
                }
                let container_path = match &d.mount_path {
                    Some(p) => {
                        if !p.starts_with('/') || p.split('/').any(|c| c == "..") || p == "/" {
                            return Err(invalid(format!(
                                "mount_path {p:?} must be an absolute path without '..'"
                            )));
                        }
                        p.clone()
                    }
                    None => format!("{SECRETS_CONTAINER_DIR}/{}", d.name),
                };
                out.files.push(FileSecret {
                    name: d.name.clone(),
                    container_path,
                    path_env: d.env.clone(),
                    value,
                });
            }
        }
    }
    Ok(out)
}

/// Variable naming the directory file secrets are written under on the
/// host. It must be on a memory filesystem (tmpfs/ramfs); the default is
/// `$XDG_RUNTIME_DIR`, then `/dev/shm`, whichever is one.
pub const SECRETS_DIR_ENV: &str = "ITERION_SECRETS_DIR";

/// `statfs` magic numbers of the memory filesystems (linux/magic.h).
const TMPFS_MAGIC: u64 = 0x0102_1994;
const RAMFS_MAGIC: u64 = 0x8584_58f6;

fn on_memory_fs(dir: &Path) -> bool {
    rustix::fs::statfs(dir).is_ok_and(|s| matches!(s.f_type as u64, TMPFS_MAGIC | RAMFS_MAGIC))
}

/// The private root of this user's file secrets: `<memory fs>/iterion-<uid>`,
/// created 0700. A plaintext secret is never written to a disk, where it
/// would outlive a crash, land in backups and need shredding (issue 19 #7);
/// with no memory filesystem at hand the run is refused instead.
///
/// On a shared, world-writable directory (`/dev/shm`) another user may
/// have planted the name first: anything but a real directory owned by us
/// and closed to others is refused, never followed.
pub fn secrets_root(env: &BTreeMap<String, String>) -> Result<PathBuf, SecretError> {
    let unusable = |reason: String| SecretError::NoMemoryFs { reason };
    let candidates: Vec<PathBuf> = match env.get(SECRETS_DIR_ENV).filter(|v| !v.trim().is_empty()) {
        Some(dir) => vec![PathBuf::from(dir)],
        None => env
            .get("XDG_RUNTIME_DIR")
            .filter(|v| !v.trim().is_empty())
            .map(PathBuf::from)
            .into_iter()
            .chain([PathBuf::from("/dev/shm")])
            .collect(),
    };
    let Some(base) = candidates
        .iter()
        .find(|d| d.is_absolute() && on_memory_fs(d))
    else {
        return Err(unusable(format!(
            "none of {} is a memory filesystem (tmpfs); set {SECRETS_DIR_ENV} to one",
            candidates
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let uid = rustix::process::getuid();
    let root = base.join(format!("iterion-{}", uid.as_raw()));
    let mut builder = std::fs::DirBuilder::new();
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    match builder.create(&root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(unusable(format!("cannot create {}: {e}", root.display())));
        }
    }
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(&root)
        .map_err(|e| unusable(format!("cannot inspect {}: {e}", root.display())))?;
    if !meta.is_dir() || meta.uid() != uid.as_raw() || meta.mode() & 0o077 != 0 {
        return Err(unusable(format!(
            "{} is not a private directory of this user (a symlink, another owner or open to others)",
            root.display()
        )));
    }
    Ok(root)
}

/// The host side of the run's file secrets: a private directory on a
/// memory filesystem, removed when dropped (teardown, every early boot
/// failure). Once the sandbox has started, [`SecretFiles::scrub`] takes the
/// values off the host while the container keeps reading them.
#[derive(Debug, Default)]
pub struct SecretFiles {
    dir: Option<tempfile::TempDir>,
    files: Vec<PathBuf>,
    /// One read-only bind per file secret (`MountOrigin::SecretFile`).
    pub mounts: Vec<Mount>,
    /// `env:` variables → container paths (not secret: paths only).
    pub path_env: BTreeMap<String, String>,
}

impl SecretFiles {
    /// The host directory, if any file was written.
    pub fn dir(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.path().to_path_buf())
    }

    /// Take every value off the host once the container has mounted it.
    ///
    /// Each file is unlinked — the container's bind holds the inode, so it
    /// keeps reading the value — and an empty 0600 file is put back at the
    /// same path, because both engines re-bind every mount source for
    /// archive calls (script upload, the read-back drain) and refuse all of
    /// them once a source is missing (dockerd 20.10, Podman 4.3).
    pub fn scrub(&mut self) -> Result<(), SecretError> {
        for path in &self.files {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let io = |operation: &str| {
                let name = name.clone();
                let operation = operation.to_owned();
                move |source| SecretError::Io {
                    name,
                    operation,
                    source,
                }
            };
            std::fs::remove_file(path).map_err(io("remove the host copy"))?;
            private_file(path).map_err(io("put back an empty placeholder"))?;
        }
        Ok(())
    }
}

/// Create `path` as a new, empty 0600 file (never an existing one).
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// Write each file secret to a 0600 file in a fresh 0700 directory
/// `<root>/<run>` (see [`secrets_root`]) and plan its read-only bind.
pub fn write_files(
    files: &[FileSecret],
    root: &Path,
    run: &RunId,
) -> Result<SecretFiles, SecretError> {
    let mut out = SecretFiles {
        dir: None,
        files: Vec::new(),
        mounts: Vec::new(),
        path_env: BTreeMap::new(),
    };
    if files.is_empty() {
        return Ok(out);
    }
    let io = |name: &str, operation: &str| {
        let name = name.to_owned();
        let operation = operation.to_owned();
        move |source| SecretError::Io {
            name,
            operation,
            source,
        }
    };
    // Named after the run (the reaper maps it back), created fresh: an
    // existing entry is an error, never reused.
    let dir = tempfile::Builder::new()
        .prefix(run.as_str())
        .rand_bytes(0)
        .tempdir_in(root)
        .map_err(io("*", "create the secrets dir"))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(io("*", "restrict the secrets dir"))?;
    }
    for f in files {
        let path = dir.path().join(&f.name);
        let mut file = private_file(&path).map_err(io(&f.name, "create"))?;
        file.write_all(f.value.as_bytes())
            .map_err(io(&f.name, "write"))?;
        out.mounts.push(Mount {
            kind: MountKind::Bind,
            source: Some(path.to_string_lossy().into_owned()),
            target: f.container_path.clone(),
            readonly: true,
            size: None,
            origin: MountOrigin::SecretFile,
        });
        out.files.push(path);
        if let Some(var) = &f.path_env {
            out.path_env.insert(var.clone(), f.container_path.clone());
        }
    }
    out.dir = Some(dir);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(name: &str, delivery: SecretDelivery) -> SecretDecl {
        SecretDecl {
            name: name.into(),
            delivery,
            value: None,
            mount_path: None,
            env: None,
            optional: false,
            egress: Vec::new(),
        }
    }

    fn host() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("TOKEN".to_owned(), "t0ken".to_owned()),
            ("GH".to_owned(), "ghp_x".to_owned()),
        ])
    }

    #[test]
    fn env_secret_defaults_to_its_name() {
        let r = resolve(&[decl("TOKEN", SecretDelivery::Env)], &host()).unwrap();
        assert_eq!(r.env.get("TOKEN").map(String::as_str), Some("t0ken"));
    }

    #[test]
    fn value_reference_and_env_rename() {
        let mut d = decl("gh", SecretDelivery::Env);
        d.value = Some("${GH}".into());
        d.env = Some("GITHUB_TOKEN".into());
        let r = resolve(&[d], &host()).unwrap();
        assert_eq!(r.env.get("GITHUB_TOKEN").map(String::as_str), Some("ghp_x"));
    }

    #[test]
    fn missing_is_refused_without_the_value_optional_is_skipped() {
        let mut d = decl("NOPE", SecretDelivery::Env);
        let err = resolve(std::slice::from_ref(&d), &host()).unwrap_err();
        assert_eq!(err.code(), "SECRET_MISSING");
        assert!(err.to_string().contains("NOPE"));
        d.optional = true;
        assert!(resolve(&[d], &host()).unwrap().env.is_empty());
    }

    #[test]
    fn file_secret_paths_and_write() {
        let mut d = decl("tok", SecretDelivery::File);
        d.value = Some("${TOKEN}".into());
        d.env = Some("TOK_FILE".into());
        let r = resolve(&[d], &host()).unwrap();
        assert_eq!(r.files[0].container_path, "/run/iterion/secrets/tok");
        let parent = tempfile::tempdir().unwrap();
        let run = RunId::parse("r1").unwrap();
        let mut w = write_files(&r.files, parent.path(), &run).unwrap();
        let dir = w.dir().unwrap();
        assert_eq!(dir, parent.path().join("r1"), "named after the run");
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("tok")), 0o600);
        assert_eq!(std::fs::read_to_string(dir.join("tok")).unwrap(), "t0ken");
        assert_eq!(w.mounts[0].origin, MountOrigin::SecretFile);
        assert!(w.mounts[0].readonly);
        assert_eq!(w.path_env["TOK_FILE"], "/run/iterion/secrets/tok");
        // A reader holding the file (as a container's bind holds the inode)
        // keeps the value; the host path is left empty.
        let held = std::fs::File::open(dir.join("tok")).unwrap();
        w.scrub().unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("tok")).unwrap(), "");
        assert_eq!(mode(&dir.join("tok")), 0o600);
        let mut kept = String::new();
        std::io::Read::read_to_string(&mut &held, &mut kept).unwrap();
        assert_eq!(kept, "t0ken");
        // A second run with the same id never reuses the directory.
        assert!(write_files(&r.files, parent.path(), &run).is_err());
        drop(w);
        assert!(!dir.exists());
    }

    #[test]
    fn secrets_live_on_a_memory_filesystem_only() {
        let disk = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let env = BTreeMap::from([(
            SECRETS_DIR_ENV.to_owned(),
            disk.path().to_string_lossy().into_owned(),
        )]);
        let err = secrets_root(&env).unwrap_err();
        assert_eq!(err.code(), "SECRET_NO_MEMORY_FS", "{err}");
        // /dev/shm is a tmpfs on every Linux this runs on.
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        let env = BTreeMap::from([(
            SECRETS_DIR_ENV.to_owned(),
            shm.path().to_string_lossy().into_owned(),
        )]);
        let root = secrets_root(&env).unwrap();
        assert!(root.starts_with(shm.path()));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&root).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert_eq!(secrets_root(&env).unwrap(), root, "reused when ours");
        // Someone else's plant (here: a symlink) is refused, not followed.
        std::fs::remove_dir(&root).unwrap();
        std::os::unix::fs::symlink(disk.path(), &root).unwrap();
        assert_eq!(
            secrets_root(&env).unwrap_err().code(),
            "SECRET_NO_MEMORY_FS"
        );
        std::fs::remove_file(&root).unwrap();
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(secrets_root(&env).is_err(), "open to others");
    }

    #[test]
    fn bad_mount_path_and_name_are_refused() {
        let mut d = decl("tok", SecretDelivery::File);
        d.value = Some("x".into());
        d.mount_path = Some("/run/../etc/passwd".into());
        assert_eq!(resolve(&[d], &host()).unwrap_err().code(), "SECRET_INVALID");
        let mut d = decl("../x", SecretDelivery::File);
        d.value = Some("x".into());
        assert_eq!(resolve(&[d], &host()).unwrap_err().code(), "SECRET_INVALID");
    }

    #[test]
    fn redactor_masks_longest_first() {
        let r = resolve(
            &[
                decl("TOKEN", SecretDelivery::Env),
                decl("GH", SecretDelivery::Env),
            ],
            &host(),
        )
        .unwrap();
        assert_eq!(
            r.redactor().redact("a t0ken b ghp_x"),
            "a [REDACTED] b [REDACTED]"
        );
        let mut v = serde_json::json!({"out": ["x t0ken", 3], "t0ken": {"k": "ghp_x"}});
        r.redactor().redact_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"out": ["x [REDACTED]", 3], "[REDACTED]": {"k": "[REDACTED]"}})
        );
    }
}
