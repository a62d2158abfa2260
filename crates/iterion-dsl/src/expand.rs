//! Host-side variable expansion of a sandbox [`Spec`], done by the engine at
//! run time (facts §2.2): `${localEnv:NAME}` / `${localEnv:NAME:default}`
//! resolve only allowlisted names (anything else resolves to its default or
//! empty, so a hostile workflow or devcontainer cannot exfiltrate secrets
//! through substitution), `${localWorkspaceFolder}` and
//! `${localWorkspaceFolderBasename}` resolve from the workspace path, and
//! `${containerEnv:…}` (and anything unknown) is left alone.

use std::path::Path;

pub use iterion_core::hostvars::local_env_allowed;

/// Expand host-side variables in one string (see [`iterion_core::hostvars`]).
pub fn expand_str(s: &str, env: &dyn Fn(&str) -> Option<String>, workspace: &Path) -> String {
    iterion_core::hostvars::expand_host_vars(s, env, workspace)
}

pub use iterion_core::hostvars::expand_spec;

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_core::Spec;

    fn env(n: &str) -> Option<String> {
        match n {
            "HOME" => Some("/home/me".into()),
            "AWS_SECRET_ACCESS_KEY" => Some("s3cr3t".into()),
            "LC_ALL" => Some("C".into()),
            _ => None,
        }
    }

    #[test]
    fn allowlisted_names_resolve_others_do_not() {
        let ws = Path::new("/src/proj");
        assert_eq!(expand_str("${localEnv:HOME}/x", &env, ws), "/home/me/x");
        assert_eq!(
            expand_str("${localEnv:AWS_SECRET_ACCESS_KEY}", &env, ws),
            ""
        );
        assert_eq!(
            expand_str("${localEnv:AWS_SECRET_ACCESS_KEY:d}", &env, ws),
            "d"
        );
        assert_eq!(
            expand_str("${localEnv:NOPE:fallback}", &env, ws),
            "fallback"
        );
        assert_eq!(expand_str("${localEnv:LC_ALL}", &env, ws), "C");
        assert_eq!(expand_str("${localWorkspaceFolder}", &env, ws), "/src/proj");
        assert_eq!(
            expand_str("${localWorkspaceFolderBasename}", &env, ws),
            "proj"
        );
        assert_eq!(
            expand_str("${containerEnv:PATH}", &env, ws),
            "${containerEnv:PATH}"
        );
        assert_eq!(expand_str("a ${unclosed", &env, ws), "a ${unclosed");
    }

    #[test]
    fn spec_fields_are_expanded() {
        let s = Spec {
            image: Some("img:${localEnv:USER:dev}".into()),
            mounts: vec!["type=bind,source=${localEnv:HOME},target=/h".into()],
            env: [(
                "K".to_string(),
                "${localWorkspaceFolderBasename}".to_string(),
            )]
            .into(),
            build: Some(iterion_core::BuildSpec {
                dockerfile: Some("${localWorkspaceFolder}/Dockerfile".into()),
                context: None,
                args: [("A".to_string(), "${localEnv:HOME}".to_string())].into(),
            }),
            ..Spec::default()
        };
        let e = expand_spec(&s, &env, Path::new("/w/p"));
        assert_eq!(e.image.as_deref(), Some("img:dev"));
        assert_eq!(e.mounts[0], "type=bind,source=/home/me,target=/h");
        assert_eq!(e.env["K"], "p");
        let b = e.build.expect("build");
        assert_eq!(b.dockerfile.as_deref(), Some("/w/p/Dockerfile"));
        assert_eq!(b.args["A"], "/home/me");
    }
}
