//! The privacy tools, upstream's `privacy_filter` and `privacy_unfilter`
//! (`pkg/backend/tool/privacy`): the filter replaces what the
//! [`detector`] finds (emails, phones, URLs, account numbers, secrets)
//! with placeholder tokens `PII_` + 8 hex digits, stable per (run, value,
//! category), and remembers each token's value in the run's [`vault`];
//! the unfilter puts the values back. They run on the host (the vault is
//! the run store's), as a tool node's command or as an agent's tool.
//!
//! The input text of the filter and the output text of the unfilter are
//! the clear PII: the engine shows them in events as
//! [`EVENT_TEXT_MARKER`] (upstream), and no error text carries a value.

pub mod detector;
pub mod vault;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant;

use iterion_core::{RunId, RunStore};
use regex::Regex;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use self::detector::{CATEGORIES, ScanOptions, Span};
use self::vault::Vault;
use super::spec::ToolSpec;

/// The filter's name.
pub const FILTER: &str = "privacy_filter";
/// The unfilter's name.
pub const UNFILTER: &str = "privacy_unfilter";
/// What events show instead of the clear text of these tools.
pub const EVENT_TEXT_MARKER: &str = "<redacted by privacy tool>";
/// The `engine` field of the filter's answer.
const ENGINE: &str = "iterion-privacy-rs-v1";

/// Whether `name` is one of the privacy tools.
pub fn is_privacy_tool(name: &str) -> bool {
    name == FILTER || name == UNFILTER
}

/// What the model (or a tool node's author) is told about each tool.
pub fn specs() -> Vec<ToolSpec> {
    let cats: Vec<&str> = CATEGORIES.to_vec();
    vec![
        ToolSpec {
            name: FILTER.to_owned(),
            description: "Detect or redact personal data in a text (account_number, email, phone, url, secret). redact (default) replaces each value with a placeholder token PII_xxxxxxxx, stable within the run, and keeps the mapping in the run's vault; detect lists spans with hashed values.".to_owned(),
            input_schema: json!({
                "type": "object",
                "required": ["text"],
                "additionalProperties": false,
                "properties": {
                    "text": {"type": "string"},
                    "mode": {"type": "string", "enum": ["redact", "detect"]},
                    "categories": {"type": "array", "items": {"type": "string", "enum": cats}},
                    "min_score": {"type": "number", "minimum": 0, "maximum": 1},
                    "placeholder_format": {"type": "string", "description": "{token} and {category} are replaced; the default {token} round-trips through privacy_unfilter"}
                }
            }),
        },
        ToolSpec {
            name: UNFILTER.to_owned(),
            description: "Replace privacy_filter placeholder tokens with their original values from the run's vault; a token not in the vault is left (default), removed, or an error (missing_policy).".to_owned(),
            input_schema: json!({
                "type": "object",
                "required": ["text"],
                "additionalProperties": false,
                "properties": {
                    "text": {"type": "string"},
                    "missing_policy": {"type": "string", "enum": ["leave", "error", "remove"]}
                }
            }),
        },
    ]
}

/// The event form of a privacy tool's input or output: `text` replaced
/// by [`EVENT_TEXT_MARKER`] where it holds clear values (the filter's
/// input, the unfilter's output).
pub fn for_event(mut value: Value) -> Value {
    if let Some(t) = value.get_mut("text").filter(|t| t.is_string()) {
        *t = Value::String(EVENT_TEXT_MARKER.to_owned());
    }
    value
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilterInput {
    text: String,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    categories: Vec<String>,
    #[serde(default)]
    min_score: Option<f64>,
    #[serde(default)]
    placeholder_format: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UnfilterInput {
    text: String,
    #[serde(default)]
    missing_policy: Option<String>,
}

/// The privacy tools of every run of this process, over its run store.
pub struct PrivacyTools {
    store: Arc<dyn RunStore>,
    /// Open vaults by run (one lock per run: concurrent branches of a run
    /// add to the same vault one after the other).
    vaults: Mutex<HashMap<RunId, Arc<tokio::sync::Mutex<Vault>>>>,
}

impl std::fmt::Debug for PrivacyTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivacyTools")
            .field("store", &self.store.describe())
            .finish_non_exhaustive()
    }
}

impl PrivacyTools {
    /// Over `store`, which keeps each run's vault.
    pub fn new(store: Arc<dyn RunStore>) -> Self {
        Self {
            store,
            vaults: Mutex::new(HashMap::new()),
        }
    }

    /// Forget a finished run's vault (it stays in the store).
    pub fn forget(&self, run: &RunId) {
        if let Ok(mut v) = self.vaults.lock() {
            v.remove(run);
        }
    }

    async fn vault(&self, run: &RunId) -> Result<Arc<tokio::sync::Mutex<Vault>>, String> {
        if let Some(v) = self.vaults.lock().ok().and_then(|m| m.get(run).cloned()) {
            return Ok(v);
        }
        let opened = Vault::open(self.store.as_ref(), run)
            .await
            .map_err(|e| e.to_string())?;
        let mut map = self
            .vaults
            .lock()
            .map_err(|_| "privacy vault cache poisoned".to_owned())?;
        Ok(map
            .entry(run.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(opened)))
            .clone())
    }

    /// Run `tool` of `run` on `input`: its JSON answer, or the error the
    /// caller sees (a tool node fails on it; a model gets it as an error
    /// result). No error names a value.
    pub async fn call(&self, run: &RunId, tool: &str, input: &Value) -> Result<String, String> {
        match tool {
            FILTER => self.filter(run, input).await,
            UNFILTER => self.unfilter(run, input).await,
            other => Err(format!("{other} is not a privacy tool")),
        }
    }

    async fn filter(&self, run: &RunId, input: &Value) -> Result<String, String> {
        let started = Instant::now();
        let args: FilterInput = serde_json::from_value(input.clone())
            .map_err(|e| format!("{FILTER}: bad input: {}", schema_error(&e)))?;
        let mode = match args.mode.as_deref().map(str::trim) {
            None | Some("") | Some("redact") => "redact",
            Some("detect") => "detect",
            Some(other) => {
                return Err(format!(
                    "{FILTER}: unknown mode {other:?} (redact or detect)"
                ));
            }
        };
        if let Some(bad) = args
            .categories
            .iter()
            .find(|c| !CATEGORIES.contains(&c.as_str()))
        {
            return Err(format!(
                "{FILTER}: unknown category {bad:?} ({})",
                CATEGORIES.join(", ")
            ));
        }
        let min_score = args.min_score.unwrap_or(0.5);
        if !(0.0..=1.0).contains(&min_score) {
            return Err(format!("{FILTER}: min_score must be between 0 and 1"));
        }
        let format = args
            .placeholder_format
            .filter(|f| !f.is_empty())
            .unwrap_or_else(|| "{token}".to_owned());
        let spans = detector::scan(
            &args.text,
            &ScanOptions {
                categories: args.categories,
                min_score,
            },
        );
        let elapsed = || u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut out = serde_json::Map::new();
        out.insert("mode".into(), json!(mode));
        out.insert("engine".into(), json!(ENGINE));
        if mode == "detect" {
            let rendered: Vec<Value> = spans
                .iter()
                .map(|s| {
                    json!({
                        "category": s.category,
                        "score": s.score,
                        // Character offsets, as upstream reports them.
                        "start": args.text[..s.start].chars().count(),
                        "end": args.text[..s.end].chars().count(),
                        "rule": s.rule,
                        "value_hash": short_hash(&args.text[s.start..s.end]),
                    })
                })
                .collect();
            let cats: Vec<&str> = spans.iter().map(|s| s.category).collect();
            out.insert("spans".into(), Value::Array(rendered));
            finish_counts(&mut out, &cats);
            out.insert("elapsed_ms".into(), json!(elapsed()));
            return Ok(Value::Object(out).to_string());
        }
        let (redacted, placeholders, entries) = redact(run, &args.text, &spans, &format);
        if !entries.is_empty() {
            let vault = self
                .vault(run)
                .await
                .map_err(|e| format!("{FILTER}: {e}"))?;
            let mut vault = vault.lock().await;
            vault
                .add_all(self.store.as_ref(), entries)
                .await
                .map_err(|e| format!("{FILTER}: {e}"))?;
        }
        let cats: Vec<&str> = placeholders.iter().map(|p| p.1).collect();
        out.insert("redacted".into(), json!(redacted));
        out.insert(
            "placeholders".into(),
            Value::Array(
                placeholders
                    .iter()
                    .map(|(token, category, score, rule)| {
                        json!({"token": token, "category": category, "score": score, "rule": rule})
                    })
                    .collect(),
            ),
        );
        finish_counts(&mut out, &cats);
        out.insert("elapsed_ms".into(), json!(elapsed()));
        Ok(Value::Object(out).to_string())
    }

    async fn unfilter(&self, run: &RunId, input: &Value) -> Result<String, String> {
        let args: UnfilterInput = serde_json::from_value(input.clone())
            .map_err(|e| format!("{UNFILTER}: bad input: {}", schema_error(&e)))?;
        let policy = match args.missing_policy.as_deref().map(str::trim) {
            None | Some("") | Some("leave") => Missing::Leave,
            Some("error") => Missing::Error,
            Some("remove") => Missing::Remove,
            Some(other) => {
                return Err(format!(
                    "{UNFILTER}: unknown missing_policy {other:?} (leave, error or remove)"
                ));
            }
        };
        if args.text.is_empty() {
            return Ok(json!({"text": "", "substituted": [], "missing": []}).to_string());
        }
        let vault = self
            .vault(run)
            .await
            .map_err(|e| format!("{UNFILTER}: {e}"))?;
        let vault = vault.lock().await;
        let mut substituted: Vec<String> = Vec::new();
        let mut missing: Vec<String> = Vec::new();
        let token_re = TOKEN_RE
            .as_ref()
            .ok_or_else(|| format!("{UNFILTER}: token pattern unavailable"))?;
        let restored = token_re.replace_all(&args.text, |caps: &regex::Captures<'_>| {
            let token = &caps[0];
            match vault.get(token) {
                Some(e) => {
                    if !substituted.iter().any(|t| t == token) {
                        substituted.push(token.to_owned());
                    }
                    e.value.clone()
                }
                None => {
                    if !missing.iter().any(|t| t == token) {
                        missing.push(token.to_owned());
                    }
                    match policy {
                        Missing::Remove => String::new(),
                        Missing::Leave | Missing::Error => token.to_owned(),
                    }
                }
            }
        });
        if policy == Missing::Error
            && let Some(first) = missing.first()
        {
            return Err(format!(
                "{UNFILTER}: {} token(s) are not in the run's vault (first: {first})",
                missing.len()
            ));
        }
        Ok(json!({"text": restored, "substituted": substituted, "missing": missing}).to_string())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missing {
    Leave,
    Error,
    Remove,
}

/// A constant pattern (`None` never happens; tested).
static TOKEN_RE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"PII_[0-9a-f]{8}").ok());

type Placeholder = (String, &'static str, f64, &'static str);
type VaultEntries = Vec<(String, String, &'static str)>;

/// The text with every span replaced, the distinct placeholders (sorted
/// by token) and the vault entries to add.
fn redact(
    run: &RunId,
    text: &str,
    spans: &[Span],
    format: &str,
) -> (String, Vec<Placeholder>, VaultEntries) {
    let mut out = String::with_capacity(text.len());
    let mut cursor = 0;
    let mut placeholders: BTreeMap<String, Placeholder> = BTreeMap::new();
    let mut entries = Vec::new();
    for s in spans {
        if s.start < cursor || s.end > text.len() || s.start >= s.end {
            continue;
        }
        out.push_str(&text[cursor..s.start]);
        let raw = &text[s.start..s.end];
        let token = token_of(run, raw, s.category);
        out.push_str(
            &format
                .replace("{token}", &token)
                .replace("{category}", &s.category.to_ascii_uppercase()),
        );
        cursor = s.end;
        entries.push((token.clone(), raw.to_owned(), s.category));
        placeholders
            .entry(token.clone())
            .or_insert((token, s.category, s.score, s.rule));
    }
    out.push_str(&text[cursor..]);
    (out, placeholders.into_values().collect(), entries)
}

/// The placeholder of `value` in `run`: deterministic, so re-redacting
/// the same text (a resumed run) reuses the vault's entry.
pub fn token_of(run: &RunId, value: &str, category: &str) -> String {
    let mut h = Sha256::new();
    h.update(run.as_str().as_bytes());
    h.update([0]);
    h.update(value.as_bytes());
    h.update([0]);
    h.update(category.as_bytes());
    let digest = h.finalize();
    format!("PII_{}", hex::encode(&digest[..4]))
}

fn short_hash(s: &str) -> String {
    let digest = Sha256::digest(s.as_bytes());
    hex::encode(&digest[..16])
}

fn finish_counts(out: &mut serde_json::Map<String, Value>, cats: &[&str]) {
    let mut counts = serde_json::Map::new();
    for c in cats {
        let n = counts.get(*c).and_then(Value::as_u64).unwrap_or(0);
        counts.insert((*c).to_owned(), json!(n + 1));
    }
    for c in CATEGORIES {
        out.insert(format!("has_{c}"), json!(counts.contains_key(*c)));
    }
    out.insert("category_counts".into(), Value::Object(counts));
}

/// A serde error without the offending value (it may be PII).
fn schema_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    // serde_json names the field or type, and quotes an unexpected
    // string value: keep only the part before the quote.
    match text.find(['"', '`']) {
        Some(i) if text.contains("invalid type") || text.contains("invalid value") => {
            text[..i].trim_end().to_owned()
        }
        _ => text,
    }
}

// Its tests run against a real run store, so they live with the other
// cross-backend tests (`crates/iterion-e2e/tests/integration/agent/privacy.rs`).
