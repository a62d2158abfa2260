//! Devbox provisioning of a sandbox (flow seed step 12, facts §6.10): each
//! devbox project found (the repo's `devbox.json`, then a bundle's) appends
//! `devbox install` in its directory to `post_create`, and its profile bin
//! directory is prepended to the container's `PATH` (base: the spec's
//! `PATH` or the FHS default). The result is reported as
//! `sandbox_devbox_provisioned`, whatever the image turns out to hold: an
//! image without `devbox` fails `post_create` loudly rather than running
//! the project without its tools.

use iterion_core::{EventKind, LaunchPlan};

/// `PATH` of a container whose spec sets none.
pub const FHS_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One devbox project to provision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevboxProject {
    /// Where it comes from (`repo`, `bundle`).
    pub source: String,
    /// Host path of its `devbox.json` (reported, never read here).
    pub config: String,
    /// Its directory as the container sees it.
    pub container_dir: String,
}

/// POSIX single-quoting.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Apply the projects to the plan; `None` when there is nothing to do.
pub fn provision(plan: &mut LaunchPlan, projects: &[DevboxProject]) -> Option<EventKind> {
    if projects.is_empty() {
        return None;
    }
    let installs: Vec<String> = projects
        .iter()
        .map(|p| format!("(cd {} && devbox install)", quote(&p.container_dir)))
        .collect();
    let mut steps: Vec<String> = plan.post_create.iter().cloned().collect();
    steps.extend(installs);
    plan.post_create = Some(steps.join(" && "));
    let bin_dirs: Vec<String> = projects
        .iter()
        .map(|p| {
            format!(
                "{}/.devbox/nix/profile/default/bin",
                p.container_dir.trim_end_matches('/')
            )
        })
        .collect();
    let base = plan
        .env
        .get("PATH")
        .cloned()
        .unwrap_or_else(|| FHS_PATH.to_owned());
    let path = format!("{}:{base}", bin_dirs.join(":"));
    plan.env.insert("PATH".to_owned(), path.clone());
    Some(EventKind::SandboxDevboxProvisioned {
        target: "sandbox".to_owned(),
        sources: projects.iter().map(|p| p.source.clone()).collect(),
        configs: projects.iter().map(|p| p.config.clone()).collect(),
        bin_dirs,
        path,
        errors: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(dir: &str) -> DevboxProject {
        DevboxProject {
            source: "repo".into(),
            config: format!("/host{dir}/devbox.json"),
            container_dir: dir.into(),
        }
    }

    #[test]
    fn nothing_to_do_leaves_the_plan_alone() {
        let mut plan = LaunchPlan::default();
        assert_eq!(provision(&mut plan, &[]), None);
        assert_eq!(plan, LaunchPlan::default());
    }

    #[test]
    fn appends_install_and_prepends_the_profile_bin() {
        let mut plan = LaunchPlan {
            post_create: Some("make deps".into()),
            ..LaunchPlan::default()
        };
        let event = provision(&mut plan, &[repo("/w/it's")]).expect("event");
        assert_eq!(
            plan.post_create.as_deref(),
            Some(r"make deps && (cd '/w/it'\''s' && devbox install)")
        );
        let path = plan.env.get("PATH").expect("PATH");
        assert_eq!(
            path,
            &format!("/w/it's/.devbox/nix/profile/default/bin:{FHS_PATH}")
        );
        match event {
            EventKind::SandboxDevboxProvisioned {
                target,
                sources,
                bin_dirs,
                ..
            } => {
                assert_eq!(target, "sandbox");
                assert_eq!(sources, vec!["repo".to_owned()]);
                assert_eq!(bin_dirs.len(), 1);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn keeps_the_spec_path_as_base() {
        let mut plan = LaunchPlan::default();
        plan.env.insert("PATH".into(), "/opt/bin".into());
        provision(&mut plan, &[repo("/w")]);
        assert_eq!(
            plan.env["PATH"],
            "/w/.devbox/nix/profile/default/bin:/opt/bin"
        );
    }
}
