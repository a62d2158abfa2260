//! A secret's `egress:` binding (issue 17): its patterns, read through the
//! one network-rule parser (`iterion_core::net::NetRule`), refused when
//! they could never bind a host (`C324`), and checked against the
//! workflow's `network:` block through the hook of the component that owns
//! "host allowed" (`C325`). Owns no host matching of its own.

use iterion_core::NetworkSpec;
use iterion_core::net::NetRule;

use crate::diag::{Severity, codes};
use crate::ir::Workflow;

use super::ctx::Ctx;
use super::props::Prop;
use super::sandbox::string_list;

/// The patterns of one secret's `egress:` list; each refused one is a
/// `C324` at its position and is left out.
pub(crate) fn read_egress(secret: &str, p: &Prop<'_>, ctx: &mut Ctx<'_>) -> Vec<NetRule> {
    let mut out = Vec::new();
    for (text, pos) in string_list(p, ctx) {
        let rule = match text.parse::<NetRule>() {
            Ok(rule) => rule,
            Err(e) => {
                ctx.push(
                    codes::C324,
                    Severity::Error,
                    pos,
                    format!("secret {secret}: egress pattern `{text}` can never match: {e}"),
                    None,
                );
                continue;
            }
        };
        // A binding says where the value may go; a negation names where it
        // may not, which binds nothing.
        if rule.negated() {
            ctx.push(
                codes::C324,
                Severity::Error,
                pos,
                format!("secret {secret}: egress pattern `{text}` is negated and binds no host"),
                Some("list the hosts the secret is for; the network block says where traffic may not go"),
            );
            continue;
        }
        // `**` would hand the value to every host: no binding at all.
        if rule.as_str() == "**" {
            ctx.push(
                codes::C324,
                Severity::Error,
                pos,
                format!(
                    "secret {secret}: egress pattern `**` binds every host, so it protects nothing"
                ),
                Some("name the hosts the secret is for, e.g. \"api.anthropic.com\""),
            );
            continue;
        }
        ctx.bindings.push((secret.to_owned(), text, pos));
        out.push(rule);
    }
    out
}

/// `C325` for every binding no request could carry under `w`'s `network:`
/// block, as `check` (the egress policy's hook) judges it.
pub(crate) fn check(
    w: &Workflow,
    ctx: &mut Ctx<'_>,
    check: &dyn Fn(Option<&NetworkSpec>, &NetRule) -> Option<String>,
) {
    let network = w.sandbox.as_ref().and_then(|s| s.spec.network.as_ref());
    for s in &w.secrets {
        for rule in &s.egress {
            let Some(why) = check(network, rule) else {
                continue;
            };
            let pos = ctx
                .bindings
                .iter()
                .rev()
                .find(|(name, text, _)| *name == s.name && text.trim() == rule.as_str())
                .map_or(w.pos, |(_, _, pos)| *pos);
            ctx.push(
                codes::C325,
                Severity::Error,
                pos,
                format!(
                    "secret {}: egress host `{}` is outside the workflow's network allowlist: {why}",
                    s.name,
                    rule.as_str()
                ),
                Some("allow the host in `sandbox: network: rules:`, or bind the secret to an allowed host"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::Checks;

    const WORKFLOW: &str = "tool t:\n  command: \"true\"\n\nworkflow w:\n  entry: t\n  sandbox:\n    image: \"img:1\"\n    network:\n      mode: allowlist\n      rules: [\"api.example.com\"]\n  t -> done\n";

    fn compile(
        secrets: &str,
        egress: &dyn Fn(Option<&crate::NetworkSpec>, &iterion_core::net::NetRule) -> Option<String>,
    ) -> crate::Compiled {
        let src = format!("secrets:\n{secrets}\n{WORKFLOW}");
        crate::compile_checked(
            &src,
            Path::new("s.iter"),
            &Checks {
                tool: &|_| None,
                egress,
            },
        )
    }

    fn codes(c: &crate::Compiled) -> Vec<&'static str> {
        c.diagnostics.iter().map(|d| d.code).collect()
    }

    #[test]
    fn egress_patterns_reach_the_ir_through_the_one_parser() {
        let c = compile(
            "  KEY:\n    egress: [\"api.example.com\", \"*.example.com\"]\n",
            &|_, _| None,
        );
        assert!(!c.has_errors(), "{:?}", c.diagnostics);
        let s = &c.workflows[0].secrets[0];
        let hosts: Vec<&str> = s.egress.iter().map(|r| r.as_str()).collect();
        assert_eq!(hosts, ["api.example.com", "*.example.com"]);
    }

    #[test]
    fn a_pattern_that_can_never_bind_is_c324() {
        for bad in [
            "\"a*b.example.com\"",
            "\"!api.example.com\"",
            "\"**\"",
            "\"*.0.2\"",
            "\"host:443\"",
        ] {
            let c = compile(&format!("  KEY:\n    egress: [{bad}]\n"), &|_, _| None);
            assert_eq!(codes(&c), ["C324"], "{bad}: {:?}", c.diagnostics);
            assert!(c.workflows[0].secrets[0].egress.is_empty());
        }
    }

    #[test]
    fn a_host_outside_the_allowlist_is_c325_at_its_pattern() {
        let seen = std::cell::RefCell::new(Vec::new());
        let hook = |net: Option<&crate::NetworkSpec>, rule: &iterion_core::net::NetRule| {
            seen.borrow_mut()
                .push((net.map(|n| n.rules.len()), rule.as_str().to_owned()));
            (rule.as_str() == "evil.test").then(|| "no rule allows it".to_owned())
        };
        let c = compile(
            "  KEY:\n    egress: [\"api.example.com\", \"evil.test\"]\n",
            &hook,
        );
        assert_eq!(codes(&c), ["C325"], "{:?}", c.diagnostics);
        let d = &c.diagnostics[0];
        assert_eq!(d.line, 3, "{d:?}");
        assert!(
            d.message.contains("evil.test") && d.message.contains("KEY"),
            "{}",
            d.message
        );
        assert_eq!(
            *seen.borrow(),
            [
                (Some(1), "api.example.com".to_owned()),
                (Some(1), "evil.test".to_owned())
            ]
        );
    }
}
