//! The native kanban board an agent reaches through its `board.*`
//! capabilities (upstream `pkg/dispatcher/native` and its `boardops`): the
//! seven tools of MCP server `iterion_board` (`mcp.iterion_board.<tool>`,
//! `mcp__iterion_board__<tool>` on the wire), each unlocked by one
//! capability, over a store on the host.
//!
//! The store is upstream's layout — `board.json` (the states; upstream's
//! default board when missing), `issues/<id>.json` one issue each,
//! `events.jsonl` one line per change — under a root that is never, by
//! default, in the workspace a sandbox writes (issue 31 item 2: a link the
//! box planted there led `list_issues` and `create_issue` to host files):
//! `ITERION_STORE_DIR` when set, else one directory per project under
//! iterion's state directory ([`iterion_core::agent::board_root`]). Every
//! file is opened beneath that root without following a link
//! ([`files`]); an issue id is `native:` and lowercase hex (dashes allowed,
//! as upstream's UUIDs) before it names a file, and a file whose name or
//! content is not such an issue is not one. A board upstream kept in the
//! workspace (`.iterion/dispatcher`) is imported once into a fresh root,
//! by the same opens (links and malformed files are skipped and counted),
//! and left where it is; `imported.json` in the root says what came from
//! where.
//!
//! Writes go through a temporary file and a rename; one process-wide lock
//! orders them. A capability not granted is refused before anything is
//! read; every other failure is an error result the model can read.

mod files;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use iterion_core::agent::{LEGACY_BOARD_DIR, board_root};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::tools::ToolSpec;

/// The MCP server name the board's tools are under.
pub const SERVER: &str = "iterion_board";

/// One board tool: its name, the capability it needs, what it does and
/// its input schema.
struct BoardTool {
    name: &'static str,
    capability: &'static str,
    description: &'static str,
    schema: fn() -> Value,
}

const TOOLS: &[BoardTool] = &[
    BoardTool {
        name: "assign_issue",
        capability: "board.assign",
        description: "Set the assignee of an issue (an empty string clears it).",
        schema: || json!({"type": "object", "properties": {"id": {"type": "string"}, "assignee": {"type": "string"}}, "required": ["id", "assignee"]}),
    },
    BoardTool {
        name: "close_issue",
        capability: "board.close",
        description: "Move an issue to a terminal state (the board's first one unless `to` names another).",
        schema: || json!({"type": "object", "properties": {"id": {"type": "string"}, "to": {"type": "string"}}, "required": ["id"]}),
    },
    BoardTool {
        name: "create_issue",
        capability: "board.create",
        description: "Create an issue on the board; answers the created issue.",
        schema: || {
            json!({"type": "object", "properties": {
                "title": {"type": "string"}, "body": {"type": "string"}, "state": {"type": "string"},
                "labels": {"type": "array", "items": {"type": "string"}}, "priority": {"type": "integer"},
                "assignee": {"type": "string"}, "blockers": {"type": "array", "items": {"type": "string"}},
                "fields": {"type": "object"}}, "required": ["title"]})
        },
    },
    BoardTool {
        name: "get_issue",
        capability: "board.read",
        description: "Fetch one issue by id or unambiguous id prefix.",
        schema: || json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
    },
    BoardTool {
        name: "list_issues",
        capability: "board.read",
        description: "List issues, optionally filtered by state, label or assignee.",
        schema: || json!({"type": "object", "properties": {"state": {"type": "string"}, "label": {"type": "string"}, "assignee": {"type": "string"}}, "required": []}),
    },
    BoardTool {
        name: "set_labels",
        capability: "board.label",
        description: "Replace the labels of an issue.",
        schema: || json!({"type": "object", "properties": {"id": {"type": "string"}, "labels": {"type": "array", "items": {"type": "string"}}}, "required": ["id", "labels"]}),
    },
    BoardTool {
        name: "transition_issue",
        capability: "board.move",
        description: "Move an issue to another state (id or unambiguous prefix).",
        schema: || json!({"type": "object", "properties": {"id": {"type": "string"}, "to": {"type": "string"}}, "required": ["id", "to"]}),
    },
];

/// Whether `caps` grant `cap` (`board` alone grants every board action).
fn granted(caps: &[String], cap: &str) -> bool {
    caps.iter().any(|c| c == cap || c == "board")
}

/// The tools `caps` unlock, as launcher specs named `mcp.iterion_board.<t>`.
pub fn specs(caps: &[String]) -> Vec<ToolSpec> {
    TOOLS
        .iter()
        .filter(|t| granted(caps, t.capability))
        .map(|t| ToolSpec {
            name: format!("mcp.{SERVER}.{}", t.name),
            description: t.description.to_owned(),
            input_schema: (t.schema)(),
        })
        .collect()
}

/// A board state.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    display: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    terminal: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    eligible: bool,
}

/// `board.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Board {
    states: Vec<State>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    fields: Vec<Value>,
}

fn default_board() -> Board {
    let s = |name: &str, display: &str, terminal: bool, eligible: bool| State {
        name: name.to_owned(),
        display: Some(display.to_owned()),
        terminal,
        eligible,
    };
    Board {
        states: vec![
            s("backlog", "Backlog", false, false),
            s("ready", "Ready", false, true),
            s("in_progress", "In progress", false, true),
            s("review", "Review", false, false),
            s("done", "Done", true, false),
            s("blocked", "Blocked", true, false),
        ],
        fields: vec![json!({"name": "bot_args", "display": "Bot args", "type": "text"})],
    }
}

/// Bytes one issue or `board.json` may hold.
const FILE_CAP: usize = 1 << 20;

/// Bytes of a legacy `events.jsonl` imported.
const EVENTS_CAP: usize = 16 << 20;

/// The id scheme: `native:` then lowercase hex, dashes allowed (upstream's
/// UUIDs), at most 64 of them. The one check before an id names a file.
fn valid_id(id: &str) -> bool {
    id.strip_prefix("native:").is_some_and(valid_tail)
}

fn valid_tail(tail: &str) -> bool {
    !tail.is_empty()
        && tail.len() <= 64
        && tail
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b'-')
}

/// An issue's file name (upstream's encoding: ':' is not portable).
fn file_of(id: &str) -> Option<String> {
    valid_id(id).then(|| format!("{}.json", id.replace(':', "__")))
}

/// The issue id a file name encodes, when it encodes one.
fn id_of(file: &str) -> Option<String> {
    let tail = file.strip_prefix("native__")?.strip_suffix(".json")?;
    valid_tail(tail).then(|| format!("native:{tail}"))
}

/// The board's store.
#[derive(Debug)]
pub struct BoardStore {
    /// Where it lives, or why it has nowhere to.
    root: Result<PathBuf, String>,
    /// The directory whose legacy `.iterion/dispatcher` is imported once.
    legacy: Option<PathBuf>,
    /// The root's real path, fixed at first use.
    real: OnceLock<PathBuf>,
    /// The legacy board was looked at (once per process).
    imported: OnceLock<()>,
    lock: Mutex<()>,
}

impl BoardStore {
    /// The store under `root` (made on first use), with nothing to import.
    pub fn new(root: PathBuf) -> Self {
        Self {
            root: Ok(root),
            legacy: None,
            real: OnceLock::new(),
            imported: OnceLock::new(),
            lock: Mutex::new(()),
        }
    }

    /// The store a process running in `cwd` uses
    /// ([`iterion_core::agent::board_root`]), importing `cwd`'s legacy
    /// board once when the root is the default one.
    pub fn for_process(env: &crate::env::EnvSnapshot, cwd: &Path) -> Self {
        let configured = env.get("ITERION_STORE_DIR");
        let root = board_root(configured, env.get("XDG_STATE_HOME"), env.get("HOME"), cwd)
            .ok_or_else(|| {
                "the board has no directory: set ITERION_STORE_DIR, XDG_STATE_HOME or HOME"
                    .to_owned()
            });
        Self {
            root,
            legacy: configured.is_none().then(|| cwd.to_path_buf()),
            real: OnceLock::new(),
            imported: OnceLock::new(),
            lock: Mutex::new(()),
        }
    }

    /// Its root, when it has one.
    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref().ok()
    }

    /// Run tool `name` (bare, as on the wire after the server prefix)
    /// with `input` under `caps`: the result as JSON text.
    pub fn call(&self, caps: &[String], name: &str, input: &Value) -> Result<String, String> {
        let tool = TOOLS
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| format!("the board has no tool {name:?}"))?;
        if !granted(caps, tool.capability) {
            return Err(format!(
                "capability denied: {name} needs capability {}",
                tool.capability
            ));
        }
        let _held = self.lock.lock().map_err(|_| "the board lock is poisoned")?;
        let dir = self.open().map_err(|e| format!("the board: {e}"))?;
        let board = dir.board().map_err(|e| format!("board.json: {e}"))?;
        let out = match name {
            "create_issue" => dir.create(&board, input)?,
            "get_issue" => dir.get(&dir.resolve(str_arg(input, "id")?)?)?,
            "list_issues" => dir.list(input)?,
            "transition_issue" => {
                let id = dir.resolve(str_arg(input, "id")?)?;
                let to = str_arg(input, "to")?;
                if !board.states.iter().any(|s| s.name == to) {
                    return Err(format!("unknown state {to:?}"));
                }
                dir.update(&id, "issue_moved", |i| i["state"] = json!(to))?
            }
            "close_issue" => {
                let id = dir.resolve(str_arg(input, "id")?)?;
                let to = match input
                    .get("to")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    Some(t) => match board.states.iter().find(|s| s.name == t) {
                        None => return Err(format!("unknown state {t:?}")),
                        Some(s) if !s.terminal => {
                            return Err(format!("state {t:?} is not terminal"));
                        }
                        Some(s) => s.name.clone(),
                    },
                    None => board
                        .states
                        .iter()
                        .find(|s| s.terminal)
                        .map(|s| s.name.clone())
                        .ok_or("the board has no terminal state; name one in `to`")?,
                };
                dir.update(&id, "issue_moved", |i| i["state"] = json!(to))?
            }
            "assign_issue" => {
                let id = dir.resolve(str_arg(input, "id")?)?;
                let who = input
                    .get("assignee")
                    .and_then(Value::as_str)
                    .ok_or("assignee is required")?
                    .to_owned();
                dir.update(&id, "issue_updated", |i| {
                    if who.is_empty() {
                        if let Some(o) = i.as_object_mut() {
                            o.remove("assignee");
                        }
                    } else {
                        i["assignee"] = json!(who);
                    }
                })?
            }
            "set_labels" => {
                let id = dir.resolve(str_arg(input, "id")?)?;
                let labels = strings(input, "labels")?;
                dir.update(&id, "issue_updated", |i| i["labels"] = json!(labels))?
            }
            _ => return Err(format!("the board has no tool {name:?}")),
        };
        Ok(out.to_string())
    }

    /// The root, open (made, resolved and the legacy board imported on
    /// first use).
    fn open(&self) -> std::io::Result<BoardDir> {
        let root = self
            .root
            .as_ref()
            .map_err(|why| std::io::Error::other(why.clone()))?;
        let real = match self.real.get() {
            Some(real) => real.clone(),
            None => {
                let real = files::create(root)?;
                self.real.get_or_init(|| real).clone()
            }
        };
        let dir = BoardDir {
            root: files::Root::open(&real)?,
        };
        if let Some(cwd) = &self.legacy
            && self.imported.set(()).is_ok()
        {
            dir.import_legacy(cwd);
        }
        Ok(dir)
    }
}

/// One open board root.
struct BoardDir {
    root: files::Root,
}

impl BoardDir {
    fn board(&self) -> std::io::Result<Board> {
        match self.root.read("board.json", FILE_CAP)? {
            Some(b) => serde_json::from_slice(&b).map_err(std::io::Error::other),
            None => {
                let b = default_board();
                self.root
                    .write("board.json", &serde_json::to_vec_pretty(&b)?)?;
                Ok(b)
            }
        }
    }

    /// Every issue: each file whose name encodes an id and whose content
    /// is an issue of that id; anything else under `issues/` (a link, a
    /// FIFO, a stray file) is skipped and logged, never read through.
    fn all(&self) -> Result<Vec<Value>, String> {
        let Some(dir) = self
            .root
            .dir("issues", false)
            .map_err(|e| format!("issues: {e}"))?
        else {
            return Ok(Vec::new());
        };
        let mut out = read_issues(&dir).map_err(|e| format!("issues: {e}"))?.0;
        out.sort_by(|a: &Value, b: &Value| {
            a["created_at"]
                .as_str()
                .cmp(&b["created_at"].as_str())
                .then(a["id"].as_str().cmp(&b["id"].as_str()))
        });
        Ok(out)
    }

    /// An id or a prefix of exactly one (with or without `native:`); what
    /// is not spelled as an id is refused before anything is looked up.
    fn resolve(&self, prefix: &str) -> Result<String, String> {
        let tail = prefix.strip_prefix("native:").unwrap_or(prefix);
        if !valid_tail(tail) {
            return Err(format!(
                "{prefix:?} is not an issue id (native: and lowercase hex)"
            ));
        }
        let ids: Vec<String> = self
            .all()?
            .iter()
            .filter_map(|i| i["id"].as_str().map(str::to_owned))
            .collect();
        let hits: Vec<&String> = ids
            .iter()
            .filter(|i| i.trim_start_matches("native:").starts_with(tail))
            .collect();
        if let Some(exact) = hits
            .iter()
            .find(|i| i.trim_start_matches("native:") == tail)
        {
            return Ok((*exact).clone());
        }
        match hits.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(format!("no issue {prefix:?}")),
            _ => Err(format!("issue id prefix {prefix:?} is ambiguous")),
        }
    }

    fn get(&self, id: &str) -> Result<Value, String> {
        let file = file_of(id).ok_or_else(|| format!("no issue {id:?}"))?;
        let missing = || format!("no issue {id:?}");
        let dir = self
            .root
            .dir("issues", false)
            .map_err(|e| format!("issues: {e}"))?
            .ok_or_else(missing)?;
        let bytes = dir
            .read(&file, FILE_CAP)
            .map_err(|e| format!("issue {id}: {e}"))?
            .ok_or_else(missing)?;
        let issue: Value =
            serde_json::from_slice(&bytes).map_err(|e| format!("issue {id}: {e}"))?;
        if issue["id"] != id {
            return Err(format!("issue {id}: its file holds another id"));
        }
        Ok(issue)
    }

    fn create(&self, board: &Board, input: &Value) -> Result<Value, String> {
        let title = str_arg(input, "title")?.trim().to_owned();
        if title.is_empty() {
            return Err("title is required".to_owned());
        }
        let state = match input
            .get("state")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            Some(s) if board.states.iter().any(|b| b.name == s) => s.to_owned(),
            Some(s) => return Err(format!("unknown state {s:?}")),
            None => board.states[0].name.clone(),
        };
        if let Some(Value::Object(fields)) = input.get("fields") {
            for k in fields.keys() {
                if !board.fields.iter().any(|f| f["name"] == k.as_str()) {
                    return Err(format!("the board has no field {k:?}"));
                }
            }
        }
        let now = now();
        let mut issue = Map::new();
        issue.insert("id".into(), json!(format!("native:{}", new_id())));
        issue.insert("title".into(), json!(title));
        for key in ["body", "assignee"] {
            if let Some(v) = input
                .get(key)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
            {
                issue.insert(key.into(), json!(v));
            }
        }
        issue.insert("state".into(), json!(state));
        for key in ["labels", "blockers"] {
            let v = strings(input, key).unwrap_or_default();
            if !v.is_empty() {
                issue.insert(key.into(), json!(v));
            }
        }
        if let Some(p) = input
            .get("priority")
            .and_then(Value::as_i64)
            .filter(|p| *p != 0)
        {
            issue.insert("priority".into(), json!(p));
        }
        if let Some(f @ Value::Object(m)) = input.get("fields")
            && !m.is_empty()
        {
            issue.insert("fields".into(), f.clone());
        }
        issue.insert("created_at".into(), json!(now));
        issue.insert("updated_at".into(), json!(now));
        let issue = Value::Object(issue);
        self.write(&issue)?;
        self.event("issue_created", &issue);
        Ok(issue)
    }

    fn list(&self, input: &Value) -> Result<Value, String> {
        let want = |k: &str| {
            input
                .get(k)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
        };
        let issues: Vec<Value> = self
            .all()?
            .into_iter()
            .filter(|i| want("state").is_none_or(|s| i["state"] == s))
            .filter(|i| want("assignee").is_none_or(|a| i["assignee"] == a))
            .filter(|i| {
                want("label").is_none_or(|l| {
                    i["labels"]
                        .as_array()
                        .is_some_and(|ls| ls.iter().any(|x| x == l))
                })
            })
            .collect();
        Ok(Value::Array(issues))
    }

    fn update(
        &self,
        id: &str,
        event: &str,
        change: impl FnOnce(&mut Value),
    ) -> Result<Value, String> {
        let mut issue = self.get(id)?;
        change(&mut issue);
        issue["updated_at"] = json!(now());
        self.write(&issue)?;
        self.event(event, &issue);
        Ok(issue)
    }

    fn write(&self, issue: &Value) -> Result<(), String> {
        let id = issue["id"].as_str().unwrap_or_default();
        let file = file_of(id).ok_or_else(|| format!("{id:?} is not an issue id"))?;
        let bytes = serde_json::to_vec_pretty(issue).map_err(|e| e.to_string())?;
        self.root
            .dir("issues", true)
            .and_then(|d| d.ok_or_else(|| std::io::Error::other("issues: not made")))
            .and_then(|d| d.write(&file, &bytes))
            .map_err(|e| format!("issue {id}: {e}"))
    }

    /// The change log; a failure to append loses no issue (logged only).
    fn event(&self, kind: &str, issue: &Value) {
        let line =
            json!({"type": kind, "issue_id": issue["id"], "state": issue["state"], "at": now()});
        if let Err(e) = self
            .root
            .append("events.jsonl", format!("{line}\n").as_bytes())
        {
            tracing::warn!("board event log: {e}");
        }
    }

    /// Import `cwd`'s legacy board once into this (fresh) root: the same
    /// opens (a link anywhere is not followed), only well-formed issues,
    /// `board.json` and a bounded `events.jsonl`; the old directory is
    /// left as it is. `imported.json` records it (and marks it done); a
    /// root that already holds a board is never touched.
    fn import_legacy(&self, cwd: &Path) {
        let fresh = ["imported.json", "board.json", "issues", "events.jsonl"]
            .iter()
            .all(|n| matches!(self.root.exists(n), Ok(false)));
        if !fresh {
            return;
        }
        let legacy = cwd.join(LEGACY_BOARD_DIR);
        // Beneath the directory iterion runs in, no link followed: a
        // `.iterion` or `dispatcher` that is a link is refused, not read.
        let from = match files::Root::open(cwd).and_then(|c| c.dir(LEGACY_BOARD_DIR, false)) {
            Ok(None) => return,
            Ok(Some(from)) => Ok(from),
            Err(e) => Err(e),
        };
        let report = match from.and_then(|from| import_from(&from, self)) {
            Ok(mut report) => {
                report["from"] = json!(legacy.display().to_string());
                report
            }
            Err(e) => json!({
                "from": legacy.display().to_string(),
                "at": now(),
                "error": e.to_string(),
            }),
        };
        tracing::warn!(
            "the board moved out of the workspace (issue 31 item 2): imported {} once; it stays there unused: {report}",
            legacy.display()
        );
        let _ = self.root.write(
            "imported.json",
            &serde_json::to_vec_pretty(&report).unwrap_or_default(),
        );
    }
}

/// Every issue of `dir` and the names skipped.
fn read_issues(dir: &files::Root) -> std::io::Result<(Vec<Value>, Vec<String>)> {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for name in dir.names()? {
        let Some(id) = id_of(&name) else {
            if !name.starts_with('.') {
                skipped.push(name);
            }
            continue;
        };
        let issue = dir
            .read(&name, FILE_CAP)
            .ok()
            .flatten()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .filter(|i| i["id"] == id.as_str());
        match issue {
            Some(i) => out.push(i),
            None => {
                tracing::warn!("board: {name} is not an issue of id {id}; skipped");
                skipped.push(name);
            }
        }
    }
    Ok((out, skipped))
}

/// Copy the legacy board `from` into `into`, with the board's own opens.
fn import_from(from: &files::Root, into: &BoardDir) -> std::io::Result<Value> {
    let mut skipped = Vec::new();
    if let Ok(Some(board)) = from.read("board.json", FILE_CAP)
        && serde_json::from_slice::<Board>(&board).is_ok()
    {
        into.root.write("board.json", &board)?;
    } else {
        skipped.push("board.json".to_owned());
    }
    let mut imported = 0;
    if let Ok(Some(dir)) = from.dir("issues", false) {
        let (issues, rest) = read_issues(&dir)?;
        skipped.extend(rest.into_iter().map(|n| format!("issues/{n}")));
        for issue in issues {
            into.write(&issue).map_err(std::io::Error::other)?;
            imported += 1;
        }
    } else {
        skipped.push("issues".to_owned());
    }
    match from.read("events.jsonl", EVENTS_CAP) {
        Ok(Some(events)) => into.root.write("events.jsonl", &events)?,
        Ok(None) => {}
        Err(_) => skipped.push("events.jsonl".to_owned()),
    }
    Ok(json!({
        "at": now(),
        "issues": imported,
        "skipped": skipped,
    }))
}

fn str_arg<'v>(input: &'v Value, key: &str) -> Result<&'v str, String> {
    input
        .get(key)
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("{key} is required"))
}

fn strings(input: &Value, key: &str) -> Result<Vec<String>, String> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{key} must be a list of strings"))
            })
            .collect(),
        Some(_) => Err(format!("{key} must be a list of strings")),
    }
}

fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn new_id() -> String {
    use rand::RngCore;
    let mut b = [0u8; 16];
    rand::rng().fill_bytes(&mut b);
    hex::encode(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(c: &[&str]) -> Vec<String> {
        c.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn capabilities_gate_the_tools_and_the_store_keeps_the_issues() {
        let dir = tempfile::tempdir().unwrap();
        let store = BoardStore::new(dir.path().join("dispatcher"));
        let all = caps(&[
            "board.read",
            "board.create",
            "board.move",
            "board.close",
            "board.label",
            "board.assign",
        ]);
        assert_eq!(specs(&all).len(), 7);
        assert_eq!(specs(&caps(&["board.read"])).len(), 2);
        let created = store
            .call(
                &caps(&["board.create"]),
                "create_issue",
                &json!({"title": "Fix it", "labels": ["bug"]}),
            )
            .expect("create");
        let issue: Value = serde_json::from_str(&created).unwrap();
        assert_eq!(issue["state"], "backlog");
        let id = issue["id"].as_str().unwrap().to_owned();
        assert!(dir.path().join("dispatcher/board.json").is_file());
        let denied = store
            .call(
                &caps(&["board.read"]),
                "transition_issue",
                &json!({"id": id, "to": "ready"}),
            )
            .unwrap_err();
        assert!(denied.contains("capability denied"), "{denied}");
        let short = &id["native:".len().."native:".len() + 6];
        let moved: Value = serde_json::from_str(
            &store
                .call(
                    &all,
                    "transition_issue",
                    &json!({"id": short, "to": "in_progress"}),
                )
                .expect("move"),
        )
        .unwrap();
        assert_eq!(moved["state"], "in_progress");
        assert!(
            store
                .call(
                    &all,
                    "transition_issue",
                    &json!({"id": short, "to": "nowhere"})
                )
                .is_err()
        );
        store
            .call(&all, "assign_issue", &json!({"id": id, "assignee": "bot"}))
            .unwrap();
        let listed: Value = serde_json::from_str(
            &store
                .call(
                    &all,
                    "list_issues",
                    &json!({"assignee": "bot", "label": "bug"}),
                )
                .unwrap(),
        )
        .unwrap();
        assert_eq!(listed.as_array().unwrap().len(), 1);
        let closed: Value =
            serde_json::from_str(&store.call(&all, "close_issue", &json!({"id": id})).unwrap())
                .unwrap();
        assert_eq!(closed["state"], "done");
        assert!(
            store
                .call(&all, "close_issue", &json!({"id": id, "to": "review"}))
                .is_err()
        );
        let got: Value =
            serde_json::from_str(&store.call(&all, "get_issue", &json!({"id": id})).unwrap())
                .unwrap();
        assert_eq!(got["assignee"], "bot");
        let events = std::fs::read_to_string(dir.path().join("dispatcher/events.jsonl")).unwrap();
        assert_eq!(events.lines().count(), 4, "{events}");
        assert!(
            store
                .call(&all, "create_issue", &json!({"title": " "}))
                .is_err()
        );
    }

    fn all_caps() -> Vec<String> {
        caps(&[
            "board.read",
            "board.create",
            "board.move",
            "board.close",
            "board.label",
            "board.assign",
        ])
    }

    /// A host directory and file the board must never read or write.
    fn host_targets(tmp: &Path) -> (PathBuf, PathBuf) {
        let host = tmp.join("host-dir");
        std::fs::create_dir(&host).unwrap();
        std::fs::write(
            host.join("config.json"),
            "{\"id\": \"native:ab\", \"auths\": \"HOST-SECRET\"}",
        )
        .unwrap();
        std::fs::write(
            host.join("native__ab.json"),
            "{\"id\": \"native:ab\", \"title\": \"HOST-SECRET\"}",
        )
        .unwrap();
        let file = tmp.join("host-file");
        std::fs::write(&file, "host\n").unwrap();
        (host, file)
    }

    fn untouched(host: &Path, file: &Path) {
        let mut names: Vec<String> = std::fs::read_dir(host)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["config.json", "native__ab.json"],
            "made in the host dir"
        );
        assert_eq!(std::fs::read_to_string(file).unwrap(), "host\n");
    }

    /// Issue 31 item 2: `issues` and `events.jsonl` planted as links to a
    /// host directory and file. Nothing of the directory reaches the model,
    /// nothing is created in it, the file is not appended to.
    #[test]
    fn links_planted_in_the_store_lead_nowhere() {
        let tmp = tempfile::tempdir().unwrap();
        let (host, file) = host_targets(tmp.path());
        let root = tmp.path().join("board");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(&host, root.join("issues")).unwrap();
        std::os::unix::fs::symlink(&file, root.join("events.jsonl")).unwrap();
        let store = BoardStore::new(root.clone());
        let all = all_caps();
        let listed = store.call(&all, "list_issues", &json!({}));
        assert!(
            listed.as_ref().is_err_and(|e| e.contains("symbolic link")),
            "{listed:?}"
        );
        let created = store.call(&all, "create_issue", &json!({"title": "x"}));
        assert!(created.is_err(), "{created:?}");
        let got = store.call(&all, "get_issue", &json!({"id": "native:ab"}));
        assert!(
            got.as_ref().is_err_and(|e| !e.contains("HOST-SECRET")),
            "{got:?}"
        );
        untouched(&host, &file);

        // `issues` real, `events.jsonl` still a link: the issue is made,
        // the host file is not appended to.
        std::fs::remove_file(root.join("issues")).unwrap();
        let made: Value = serde_json::from_str(
            &store
                .call(&all, "create_issue", &json!({"title": "kept"}))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(made["title"], "kept");
        assert!(root.join("events.jsonl").is_symlink());
        untouched(&host, &file);
    }

    /// Ids are `native:` and lowercase hex before they name a file: a
    /// traversal id is refused, and an issue file whose content claims
    /// another id (planted) is not an issue.
    #[test]
    fn ids_are_validated_before_they_name_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("board");
        let store = BoardStore::new(root.clone());
        let all = all_caps();
        store
            .call(&all, "create_issue", &json!({"title": "real"}))
            .unwrap();
        std::fs::write(
            tmp.path().join("x.json"),
            "{\"id\": \"../../x\", \"title\": \"HOST-SECRET\"}",
        )
        .unwrap();
        std::fs::write(
            root.join("issues/native__ab.json"),
            "{\"id\": \"../../x\", \"title\": \"planted\"}",
        )
        .unwrap();
        std::fs::write(root.join("issues/notes.json"), "{\"id\": \"native:cd\"}").unwrap();
        for bad in [
            "../../x",
            "../x.json",
            "/etc/passwd",
            "native:../x",
            "native:AB",
            "x y",
        ] {
            for tool in ["get_issue", "transition_issue", "set_labels"] {
                let out = store.call(&all, tool, &json!({"id": bad, "to": "done", "labels": []}));
                assert!(
                    out.as_ref()
                        .is_err_and(|e| e.contains("not an issue id") && !e.contains("SECRET")),
                    "{tool} {bad}: {out:?}"
                );
            }
        }
        let listed: Value =
            serde_json::from_str(&store.call(&all, "list_issues", &json!({})).unwrap()).unwrap();
        let titles: Vec<&str> = listed
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i["title"].as_str())
            .collect();
        assert_eq!(titles, ["real"], "planted files are not issues");
        assert!(store.call(&all, "get_issue", &json!({"id": "ab"})).is_err());
        assert!(store.call(&all, "get_issue", &json!({"id": "cd"})).is_err());
    }

    fn env(state: &Path) -> crate::env::EnvSnapshot {
        crate::env::EnvSnapshot::new().with("XDG_STATE_HOME", state.display().to_string())
    }

    /// The default root is outside the workspace, one per project; the
    /// legacy `.iterion/dispatcher` is imported once with the same opens
    /// and left where it is.
    #[test]
    fn the_default_board_leaves_the_workspace_and_imports_the_old_one_once() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        let ws = tmp.path().join("ws");
        let old = ws.join(".iterion/dispatcher");
        let old_store = BoardStore::new(old.clone());
        let all = all_caps();
        for t in ["one", "two"] {
            old_store
                .call(&all, "create_issue", &json!({"title": t}))
                .unwrap();
        }
        let (host, file) = host_targets(tmp.path());
        std::os::unix::fs::symlink(
            host.join("native__ab.json"),
            old.join("issues/native__ee.json"),
        )
        .unwrap();
        std::fs::write(old.join("issues/stray.txt"), "x").unwrap();
        let before = std::fs::read_to_string(old.join("events.jsonl")).unwrap();

        let store = BoardStore::for_process(&env(&state), &ws);
        let root = store.root().unwrap().to_path_buf();
        assert!(root.starts_with(state.join("iterion/boards")), "{root:?}");
        assert!(!root.starts_with(&ws));
        let listed: Value =
            serde_json::from_str(&store.call(&all, "list_issues", &json!({})).unwrap()).unwrap();
        let mut titles: Vec<&str> = listed
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i["title"].as_str())
            .collect();
        titles.sort();
        assert_eq!(titles, ["one", "two"]);
        let report: Value =
            serde_json::from_slice(&std::fs::read(root.join("imported.json")).unwrap()).unwrap();
        assert_eq!(report["issues"], 2, "{report}");
        let skipped = report["skipped"].to_string();
        assert!(
            skipped.contains("native__ee.json") && skipped.contains("stray.txt"),
            "{report}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("events.jsonl")).unwrap(),
            before
        );
        // Once: a new issue and a new process do not import again.
        store
            .call(&all, "create_issue", &json!({"title": "three"}))
            .unwrap();
        let again = BoardStore::for_process(&env(&state), &ws);
        let listed: Value =
            serde_json::from_str(&again.call(&all, "list_issues", &json!({})).unwrap()).unwrap();
        assert_eq!(listed.as_array().unwrap().len(), 3);
        assert_eq!(
            std::fs::read_to_string(old.join("events.jsonl")).unwrap(),
            before,
            "the old board is left as it was"
        );
        // Another project: another board.
        let other = tmp.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let elsewhere = BoardStore::for_process(&env(&state), &other);
        assert_ne!(elsewhere.root(), store.root());
        // Configured: exactly there, nothing imported.
        let shared = tmp.path().join("shared");
        let configured = BoardStore::for_process(
            &env(&state).with("ITERION_STORE_DIR", shared.display().to_string()),
            &ws,
        );
        assert_eq!(configured.root(), Some(shared.as_path()));
        let listed: Value =
            serde_json::from_str(&configured.call(&all, "list_issues", &json!({})).unwrap())
                .unwrap();
        assert_eq!(listed, json!([]));
        untouched(&host, &file);
    }

    /// A legacy board reached through a link (`.iterion/dispatcher` or
    /// its `issues` planted as links to host places) is not read.
    #[test]
    fn a_legacy_board_behind_a_link_is_not_imported() {
        for planted in ["dispatcher", "issues"] {
            let tmp = tempfile::tempdir().unwrap();
            let (host, file) = host_targets(tmp.path());
            let ws = tmp.path().join("ws");
            std::fs::create_dir_all(ws.join(".iterion")).unwrap();
            match planted {
                "dispatcher" => {
                    std::os::unix::fs::symlink(&host, ws.join(".iterion/dispatcher")).unwrap();
                }
                _ => {
                    std::fs::create_dir(ws.join(".iterion/dispatcher")).unwrap();
                    std::os::unix::fs::symlink(&host, ws.join(".iterion/dispatcher/issues"))
                        .unwrap();
                    std::os::unix::fs::symlink(&file, ws.join(".iterion/dispatcher/events.jsonl"))
                        .unwrap();
                }
            }
            let store = BoardStore::for_process(&env(&tmp.path().join("state")), &ws);
            let all = all_caps();
            let listed = store.call(&all, "list_issues", &json!({})).unwrap();
            assert_eq!(listed, "[]", "{planted}");
            assert!(!listed.contains("HOST-SECRET"));
            let report: Value = serde_json::from_slice(
                &std::fs::read(store.root().unwrap().join("imported.json")).unwrap(),
            )
            .unwrap();
            assert!(
                report["error"].is_string() || report["skipped"].to_string().contains("issues"),
                "{planted}: {report}"
            );
            store
                .call(&all, "create_issue", &json!({"title": "new"}))
                .unwrap();
            untouched(&host, &file);
        }
    }
}
