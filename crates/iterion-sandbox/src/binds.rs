//! Host bind sources judged by what they really are (issue 19 item 1,
//! issue 14 item 1). A word list matched against the spelling let the
//! engine socket at a non-standard path, `/`, `/etc` and a symlink into
//! `/etc` through; here a source is resolved to its real path (every
//! symlink followed, `..` applied by the kernel) and that path is judged,
//! by the role of the bind:
//!
//! * **workspace** (the run's checkout, the worktree's `.git`): it may live
//!   anywhere a user keeps projects (`/root/proj` included); refused only
//!   when it is `/`, contains a sensitive path (so `/home`, `~`, `/etc`,
//!   `/var`, `/tmp` are refused), lies inside a kernel or engine area or a
//!   credential dir, or is not a directory;
//! * **managed** (iterion's own per-run dirs: run files, secret files,
//!   masks): allowed by default, but only under the managed roots the
//!   caller names, and never as a socket, device or fifo;
//! * **declared** (a workflow's or a repository devcontainer's `mounts:`,
//!   the host_state binds): refused when it is `/`, lies in or contains a
//!   kernel, engine or system area (`/proc`, `/sys`, `/dev`, `/etc`,
//!   `/run`, `/var/run`, `/boot`, every engine socket and data root),
//!   lies in or contains a home credential dir, has a credential
//!   component, lies inside iterion's private areas (the run store, the
//!   per-run state dir), is a socket, device or fifo — and, under `--trust
//!   untrusted`, lies outside the workspace.
//!
//! Every source must exist (a path that does not exist has no real path to
//! judge). A private area inside an allowed bind is not a refusal: the
//! caller masks it ([`resolve_plan_binds`] adds the masks), so the
//! workspace can hold the default `.iterion` store.
//!
//! [`sensitive_reason`] is the pure half (a normalised absolute path and a
//! role in, a reason out); [`judge_bind_in`] resolves through a
//! [`HostPaths`] and calls it ([`judge_bind`] on [`RealHost`]);
//! [`resolve_plan_binds`] (the sandbox decision, so a run and `doctor`)
//! rewrites a plan's sources to their real paths and adds the masks; [`recheck_plan_binds`] (the driver,
//! in `prepare` and immediately before create) refuses a plan whose
//! sources no longer resolve to themselves, so a component swapped for a
//! symlink after the judgement cannot win. `doctor --strict` and a run get
//! the same verdicts: they share the decision. This module does not decide which binds a plan has
//! (`mounts`) nor who the sandbox runs as (`identity`).

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use iterion_core::plan::path_is_under;
use iterion_core::{LaunchPlan, Mount, MountKind, MountOrigin};

use crate::guards::lexical::{GuardViolation, check_token, normalize_lexical};

/// Kernel, system and engine areas: never a declared bind source, never
/// under one, never an ancestor of one (facts §6.7, widened by issue 19).
pub const SEALED_AREAS: &[&str] = &["/proc", "/sys", "/dev", "/etc", "/run", "/var/run", "/boot"];

/// The engines' standard sockets and data roots; the ones a driver reports
/// (`Driver::host_footprint`) and the ones `DOCKER_HOST`/`CONTAINER_HOST`
/// name are added at run time.
pub const ENGINE_AREAS: &[&str] = &[
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/var/run/podman/podman.sock",
    "/run/podman/podman.sock",
    "/run/containerd",
    "/var/lib/docker",
    "/var/lib/containers",
    "/var/lib/containerd",
];

/// Shared scratch areas: a bind may lie under them but never be one (or an
/// ancestor of one): other users' agent and display sockets live there.
pub const SHARED_AREAS: &[&str] = &["/tmp", "/var/tmp"];

/// Credential entries of a home directory; also refused as any component
/// of a declared source (facts §6.7).
pub const CREDENTIAL_NAMES: &[&str] = &[
    ".aws",
    ".ssh",
    ".gnupg",
    ".docker",
    ".kube",
    ".gcloud",
    ".config/gcloud",
    ".azure",
    ".npmrc",
    ".pypirc",
];

/// Kernel areas a workspace may not lie in (unlike `/etc` or `/run`, where
/// nothing forbids keeping a checkout).
const KERNEL_AREAS: &[&str] = &["/proc", "/sys", "/dev"];

/// Why a bind is in a plan, as far as judging its source goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindRole {
    /// The run's checkout (or the worktree's repository `.git`).
    Workspace,
    /// A read-only guard inside the worktree's `.git` (its `config` file,
    /// its `hooks`): judged as the workspace is, but it may be a file.
    GitGuard,
    /// A directory iterion created for the run (run files, secrets, masks).
    Managed,
    /// A workflow's or devcontainer's mount, or a host_state bind.
    Declared,
    /// A file iterion itself provides from the host (the runner binary,
    /// read-only): judged like a declared mount, but iterion's own choice,
    /// so `--trust untrusted` does not confine it to the workspace; it
    /// must be a regular file.
    Runtime,
}

impl BindRole {
    /// The role a plan mount's origin gives its source.
    pub fn of(origin: MountOrigin) -> Self {
        match origin {
            MountOrigin::Workspace | MountOrigin::WorktreeGit => Self::Workspace,
            MountOrigin::WorktreeGitGuard => Self::GitGuard,
            MountOrigin::RunFiles
            | MountOrigin::SecretFile
            | MountOrigin::Scratch
            | MountOrigin::Attachments
            | MountOrigin::Bundle
            | MountOrigin::ReadBack
            | MountOrigin::Mask => Self::Managed,
            MountOrigin::Workflow | MountOrigin::HostState => Self::Declared,
            MountOrigin::RunnerBinary => Self::Runtime,
        }
    }
}

/// What the judge knows about the host (captured once, passed around).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostBindSettings {
    /// Engine sockets and data roots beyond [`ENGINE_AREAS`]: reported by
    /// the drivers, named by `DOCKER_HOST` / `CONTAINER_HOST`.
    pub engine_paths: Vec<String>,
    /// Home directories whose [`CREDENTIAL_NAMES`] are sensitive.
    pub homes: Vec<String>,
    /// iterion's private areas (the run store, the per-run state dir): a
    /// bind containing one gets it masked; a declared bind inside one is
    /// refused.
    pub private: Vec<String>,
    /// Roots a managed bind must lie under (empty: not checked).
    pub managed_roots: Vec<String>,
    /// Where `worktree: auto` worktrees live (`<private>/worktrees`): a
    /// workspace below one is a run's own checkout, not the private area
    /// it sits in (the rest of the store stays out of reach).
    pub worktree_roots: Vec<String>,
}

impl HostBindSettings {
    /// Capture the host facts: every home in `/etc/passwd` plus `$HOME`,
    /// and the unix sockets `DOCKER_HOST` / `CONTAINER_HOST` name. The
    /// impure half; `lookup` reads the environment.
    pub fn capture(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut homes: Vec<String> = std::fs::read_to_string("/etc/passwd")
            .map(|text| passwd_homes(&text))
            .unwrap_or_default();
        homes.extend(lookup("HOME").filter(|h| h.starts_with('/')));
        homes.push("/root".to_owned());
        let mut engine_paths = Vec::new();
        for var in ["DOCKER_HOST", "CONTAINER_HOST"] {
            if let Some(path) = lookup(var).as_deref().and_then(unix_socket_path) {
                engine_paths.push(path);
            }
        }
        let mut settings = Self {
            engine_paths,
            homes,
            ..Self::default()
        };
        settings.dedup();
        settings
    }

    /// Add paths an engine owns (socket, data root).
    pub fn with_engine_paths(mut self, paths: impl IntoIterator<Item = String>) -> Self {
        self.engine_paths.extend(paths);
        self.dedup();
        self
    }

    /// Add iterion's private areas (store, state dir), as real paths when
    /// they exist so they compare with resolved sources.
    pub fn with_private(mut self, paths: impl IntoIterator<Item = String>) -> Self {
        self.private
            .extend(paths.into_iter().map(|p| real_or_lexical(&p)));
        self.dedup();
        self
    }

    /// Name the roots `worktree: auto` worktrees are made under.
    pub fn with_worktree_roots(mut self, roots: impl IntoIterator<Item = String>) -> Self {
        self.worktree_roots
            .extend(roots.into_iter().map(|p| real_or_lexical(&p)));
        self.dedup();
        self
    }

    /// Name the roots managed binds must lie under.
    pub fn with_managed_roots(mut self, roots: impl IntoIterator<Item = String>) -> Self {
        self.managed_roots
            .extend(roots.into_iter().map(|p| real_or_lexical(&p)));
        self.dedup();
        self
    }

    fn dedup(&mut self) {
        for list in [
            &mut self.engine_paths,
            &mut self.homes,
            &mut self.private,
            &mut self.managed_roots,
            &mut self.worktree_roots,
        ] {
            for p in list.iter_mut() {
                *p = normalize_lexical(p);
            }
            list.sort();
            list.dedup();
        }
    }

    /// Every credential path of every known home (root's always).
    fn credential_paths(&self) -> impl Iterator<Item = String> + '_ {
        let root = std::iter::once("/root");
        root.chain(self.homes.iter().map(String::as_str))
            .flat_map(|home| {
                CREDENTIAL_NAMES
                    .iter()
                    .map(move |name| normalize_lexical(&format!("{home}/{name}")))
            })
    }

    /// Engine areas, standard and reported.
    fn engine_areas(&self) -> impl Iterator<Item = String> + '_ {
        ENGINE_AREAS
            .iter()
            .map(|s| (*s).to_owned())
            .chain(self.engine_paths.iter().cloned())
    }
}

/// The settings one run is judged with — and `doctor --strict`'s view of
/// that run, so both read the same verdicts: the captured host facts, the
/// paths every reachable engine owns, iterion's private areas (the
/// directory store, the state dir holding every run's files and secrets)
/// and the state dirs (per-run host dirs, file secrets on their memory
/// filesystem) as the managed roots.
pub fn run_settings(
    lookup: impl Fn(&str) -> Option<String>,
    engine_paths: impl IntoIterator<Item = String>,
    store_dir: Option<&Path>,
    state_dirs: &[std::path::PathBuf],
) -> HostBindSettings {
    let state: Vec<String> = state_dirs
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect();
    let private: Vec<String> = store_dir
        .map(|d| d.to_string_lossy().into_owned())
        .into_iter()
        .chain(state.iter().cloned())
        .collect();
    let worktrees: Vec<String> = private.iter().map(|p| format!("{p}/worktrees")).collect();
    HostBindSettings::capture(lookup)
        .with_engine_paths(engine_paths)
        .with_worktree_roots(worktrees)
        .with_private(private)
        .with_managed_roots(state)
}

/// The home column of `/etc/passwd` (absolute paths only).
pub fn passwd_homes(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split(':').nth(5))
        .filter(|h| h.starts_with('/'))
        .map(str::to_owned)
        .collect()
}

/// The socket path of a `unix://` (or bare absolute) engine address.
pub fn unix_socket_path(address: &str) -> Option<String> {
    let a = address.trim();
    let path = a.strip_prefix("unix://").unwrap_or(a);
    path.starts_with('/').then(|| normalize_lexical(path))
}

fn real_or_lexical(path: &str) -> String {
    std::fs::canonicalize(path)
        .ok()
        .and_then(|p| p.to_str().map(str::to_owned))
        .unwrap_or_else(|| normalize_lexical(path))
}

/// The run a bind is judged for.
#[derive(Debug, Clone, Copy, Default)]
pub struct BindScope<'a> {
    /// Real path of the workspace (`None`: no workspace known, e.g. the
    /// driver's re-check, which relies on the sources being unchanged).
    pub workspace: Option<&'a str>,
    /// `--trust untrusted`: a declared bind outside the workspace is refused.
    pub untrusted: bool,
}

fn refuse(source: &str, reason: impl Into<String>) -> GuardViolation {
    GuardViolation {
        field: "mount source".to_owned(),
        value: source.to_owned(),
        reason: reason.into(),
    }
}

/// Why `path` (normalised, absolute) may not be a bind source of `role`,
/// or `None`. Pure: the same answer for a spelling and for a real path.
pub fn sensitive_reason(
    path: &str,
    role: BindRole,
    settings: &HostBindSettings,
    scope: &BindScope<'_>,
) -> Option<String> {
    if role == BindRole::Managed {
        return None;
    }
    if path == "/" {
        return Some("the host's root directory".to_owned());
    }
    let sealed: Vec<String> = SEALED_AREAS
        .iter()
        .map(|s| (*s).to_owned())
        .chain(settings.engine_areas())
        .chain(settings.credential_paths())
        .collect();
    // Containing a sensitive path exposes it, whatever the role.
    let shared = SHARED_AREAS.iter().map(|s| (*s).to_owned());
    for area in sealed.iter().cloned().chain(shared) {
        if path_is_under(&area, path) {
            return Some(if area == path {
                format!("sensitive host path {area}")
            } else {
                format!("contains the sensitive host path {area}")
            });
        }
    }
    // A run's worktree (strictly below a worktree root) is its checkout.
    let worktree = role == BindRole::Workspace
        && settings
            .worktree_roots
            .iter()
            .any(|root| path_is_under(path, root) && path != root);
    for private in &settings.private {
        if path_is_under(path, private) && !worktree {
            return Some(format!("inside iterion's private area {private}"));
        }
    }
    match role {
        BindRole::Managed => None,
        BindRole::Workspace | BindRole::GitGuard => {
            let inside = KERNEL_AREAS
                .iter()
                .map(|s| (*s).to_owned())
                .chain(settings.engine_areas())
                .chain(settings.credential_paths());
            for area in inside {
                if path_is_under(path, &area) {
                    return Some(format!("inside the sensitive host path {area}"));
                }
            }
            None
        }
        BindRole::Declared | BindRole::Runtime => {
            for area in &sealed {
                if path_is_under(path, area) {
                    return Some(format!("inside the sensitive host path {area}"));
                }
            }
            let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
            for (i, comp) in comps.iter().enumerate() {
                if CREDENTIAL_NAMES.contains(comp)
                    || (*comp == ".config" && comps.get(i + 1) == Some(&"gcloud"))
                {
                    return Some(format!("credential path component {comp}"));
                }
            }
            if scope.untrusted
                && role == BindRole::Declared
                && let Some(ws) = scope.workspace
                && !path_is_under(path, ws)
            {
                return Some("outside the workspace (--trust untrusted)".to_owned());
            }
            None
        }
    }
}

/// The lexical half alone (no filesystem): a spelling that names a
/// sensitive path is refused before anything is resolved. Used where only
/// the spelling is at hand (mount-string parsing, the driver's plan guard).
pub fn check_spelling(
    source: &str,
    role: BindRole,
    settings: &HostBindSettings,
) -> Result<String, GuardViolation> {
    check_token("mount source", source)?;
    let trimmed = source.trim();
    if trimmed.is_empty() {
        return Err(refuse(source, "empty source"));
    }
    if !trimmed.starts_with('/') {
        return Err(refuse(
            source,
            "not an absolute path (the engine would resolve it against its own directory)",
        ));
    }
    let lexical = normalize_lexical(trimmed);
    if let Some(reason) = sensitive_reason(&lexical, role, settings, &BindScope::default()) {
        return Err(refuse(source, reason));
    }
    // A credential dir a later `..` walks out of still refuses (deny wins).
    if matches!(role, BindRole::Declared | BindRole::Runtime) {
        for comp in trimmed.split('/') {
            if CREDENTIAL_NAMES.contains(&comp) {
                return Err(refuse(source, format!("credential path component {comp}")));
            }
        }
    }
    Ok(lexical)
}

/// What a host path really is: its real path (every symlink followed)
/// and the kind of file there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPath {
    /// The real path.
    pub real: String,
    /// What is there.
    pub kind: PathKind,
}

/// The kind of file a real path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A unix socket.
    Socket,
    /// A block or character device.
    Device,
    /// A fifo.
    Fifo,
}

/// Why a host path could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// Nothing is there.
    NotFound,
    /// It resolves to a path that is not UTF-8.
    NotUtf8,
    /// Resolving or inspecting it failed.
    Failed {
        /// The error as the OS said it.
        reason: String,
    },
}

/// The host's filesystem as the bind judge sees it. The judge asks only
/// this, so the sandbox decision stays a function of what it is given:
/// [`RealHost`] asks the kernel; the decision layers the per-run
/// directories the booter will create over it (`crate::decision`), and
/// tests hand a table.
pub trait HostPaths {
    /// Resolve `path` (absolute, normalised).
    fn resolve(&self, path: &str) -> Result<ResolvedPath, ResolveError>;
}

/// The paths of `private` (iterion's areas: the store, the state dirs)
/// that lie inside `workspace`, relative to it: what a copy-based
/// workspace leaves out, as a bind masks them (issue 14 item 2).
pub fn private_areas_within<'a>(
    workspace: &str,
    private: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    let workspace = workspace.trim_end_matches('/');
    private
        .into_iter()
        .filter_map(|p| {
            let p = p.trim_end_matches('/');
            let rest = p.strip_prefix(workspace)?.strip_prefix('/')?;
            (!rest.is_empty()).then(|| rest.to_owned())
        })
        .collect()
}

/// The real filesystem of this host.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealHost;

impl HostPaths for RealHost {
    fn resolve(&self, path: &str) -> Result<ResolvedPath, ResolveError> {
        let real = match std::fs::canonicalize(path) {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ResolveError::NotFound);
            }
            Err(e) => {
                return Err(ResolveError::Failed {
                    reason: format!("cannot be resolved: {e}"),
                });
            }
        };
        let real = real
            .to_str()
            .map(str::to_owned)
            .ok_or(ResolveError::NotUtf8)?;
        let meta = std::fs::symlink_metadata(&real).map_err(|e| ResolveError::Failed {
            reason: format!("cannot be inspected: {e}"),
        })?;
        let t = meta.file_type();
        let kind = if t.is_socket() {
            PathKind::Socket
        } else if t.is_block_device() || t.is_char_device() {
            PathKind::Device
        } else if t.is_fifo() {
            PathKind::Fifo
        } else if t.is_dir() {
            PathKind::Dir
        } else {
            PathKind::File
        };
        Ok(ResolvedPath { real, kind })
    }
}

/// Judge one bind source on this host's real filesystem (the driver's
/// re-check); [`judge_bind_in`] with [`RealHost`].
pub fn judge_bind(
    source: &str,
    role: BindRole,
    settings: &HostBindSettings,
    scope: &BindScope<'_>,
) -> Result<String, GuardViolation> {
    judge_bind_in(&RealHost, source, role, settings, scope)
}

/// Judge one bind source: its spelling, then its real path (every
/// symlink followed) and the kind of file it is. Returns the real path,
/// which is what the engine must be given.
pub fn judge_bind_in(
    fs: &dyn HostPaths,
    source: &str,
    role: BindRole,
    settings: &HostBindSettings,
    scope: &BindScope<'_>,
) -> Result<String, GuardViolation> {
    let lexical = check_spelling(source, role, settings)?;
    let ResolvedPath { real, kind } = match fs.resolve(&lexical) {
        Ok(r) => r,
        Err(ResolveError::NotFound) => {
            return Err(refuse(
                source,
                "does not exist (a bind source must exist so its real path can be judged)",
            ));
        }
        Err(ResolveError::NotUtf8) => {
            return Err(refuse(source, "resolves to a path that is not UTF-8"));
        }
        Err(ResolveError::Failed { reason }) => return Err(refuse(source, reason)),
    };
    let shown = |reason: String| {
        if real == lexical {
            reason
        } else {
            format!("resolves to {real}: {reason}")
        }
    };
    match kind {
        PathKind::Socket => return Err(refuse(source, shown("is a socket".to_owned()))),
        PathKind::Device => return Err(refuse(source, shown("is a device".to_owned()))),
        PathKind::Fifo => return Err(refuse(source, shown("is a fifo".to_owned()))),
        PathKind::Dir | PathKind::File => {}
    }
    if role == BindRole::GitGuard && kind != PathKind::Dir && kind != PathKind::File {
        return Err(refuse(
            source,
            shown("is not a file or directory".to_owned()),
        ));
    }
    if role == BindRole::Workspace && kind != PathKind::Dir {
        return Err(refuse(source, shown("is not a directory".to_owned())));
    }
    if role == BindRole::Runtime && kind != PathKind::File {
        return Err(refuse(source, shown("is not a regular file".to_owned())));
    }
    if role == BindRole::Managed
        && !settings.managed_roots.is_empty()
        && !settings
            .managed_roots
            .iter()
            .any(|root| path_is_under(&real, root))
    {
        return Err(refuse(
            source,
            shown("is not under iterion's per-run state directory".to_owned()),
        ));
    }
    if let Some(reason) = sensitive_reason(&real, role, settings, scope) {
        return Err(refuse(source, shown(reason)));
    }
    Ok(real)
}

/// Judge every host bind of a plan, rewrite each source to its real path,
/// and hide iterion's private areas that a kept bind would expose: an
/// empty read-only bind of `mask_source` over the area, after self-binds
/// of the directories between the bind's root and the area (a mount point
/// cannot be renamed, so the sandbox cannot move the area aside and plant
/// a forged one at its path). No `mask_source` when one is needed is a
/// refusal: the store is never left visible.
pub fn resolve_plan_binds(
    fs: &dyn HostPaths,
    plan: &mut LaunchPlan,
    settings: &HostBindSettings,
    scope: &BindScope<'_>,
    mask_source: Option<&str>,
) -> Result<(), GuardViolation> {
    let mut extra = Vec::new();
    for m in plan.mounts.iter_mut().filter(|m| m.kind == MountKind::Bind) {
        let source = m.source.clone().unwrap_or_default();
        let role = BindRole::of(m.origin);
        let real = judge_bind_in(fs, &source, role, settings, scope)?;
        if role != BindRole::Managed {
            for private in &settings.private {
                if !path_is_under(private, &real) || private == &real {
                    continue;
                }
                let Some(mask) = mask_source else {
                    return Err(refuse(
                        &source,
                        format!(
                            "contains iterion's private area {private}, and no mask is available"
                        ),
                    ));
                };
                extra.extend(masks_for(&real, &m.target, private, mask));
            }
        }
        m.source = Some(real);
    }
    for mask in extra {
        if !plan.mounts.iter().any(|m| m.target == mask.target) {
            plan.mounts.push(mask);
        }
    }
    Ok(())
}

/// The self-binds and the final mask hiding `private` inside a bind of
/// `root` at `target`.
fn masks_for(root: &str, target: &str, private: &str, mask: &str) -> Vec<Mount> {
    let rel = private[root.len()..].trim_start_matches('/');
    let comps: Vec<&str> = rel.split('/').collect();
    let join =
        |base: &str, parts: &[&str]| normalize_lexical(&format!("{base}/{}", parts.join("/")));
    let mut out = Vec::new();
    for i in 1..comps.len() {
        out.push(Mount {
            kind: MountKind::Bind,
            source: Some(join(root, &comps[..i])),
            target: join(target, &comps[..i]),
            readonly: false,
            size: None,
            origin: MountOrigin::Workspace,
        });
    }
    out.push(Mount {
        kind: MountKind::Bind,
        source: Some(mask.to_owned()),
        target: join(target, &comps),
        readonly: true,
        size: None,
        origin: MountOrigin::Mask,
    });
    out
}

/// The driver's re-check, in `prepare` and immediately before create:
/// every host bind source must still resolve to itself (the booter wrote
/// real paths, so a difference means a component was swapped since the
/// judgement) and pass [`judge_bind`] again.
pub fn recheck_plan_binds(
    plan: &LaunchPlan,
    settings: &HostBindSettings,
) -> Result<(), GuardViolation> {
    for m in plan.mounts.iter().filter(|m| m.kind == MountKind::Bind) {
        let source = m.source.clone().unwrap_or_default();
        let real = judge_bind(
            &source,
            BindRole::of(m.origin),
            settings,
            &BindScope::default(),
        )?;
        if normalize_lexical(source.trim()) != real || !Path::new(&real).is_absolute() {
            return Err(refuse(
                &source,
                format!("now resolves to {real}: a component changed after the bind was judged"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
