//! The native kanban board an agent reaches through its `board.*`
//! capabilities (upstream `pkg/dispatcher/native` and its `boardops`): the
//! seven tools of MCP server `iterion_board` (`mcp.iterion_board.<tool>`,
//! `mcp__iterion_board__<tool>` on the wire), each unlocked by one
//! capability, over a store on the host.
//!
//! The store is upstream's layout under its root — `ITERION_STORE_DIR`
//! when set, else `.iterion/dispatcher` under the directory iterion runs
//! in: `board.json` (the states; upstream's default board when missing),
//! `issues/<id>.json` one issue each, `events.jsonl` one line per change.
//! Writes go through a temporary file and a rename; one process-wide lock
//! orders them. A capability not granted is refused before anything is
//! read; every other failure is an error result the model can read.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

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

/// The board's store.
#[derive(Debug)]
pub struct BoardStore {
    root: PathBuf,
    lock: Mutex<()>,
}

impl BoardStore {
    /// The store under `root` (made on first use).
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            lock: Mutex::new(()),
        }
    }

    /// The store a process uses: `ITERION_STORE_DIR`, else
    /// `.iterion/dispatcher` under `cwd` (upstream).
    pub fn root_for(store_dir: Option<&str>, cwd: &Path) -> PathBuf {
        match store_dir.filter(|d| !d.is_empty()) {
            Some(d) => PathBuf::from(d),
            None => cwd.join(".iterion").join("dispatcher"),
        }
    }

    /// Its root.
    pub fn root(&self) -> &Path {
        &self.root
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
        let board = self.board().map_err(|e| format!("board.json: {e}"))?;
        let out = match name {
            "create_issue" => self.create(&board, input)?,
            "get_issue" => self.get(&self.resolve(str_arg(input, "id")?)?)?,
            "list_issues" => self.list(input)?,
            "transition_issue" => {
                let id = self.resolve(str_arg(input, "id")?)?;
                let to = str_arg(input, "to")?;
                if !board.states.iter().any(|s| s.name == to) {
                    return Err(format!("unknown state {to:?}"));
                }
                self.update(&id, "issue_moved", |i| i["state"] = json!(to))?
            }
            "close_issue" => {
                let id = self.resolve(str_arg(input, "id")?)?;
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
                self.update(&id, "issue_moved", |i| i["state"] = json!(to))?
            }
            "assign_issue" => {
                let id = self.resolve(str_arg(input, "id")?)?;
                let who = input
                    .get("assignee")
                    .and_then(Value::as_str)
                    .ok_or("assignee is required")?
                    .to_owned();
                self.update(&id, "issue_updated", |i| {
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
                let id = self.resolve(str_arg(input, "id")?)?;
                let labels = strings(input, "labels")?;
                self.update(&id, "issue_updated", |i| i["labels"] = json!(labels))?
            }
            _ => return Err(format!("the board has no tool {name:?}")),
        };
        Ok(out.to_string())
    }

    fn board(&self) -> std::io::Result<Board> {
        let p = self.root.join("board.json");
        match std::fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b).map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let b = default_board();
                write_atomic(&p, &serde_json::to_vec_pretty(&b)?)?;
                Ok(b)
            }
            Err(e) => Err(e),
        }
    }

    fn issue_path(&self, id: &str) -> PathBuf {
        // Upstream's encoding: ':' is not portable in a file name.
        self.root
            .join("issues")
            .join(format!("{}.json", id.replace(':', "__")))
    }

    fn all(&self) -> Result<Vec<Value>, String> {
        let dir = self.root.join("issues");
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            let text = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            out.push(
                serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?,
            );
        }
        out.sort_by(|a: &Value, b: &Value| {
            a["created_at"]
                .as_str()
                .cmp(&b["created_at"].as_str())
                .then(a["id"].as_str().cmp(&b["id"].as_str()))
        });
        Ok(out)
    }

    /// An id or a prefix of exactly one (with or without `native:`).
    fn resolve(&self, prefix: &str) -> Result<String, String> {
        let ids: Vec<String> = self
            .all()?
            .iter()
            .filter_map(|i| i["id"].as_str().map(str::to_owned))
            .collect();
        if ids.iter().any(|i| i == prefix) {
            return Ok(prefix.to_owned());
        }
        let hits: Vec<&String> = ids
            .iter()
            .filter(|i| {
                i.starts_with(prefix) || i.trim_start_matches("native:").starts_with(prefix)
            })
            .collect();
        match hits.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(format!("no issue {prefix:?}")),
            _ => Err(format!("issue id prefix {prefix:?} is ambiguous")),
        }
    }

    fn get(&self, id: &str) -> Result<Value, String> {
        let text = std::fs::read(self.issue_path(id)).map_err(|_| format!("no issue {id:?}"))?;
        serde_json::from_slice(&text).map_err(|e| format!("issue {id}: {e}"))
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
        let path = self.issue_path(id);
        let bytes = serde_json::to_vec_pretty(issue).map_err(|e| e.to_string())?;
        write_atomic(&path, &bytes).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The change log; a failure to append loses no issue (logged only).
    fn event(&self, kind: &str, issue: &Value) {
        use std::io::Write;
        let line =
            json!({"type": kind, "issue_id": issue["id"], "state": issue["state"], "at": now()});
        let path = self.root.join("events.jsonl");
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = appended {
            tracing::warn!("board event log {}: {e}", path.display());
        }
    }
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

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
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
}
