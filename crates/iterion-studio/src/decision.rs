//! The sandbox decision card and the network table of a run, folded from
//! its events (read through `iterion_core`'s typed decoder,
//! [`EventRecord::payload`]). The studio
//! decides nothing: the decision was made and recorded by the run
//! (`iterion_sandbox`'s decision, executed by the booter); this only
//! gathers what the events say into the answers operators ask for: which
//! sandbox, why (the knob that decided the mode), what it could reach and
//! what was refused.

use iterion_core::{EventKind, EventRecord};
use serde::Serialize;
use serde_json::Value;

use iterion_core::event::Payload;
use iterion_core::store::AdmissionDecision;

/// What the run's sandbox turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No sandbox decision recorded (yet).
    Undecided,
    /// A container was started.
    Sandboxed,
    /// The run went on without one (mode `none`, or `auto` degraded).
    Skipped,
    /// The run was refused (an inline sandbox that could not be had, an
    /// admission denial).
    Refused,
}

/// The sandbox decision card.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DecisionCard {
    /// Verdict.
    pub verdict: Option<Verdict>,
    /// Mode (`inline`, `auto`, `none`).
    pub mode: Option<String>,
    /// The knob that decided it (source label: `cli`, `env`, `workflow`…).
    pub source: Option<String>,
    /// Driver.
    pub driver: Option<String>,
    /// Host kind the driver was picked for.
    pub host: Option<String>,
    /// Image.
    pub image: Option<String>,
    /// Container name.
    pub container: Option<String>,
    /// Egress mode.
    pub egress: Option<String>,
    /// Limits, `name = value`.
    pub limits: Vec<(String, String)>,
    /// Why it degraded or was refused.
    pub reason: Option<String>,
    /// The refusal's code.
    pub error_code: Option<String>,
    /// The admission decision and its reason.
    pub admission: Option<(String, String)>,
    /// Other things the operator should know (dropped binds, egress
    /// advisory only, unenforced limits, defaulted network).
    pub notes: Vec<String>,
}

impl DecisionCard {
    /// The verdict, `Undecided` when nothing was recorded.
    pub fn verdict(&self) -> Verdict {
        self.verdict.unwrap_or(Verdict::Undecided)
    }
}

/// Fold the run's events into its decision card.
pub fn decision(events: &[EventRecord]) -> DecisionCard {
    let mut card = DecisionCard::default();
    for e in events {
        card.apply(e);
    }
    card
}

impl DecisionCard {
    /// Take one more event into account (the live page folds as events
    /// arrive).
    pub fn apply(&mut self, e: &EventRecord) {
        let card = self;
        let Payload::Known(kind) = e.payload() else {
            return;
        };
        match *kind {
            EventKind::RunAdmission {
                decision, reason, ..
            } => {
                if decision == AdmissionDecision::Denied {
                    card.verdict = Some(Verdict::Refused);
                    card.reason.get_or_insert_with(|| reason.clone());
                }
                card.admission = Some((decision.as_str().to_owned(), reason));
            }
            EventKind::SandboxDriverSelected { driver, host } => {
                card.driver = Some(driver.as_str().to_owned());
                card.host = Some(host);
            }
            EventKind::SandboxSkipped {
                mode,
                source,
                reason,
                refused,
                error_code,
                driver,
                ..
            } => {
                card.verdict = Some(if refused == Some(true) {
                    Verdict::Refused
                } else {
                    Verdict::Skipped
                });
                card.mode = Some(mode.as_str().to_owned());
                card.source = Some(source);
                card.reason = Some(reason);
                card.error_code = error_code.map(|c| c.as_str().to_owned());
                if let Some(driver) = driver {
                    card.driver = Some(driver.as_str().to_owned());
                }
            }
            EventKind::SandboxStarted {
                driver,
                mode,
                source,
                image,
                container,
                limits,
                egress,
                ..
            } => {
                card.verdict = Some(Verdict::Sandboxed);
                card.driver = Some(driver.as_str().to_owned());
                card.mode = Some(mode.as_str().to_owned());
                card.source = Some(source);
                card.image = Some(image);
                card.container = Some(container);
                card.egress = Some(egress);
                card.limits = flatten(&limits);
            }
            EventKind::SandboxShared {
                parent_run_id,
                driver,
                container,
            } => {
                card.verdict = Some(Verdict::Sandboxed);
                card.driver = Some(driver.as_str().to_owned());
                card.container = Some(container);
                card.notes
                    .push(format!("shares the sandbox of run {parent_run_id}"));
            }
            EventKind::SandboxHostBindsDropped {
                driver,
                dropped,
                withdrawn_env,
            } => {
                let targets: Vec<&str> = dropped.iter().map(|d| d.target.as_str()).collect();
                let mut note = format!(
                    "{driver} cannot bind host paths: dropped {}",
                    targets.join(", ")
                );
                if !withdrawn_env.is_empty() {
                    note.push_str(&format!("; withdrawn {}", withdrawn_env.join(", ")));
                }
                card.notes.push(note);
            }
            EventKind::SandboxEgressUnenforced { reason, .. } => card
                .notes
                .push(format!("egress is advisory only: {reason}")),
            EventKind::SandboxNetworkDefaulted {
                mode,
                preset,
                source,
            } => card.notes.push(format!(
                "network defaulted to {mode} with preset {preset} ({source})"
            )),
            EventKind::SandboxLimitUnenforced { limit, reason } => card
                .notes
                .push(format!("{limit} limit not enforced: {reason}")),
            EventKind::SandboxHostStateMounted {
                enabled, source, ..
            } => card.notes.push(format!(
                "host state {} ({source})",
                if enabled { "bound" } else { "not bound" }
            )),
            EventKind::SandboxBuildFailed { error, .. } => {
                card.reason.get_or_insert(error);
            }
            _ => {}
        }
    }

    /// The card as the page shows it: a title and rows of text, which the
    /// server renders and the live page re-renders alike.
    pub fn view(&self) -> CardView {
        let verdict = self.verdict();
        let title = match verdict {
            Verdict::Undecided => "No sandbox decision recorded yet",
            Verdict::Sandboxed => "Sandboxed",
            Verdict::Skipped => "Ran without a sandbox",
            Verdict::Refused => "Refused",
        };
        let mut facts = Vec::new();
        let mut row = |name: &str, value: Option<String>| {
            if let Some(v) = value {
                facts.push((name.to_owned(), v));
            }
        };
        row(
            "Mode",
            self.mode.as_ref().map(|m| match &self.source {
                Some(src) => format!("{m} (decided by {src})"),
                None => m.clone(),
            }),
        );
        row("Driver", self.driver.clone());
        row("Host", self.host.clone());
        row("Image", self.image.clone());
        row("Container", self.container.clone());
        row("Egress", self.egress.clone());
        row("Reason", self.reason.clone());
        row("Error code", self.error_code.clone());
        row(
            "Admission",
            self.admission.as_ref().map(|(d, r)| format!("{d}: {r}")),
        );
        CardView {
            verdict,
            title,
            facts,
            limits: self.limits.clone(),
            notes: self.notes.clone(),
        }
    }
}

/// The decision card as rows of text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CardView {
    /// Verdict (the CSS class).
    pub verdict: Verdict,
    /// Its words.
    pub title: &'static str,
    /// `name`, `value` rows.
    pub facts: Vec<(String, String)>,
    /// Limits, `name`, `value`.
    pub limits: Vec<(String, String)>,
    /// Notes.
    pub notes: Vec<String>,
}

/// The limits that are byte counts (`iterion_core::plan::Limits`).
const BYTE_LIMITS: [&str; 3] = ["memory", "memory_swap", "writable_layer"];

/// A byte count as a person reads it: `2 GiB`, `1.5 GiB`, `512 MiB`,
/// `100 B`.
fn human_bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, factor) in UNITS {
        if n >= factor {
            return if n.is_multiple_of(factor) {
                format!("{} {unit}", n / factor)
            } else {
                // One decimal is what a person compares limits by.
                let tenths = (u128::from(n) * 10 + u128::from(factor) / 2) / u128::from(factor);
                format!("{}.{} {unit}", tenths / 10, tenths % 10)
            };
        }
    }
    format!("{n} B")
}

/// `limits` as `name = value` rows, nested keys dotted, nulls left out,
/// byte counts in binary units.
fn flatten(limits: &Value) -> Vec<(String, String)> {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
        match v {
            Value::Null => {}
            Value::Object(map) => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            Value::String(s) => out.push((prefix.to_owned(), s.clone())),
            Value::Number(n) if BYTE_LIMITS.contains(&prefix) => out.push((
                prefix.to_owned(),
                n.as_u64().map_or_else(|| n.to_string(), human_bytes),
            )),
            other => out.push((prefix.to_owned(), other.to_string())),
        }
    }
    let mut out = Vec::new();
    walk("", limits, &mut out);
    out
}

/// One refused request of the run's egress proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockedRequest {
    /// The event's seq.
    pub seq: u64,
    /// Host asked for.
    pub host: String,
    /// Port.
    pub port: u16,
    /// The rule that decided, when one did.
    pub rule: Option<String>,
    /// Why.
    pub reason: String,
    /// The node that asked.
    pub node: Option<String>,
}

/// Every `network_blocked` of the run, in order.
pub fn blocked(events: &[EventRecord]) -> Vec<BlockedRequest> {
    events
        .iter()
        .filter_map(|e| match e.payload() {
            Payload::Known(kind) => match *kind {
                EventKind::NetworkBlocked {
                    host,
                    port,
                    reason,
                    rule,
                    node_id,
                    ..
                } => Some(BlockedRequest {
                    seq: e.seq,
                    host,
                    port,
                    rule,
                    reason,
                    node: node_id.or_else(|| e.node_id.as_ref().map(|n| n.to_string())),
                }),
                _ => None,
            },
            Payload::Unknown { .. } | Payload::Malformed { .. } => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_limits_read_in_binary_units() {
        let cases = [
            (2_147_483_648, "2 GiB"),
            (1_610_612_736, "1.5 GiB"),
            (536_870_912, "512 MiB"),
            (1024, "1 KiB"),
            (1000, "1000 B"),
            (0, "0 B"),
        ];
        for (n, want) in cases {
            assert_eq!(super::human_bytes(n), want, "{n}");
        }
        let rows = super::flatten(
            &serde_json::json!({"memory": 2_147_483_648_u64, "memory_swap": 2_147_483_648_u64, "pids": 512, "writable_layer": 10_737_418_240_u64}),
        );
        assert_eq!(
            rows,
            vec![
                ("memory".to_owned(), "2 GiB".to_owned()),
                ("memory_swap".to_owned(), "2 GiB".to_owned()),
                ("pids".to_owned(), "512".to_owned()),
                ("writable_layer".to_owned(), "10 GiB".to_owned()),
            ]
        );
    }

    use iterion_core::RunId;
    use serde_json::json;

    use super::*;

    fn ev(seq: u64, kind: &str, data: Value) -> EventRecord {
        EventRecord {
            seq,
            timestamp: time::OffsetDateTime::UNIX_EPOCH,
            kind: kind.into(),
            run_id: RunId::parse("r1").expect("id"),
            node_id: None,
            data,
        }
    }

    #[test]
    fn a_started_sandbox_fills_the_card() {
        let events = [
            ev(
                1,
                "run_admission",
                json!({"decision": "admitted", "phase": "pre_model", "code": null, "reason": "trusted workspace"}),
            ),
            ev(
                2,
                "sandbox_driver_selected",
                json!({"driver": "docker", "host": "local"}),
            ),
            ev(
                3,
                "sandbox_started",
                json!({"driver": "docker", "mode": "inline", "source": "workflow", "image": "busybox", "has_post_create": false, "container": "iterion-r1", "limits": {"memory": 536870912, "pids": 512, "cpus": null}, "egress": "proxy"}),
            ),
            ev(
                4,
                "sandbox_egress_unenforced",
                json!({"driver": "docker", "reason": "no nft"}),
            ),
            ev(
                5,
                "network_blocked",
                json!({"host": "evil.test", "port": 443, "reason": "blocked-by-allowlist", "rule": null, "node_id": "probe"}),
            ),
        ];
        let card = decision(&events);
        assert_eq!(card.verdict(), Verdict::Sandboxed);
        assert_eq!(card.source.as_deref(), Some("workflow"));
        assert_eq!(card.egress.as_deref(), Some("proxy"));
        assert_eq!(
            card.limits,
            vec![
                ("memory".to_owned(), "512 MiB".to_owned()),
                ("pids".to_owned(), "512".to_owned())
            ]
        );
        assert_eq!(
            card.notes,
            vec!["egress is advisory only: no nft".to_owned()]
        );
        let net = blocked(&events);
        assert_eq!(net.len(), 1);
        assert_eq!(net[0].node.as_deref(), Some("probe"));
    }

    #[test]
    fn a_refusal_names_its_code_and_reason() {
        let events = [ev(
            1,
            "sandbox_skipped",
            json!({"mode": "inline", "source": "workflow", "reason": "no driver", "refused": true, "error_code": "SANDBOX_DRIVER_UNAVAILABLE"}),
        )];
        let card = decision(&events);
        assert_eq!(card.verdict(), Verdict::Refused);
        assert_eq!(
            card.error_code.as_deref(),
            Some("SANDBOX_DRIVER_UNAVAILABLE")
        );
        assert_eq!(decision(&[]).verdict(), Verdict::Undecided);
    }
}
