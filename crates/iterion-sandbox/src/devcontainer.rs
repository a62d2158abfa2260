//! Reading a repository's devcontainer (`.devcontainer/devcontainer.json`,
//! then `.devcontainer.json`): a small tolerant JSONC stripper (line and
//! block comments, trailing commas) and a typed extraction of the fields a
//! sandbox uses. Hostile input gets a typed error, never a panic.
//!
//! `runArgs` are screened (dangerous flags refused) and otherwise never
//! applied (facts §3.3); `features`, `forwardPorts`, lifecycle commands
//! other than `postCreateCommand` are ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::PolicyError;

/// Largest devcontainer file read (a bigger one is refused, not truncated).
pub const MAX_DEVCONTAINER_BYTES: u64 = 1024 * 1024;

/// The sandbox-relevant fields of a devcontainer file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Devcontainer {
    /// `image`.
    pub image: Option<String>,
    /// `build.dockerfile` (or legacy `dockerFile`), relative to the file's dir.
    pub dockerfile: Option<String>,
    /// `build.context`.
    pub context: Option<String>,
    /// `build.args`.
    pub build_args: BTreeMap<String, String>,
    /// `containerEnv` over `remoteEnv`.
    pub env: BTreeMap<String, String>,
    /// `mounts`, as docker `--mount` CSV strings.
    pub mounts: Vec<String>,
    /// `remoteUser`, else `containerUser`.
    pub user: Option<String>,
    /// `workspaceFolder` (absolute).
    pub workspace_folder: Option<String>,
    /// `postCreateCommand` as one shell string.
    pub post_create: Option<String>,
    /// Workspace-relative directory of the file (`.devcontainer` or empty):
    /// `build.dockerfile` and `build.context` are relative to it.
    pub dir: String,
}

/// Strip `//` and `/* */` comments and trailing commas outside strings.
pub fn strip_jsonc(input: &str) -> Result<String, String> {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut in_string = false;
    let mut start = 0; // start of the current verbatim run
    let flush = |out: &mut String, from: usize, to: usize| out.push_str(&input[from..to]);
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 2,
                b'"' => {
                    in_string = false;
                    i += 1;
                }
                _ => i += 1,
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                i += 1;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                flush(&mut out, start, i);
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                start = i;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                flush(&mut out, start, i);
                let rest = &input[i + 2..];
                match rest.find("*/") {
                    Some(end) => i = i + 2 + end + 2,
                    None => return Err("unterminated block comment".to_owned()),
                }
                out.push(' ');
                start = i;
            }
            _ => i += 1,
        }
    }
    if in_string {
        return Err("unterminated string".to_owned());
    }
    flush(&mut out, start, bytes.len().min(input.len()));
    Ok(remove_trailing_commas(&out))
}

/// Drop a `,` whose next non-space character (outside strings) is `}` or `]`.
fn remove_trailing_commas(input: &str) -> String {
    let chars: Vec<char> = input.chars().collect();
    let mut out = String::with_capacity(input.len());
    let mut in_string = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if in_string {
            out.push(c);
            if c == '\\' {
                if let Some(n) = chars.get(i + 1) {
                    out.push(*n);
                }
                i += 2;
                continue;
            }
            if c == '"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        if c == ',' {
            let next = chars[i + 1..].iter().find(|c| !c.is_whitespace());
            if matches!(next, Some('}') | Some(']')) {
                i += 1;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

/// `runArgs` flags that would undo the sandbox (refused, never applied).
fn dangerous_run_arg(arg: &str) -> Option<&'static str> {
    let a = arg.trim();
    let (flag, value) = match a.split_once('=') {
        Some((f, v)) => (f, Some(v)),
        None => (a, None),
    };
    match flag {
        "--privileged" => Some("--privileged"),
        "--cap-add" => Some("--cap-add"),
        "--device" => Some("--device"),
        "--security-opt" => Some("--security-opt"),
        "--userns" if value == Some("host") => Some("--userns=host"),
        "--pid" if value == Some("host") => Some("--pid=host"),
        "--ipc" if value == Some("host") => Some("--ipc=host"),
        "--uts" if value == Some("host") => Some("--uts=host"),
        "--network" | "--net" if value == Some("host") => Some("--network=host"),
        "-v" | "--volume" | "--mount" => Some("host volume flags (use mounts:)"),
        _ if a.starts_with("-v/") || a.starts_with("-v=") => {
            Some("host volume flags (use mounts:)")
        }
        _ => None,
    }
}

fn err(path: &str, reason: impl Into<String>) -> PolicyError {
    PolicyError::Devcontainer {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

fn string_field(
    obj: &serde_json::Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, PolicyError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(err(path, format!("{key} must be a string"))),
    }
}

fn string_map(
    obj: &serde_json::Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<BTreeMap<String, String>, PolicyError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                Value::Number(n) => Ok((k.clone(), n.to_string())),
                Value::Bool(b) => Ok((k.clone(), b.to_string())),
                _ => Err(err(path, format!("{key}.{k} must be a string"))),
            })
            .collect(),
        Some(_) => Err(err(path, format!("{key} must be an object"))),
    }
}

/// POSIX single-quote one word.
fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:@%+,".contains(&b))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Parse a devcontainer document (`path` only labels errors).
pub fn parse_devcontainer(text: &str, path: &str) -> Result<Devcontainer, PolicyError> {
    let stripped = strip_jsonc(text).map_err(|r| err(path, r))?;
    let value: Value =
        serde_json::from_str(&stripped).map_err(|e| err(path, format!("not JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(err(path, "top level must be an object"));
    };
    let mut dc = Devcontainer {
        image: string_field(&obj, "image", path)?,
        ..Devcontainer::default()
    };
    match obj.get("build") {
        None | Some(Value::Null) => {
            dc.dockerfile = string_field(&obj, "dockerFile", path)?;
            dc.context = string_field(&obj, "context", path)?;
        }
        Some(Value::Object(b)) => {
            dc.dockerfile =
                string_field(b, "dockerfile", path)?.or(string_field(b, "dockerFile", path)?);
            dc.context = string_field(b, "context", path)?;
            dc.build_args = string_map(b, "args", path)?;
            if dc.dockerfile.is_none() {
                return Err(err(path, "build.dockerfile is required when build is set"));
            }
        }
        Some(_) => return Err(err(path, "build must be an object")),
    }
    match (&dc.image, &dc.dockerfile) {
        (Some(_), Some(_)) => return Err(err(path, "set exactly one of image and build")),
        (None, None) => return Err(err(path, "set one of image and build")),
        _ => {}
    }
    let mut env = string_map(&obj, "remoteEnv", path)?;
    env.extend(string_map(&obj, "containerEnv", path)?);
    dc.env = env;
    match obj.get("mounts") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for item in items {
                match item {
                    Value::String(s) => dc.mounts.push(s.clone()),
                    Value::Object(m) => {
                        let mut parts = Vec::new();
                        for key in ["type", "source", "target"] {
                            if let Some(v) = string_field(m, key, path)? {
                                parts.push(format!("{key}={v}"));
                            }
                        }
                        dc.mounts.push(parts.join(","));
                    }
                    _ => return Err(err(path, "mounts entries must be strings or objects")),
                }
            }
        }
        Some(_) => return Err(err(path, "mounts must be an array")),
    }
    dc.user =
        string_field(&obj, "remoteUser", path)?.or(string_field(&obj, "containerUser", path)?);
    dc.workspace_folder = string_field(&obj, "workspaceFolder", path)?;
    if dc
        .workspace_folder
        .as_ref()
        .is_some_and(|wf| !wf.starts_with('/'))
    {
        return Err(err(path, "workspaceFolder must be absolute"));
    }
    dc.post_create = match obj.get("postCreateCommand") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(items)) => {
            let words: Result<Vec<String>, PolicyError> = items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(shell_quote(s)),
                    _ => Err(err(path, "postCreateCommand array items must be strings")),
                })
                .collect();
            Some(words?.join(" "))
        }
        Some(Value::Object(m)) => {
            // Parallel-command form: run each in key order, sequentially.
            let mut cmds = Vec::new();
            for v in m.values() {
                match v {
                    Value::String(s) => cmds.push(s.clone()),
                    Value::Array(a) => cmds.push(
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(shell_quote)
                            .collect::<Vec<_>>()
                            .join(" "),
                    ),
                    _ => {
                        return Err(err(
                            path,
                            "postCreateCommand object values must be strings or arrays",
                        ));
                    }
                }
            }
            Some(cmds.join(" && "))
        }
        Some(_) => {
            return Err(err(
                path,
                "postCreateCommand must be a string, array or object",
            ));
        }
    };
    match obj.get("runArgs") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for item in items {
                let Value::String(arg) = item else {
                    return Err(err(path, "runArgs entries must be strings"));
                };
                if let Some(flag) = dangerous_run_arg(arg) {
                    return Err(err(path, format!("runArgs {flag} refused")));
                }
            }
        }
        Some(_) => return Err(err(path, "runArgs must be an array")),
    }
    Ok(dc)
}

/// Find and parse the repo devcontainer. `Ok(None)` when neither file exists.
pub fn read_repo_devcontainer(
    repo_root: &Path,
) -> Result<Option<(PathBuf, Devcontainer)>, PolicyError> {
    for rel in [".devcontainer/devcontainer.json", ".devcontainer.json"] {
        let path = repo_root.join(rel);
        let label = path.to_string_lossy().into_owned();
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(err(&label, e.to_string())),
        };
        if !meta.is_file() {
            return Err(err(&label, "not a regular file"));
        }
        if meta.len() > MAX_DEVCONTAINER_BYTES {
            return Err(err(&label, "larger than 1 MiB"));
        }
        let text = std::fs::read_to_string(&path).map_err(|e| err(&label, e.to_string()))?;
        let mut dc = parse_devcontainer(&text, &label)?;
        dc.dir = rel
            .rsplit_once('/')
            .map(|(d, _)| d.to_owned())
            .unwrap_or_default();
        return Ok(Some((path, dc)));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_comments_and_trailing_commas() {
        let text = r#"// top
        {
          /* block */ "image": "img:1", // tail
          "containerEnv": { "URL": "http://x//y", "Q": "a /* not */ b", "E": "\"//\"", },
          "mounts": ["type=bind,source=/a,target=/b",],
        }"#;
        let dc = parse_devcontainer(text, "t").expect("parse");
        assert_eq!(dc.image.as_deref(), Some("img:1"));
        assert_eq!(dc.env["URL"], "http://x//y");
        assert_eq!(dc.env["Q"], "a /* not */ b");
        assert_eq!(dc.env["E"], "\"//\"");
        assert_eq!(dc.mounts.len(), 1);
    }

    #[test]
    fn fields() {
        let text = r#"{
          "build": { "dockerfile": "Dockerfile", "context": "..", "args": {"A": "1"} },
          "remoteEnv": {"X": "remote", "Y": "y"}, "containerEnv": {"X": "container"},
          "remoteUser": "dev", "containerUser": "root",
          "workspaceFolder": "/workspaces/p",
          "postCreateCommand": ["npm", "install", "it's"],
          "runArgs": ["--init"],
          "mounts": [{"type": "volume", "source": "cache", "target": "/c"}]
        }"#;
        let dc = parse_devcontainer(text, "t").expect("parse");
        assert_eq!(dc.dockerfile.as_deref(), Some("Dockerfile"));
        assert_eq!(dc.env["X"], "container");
        assert_eq!(dc.user.as_deref(), Some("dev"));
        assert_eq!(dc.post_create.as_deref(), Some(r"npm install 'it'\''s'"));
        assert_eq!(dc.mounts, vec!["type=volume,source=cache,target=/c"]);
    }

    #[test]
    fn refusals() {
        for text in [
            r#"{"image": "a", "runArgs": ["--privileged"]}"#,
            r#"{"image": "a", "runArgs": ["--cap-add=SYS_ADMIN"]}"#,
            r#"{"image": "a", "runArgs": ["--pid=host"]}"#,
            r#"{"image": "a", "runArgs": ["--network=host"]}"#,
            r#"{"image": "a", "runArgs": ["-v", "/:/host"]}"#,
            r#"{"image": "a", "runArgs": ["-v/var/run/docker.sock:/s"]}"#,
            r#"{"image": "a", "build": {"dockerfile": "D"}}"#,
            r#"{}"#,
            r#"{"build": {}}"#,
            r#"{"image": "a", "workspaceFolder": "rel"}"#,
            r#"{"image": 3}"#,
            r#"[1]"#,
            r#"{"image": "a" /* open"#,
            r#"{"image": "a"#,
            "",
        ] {
            assert!(parse_devcontainer(text, "t").is_err(), "{text}");
        }
    }

    #[test]
    fn reads_repo_files_in_order() {
        let dir = tempfile::tempdir().expect("tmp");
        assert_eq!(read_repo_devcontainer(dir.path()).expect("ok"), None);
        std::fs::write(dir.path().join(".devcontainer.json"), r#"{"image": "b"}"#).expect("write");
        let (p, dc) = read_repo_devcontainer(dir.path())
            .expect("ok")
            .expect("some");
        assert!(p.ends_with(".devcontainer.json"));
        assert_eq!(dc.image.as_deref(), Some("b"));
        std::fs::create_dir(dir.path().join(".devcontainer")).expect("mkdir");
        std::fs::write(
            dir.path().join(".devcontainer/devcontainer.json"),
            r#"{"image": "a",}"#,
        )
        .expect("write");
        let (_, dc) = read_repo_devcontainer(dir.path())
            .expect("ok")
            .expect("some");
        assert_eq!(dc.image.as_deref(), Some("a"));
        assert_eq!(dc.dir, ".devcontainer");
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn hostile_input_never_panics(s in "\\PC{0,200}") {
                let _ = parse_devcontainer(&s, "t");
            }

            #[test]
            fn jsonc_noise_never_panics(s in "[{}\\[\\]\",/*\\\\ a:\n]{0,120}") {
                let _ = strip_jsonc(&s);
                let _ = parse_devcontainer(&s, "t");
            }

            #[test]
            fn strip_preserves_plain_json(k in "[a-z]{1,8}", v in "[a-z/ *]{0,12}") {
                let json = serde_json::json!({ "image": "i", "containerEnv": { k.clone(): v.clone() } }).to_string();
                let dc = parse_devcontainer(&json, "t").expect("plain JSON parses");
                prop_assert_eq!(&dc.env[&k], &v);
            }
        }
    }
}
