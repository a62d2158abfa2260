//! The wire format of events: names, the draft, the typed read-back, and
//! the golden JSON every variant serialises to.

use super::*;

#[test]
fn draft_carries_type_and_data() {
    let draft: EventDraft = EventKind::SandboxHostBindsDropped {
        driver: crate::driver::DriverName::Kubernetes,
        dropped: vec![DroppedBind {
            source: "/h".into(),
            target: "/c".into(),
        }],
        withdrawn_env: vec!["ITERION_ARTIFACT_FILES_DIR".into()],
    }
    .into();
    assert_eq!(draft.kind, "sandbox_host_binds_dropped");
    assert_eq!(draft.data["dropped"][0]["target"], "/c");
    assert_eq!(draft.data["withdrawn_env"][0], "ITERION_ARTIFACT_FILES_DIR");
}

#[test]
fn agent_event_names_match_serde_tags() {
    let kinds = [
        EventKind::LlmRequest {
            backend: "claw".into(),
            model: "anthropic/m".into(),
            message_count: 1,
            tool_count: 0,
        },
        EventKind::LlmStepFinished {
            step: 1,
            input_tokens: 1,
            output_tokens: 2,
            finish_reason: "end_turn".into(),
            tool_calls: 0,
            cost_usd: None,
        },
        EventKind::LlmRetry {
            attempt: 1,
            delay_ms: 10,
            error: "429".into(),
            status_code: Some(429),
        },
        EventKind::SandboxClawRoutedViaRunner {
            reason: "sandbox active".into(),
            limitations_v1: vec![],
        },
        EventKind::BudgetExceeded {
            dimension: "tokens".into(),
            used: 2.0,
            limit: 1.0,
        },
        EventKind::RunClaimed {
            runner_id: "r1".into(),
            delivery: 3,
            attempt: 1,
            lease_revision: 9,
        },
        EventKind::RunReleased {
            runner_id: "r1".into(),
            delivery: 3,
            attempt: 1,
            action: "ack".into(),
            reason: "finished".into(),
        },
    ];
    for kind in kinds {
        let draft: EventDraft = kind.clone().into();
        assert_eq!(draft.kind, kind.name());
    }
}

#[test]
fn name_matches_serde_tag() {
    let kind = EventKind::NetworkBlocked {
        host: "evil.test".into(),
        port: 443,
        reason: "blocked-by-allowlist".into(),
        rule: None,
        node_id: Some("probe".into()),
        secret: None,
        authority: None,
    };
    let draft: EventDraft = kind.clone().into();
    assert_eq!(draft.kind, kind.name());
}

mod every_variant {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeSet;

    use proptest::prelude::*;
    use serde_json::{Value, json};
    use time::OffsetDateTime;

    use super::super::samples::every_kind;
    use super::*;
    use crate::id::{NodeId, RunId};

    fn record(draft: EventDraft) -> EventRecord {
        EventRecord {
            seq: 1,
            timestamp: OffsetDateTime::UNIX_EPOCH,
            kind: draft.kind,
            run_id: RunId::parse("r1").unwrap(),
            node_id: draft.node_id,
            data: draft.data,
        }
    }

    #[test]
    fn the_samples_cover_every_name_and_the_names_are_the_serde_tags() {
        let names: BTreeSet<&str> = EventKind::NAMES.iter().copied().collect();
        assert_eq!(names.len(), EventKind::NAMES.len(), "a name twice");
        let sampled: BTreeSet<&str> = every_kind().iter().map(EventKind::name).collect();
        assert_eq!(sampled, names, "every variant needs a sample");
        for kind in every_kind() {
            let draft = EventDraft::from(kind.clone());
            assert_eq!(draft.kind, kind.name());
        }
    }

    /// What the writer puts on the wire for every variant, byte for byte:
    /// a changed field type (a `String` that became an enum) must keep
    /// every stored event and every `iterion events --json` line as it
    /// was.
    #[test]
    fn the_wire_format_of_every_variant_is_golden() {
        let lines: Vec<String> = every_kind()
            .into_iter()
            .map(|kind| {
                let draft = EventDraft::from(kind);
                format!(
                    "{} {}",
                    draft.kind,
                    serde_json::to_string(&draft.data).unwrap()
                )
            })
            .collect();
        insta::assert_snapshot!(lines.join("\n"));
    }

    #[test]
    fn every_variant_comes_back_from_its_envelope() {
        for kind in every_kind() {
            let plain = record(EventDraft::from(kind.clone()));
            assert_eq!(plain.payload(), Payload::Known(Box::new(kind.clone())));
            if let EventKind::BranchStarted { branch_id, .. }
            | EventKind::BranchFinished { branch_id, .. } = &kind
            {
                // A branch's own events name it with the same key.
                assert_eq!(plain.branch_id(), Some(branch_id.as_str()));
                continue;
            }
            assert_eq!(plain.branch_id(), None);
            // The branch tag rides in `data` beside the variant's fields.
            let tagged = record(
                EventDraft::from(kind.clone())
                    .for_node(NodeId::new("n"))
                    .in_branch(Some("fan#1")),
            );
            assert_eq!(tagged.payload(), Payload::Known(Box::new(kind.clone())));
            assert_eq!(tagged.branch_id(), Some("fan#1"));
            // And through the stored JSON envelope.
            let text = serde_json::to_string(&tagged).unwrap();
            let back: EventRecord = serde_json::from_str(&text).unwrap();
            assert_eq!(back, tagged);
            assert_eq!(back.payload().known(), Some(&kind));
        }
    }

    #[test]
    fn unknown_names_and_bad_shapes_come_back_whole() {
        let data = json!({"x": {"deep": [1, 2]}, "s": "<b>"});
        let p = Payload::decode("quantum_flux", &data);
        assert_eq!(
            p,
            Payload::Unknown {
                kind: "quantum_flux".into(),
                data: data.clone()
            }
        );
        assert_eq!(p.name(), "quantum_flux");
        assert_eq!(p.known(), None);
        for bad in [
            json!("nonsense"),
            Value::Null,
            json!({"host": "evil.test"}),
            json!({"host": "evil.test", "port": "443", "reason": "r", "rule": null, "node_id": null}),
        ] {
            match Payload::decode("network_blocked", &bad) {
                Payload::Malformed { kind, data, error } => {
                    assert_eq!(kind, "network_blocked");
                    assert_eq!(data, bad);
                    assert!(!error.is_empty());
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "[a-z_ ]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z_]{1,12}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Whatever a store holds, decoding answers without panicking and
        /// a payload it cannot type keeps the data as stored.
        #[test]
        fn decoding_anything_is_total_and_lossless(
            known in prop::sample::select(EventKind::NAMES),
            other in "[a-z_]{0,24}",
            pick_known in any::<bool>(),
            data in json_value(),
        ) {
            let kind = if pick_known { known.to_owned() } else { other };
            match Payload::decode(&kind, &data) {
                Payload::Known(k) => prop_assert_eq!(k.name(), kind.as_str()),
                Payload::Unknown { kind: k, data: d } => {
                    prop_assert!(!EventKind::NAMES.contains(&k.as_str()));
                    prop_assert_eq!(k, kind);
                    prop_assert_eq!(d, data);
                }
                Payload::Malformed { kind: k, data: d, .. } => {
                    prop_assert!(EventKind::NAMES.contains(&k.as_str()));
                    prop_assert_eq!(k, kind);
                    prop_assert_eq!(d, data);
                }
            }
        }
    }
}

/// The typed fields are serialised to exactly the words the emitters used
/// to write by hand (`code.as_str()`, `driver.as_str()`, `mode.as_str()`,
/// the trust's lower-cased name), for every value, so no stored event and
/// no reader of `--json` sees a difference.
mod words {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Value, json};

    use super::*;
    use crate::driver::DriverName;
    use crate::failure::{Disposition, FailureCode, RunStatus};
    use crate::mode::AdmissionDecision;
    use crate::mode::{Mode, Trust};
    use crate::net::NetPreset;
    use crate::spec::NetworkMode;

    fn word<T: serde::Serialize>(v: T) -> String {
        match serde_json::to_value(v).unwrap() {
            Value::String(s) => s,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn every_enum_value_keeps_its_word() {
        let codes = [
            FailureCode::SandboxDriverUnavailable,
            FailureCode::SandboxSetupTimeout,
            FailureCode::SandboxCapacity,
            FailureCode::LaunchFailed,
            FailureCode::ScratchNotPortable,
            FailureCode::Interrupted,
            FailureCode::Cancelled,
            FailureCode::SandboxImageUnavailable,
            FailureCode::SandboxBuildFailed,
            FailureCode::SandboxStartFailed,
            FailureCode::SandboxLost,
            FailureCode::SandboxSpecRefused,
            FailureCode::NodeFailed,
            FailureCode::WorkflowFailed,
            FailureCode::NoOutgoingEdge,
            FailureCode::LoopLimitExceeded,
            FailureCode::StoreError,
            FailureCode::Timeout,
            FailureCode::BudgetExceeded,
            FailureCode::AttachmentLost,
        ];
        for c in codes {
            assert_eq!(word(c), c.as_str());
            assert_eq!(word(c.disposition()), c.disposition().as_str());
        }
        for d in [Disposition::Unknown, Disposition::Transient] {
            assert_eq!(word(d), d.as_str());
        }
        for st in RunStatus::ALL {
            assert_eq!(word(st), st.as_str());
        }
        for d in [
            DriverName::Docker,
            DriverName::Podman,
            DriverName::Kubernetes,
            DriverName::Noop,
        ] {
            assert_eq!(word(d), d.as_str());
        }
        for t in [Trust::Trusted, Trust::Untrusted] {
            // What `run_started` was built from: `format!("{:?}").to_lowercase()`.
            assert_eq!(word(t), format!("{t:?}").to_lowercase());
            assert_eq!(word(t), t.as_str());
        }
        for a in [AdmissionDecision::Admitted, AdmissionDecision::Denied] {
            assert_eq!(word(a), a.as_str());
        }
        for m in [
            NetworkMode::Allowlist,
            NetworkMode::Denylist,
            NetworkMode::Open,
        ] {
            assert_eq!(word(m), m.as_str());
        }
        assert_eq!(word(NetPreset::IterionDefault), "iterion-default");
    }

    #[test]
    fn a_mode_is_its_workflow_word_both_ways_inherit_included() {
        for mode in [Mode::Inherit, Mode::None, Mode::Auto, Mode::Inline] {
            let kind = EventKind::SandboxStarted {
                driver: DriverName::Docker,
                mode,
                source: "cli".into(),
                image: "i".into(),
                has_post_create: false,
                container: "c".into(),
                limits: json!({}),
                egress: "open".into(),
            };
            let draft = EventDraft::from(kind.clone());
            assert_eq!(draft.data["mode"], mode.as_str());
            assert_eq!(
                Payload::decode(&draft.kind, &draft.data).known(),
                Some(&kind)
            );
        }
        // `inherit` is Mode's own serde word, never an event's.
        let mut data = EventDraft::from(EventKind::SandboxStarted {
            driver: DriverName::Docker,
            mode: Mode::Auto,
            source: "cli".into(),
            image: "i".into(),
            has_post_create: false,
            container: "c".into(),
            limits: json!({}),
            egress: "open".into(),
        })
        .data;
        data["mode"] = json!("inherit");
        assert!(matches!(
            Payload::decode("sandbox_started", &data),
            Payload::Malformed { .. }
        ));
    }
}
