//! Executing the decision's provider-key verdict (issue 17 item 5): the
//! keys a run's agents would carry into its sandbox — which ones, and the
//! host each is for, is the agent crate's one reading
//! ([`ProviderSecrets`]) — become placeholders bound to their provider's
//! host when the decision said the proxy can put them back, and the run
//! says what it did (`sandbox_provider_keys`). It decides nothing: the
//! verdict is [`iterion_sandbox::secret_egress::provider_keys_verdict`]'s.

use std::collections::BTreeMap;
use std::sync::Arc;

use iterion_core::EventKind;
use iterion_core::agent::ProviderSecrets;
use iterion_dsl::ir;
use iterion_sandbox::secret_egress::ProviderKeysVerdict;

use crate::secret_egress::BoundSecret;

/// What the booter does with the run's provider keys.
#[derive(Debug, Default)]
pub(super) struct ProviderKeys {
    /// The bound keys, each with its placeholder (the proxy's bindings).
    pub bound: Vec<BoundSecret>,
    /// Every key's value, bound or not: the run's redactor masks them.
    pub values: Vec<String>,
    /// `sandbox_provider_keys`, when the run carries any.
    pub event: Option<EventKind>,
}

impl ProviderKeys {
    /// Variable → placeholder, for the agents' exec env.
    pub fn placeholders(&self) -> BTreeMap<String, String> {
        self.bound
            .iter()
            .map(|b| (b.name.clone(), b.placeholder().to_owned()))
            .collect()
    }
}

/// Execute `verdict` for `workflow`'s agents over what `seam` reads.
pub(super) fn execute(
    seam: Option<&Arc<dyn ProviderSecrets>>,
    workflow: &ir::Workflow,
    verdict: &ProviderKeysVerdict,
) -> ProviderKeys {
    let Some(seam) = seam else {
        return ProviderKeys::default();
    };
    // No agent, no key travels: nothing to bind or to say.
    if !workflow.nodes.values().any(crate::agents::is_agent_node) {
        return ProviderKeys::default();
    }
    let keys = seam.bindable();
    if keys.is_empty() {
        return ProviderKeys::default();
    }
    let values = keys.iter().map(|k| k.value().to_owned()).collect();
    let mut hosts: Vec<String> = keys.iter().map(|k| k.host.clone()).collect();
    hosts.sort();
    hosts.dedup();
    let (bound, delivery, reason) = match verdict {
        ProviderKeysVerdict::Plain { reason } => (Vec::new(), "plain", Some(reason.clone())),
        ProviderKeysVerdict::Placeholders => {
            let bound: Vec<BoundSecret> =
                keys.iter().filter_map(BoundSecret::for_provider).collect();
            // A host no rule can name cannot be inspected: said, never
            // silent (the bound ones still go in as placeholders).
            let unbindable: Vec<&str> = keys
                .iter()
                .filter(|k| !bound.iter().any(|b| b.name == k.variable))
                .map(|k| k.variable.as_str())
                .collect();
            match unbindable.is_empty() {
                true => (bound, "placeholder", None),
                false => (
                    bound,
                    "partial",
                    Some(format!(
                        "{} go in plain: their provider host is no host name or address the proxy can match",
                        unbindable.join(", ")
                    )),
                ),
            }
        }
    };
    // Placeholders name the bound keys; plain names every key.
    let variables = match verdict {
        ProviderKeysVerdict::Plain { .. } => keys.iter().map(|k| k.variable.clone()).collect(),
        ProviderKeysVerdict::Placeholders => bound.iter().map(|b| b.name.clone()).collect(),
    };
    ProviderKeys {
        bound,
        values,
        event: Some(EventKind::SandboxProviderKeys {
            delivery: delivery.to_owned(),
            variables,
            hosts,
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterion_core::agent::ProviderSecret;

    struct Keys(Vec<ProviderSecret>);
    impl ProviderSecrets for Keys {
        fn bindable(&self) -> Vec<ProviderSecret> {
            self.0.clone()
        }
    }

    fn workflow(agent: bool) -> ir::Workflow {
        let src = if agent {
            "agent a:\n  model: \"anthropic/claude-sonnet-4-6\"\n  user: \"hi\"\n\nworkflow w:\n  entry: a\n  a -> done\n"
        } else {
            "tool t:\n  command: \"true\"\n\nworkflow w:\n  entry: t\n  t -> done\n"
        };
        let compiled = iterion_dsl::compile_source(src, std::path::Path::new("w.iter"));
        assert!(!compiled.has_errors(), "{:?}", compiled.diagnostics);
        compiled.workflows.into_iter().next().expect("a workflow")
    }

    fn seam() -> Arc<dyn ProviderSecrets> {
        Arc::new(Keys(vec![
            ProviderSecret::new(
                "ANTHROPIC_API_KEY",
                "api.anthropic.com",
                "sk-ant-api03-0123456789abcdefghijklmnopqrstuvwxyz",
            ),
            ProviderSecret::new(
                "OPENAI_API_KEY",
                "10.1.2.3",
                "sk-openai-0123456789abcdefghij",
            ),
        ]))
    }

    #[test]
    fn placeholders_bind_each_key_to_its_host_and_say_so_by_name() {
        let s = seam();
        let keys = execute(
            Some(&s),
            &workflow(true),
            &ProviderKeysVerdict::Placeholders,
        );
        assert_eq!(keys.bound.len(), 2);
        let ph = keys.placeholders();
        assert!(ph["ANTHROPIC_API_KEY"].starts_with("sk-ant-api03-"));
        assert!(!ph["ANTHROPIC_API_KEY"].contains("0123456789abcdef"));
        assert_eq!(
            keys.bound[0].binding().expect("binding").name(),
            "ANTHROPIC_API_KEY"
        );
        assert_eq!(keys.values.len(), 2, "both values masked");
        let event = serde_json::to_string(&keys.event.expect("event")).unwrap();
        assert!(event.contains("\"delivery\":\"placeholder\""), "{event}");
        assert!(
            event.contains("api.anthropic.com") && event.contains("10.1.2.3"),
            "{event}"
        );
        assert!(
            !event.contains("0123456789abcdef"),
            "no value in the event: {event}"
        );
    }

    #[test]
    fn plain_says_why_and_nothing_happens_without_agents_or_keys() {
        let s = seam();
        let keys = execute(
            Some(&s),
            &workflow(true),
            &ProviderKeysVerdict::Plain {
                reason: "the k8s driver cannot".into(),
            },
        );
        assert!(keys.bound.is_empty() && keys.placeholders().is_empty());
        match keys.event {
            Some(EventKind::SandboxProviderKeys {
                delivery,
                variables,
                reason,
                ..
            }) => {
                assert_eq!(delivery, "plain");
                assert_eq!(variables, vec!["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]);
                assert_eq!(reason.as_deref(), Some("the k8s driver cannot"));
            }
            other => panic!("{other:?}"),
        }
        // No agent node: no key travels, nothing is said.
        let none = execute(
            Some(&s),
            &workflow(false),
            &ProviderKeysVerdict::Placeholders,
        );
        assert!(none.event.is_none() && none.bound.is_empty() && none.values.is_empty());
        // No seam (an engine without agents).
        assert!(
            execute(None, &workflow(true), &ProviderKeysVerdict::Placeholders)
                .event
                .is_none()
        );
        let empty: Arc<dyn ProviderSecrets> = Arc::new(Keys(vec![]));
        assert!(
            execute(
                Some(&empty),
                &workflow(true),
                &ProviderKeysVerdict::Placeholders
            )
            .event
            .is_none()
        );
    }
}
