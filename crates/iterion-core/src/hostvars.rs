//! Host-side variable expansion (facts §2.2), the one implementation the
//! DSL and the sandbox policy both call: `${localEnv:NAME}` /
//! `${localEnv:NAME:default}` resolve only allowlisted names (anything else
//! resolves to its default or empty, so a hostile workflow or devcontainer
//! cannot exfiltrate a secret through substitution),
//! `${localWorkspaceFolder}` and `${localWorkspaceFolderBasename}` resolve
//! from the workspace path, and `${containerEnv:…}` (or anything unknown)
//! is left as written. Pure: the caller supplies the environment.

use std::path::Path;

use crate::Spec;

/// Host variables `${localEnv:…}` may read.
pub fn local_env_allowed(name: &str) -> bool {
    const ALLOWED: &[&str] = &[
        "HOME",
        "USER",
        "USERNAME",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TERM",
        "TZ",
        "XDG_CONFIG_HOME",
        "XDG_CACHE_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "XDG_RUNTIME_DIR",
        "PWD",
        "OLDPWD",
        "DISPLAY",
        "WAYLAND_DISPLAY",
        "XAUTHORITY",
        "PUID",
        "PGID",
        "VARIANT",
    ];
    ALLOWED.contains(&name) || name.starts_with("LC_")
}

/// Expand host-side variables in one string.
pub fn expand_host_vars(s: &str, env: &dyn Fn(&str) -> Option<String>, workspace: &Path) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = &after[..end];
        let whole = &rest[start..start + 2 + end + 1];
        match resolve(inner, env, workspace) {
            Some(v) => out.push_str(&v),
            None => out.push_str(whole),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

fn resolve(inner: &str, env: &dyn Fn(&str) -> Option<String>, workspace: &Path) -> Option<String> {
    if inner == "localWorkspaceFolder" {
        return Some(workspace.display().to_string());
    }
    if inner == "localWorkspaceFolderBasename" {
        return Some(
            workspace
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
    }
    let spec = inner.strip_prefix("localEnv:")?;
    let (name, default) = match spec.split_once(':') {
        Some((n, d)) => (n, d),
        None => (spec, ""),
    };
    if local_env_allowed(name)
        && let Some(v) = env(name)
    {
        return Some(v);
    }
    Some(default.to_string())
}

/// Expand a spec: image, user, workspace_folder, post_create, mounts, env
/// values and build fields (dockerfile, context, args values).
pub fn expand_spec(spec: &Spec, env: &dyn Fn(&str) -> Option<String>, workspace: &Path) -> Spec {
    let x = |s: &String| expand_host_vars(s, env, workspace);
    let mut out = spec.clone();
    out.image = spec.image.as_ref().map(x);
    out.user = spec.user.as_ref().map(x);
    out.workspace_folder = spec.workspace_folder.as_ref().map(x);
    out.post_create = spec.post_create.as_ref().map(x);
    out.mounts = spec.mounts.iter().map(x).collect();
    out.env = spec.env.iter().map(|(k, v)| (k.clone(), x(v))).collect();
    if let Some(b) = &spec.build {
        let mut nb = b.clone();
        nb.dockerfile = b.dockerfile.as_ref().map(x);
        nb.context = b.context.as_ref().map(x);
        nb.args = b.args.iter().map(|(k, v)| (k.clone(), x(v))).collect();
        out.build = Some(nb);
    }
    out
}
