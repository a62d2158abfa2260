//! The steps of [`super::decide`], in the seed's order (steps 5–15), each
//! calling its one home; the first that ends the path gives the verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use iterion_core::{
    ByteSize, Capabilities, DriverName, EventKind, HostState, LaunchPlan, Mode, Mount, MountKind,
    MountOrigin, NetworkSpec, Spec, Trust,
};

use super::outcome::{
    BindReport, IdentityOutcome, READBACK_UNSERVABLE, Refusal, SandboxDecision, SandboxPlan,
    SelectedDriver, Verdict,
};
use super::request::{DecisionRequest, FileSecretShape, RepoSnapshot};
use crate::admission::AdmissionVerdict;
use crate::binds::{
    BindRole, BindScope, HostPaths, PathKind, ResolveError, ResolvedPath, judge_bind_in,
    private_areas_within, resolve_plan_binds,
};
use crate::classify::Refused;
use crate::devbox::{self, DevboxProject};
use crate::error::PolicyError;
use crate::guards::check_noop_file_secrets;
use crate::host::DriverOffer;
use crate::identity::{HostRootGuard, IdentityInputs, decide_identity, has_writable_host_bind};
use crate::mounts::{PlanInputs, finalize_mounts_for_driver, plan_launch};
use crate::secret_egress::{
    Placement, SecretEgressVerdict, provider_keys_verdict, secret_egress_verdict,
};
use crate::spec::{BuiltSpec, SpecInputs, build_spec, source_label};
use crate::verdict::{
    Availability, EgressVerdict, SandboxVerdict, egress_verdict, sandbox_verdict,
};

fn display_mode(mode: Mode) -> &'static str {
    match mode {
        Mode::Inherit => "unset",
        other => other.as_str(),
    }
}

/// The host filesystem with the run's private directories, which the
/// booter creates fresh before the sandbox starts, answered as what they
/// will be.
struct WithRunDirs<'a> {
    fs: &'a dyn HostPaths,
    dirs: BTreeSet<String>,
    files: BTreeSet<String>,
}

impl HostPaths for WithRunDirs<'_> {
    fn resolve(&self, path: &str) -> Result<ResolvedPath, ResolveError> {
        let kind = if self.dirs.contains(path) {
            PathKind::Dir
        } else if self.files.contains(path) {
            PathKind::File
        } else {
            return self.fs.resolve(path);
        };
        Ok(ResolvedPath {
            real: path.to_owned(),
            kind,
        })
    }
}

/// The decision in progress: what is known so far, and the events so far.
pub(super) struct Decider<'r, 'a> {
    pub req: &'r DecisionRequest<'a>,
    pub decision: SandboxDecision,
}

impl Decider<'_, '_> {
    fn refuse(&self, refused: Refused, reason: impl Into<String>) -> Verdict {
        Verdict::Refused(Refusal::new(refused, reason))
    }

    fn host(&mut self, reason: String, degraded: bool) -> Verdict {
        // A host run holds its bound secrets plain, and says so.
        if let SecretEgressVerdict::Plain { event } =
            secret_egress_verdict(Mode::Auto, self.req.workflow.bound_secrets, Placement::Host)
        {
            self.decision.events.push(event);
        }
        Verdict::Host { reason, degraded }
    }

    /// Steps 5–15 of the seed, stopping at the first that ends the path.
    pub(super) fn verdict(&mut self) -> Verdict {
        let req = self.req;
        let mode = self.decision.mode;
        // Step 5: the resolved secrets; a missing one names the secret,
        // never a value.
        let secrets = match req.workflow.file_secrets {
            Ok(s) => s,
            Err(why) => return self.refuse(Refused::Spec, why),
        };
        if !mode.mode.is_active() {
            // Step 8, silent half: an explicit opt-out (or nothing asked).
            // The noop file-secret gate is a hard error here: nothing drops
            // the file secrets on this path (only a degraded auto does, and
            // says so), and the mount is their only delivery channel.
            if let Err(e) = check_noop_file_secrets(secrets.len()) {
                return self.refuse(Refused::Spec, e.to_string());
            }
            return self.host(
                format!(
                    "sandbox {} ({})",
                    display_mode(mode.mode),
                    mode.source.as_str()
                ),
                false,
            );
        }
        // Step 7: auto reads the repo devcontainer and fuses it.
        let built = match self.build_spec() {
            Ok(b) => b,
            Err(e) => {
                let why = e.to_string();
                // A bind source refused by its spelling is the bind judge
                // speaking (its lexical half), before any path is resolved.
                if matches!(&e, PolicyError::Guard(v) if v.field == "mount source") {
                    self.decision.binds = Some(Err(why.clone()));
                }
                self.decision.spec = Some(Err(why.clone()));
                return self.refuse(Refused::Spec, why);
            }
        };
        self.decision.events.extend(built.events.iter().cloned());
        self.decision.source = source_label(mode.source.as_str(), &built.origin);
        self.decision.spec = Some(Ok(built.clone()));
        // Steps 9–10: driver selection, then the one degrade/refuse verdict.
        let availability = match &self.decision.selection {
            Ok(name) => Availability::Ready(*name),
            Err(e) => Availability::Blocked {
                reason: e.to_string(),
            },
        };
        let blocked = |a: &Availability| match a {
            Availability::Blocked { reason } => reason.clone(),
            Availability::Ready(d) => format!("{d} ready"),
        };
        let driver = match sandbox_verdict(
            mode.mode,
            &self.decision.source,
            &availability,
            secrets.len(),
        ) {
            SandboxVerdict::Sandbox(name) => name,
            SandboxVerdict::Unsandboxed => {
                if let Err(e) = check_noop_file_secrets(secrets.len()) {
                    return self.refuse(Refused::Spec, e.to_string());
                }
                return self.host("not sandboxed".to_owned(), false);
            }
            SandboxVerdict::Degraded { event } => {
                // The event says `file_secrets_dropped`; env secrets still
                // reach the host execs.
                self.decision.events.push(event);
                return self.host(format!("auto degraded: {}", blocked(&availability)), true);
            }
            SandboxVerdict::Refused { event, .. } => {
                self.decision.events.push(event);
                return self.refuse(Refused::NoDriver, blocked(&availability));
            }
        };
        let Some(offer) = req.offers.iter().find(|o| o.driver == driver) else {
            // select_driver only names an offered driver: a broken probe.
            return self.refuse(Refused::NoDriver, format!("{driver} has no offer"));
        };
        let caps = offer.capabilities;
        let selected = select(&built.spec, mode.mode, driver, caps);
        self.decision.driver = Some(selected.clone());
        self.decision.events.push(EventKind::SandboxDriverSelected {
            driver,
            host: self.decision.host.as_str().to_owned(),
        });
        self.plan(&built.spec, secrets, offer, selected)
    }

    fn build_spec(&self) -> Result<BuiltSpec, PolicyError> {
        let req = self.req;
        let mode = self.decision.mode.mode;
        let devcontainer = match (mode, &req.repo.devcontainer) {
            (Mode::Auto, Ok(dc)) => dc.as_ref(),
            (Mode::Auto, Err(e)) => return Err(e.clone()),
            _ => None,
        };
        build_spec(&SpecInputs {
            mode,
            workflow: req.workflow.sandbox,
            devcontainer: devcontainer.map(|(path, dc)| (path.as_str(), dc)),
            default_image: &self.decision.default_image,
            operator_env: BTreeMap::new(),
            run_id: req.run_id,
            local_env: req.local_env.clone(),
            workspace: &req.repo.workspace,
        })
    }

    /// Steps 11–15: every mount before Prepare, the identity, the egress.
    fn plan(
        &mut self,
        spec: &Spec,
        secrets: &[FileSecretShape],
        offer: &DriverOffer,
        selected: SelectedDriver,
    ) -> Verdict {
        let req = self.req;
        let caps = offer.capabilities;
        let driver = offer.driver;
        let paths = req.paths;
        // The run's private directories exist for planning: the booter
        // creates them fresh before the sandbox starts.
        let mut host = req.host.clone();
        host.existing
            .insert(crate::guards::normalize_lexical(&paths.run_files));
        if let Some(dir) = &paths.attachments {
            host.existing.insert(crate::guards::normalize_lexical(dir));
        }
        // Step 11: every mount, as if every mount were possible.
        let planned = match plan_launch(
            &PlanInputs {
                spec,
                host_state: Some(self.decision.host_state),
                host_state_source: self.decision.host_state_source.as_str(),
                workspace: &req.repo.workspace,
                worktree_git_dir: req.repo.worktree_git_dir.as_deref(),
                worktree_git_guards: &req.repo.worktree_git_guards,
                worktree_git_masks: &req.repo.worktree_git_masks,
                mask_dir: Some(&paths.mask),
                scratch_dir: None,
                attachments_dir: paths.attachments.as_deref(),
                run_files_dir: Some(&paths.run_files),
                bundle_dir: None,
                readback_cap: req.env.readback_cap,
                untrusted: req.trust == Trust::Untrusted,
            },
            &host,
        ) {
            Ok(p) => p,
            Err(e) => {
                if matches!(&e, PolicyError::Guard(v) if v.field == "mount source") {
                    self.decision.binds = Some(Err(e.to_string()));
                }
                return self.refuse(Refused::Spec, e.to_string());
            }
        };
        self.decision.events.extend(planned.events);
        let mut plan = planned.plan;
        // Step 12: devbox tooling of the repo, appended to post_create with
        // its profile bins on PATH.
        if let Some(config) = &req.repo.devbox_json {
            let project = DevboxProject {
                source: "repo".to_owned(),
                config: config.clone(),
                container_dir: plan.workdir.clone(),
            };
            if let Some(event) = devbox::provision(&mut plan, &[project]) {
                self.decision.events.push(event);
            }
        }
        // Step 14's mounts join before the drop (step 13), so a driver that
        // cannot keep them is caught below.
        let secret_mounts = match secret_file_mounts(secrets, &paths.secrets_dir) {
            Ok(m) => m,
            Err(why) => return self.refuse(Refused::Spec, why),
        };
        plan.mounts.extend(secret_mounts.iter().cloned());
        if caps.host_bind_mounts {
            plan.mounts.extend(req.runtime_mounts.iter().cloned());
        }
        // Paths only (facts §6.9: exported before start); values never
        // touch the create-time env.
        for s in secrets {
            if let Some(var) = &s.path_env {
                plan.env.insert(var.clone(), s.container_path.clone());
            }
        }
        // Step 13: drop what the driver cannot honour, withdraw promises.
        // A declared read-back path it can neither bind nor drain is
        // refused at admission, with its own code (ADR-143 R2).
        let finalized = match finalize_mounts_for_driver(plan, driver, &caps) {
            Ok(f) => f,
            Err(e @ PolicyError::ReadBackUnservable { .. }) => {
                self.decision.admission =
                    AdmissionVerdict::deny(READBACK_UNSERVABLE, e.to_string());
                return Verdict::Denied;
            }
            Err(e) => return self.refuse(Refused::Spec, e.to_string()),
        };
        self.decision.events.extend(finalized.dropped);
        // A dropped secret-file bind (a driver without host binds) would
        // start a sandbox missing a secret it declared: refuse instead.
        for m in &secret_mounts {
            let kept = finalized
                .plan
                .mounts
                .iter()
                .any(|k| k.origin == MountOrigin::SecretFile && k.target == m.target);
            if !kept {
                return self.refuse(
                    Refused::Spec,
                    format!(
                        "the {driver} driver cannot bind the secret file {} here \
                         (no host bind mounts); file secrets have no other delivery channel",
                        m.target
                    ),
                );
            }
        }
        let mut plan = finalized.plan;
        // Every kept bind judged by its real path, the store masked where a
        // bind would expose it (issue 19 items 1 and 3); the driver checks
        // the sources again immediately before create.
        let workspace_real = req
            .repo
            .workspace_real
            .clone()
            .unwrap_or_else(|| req.repo.workspace.clone());
        let fs = WithRunDirs {
            fs: req.fs,
            dirs: [
                paths.run_files.clone(),
                paths.mask.clone(),
                Path::new(&paths.run_files)
                    .parent()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ]
            .into_iter()
            .chain(paths.secrets_dir.clone().ok())
            .chain(paths.attachments.clone())
            .map(|p| crate::guards::normalize_lexical(&p))
            .collect(),
            files: secret_mounts
                .iter()
                .filter_map(|m| m.source.clone())
                .collect(),
        };
        let settings = req
            .binds
            .clone()
            .with_engine_paths(offer.footprint.paths.iter().cloned());
        let scope = BindScope {
            workspace: Some(&workspace_real),
            untrusted: req.trust == Trust::Untrusted,
        };
        if let Err(e) = resolve_plan_binds(&fs, &mut plan, &settings, &scope, Some(&paths.mask)) {
            self.decision.binds = Some(Err(e.to_string()));
            return self.refuse(Refused::Spec, e.to_string());
        }
        // A copy-based workspace (issue 14 item 2) is judged as its bind
        // would have been (never `/`, a home, a system area) and leaves
        // iterion's own areas inside it out, as a bind masks them.
        if let Some(copy) = plan.workspace_copy.as_mut() {
            match judge_bind_in(&fs, &copy.host, BindRole::Workspace, &settings, &scope) {
                Ok(real) => {
                    copy.exclude =
                        private_areas_within(&real, settings.private.iter().map(String::as_str));
                    copy.host = real;
                    copy.manifest = Some(paths.workspace_manifest.clone());
                }
                Err(e) => {
                    self.decision.binds = Some(Err(e.to_string()));
                    return self.refuse(Refused::Spec, e.to_string());
                }
            }
        }
        self.decision.binds = Some(Ok(BindReport {
            workspace: workspace_real.clone(),
            declared: plan
                .mounts
                .iter()
                .filter(|m| m.kind == MountKind::Bind && m.origin == MountOrigin::Workflow)
                .count(),
            masked: plan
                .mounts
                .iter()
                .filter(|m| m.origin == MountOrigin::Mask)
                .map(|m| m.target.clone())
                .collect(),
        }));
        // Who the sandbox runs as and what keeps host-root artefacts off
        // its writable host binds, now that they are known (issue 19 item
        // 4); the driver applies it and verifies it before the first exec.
        let identity = match decide_identity(&IdentityInputs {
            spec_user: plan.user.as_deref(),
            invoker: (req.host.uid, req.host.gid),
            workspace_owner: req.repo.owner,
            mapping: offer.footprint.uid_mapping,
            writable_host_binds: has_writable_host_bind(&plan),
            host_state_auto: self.decision.host_state == HostState::Auto,
        }) {
            Ok(i) => i,
            Err(e) => {
                self.decision.identity = Some(Err(e.to_string()));
                return self.refuse(Refused::Spec, e.to_string());
            }
        };
        plan.user = identity.user.clone();
        plan.limits.host_root_guard = identity.guard;
        // The seccomp guard is verified from inside the sandbox before the
        // first command; iterion's static binary, bound read-only, does it
        // in any image (no `chmod`, no writable `/tmp` needed). Judged as
        // the runner bind it is.
        let has_probe = plan
            .mounts
            .iter()
            .any(|m| m.origin == MountOrigin::RunnerBinary && m.kind == MountKind::Bind);
        if let (HostRootGuard::RootSeccomp, false, true, Some(probe)) = (
            identity.guard,
            has_probe,
            caps.host_bind_mounts,
            req.guard_probe,
        ) {
            let source = probe.source.clone().unwrap_or_default();
            match judge_bind_in(&fs, &source, BindRole::Runtime, &settings, &scope) {
                Ok(real) => plan.mounts.push(Mount {
                    source: Some(real),
                    ..probe.clone()
                }),
                Err(e) => return self.refuse(Refused::Spec, e.to_string()),
            }
        }
        self.decision.events.extend(identity.events.iter().cloned());
        self.decision.identity = Some(Ok(IdentityOutcome {
            workspace_writable: writable_by(req.repo, identity.user.as_deref()),
            decision: identity,
        }));
        plan.host_gateway_alias = true;
        // Step 15: the proxy precedes Prepare, and only for a non-open
        // policy: enforce, advise (said) or refuse.
        match &selected.egress {
            EgressVerdict::Refused { reason } => {
                return self.refuse(Refused::Spec, reason.clone());
            }
            EgressVerdict::Advisory { event } => self.decision.events.push(event.clone()),
            EgressVerdict::Open | EgressVerdict::Enforced => {}
        }
        // Step 15, bound secrets: placeholders only where the proxy can put
        // the value back and the sandbox can trust its CA.
        let secret_placeholders = match secret_egress_verdict(
            self.decision.mode.mode,
            req.workflow.bound_secrets,
            Placement::Sandbox {
                driver: driver.as_str(),
                capabilities: caps,
                egress: &selected.egress,
            },
        ) {
            SecretEgressVerdict::Unbound => false,
            SecretEgressVerdict::Placeholders => true,
            SecretEgressVerdict::Plain { event } => {
                self.decision.events.push(event);
                false
            }
            SecretEgressVerdict::Refused { reason } => {
                return self.refuse(Refused::Spec, reason);
            }
        };
        let provider_keys = provider_keys_verdict(
            req.env.provider_keys,
            driver.as_str(),
            caps,
            &selected.egress,
        );
        let run_files_cap = run_files_cap(&plan, &paths.run_files);
        Verdict::Sandbox(Box::new(SandboxPlan {
            driver,
            capabilities: caps,
            launch: plan,
            network: spec.network.clone(),
            egress: selected.egress,
            run_files_cap,
            secret_placeholders,
            provider_keys,
        }))
    }
}

/// What the driver makes of the spec: the egress verdict and the gaps.
fn select(spec: &Spec, mode: Mode, driver: DriverName, caps: Capabilities) -> SelectedDriver {
    let needs_proxy = NetworkSpec::needs_proxy(spec.network.as_ref());
    let egress = egress_verdict(mode, needs_proxy, driver, caps.egress_enforcement);
    let mut gaps = Vec::new();
    if spec.build.is_some() && !caps.build {
        gaps.push("build");
    }
    if !spec.mounts.is_empty() && !caps.mounts {
        gaps.push("mounts");
    }
    if spec.user.is_some() && !caps.remote_user {
        gaps.push("user");
    }
    if spec.post_create.is_some() && !caps.post_create {
        gaps.push("post_create");
    }
    if !spec.read_back.is_empty() && !caps.can_serve_read_back() {
        gaps.push("read_back");
    }
    if matches!(egress, EgressVerdict::Refused { .. }) {
        gaps.push("egress enforcement");
    }
    SelectedDriver {
        driver,
        capabilities: caps,
        egress,
        needs_proxy,
        gaps,
    }
}

/// One read-only bind per file secret, from the run's secret directory;
/// none is possible without a memory filesystem to hold it.
fn secret_file_mounts(
    secrets: &[FileSecretShape],
    dir: &Result<String, String>,
) -> Result<Vec<Mount>, String> {
    if secrets.is_empty() {
        return Ok(Vec::new());
    }
    let dir = dir.as_ref().map_err(Clone::clone)?;
    Ok(secrets
        .iter()
        .map(|s| Mount {
            kind: MountKind::Bind,
            source: Some(format!("{}/{}", dir.trim_end_matches('/'), s.name)),
            target: s.container_path.clone(),
            readonly: true,
            size: None,
            origin: MountOrigin::SecretFile,
        })
        .collect())
}

/// The run-files dir's read-back cap, when a kept host bind serves it.
fn run_files_cap(plan: &LaunchPlan, run_files: &str) -> Option<ByteSize> {
    let run_files = crate::guards::normalize_lexical(run_files);
    let served = plan.mounts.iter().any(|m| {
        m.origin == MountOrigin::RunFiles
            && m.is_host_bind()
            && m.source.as_deref() == Some(run_files.as_str())
    });
    served.then(|| {
        plan.read_back
            .iter()
            .find(|d| d.origin == MountOrigin::RunFiles)
            .map_or(ByteSize::DEFAULT_READBACK_CAP, |d| d.cap)
    })
}

/// Whether `user` (`uid[:gid]`; `None`: the image's own) can write the
/// workspace: its owner, or a world-writable one. A named user is taken
/// as able to (the driver resolves it in the image).
fn writable_by(repo: &RepoSnapshot, user: Option<&str>) -> bool {
    let uid = user
        .and_then(|u| u.split(':').next())
        .and_then(|u| u.parse::<u32>().ok());
    match (repo.owner, repo.mode_bits, uid) {
        (Some((owner, _)), Some(bits), Some(uid)) => owner == uid || bits & 0o002 != 0,
        (Some(_), _, None) => true,
        _ => false,
    }
}
