//! Mount planning (facts §6) and the per-driver finalize step (ADR-143).
//!
//! [`plan_launch`] turns a resolved [`Spec`] plus a snapshot of host facts
//! into a [`LaunchPlan`] as if every mount were possible; it is pure (host
//! facts arrive as a [`HostSnapshot`]; only [`HostSnapshot::capture`]
//! looks at the real host). [`finalize_mounts_for_driver`] then drops what
//! a driver cannot honour and withdraws exactly the promises those mounts
//! served: a promised variable is named iff a kept mount serves its path
//! (ADR-143 R5/R13). It does not launch anything, and the guards
//! ([`crate::guards::check_launch_plan`]) run on its output in the driver.
//!
//! Driver contract not expressible in [`Mount`] without a core change: a
//! `Tmpfs` with origin `HostState` (HOME and its intermediate parents) is
//! "uid-owned" — the driver mounts it with `uid=`/`gid=` (or mode 1777)
//! taken from the plan's numeric `user`, so binds under it stay reachable.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;

use iterion_core::event::DroppedBind;
use iterion_core::plan::{
    ATTACHMENTS_CONTAINER_DIR, BUNDLE_CONTAINER_DIR, Limits, RUN_FILES_CONTAINER_DIR,
    RUN_FILES_ENV, ResolvedBuild, path_is_under,
};
use iterion_core::{
    ByteSize, Capabilities, DriverName, EventKind, HostState, LaunchPlan, Mount, MountKind,
    MountOrigin, ReadBackDecl, Spec,
};

use crate::binds::{BindRole, HostBindSettings, check_spelling};
use crate::env::EnvSnapshot;
use crate::error::PolicyError;
use crate::guards::{
    check_build_path, check_read_back_path, normalize_lexical, parse_docker_mount,
};

/// Container path of the per-run scratch area (the sources leave it open).
pub const SCRATCH_CONTAINER_DIR: &str = "/iterion/scratch";

/// Variables that name a container path the runtime promises; each is
/// named iff a kept mount serves its value (ADR-143).
pub const PROMISE_VARS: &[&str] = &[RUN_FILES_ENV];

/// The host's git identity, passed as env under `host_state: none`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitIdentity {
    /// `user.name`.
    pub name: Option<String>,
    /// `user.email`.
    pub email: Option<String>,
}

/// Host facts planning needs, captured once (pure planning, testable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostSnapshot {
    /// Host home (`None` = unresolvable ⇒ host_state candidates skipped).
    pub home: Option<String>,
    /// `$ITERION_HOME`.
    pub iterion_home: Option<String>,
    /// `$GOCACHE`.
    pub gocache: Option<String>,
    /// `$GOMODCACHE`.
    pub gomodcache: Option<String>,
    /// The caller's uid.
    pub uid: u32,
    /// The caller's gid.
    pub gid: u32,
    /// Git identity.
    pub git: GitIdentity,
    /// Normalised host paths known to exist.
    pub existing: BTreeSet<String>,
}

impl HostSnapshot {
    /// Whether a host path exists (per the snapshot).
    pub fn exists(&self, path: &str) -> bool {
        self.existing.contains(&normalize_lexical(path))
    }

    /// The host_state candidates of facts §6.2, in order.
    pub fn host_state_candidates(&self) -> Vec<String> {
        let Some(home) = self.home.as_deref() else {
            return Vec::new();
        };
        let h = |rel: &str| format!("{}/{rel}", home.trim_end_matches('/'));
        vec![
            self.iterion_home.clone().unwrap_or_else(|| h(".iterion")),
            h(".claude"),
            h(".claude.json"),
            h(".codex"),
            h(".gitconfig"),
            self.gocache.clone().unwrap_or_else(|| h(".cache/go-build")),
            self.gomodcache.clone().unwrap_or_else(|| h("go/pkg/mod")),
            h(".npm"),
            h(".local/share/pnpm"),
            h(".cache/yarn"),
        ]
    }

    /// Snapshot the real host: env, uid/gid (owner of `/proc/self`), git
    /// identity (env first, then `git_config`, the caller's reader of the
    /// host's git configuration: the runtime's one home of host-side git),
    /// and which candidates and `extra_paths` exist. The one impure
    /// function of this module.
    pub fn capture(
        env: &EnvSnapshot,
        extra_paths: &[&str],
        git_config: &dyn Fn(&str) -> Option<String>,
    ) -> Self {
        let (uid, gid) = std::fs::metadata("/proc/self")
            .map(|m| (m.uid(), m.gid()))
            .unwrap_or((0, 0));
        let var = |k: &str| std::env::var(k).ok().filter(|s| !s.is_empty());
        let mut snap = Self {
            home: env.home.clone().filter(|h| h.starts_with('/')),
            iterion_home: env.iterion_home.clone().filter(|s| !s.is_empty()),
            gocache: env.gocache.clone().filter(|s| !s.is_empty()),
            gomodcache: env.gomodcache.clone().filter(|s| !s.is_empty()),
            uid,
            gid,
            git: GitIdentity {
                name: var("GIT_AUTHOR_NAME").or_else(|| git_config("user.name")),
                email: var("GIT_AUTHOR_EMAIL").or_else(|| git_config("user.email")),
            },
            existing: BTreeSet::new(),
        };
        let mut probe: Vec<String> = snap.host_state_candidates();
        probe.extend(extra_paths.iter().map(|p| (*p).to_owned()));
        for p in probe {
            if std::fs::symlink_metadata(&p).is_ok() {
                snap.existing.insert(normalize_lexical(&p));
            }
        }
        snap
    }
}

/// What the runtime hands planning besides the spec.
#[derive(Debug, Clone)]
pub struct PlanInputs<'a> {
    /// The resolved spec (active mode).
    pub spec: &'a Spec,
    /// Resolved host_state.
    pub host_state: Option<HostState>,
    /// Its source label (for `sandbox_host_state_mounted`).
    pub host_state_source: &'a str,
    /// Absolute host path of the workspace (worktree or repo/cwd).
    pub workspace: &'a str,
    /// `<repo>/.git` when the workspace is a worktree of another root.
    pub worktree_git_dir: Option<&'a str>,
    /// What of that `.git` is bound read-only over it (its `config` and
    /// `hooks`, when they exist).
    pub worktree_git_guards: &'a [String],
    /// What of that `.git` is absent and gets `mask_dir` bound over it
    /// (its `hooks`, when the repository has none).
    pub worktree_git_masks: &'a [String],
    /// The run's empty read-only directory (masks bind it).
    pub mask_dir: Option<&'a str>,
    /// Host scratch dir of the run.
    pub scratch_dir: Option<&'a str>,
    /// Host attachments dir of the run.
    pub attachments_dir: Option<&'a str>,
    /// Host run-files dir of the run (filesystem store).
    pub run_files_dir: Option<&'a str>,
    /// Host bundle dir.
    pub bundle_dir: Option<&'a str>,
    /// `ITERION_SANDBOX_READBACK_CAP`, parsed ([`crate::env::SandboxEnv`]).
    pub readback_cap: Option<ByteSize>,
    /// `--trust untrusted`: host_state candidates outside the workspace
    /// are skipped (a declared bind outside it is refused by the judge).
    pub untrusted: bool,
}

/// A plan and the events planning produced.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedLaunch {
    /// The plan (all mounts, before the driver's capabilities speak).
    pub plan: LaunchPlan,
    /// `sandbox_host_state_mounted`.
    pub events: Vec<EventKind>,
}

fn bind(source: &str, target: &str, readonly: bool, origin: MountOrigin) -> Mount {
    Mount {
        kind: MountKind::Bind,
        source: Some(normalize_lexical(source)),
        target: normalize_lexical(target),
        readonly,
        size: None,
        origin,
    }
}

fn tmpfs(target: &str, origin: MountOrigin) -> Mount {
    Mount {
        kind: MountKind::Tmpfs,
        source: None,
        target: normalize_lexical(target),
        readonly: false,
        size: None,
        origin,
    }
}

/// Build the launch plan (facts §6.1–§6.5).
pub fn plan_launch(
    inputs: &PlanInputs<'_>,
    host: &HostSnapshot,
) -> Result<PlannedLaunch, PolicyError> {
    let spec = inputs.spec;
    let workspace = normalize_lexical(inputs.workspace);
    let workdir = normalize_lexical(spec.workspace_folder.as_deref().unwrap_or(&workspace));
    let host_state = inputs.host_state.unwrap_or(HostState::Auto);
    let mut events = Vec::new();
    let mut env: BTreeMap<String, String> = spec.env.clone();
    let mut mounts = Vec::new();
    let env_cap = inputs.readback_cap;

    // host_state auto: uid-owned tmpfs HOME first (binds land on top of it).
    let mut host_state_mounts = Vec::new();
    if host_state == HostState::Auto {
        if let Some(home) = host.home.as_deref().map(normalize_lexical) {
            let home_holds_workdir = path_is_under(&home, &workdir);
            if !home_holds_workdir {
                mounts.push(tmpfs(&home, MountOrigin::HostState));
            }
            let mut parents = BTreeSet::new();
            let mut binds = Vec::new();
            for cand in host.host_state_candidates() {
                let cand = normalize_lexical(&cand);
                // Skip rules (facts §6.2), plus: a candidate whose spelling
                // the bind judge refuses (a credential dir) is skipped rather
                // than failing the whole run, and so is every candidate of an
                // untrusted run (none lies in the workspace, by the rule
                // above). The judge still sees the real path of the rest.
                if !host.exists(&cand)
                    || path_is_under(&cand, &workspace)
                    || path_is_under(&workspace, &cand)
                    || inputs.untrusted
                    || check_spelling(&cand, BindRole::Declared, &HostBindSettings::default())
                        .is_err()
                {
                    continue;
                }
                // Intermediate ancestors under HOME stay writable (facts §6.2 [I]).
                if !home_holds_workdir && path_is_under(&cand, &home) {
                    let rel = cand[home.len()..].trim_start_matches('/');
                    let comps: Vec<&str> = rel.split('/').collect();
                    for i in 1..comps.len() {
                        parents.insert(format!("{home}/{}", comps[..i].join("/")));
                    }
                }
                host_state_mounts.push(cand.clone());
                binds.push(bind(&cand, &cand, false, MountOrigin::HostState));
            }
            mounts.extend(parents.iter().map(|p| tmpfs(p, MountOrigin::HostState)));
            mounts.extend(binds);
            env.entry("HOME".to_owned()).or_insert(home);
        }
    } else {
        for (var, value) in [
            ("GIT_AUTHOR_NAME", &host.git.name),
            ("GIT_AUTHOR_EMAIL", &host.git.email),
            ("GIT_COMMITTER_NAME", &host.git.name),
            ("GIT_COMMITTER_EMAIL", &host.git.email),
        ] {
            if let Some(v) = value {
                env.entry(var.to_owned()).or_insert_with(|| v.clone());
            }
        }
    }
    events.push(EventKind::SandboxHostStateMounted {
        enabled: host_state == HostState::Auto,
        source: inputs.host_state_source.to_owned(),
        workspace_folder: Some(workdir.clone()),
        mounts: host_state_mounts,
    });

    mounts.push(bind(&workspace, &workdir, false, MountOrigin::Workspace));
    for raw in &spec.mounts {
        mounts.push(parse_docker_mount(raw)?);
    }
    let present = |p: Option<&str>| p.filter(|p| host.exists(p)).map(normalize_lexical);
    if host_state == HostState::Auto
        && let Some(src) = present(inputs.scratch_dir)
    {
        mounts.push(bind(
            &src,
            SCRATCH_CONTAINER_DIR,
            false,
            MountOrigin::Scratch,
        ));
    }
    if let Some(src) = present(inputs.attachments_dir) {
        mounts.push(bind(
            &src,
            ATTACHMENTS_CONTAINER_DIR,
            true,
            MountOrigin::Attachments,
        ));
    }
    let mut read_back = Vec::new();
    if let Some(src) = present(inputs.run_files_dir) {
        // A workflow mount already at the target (e.g. a PVC) serves it instead.
        if !mounts.iter().any(|m| m.target == RUN_FILES_CONTAINER_DIR) {
            mounts.push(bind(
                &src,
                RUN_FILES_CONTAINER_DIR,
                false,
                MountOrigin::RunFiles,
            ));
        }
        env.insert(RUN_FILES_ENV.to_owned(), RUN_FILES_CONTAINER_DIR.to_owned());
        read_back.push(ReadBackDecl {
            container_path: RUN_FILES_CONTAINER_DIR.to_owned(),
            cap: serving_cap(&mounts, RUN_FILES_CONTAINER_DIR)
                .or(env_cap)
                .unwrap_or(ByteSize::DEFAULT_READBACK_CAP),
            origin: MountOrigin::RunFiles,
        });
    }
    for path in &spec.read_back {
        let path = check_read_back_path(path.as_str())?;
        if read_back
            .iter()
            .any(|d: &ReadBackDecl| d.container_path == path)
        {
            continue;
        }
        read_back.push(ReadBackDecl {
            cap: serving_cap(&mounts, &path)
                .or(env_cap)
                .unwrap_or(ByteSize::DEFAULT_READBACK_CAP),
            container_path: path,
            origin: MountOrigin::ReadBack,
        });
    }
    // A declared path inside another one is drained with it (a declared
    // path's members are addressed by container path, so at the very same
    // keys; under run-files, at their path relative to it). Draining it again
    // would store its files twice and charge them to two caps.
    let declared: Vec<String> = read_back.iter().map(|d| d.container_path.clone()).collect();
    read_back.retain(|d| {
        d.origin == MountOrigin::RunFiles
            || !declared
                .iter()
                .any(|o| *o != d.container_path && path_is_under(&d.container_path, o))
    });
    if let Some(src) = present(inputs.bundle_dir) {
        mounts.push(bind(&src, BUNDLE_CONTAINER_DIR, true, MountOrigin::Bundle));
    }
    if let Some(git) = present(inputs.worktree_git_dir)
        && !path_is_under(&git, &workspace)
    {
        mounts.push(bind(&git, &git, false, MountOrigin::WorktreeGit));
        // Read-only over the read-write bind: git in the box commits
        // (objects, refs, its worktree's index), but cannot plant a hook or
        // a `core.fsmonitor`/filter command the host's git would run.
        for guard in inputs
            .worktree_git_guards
            .iter()
            .filter_map(|g| present(Some(g)))
            .filter(|g| path_is_under(g, &git) && *g != git)
        {
            mounts.push(bind(&guard, &guard, true, MountOrigin::WorktreeGitGuard));
        }
        // An absent `hooks` is no guard at all: the box would create it
        // and fill it. An empty read-only directory stands in its place.
        for target in inputs
            .worktree_git_masks
            .iter()
            .map(|t| normalize_lexical(t))
            .filter(|t| path_is_under(t, &git) && *t != git)
        {
            let Some(mask) = inputs.mask_dir else {
                return Err(PolicyError::InvalidSpec {
                    reason: format!(
                        "{target} is absent and there is no empty directory to bind \
                         read-only over it"
                    ),
                });
            };
            mounts.push(bind(mask, &target, true, MountOrigin::Mask));
        }
    }
    let build = match &spec.build {
        None => None,
        Some(b) => {
            let ws = std::path::Path::new(&workspace);
            let dockerfile_rel = b
                .dockerfile
                .clone()
                .unwrap_or_else(|| "Dockerfile".to_owned());
            let dockerfile = check_build_path(ws, "build dockerfile", &dockerfile_rel)?;
            let context = match &b.context {
                Some(c) => check_build_path(ws, "build context", c)?,
                None => dockerfile
                    .parent()
                    .map(|p| p.to_path_buf())
                    .unwrap_or_else(|| ws.to_path_buf()),
            };
            Some(ResolvedBuild {
                dockerfile: dockerfile.to_string_lossy().into_owned(),
                context: context.to_string_lossy().into_owned(),
                args: b.args.clone(),
                declared: b.clone(),
            })
        }
    };
    Ok(PlannedLaunch {
        plan: LaunchPlan {
            image: spec.image.clone(),
            build,
            // Who the sandbox runs as is decided once the driver's binds
            // are known (`crate::identity::decide_identity`).
            user: spec.user.clone(),
            workdir,
            env,
            mounts,
            read_back,
            post_create: spec.post_create.clone(),
            limits: Limits::default(),
            egress: None,
            host_gateway_alias: false,
            gateway_ports: Vec::new(),
            workspace_copy: None,
            egress_ca: None,
        },
        events,
    })
}

/// The `size=` of the innermost mount serving `path` (the read-back escape hatch).
fn serving_cap(mounts: &[Mount], path: &str) -> Option<ByteSize> {
    mounts
        .iter()
        .filter(|m| m.serves(path))
        .max_by_key(|m| m.target.len())
        .and_then(|m| m.size)
}

/// The plan a driver will launch, and the drop event when binds went.
#[derive(Debug, Clone, PartialEq)]
pub struct Finalized {
    /// The plan after the driver's capabilities spoke.
    pub plan: LaunchPlan,
    /// `sandbox_host_binds_dropped`, when anything was dropped or withdrawn.
    pub dropped: Option<EventKind>,
}

/// Drop every mount the driver cannot honour (workflow mounts included),
/// lay driver-owned storage for read-back paths on a draining driver, and
/// withdraw exactly the promised variables no kept mount serves.
///
/// * no host binds: each bind is dropped, except run-files/read-back
///   binds on a draining driver (served by driver-owned storage, a
///   `Volume` with no source), the workspace on a driver that copies it
///   in and exports it back (`plan.workspace_copy` then names its source),
///   and file secrets on a driver that copies them
///   (`secret_file_copy`: it delivers their content from the bind's
///   source at creation);
/// * neither binds nor drains (ADR-143 R5): no run-files storage, no
///   variable, no declaration; a workflow-declared read-back path is a
///   typed refusal (R2);
/// * a promised variable is named iff a kept mount serves its value.
pub fn finalize_mounts_for_driver(
    plan: LaunchPlan,
    driver: DriverName,
    caps: &Capabilities,
) -> Result<Finalized, PolicyError> {
    let mut plan = plan;
    let mut dropped = Vec::new();
    let mut kept = Vec::new();
    for m in std::mem::take(&mut plan.mounts) {
        let storage_only = matches!(m.origin, MountOrigin::RunFiles | MountOrigin::ReadBack);
        if !caps.mounts {
            // Host passthrough: nothing is mounted at all.
            if m.is_host_bind() {
                dropped.push(DroppedBind {
                    source: m.source.clone().unwrap_or_default(),
                    target: m.target.clone(),
                });
            }
            continue;
        }
        if storage_only && !caps.can_serve_read_back() {
            if m.is_host_bind() {
                dropped.push(DroppedBind {
                    source: m.source.clone().unwrap_or_default(),
                    target: m.target.clone(),
                });
            }
            continue;
        }
        if m.is_host_bind() && !caps.host_bind_mounts {
            if storage_only && caps.read_back_drain {
                kept.push(Mount {
                    kind: MountKind::Volume,
                    source: None,
                    readonly: false,
                    ..m
                });
            } else if m.origin == MountOrigin::SecretFile && caps.secret_file_copy {
                // The driver reads the host file at creation and delivers
                // the content itself, read-only (a Kubernetes pod: a key of
                // the per-run Secret, projected at the target). Dropping it
                // refused every run with a file secret there (issue 12).
                kept.push(m);
            } else if m.origin == MountOrigin::Workspace && caps.archive_in && caps.workspace_export
            {
                // A copy-based workspace (issue 14 item 2): copied in at
                // start, exported back at teardown. Only where both halves
                // exist: a copy nothing brings back loses the run's work.
                plan.workspace_copy = Some(iterion_core::WorkspaceCopy {
                    host: m.source.clone().unwrap_or_default(),
                    ..iterion_core::WorkspaceCopy::default()
                });
                kept.push(Mount {
                    kind: MountKind::Volume,
                    source: None,
                    ..m
                });
            } else {
                dropped.push(DroppedBind {
                    source: m.source.clone().unwrap_or_default(),
                    target: m.target.clone(),
                });
            }
            continue;
        }
        kept.push(m);
    }
    let mut decls = Vec::new();
    for decl in std::mem::take(&mut plan.read_back) {
        let served = caps.mounts && kept.iter().any(|m| m.serves(&decl.container_path));
        if served {
            decls.push(decl);
        } else if caps.mounts && caps.read_back_drain {
            kept.push(Mount {
                kind: MountKind::Volume,
                source: None,
                target: decl.container_path.clone(),
                readonly: false,
                size: None,
                origin: decl.origin,
            });
            decls.push(decl);
        } else if decl.origin == MountOrigin::RunFiles {
            // The runtime's own promise: silently not laid (R5).
        } else {
            return Err(PolicyError::ReadBackUnservable {
                driver: driver.as_str().to_owned(),
                path: decl.container_path,
            });
        }
    }
    plan.mounts = kept;
    plan.read_back = decls;
    let mut withdrawn = Vec::new();
    for var in PROMISE_VARS {
        if let Some(value) = plan.env.get(*var)
            && !plan.mounts.iter().any(|m| m.serves(value))
        {
            plan.env.remove(*var);
            withdrawn.push((*var).to_owned());
        }
    }
    // The converse: kept run-files storage is always named.
    if plan
        .mounts
        .iter()
        .any(|m| m.origin == MountOrigin::RunFiles)
    {
        plan.env
            .insert(RUN_FILES_ENV.to_owned(), RUN_FILES_CONTAINER_DIR.to_owned());
    }
    let dropped = (!dropped.is_empty() || !withdrawn.is_empty()).then_some(
        EventKind::SandboxHostBindsDropped {
            driver,
            dropped,
            withdrawn_env: withdrawn,
        },
    );
    Ok(Finalized { plan, dropped })
}

#[cfg(test)]
mod tests;
