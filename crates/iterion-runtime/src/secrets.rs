//! Workflow secrets at run time (seed step 14, facts §6.9): resolve each
//! declared secret's value from the host environment, hand `as: env`
//! values to every exec (never to the container's create-time env, which
//! `docker inspect` shows for the container's lifetime), write `as: file`
//! values to 0600 files in a private 0700 per-run host directory bound
//! read-only into the sandbox, and redact exact values from log lines.
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
use std::path::PathBuf;

use iterion_core::plan::SECRETS_CONTAINER_DIR;
use iterion_core::{Mount, MountKind, MountOrigin};
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
}

impl std::fmt::Debug for ResolvedSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedSecrets")
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("files", &self.files)
            .finish()
    }
}

impl ResolvedSecrets {
    /// Every value, for redaction (longest first so a value containing
    /// another is masked whole).
    pub fn redactor(&self) -> Redactor {
        let mut values: Vec<String> = self
            .env
            .values()
            .chain(self.files.iter().map(|f| &f.value))
            .filter(|v| !v.is_empty())
            .cloned()
            .collect();
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        Redactor { values }
    }
}

/// Masks exact secret values in text bound for the run log or events.
#[derive(Clone, Default)]
pub struct Redactor {
    values: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} values)", self.values.len())
    }
}

/// What a masked value reads as.
pub const REDACTED: &str = "[REDACTED]";

impl Redactor {
    /// `text` with every secret value replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for v in &self.values {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), REDACTED);
            }
        }
        out
    }

    /// Whether there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Mask every secret value in the strings of `value` (keys included),
    /// recursively: for data that becomes event payloads.
    pub fn redact_value(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(s) => *s = self.redact(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(map) => {
                let taken = std::mem::take(map);
                for (k, mut v) in taken {
                    self.redact_value(&mut v);
                    map.insert(self.redact(&k), v);
                }
            }
            _ => {}
        }
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

/// The host side of the run's file secrets: a private directory removed
/// when dropped (teardown, and every early boot failure).
#[derive(Debug)]
pub struct SecretFiles {
    dir: Option<tempfile::TempDir>,
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
}

/// Write each file secret to a 0600 file in a fresh 0700 directory under
/// `parent` (outside the workspace) and plan its read-only bind.
pub fn write_files(
    files: &[FileSecret],
    parent: &std::path::Path,
) -> Result<SecretFiles, SecretError> {
    let mut out = SecretFiles {
        dir: None,
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
    std::fs::create_dir_all(parent).map_err(io("*", "create the secrets parent"))?;
    // An unpredictable name, then 0700 explicitly (tempfile's directory
    // mode follows the umask).
    let dir = tempfile::Builder::new()
        .prefix("secrets-")
        .tempdir_in(parent)
        .map_err(io("*", "create the secrets dir"))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(io("*", "restrict the secrets dir"))?;
    }
    for f in files {
        let path = dir.path().join(&f.name);
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut file = opts.open(&path).map_err(io(&f.name, "create"))?;
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
        let w = write_files(&r.files, parent.path()).unwrap();
        let dir = w.dir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("tok")), 0o600);
        assert_eq!(std::fs::read_to_string(dir.join("tok")).unwrap(), "t0ken");
        assert_eq!(w.mounts[0].origin, MountOrigin::SecretFile);
        assert!(w.mounts[0].readonly);
        assert_eq!(w.path_env["TOK_FILE"], "/run/iterion/secrets/tok");
        drop(w);
        assert!(!dir.exists());
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
        r.redactor().redact_value(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"out": ["x [REDACTED]", 3], "[REDACTED]": {"k": "[REDACTED]"}})
        );
    }
}
