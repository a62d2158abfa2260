//! The host a run's sandbox is decided on ([`SandboxHost`]): the parsed
//! environment, the drivers from the one probe ([`HostDrivers`]), where
//! per-run state lives, the run store's directory and iterion's own binds.
//! [`SandboxHost::decide`] takes the snapshots the pure decision needs (the
//! repository, the host, the run's secrets as shapes) and calls
//! [`iterion_sandbox::decision::decide`]; the policy booter and `iterion
//! sandbox doctor --strict` both go through it, so they are handed the
//! same decision for the same run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use iterion_core::{Driver, DriverName, Mount, RunId, Spec, Trust};
use iterion_dsl::ir::SecretDecl;
use iterion_sandbox::binds::{RealHost, run_settings};
use iterion_sandbox::decision::{
    DecisionRequest, FileSecretShape, RepoSnapshot, RunPaths, WorkflowFacts, decide,
};
use iterion_sandbox::env::SandboxEnv;
use iterion_sandbox::host::{DriverOffer, HostKind};
use iterion_sandbox::mounts::HostSnapshot;
use iterion_sandbox::precedence::SandboxFlags;

use super::dirs::{RunDirs, board_dir, private_state_dirs};
use super::handoff::Decided;
use crate::secrets::{resolve as resolve_secrets, secrets_root};

/// The drivers this host offers: each known driver's offer from the one
/// probe (readiness, capabilities, footprint), and the handles of the
/// ready ones. A run and `doctor` read the same set.
#[derive(Clone, Default)]
pub struct HostDrivers {
    offers: Vec<DriverOffer>,
    handles: Vec<Arc<dyn Driver>>,
}

impl std::fmt::Debug for HostDrivers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostDrivers")
            .field("offers", &self.offers)
            .finish_non_exhaustive()
    }
}

impl HostDrivers {
    /// The one probe: ask every driver that was found whether its engine
    /// answers now (`ping`), what it can do and what of the host it owns;
    /// each driver of `missing` gets an offer saying why it is not here.
    pub async fn probe(found: Vec<Arc<dyn Driver>>, missing: Vec<(DriverName, String)>) -> Self {
        let mut offers = Vec::new();
        let mut handles = Vec::new();
        for driver in found {
            let readiness = driver.ping().await.map_err(|e| e.to_string());
            let offer = DriverOffer {
                driver: driver.name(),
                capabilities: driver.capabilities(),
                footprint: match &readiness {
                    Ok(_) => driver.host_footprint().await,
                    Err(_) => Default::default(),
                },
                readiness,
            };
            if offer.is_ready() {
                handles.push(driver);
            }
            offers.push(offer);
        }
        for (driver, reason) in missing {
            if !offers.iter().any(|o| o.driver == driver) {
                offers.push(DriverOffer::unavailable(driver, reason));
            }
        }
        Self { offers, handles }
    }

    /// Offers with no driver behind them: a preview that contacts no
    /// engine (`iterion sandbox manifests`), whose decision cannot boot.
    pub fn offered(offers: Vec<DriverOffer>) -> Self {
        Self {
            offers,
            handles: Vec::new(),
        }
    }

    /// What each driver offers.
    pub fn offers(&self) -> &[DriverOffer] {
        &self.offers
    }

    /// The names of the ready drivers, sorted (doctor's
    /// `available_drivers`).
    pub fn ready_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .offers
            .iter()
            .filter(|o| o.is_ready())
            .map(|o| o.driver.as_str().to_owned())
            .collect();
        names.sort();
        names
    }

    /// Every ready driver (the reaper's set).
    pub fn handles(&self) -> &[Arc<dyn Driver>] {
        &self.handles
    }

    /// The ready driver `name`.
    pub fn get(&self, name: DriverName) -> Option<&Arc<dyn Driver>> {
        self.handles.iter().find(|d| d.name() == name)
    }
}

/// One run, as the decision is asked about it.
#[derive(Debug, Clone, Copy)]
pub struct RunRequest<'a> {
    /// The run.
    pub run_id: &'a RunId,
    /// The compiled workflow's `sandbox:` block.
    pub sandbox: Option<&'a Spec>,
    /// The workflow's declared secrets.
    pub secrets: &'a [SecretDecl],
    /// `--trust`.
    pub trust: Trust,
    /// The absolute host workspace.
    pub workspace: &'a Path,
    /// The CLI's knobs.
    pub flags: &'a SandboxFlags,
    /// `doctor --strict --target` (a run never sets it).
    pub target: Option<HostKind>,
    /// Whether the workflow declares attachments (the run's attachments
    /// directory is then planned and bound).
    pub attachments: bool,
    /// The shared git directory of the run's `worktree: auto` worktree.
    pub worktree_git_dir: Option<&'a Path>,
    /// That worktree's own part of it (`<git dir>/worktrees/<name>`).
    pub worktree_admin_dir: Option<&'a Path>,
}

/// The host side of every decision of this process.
#[derive(Debug, Clone)]
pub struct SandboxHost {
    pub(crate) env: SandboxEnv,
    pub(crate) local_env: BTreeMap<String, String>,
    pub(crate) drivers: HostDrivers,
    pub(crate) state_dir: PathBuf,
    store_dir: Option<PathBuf>,
    runtime_mounts: Vec<Mount>,
    runner_missing: Option<String>,
}

impl SandboxHost {
    /// A host with these drivers. `state_dir` holds the per-run host
    /// directories a bind-capable driver serves read-back paths from;
    /// `local_env` is this process's environment (secrets, `${localEnv:…}`,
    /// the secret-file root).
    pub fn new(
        env: SandboxEnv,
        local_env: BTreeMap<String, String>,
        drivers: HostDrivers,
        state_dir: PathBuf,
    ) -> Self {
        Self {
            env,
            local_env,
            drivers,
            state_dir,
            store_dir: None,
            runtime_mounts: Vec::new(),
            runner_missing: None,
        }
    }

    /// The directory of the run store, when it is one: no bind may expose
    /// it, and one that contains it gets it masked (issue 19 item 3).
    pub fn with_store_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.store_dir = dir;
        self
    }

    /// Host binds every sandbox gets where the driver keeps host binds (the
    /// claw runner binary, read-only); on a driver without them they are
    /// left out, not dropped with a notice, since their user copies them in
    /// itself (`SandboxRun::import`).
    pub fn with_mounts(mut self, mounts: Vec<Mount>) -> Self {
        self.runtime_mounts = mounts;
        self
    }

    /// Why no statically linked `iterion` can serve as the runner inside
    /// the container, when this host's workflow needs one there (the
    /// decision then refuses a sandboxed run at admission).
    pub fn with_runner_missing(mut self, why: Option<String>) -> Self {
        self.runner_missing = why;
        self
    }

    /// The drivers.
    pub fn drivers(&self) -> &HostDrivers {
        &self.drivers
    }

    /// Snapshot what the run's sandbox depends on and decide it.
    pub fn decide(&self, run: &RunRequest<'_>) -> Decided {
        let dirs = RunDirs::plan(&self.state_dir, run.run_id);
        let run_files = dirs.run_files().to_string_lossy().into_owned();
        // Values never enter the decision: names and paths only.
        let secrets = resolve_secrets(run.secrets, &self.local_env);
        let shapes: Vec<FileSecretShape> = secrets
            .as_ref()
            .map(|s| {
                s.files
                    .iter()
                    .map(|f| FileSecretShape {
                        name: f.name.clone(),
                        container_path: f.container_path.clone(),
                        path_env: f.path_env.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let bound: Vec<String> = secrets
            .as_ref()
            .map(|s| s.bound.iter().map(|b| b.name.clone()).collect())
            .unwrap_or_default();
        let secrets_error = secrets.as_ref().err().map(ToString::to_string);
        // The root is made (0700, private) only for a run that has file
        // secrets, as before the decision existed.
        let secrets_dir = match shapes.is_empty() {
            true => Err("no file secrets".to_owned()),
            false => secrets_root(&self.local_env)
                .map(|root| {
                    let root = root.canonicalize().unwrap_or(root);
                    root.join(run.run_id.as_str())
                        .to_string_lossy()
                        .into_owned()
                })
                .map_err(|e| e.to_string()),
        };
        let repo = RepoSnapshot::capture(run.workspace)
            .with_worktree_git_dir(run.worktree_git_dir, run.worktree_admin_dir);
        // The worktree's `.git` and its guards are planned only if they
        // exist, as every host path planning binds.
        let git_paths: Vec<&str> = repo
            .worktree_git_dir
            .iter()
            .chain(&repo.worktree_git_guards)
            .map(String::as_str)
            .collect();
        let host = HostSnapshot::capture(&self.env.snapshot, &git_paths, &|key| {
            let cwd = std::env::current_dir().ok()?;
            crate::hostgit::HostGit::discover(&cwd)
                .read(&["config", "--get", key])
                .ok()
                .filter(|v| !v.is_empty())
        });
        let state_dirs = private_state_dirs(&self.state_dir, &self.local_env);
        // The board's directory is private too, unless an area already
        // private holds it (its mask hides the board with it).
        let real = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let board = board_dir(&self.local_env).map(|b| real(&b)).filter(|b| {
            !self
                .store_dir
                .iter()
                .chain(&state_dirs)
                .any(|area| b.starts_with(real(area)))
        });
        let binds = run_settings(
            |k| self.local_env.get(k).cloned(),
            std::iter::empty(),
            self.store_dir.as_deref(),
            &state_dirs,
        )
        .with_private(board.map(|d| d.to_string_lossy().into_owned()));
        let decision = decide(&DecisionRequest {
            run_id: run.run_id.as_str(),
            trust: run.trust,
            flags: run.flags,
            env: &self.env,
            target: run.target,
            workflow: WorkflowFacts {
                sandbox: run.sandbox,
                file_secrets: match &secrets_error {
                    Some(why) => Err(why),
                    None => Ok(&shapes),
                },
                bound_secrets: &bound,
            },
            repo: &repo,
            host: &host,
            offers: self.drivers.offers(),
            paths: &RunPaths {
                run_files,
                mask: dirs.mask().to_string_lossy().into_owned(),
                workspace_manifest: dirs.workspace_manifest().to_string_lossy().into_owned(),
                attachments: run
                    .attachments
                    .then(|| dirs.attachments().to_string_lossy().into_owned()),
                secrets_dir,
            },
            binds: &binds,
            fs: &RealHost,
            local_env: &self.local_env,
            runtime_mounts: &self.runtime_mounts,
            runner_missing: self.runner_missing.as_deref(),
        });
        Decided {
            decision,
            secrets: secrets.unwrap_or_default(),
        }
    }
}
