//! Whether a run can serve its egress-bound secrets (issue 17): a secret
//! with `egress:` hosts reaches the sandbox as a placeholder only when the
//! run's egress proxy can put the value back — a sandbox whose traffic
//! goes through the proxy (enforced or advisory) on a driver that can make
//! the container trust the run's inspection CA. Otherwise an `inline` run
//! is refused (never a tunnel the container cannot trust, never a silent
//! downgrade) and an `auto` one gets the plain value with
//! `sandbox_secret_egress_unavailable`. Pure: the decision's step 15 and
//! its host paths call it; the booter executes what it returns.

use iterion_core::{Capabilities, EventKind, Mode};

use crate::env::ProviderKeys;
use crate::verdict::EgressVerdict;

/// How the run delivers its bound secrets.
#[derive(Debug, Clone, PartialEq)]
pub enum SecretEgressVerdict {
    /// No secret is bound.
    Unbound,
    /// Placeholders in the sandbox; the proxy inspects the bound hosts and
    /// puts the values back.
    Placeholders,
    /// The plain values, and this event says so.
    Plain {
        /// `sandbox_secret_egress_unavailable`.
        event: EventKind,
    },
    /// The run is refused before anything starts.
    Refused {
        /// Why.
        reason: String,
    },
}

/// Where the run is going, as far as bound secrets care.
#[derive(Debug, Clone, Copy)]
pub enum Placement<'a> {
    /// A sandbox on a driver with these capabilities and this egress verdict.
    Sandbox {
        /// The selected driver's name.
        driver: &'a str,
        /// What it can do (`tls_inspection`).
        capabilities: Capabilities,
        /// The run's egress verdict.
        egress: &'a EgressVerdict,
    },
    /// The host (no sandbox): nothing holds the value apart from the agent.
    Host,
}

/// The verdict for `bound` (the names of the secrets with `egress:`) of a
/// run in `mode` placed at `placement`.
pub fn secret_egress_verdict(
    mode: Mode,
    bound: &[String],
    placement: Placement<'_>,
) -> SecretEgressVerdict {
    if bound.is_empty() {
        return SecretEgressVerdict::Unbound;
    }
    let Some(reason) = unservable(placement) else {
        return SecretEgressVerdict::Placeholders;
    };
    if mode == Mode::Inline {
        return SecretEgressVerdict::Refused {
            reason: format!(
                "secret(s) {} are bound to egress hosts but {reason}",
                bound.join(", ")
            ),
        };
    }
    SecretEgressVerdict::Plain {
        event: EventKind::SandboxSecretEgressUnavailable {
            secrets: bound.to_vec(),
            reason,
        },
    }
}

/// How a sandboxed run's agents carry their provider keys (issue 17
/// item 5): as placeholders bound to each provider's HTTPS host wherever
/// a declared binding could be served, unless the operator said `plain`.
/// Which keys and hosts is the agent crate's reading; this only says
/// whether the run can and should.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderKeysVerdict {
    /// Placeholders: the proxy inspects the providers' hosts.
    Placeholders,
    /// The values, and why (said by `sandbox_provider_keys` when the run
    /// has keys to carry).
    Plain {
        /// Why the keys go in as they are.
        reason: String,
    },
}

/// The verdict for a sandbox on `driver` with `capabilities` and the
/// `egress` verdict, under the operator's `keys` word.
pub fn provider_keys_verdict(
    keys: ProviderKeys,
    driver: &str,
    capabilities: Capabilities,
    egress: &EgressVerdict,
) -> ProviderKeysVerdict {
    if keys == ProviderKeys::Plain {
        return ProviderKeysVerdict::Plain {
            reason: "ITERION_SANDBOX_PROVIDER_KEYS=plain".to_owned(),
        };
    }
    match unservable(Placement::Sandbox {
        driver,
        capabilities,
        egress,
    }) {
        None => ProviderKeysVerdict::Placeholders,
        Some(reason) => ProviderKeysVerdict::Plain { reason },
    }
}

/// Why a run placed at `placement` cannot put a placeholder's value back
/// (`None`: it can — its traffic goes through the proxy, on a driver that
/// installs the run's inspection CA). The one reading both verdicts use.
fn unservable(placement: Placement<'_>) -> Option<String> {
    let Placement::Sandbox {
        driver,
        capabilities,
        egress,
    } = placement
    else {
        return Some(
            "the run is not sandboxed, so no egress proxy stands between \
             the agent and the secret's hosts"
                .to_owned(),
        );
    };
    match egress {
        EgressVerdict::Open => Some(
            "the workflow's network is open, so no egress proxy runs \
             to put the value back (add a `network:` block with `mode: allowlist`)"
                .to_owned(),
        ),
        EgressVerdict::Refused { reason } => Some(reason.clone()),
        EgressVerdict::Enforced | EgressVerdict::Advisory { .. }
            if !capabilities.tls_inspection =>
        {
            Some(format!(
                "the {driver} driver cannot install the run's inspection CA in the sandbox"
            ))
        }
        EgressVerdict::Enforced | EgressVerdict::Advisory { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(tls: bool) -> Capabilities {
        Capabilities {
            tls_inspection: tls,
            ..Capabilities::default()
        }
    }

    fn bound() -> Vec<String> {
        vec!["API_KEY".to_owned()]
    }

    #[test]
    fn servable_only_through_a_proxy_on_a_driver_that_installs_the_ca() {
        let on = |mode, tls, egress: &EgressVerdict| {
            secret_egress_verdict(
                mode,
                &bound(),
                Placement::Sandbox {
                    driver: "docker",
                    capabilities: caps(tls),
                    egress,
                },
            )
        };
        let advisory = EgressVerdict::Advisory {
            event: EventKind::SandboxEgressUnenforced {
                driver: iterion_core::DriverName::Docker,
                reason: "r".into(),
            },
        };
        for mode in [Mode::Inline, Mode::Auto] {
            assert_eq!(
                on(mode, true, &EgressVerdict::Enforced),
                SecretEgressVerdict::Placeholders
            );
            assert_eq!(on(mode, true, &advisory), SecretEgressVerdict::Placeholders);
        }
        // No CA install, or no proxy: inline refuses, auto says so.
        for (tls, egress) in [
            (false, EgressVerdict::Enforced),
            (true, EgressVerdict::Open),
        ] {
            match on(Mode::Inline, tls, &egress) {
                SecretEgressVerdict::Refused { reason } => {
                    assert!(reason.contains("API_KEY"), "{reason}");
                }
                other => panic!("inline must refuse, got {other:?}"),
            }
            match on(Mode::Auto, tls, &egress) {
                SecretEgressVerdict::Plain {
                    event: EventKind::SandboxSecretEgressUnavailable { secrets, reason },
                } => {
                    assert_eq!(secrets, bound());
                    assert!(!reason.is_empty());
                }
                other => panic!("auto must deliver plain with the event, got {other:?}"),
            }
        }
    }

    #[test]
    fn no_bound_secret_is_unbound_and_a_host_run_says_plain() {
        assert_eq!(
            secret_egress_verdict(Mode::Inline, &[], Placement::Host),
            SecretEgressVerdict::Unbound
        );
        assert!(matches!(
            secret_egress_verdict(Mode::Auto, &bound(), Placement::Host),
            SecretEgressVerdict::Plain { .. }
        ));
    }

    #[test]
    fn provider_keys_are_placeholders_only_where_the_proxy_can_swap_them() {
        let advisory = EgressVerdict::Advisory {
            event: EventKind::SandboxEgressUnenforced {
                driver: iterion_core::DriverName::Docker,
                reason: "r".into(),
            },
        };
        let cases = [
            (
                ProviderKeys::Placeholder,
                true,
                EgressVerdict::Enforced,
                true,
            ),
            (ProviderKeys::Placeholder, true, advisory.clone(), true),
            (
                ProviderKeys::Placeholder,
                false,
                EgressVerdict::Enforced,
                false,
            ),
            (ProviderKeys::Placeholder, true, EgressVerdict::Open, false),
            (
                ProviderKeys::Placeholder,
                true,
                EgressVerdict::Refused {
                    reason: "no proxy here".into(),
                },
                false,
            ),
            (ProviderKeys::Plain, true, EgressVerdict::Enforced, false),
        ];
        for (keys, tls, egress, placeholders) in cases {
            let got = provider_keys_verdict(keys, "docker", caps(tls), &egress);
            match got {
                ProviderKeysVerdict::Placeholders => {
                    assert!(placeholders, "{keys:?} {tls} {egress:?}")
                }
                ProviderKeysVerdict::Plain { reason } => {
                    assert!(!placeholders, "{keys:?} {tls} {egress:?}");
                    assert!(!reason.is_empty());
                }
            }
        }
        match provider_keys_verdict(
            ProviderKeys::Plain,
            "docker",
            caps(true),
            &EgressVerdict::Enforced,
        ) {
            ProviderKeysVerdict::Plain { reason } => {
                assert!(reason.contains("ITERION_SANDBOX_PROVIDER_KEYS"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }
}
