//! What the driver needs the cluster to let it do, asked of the cluster
//! itself: one `SelfSubjectAccessReview` per verb and resource the driver
//! calls in its namespace (`iterion sandbox doctor --strict`). The list is
//! the driver's, kept beside the calls it makes; the answer is the API
//! server's authorizer (RBAC, webhooks), never guessed from roles.
//!
//! It does not decide whether a run may start (a denied verb fails the
//! call that needs it, typed `K8S_FORBIDDEN`); it only reports.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

use crate::api::bounded;
use crate::driver::KubeDriver;

/// One permission the driver uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Resource.
    pub resource: &'static str,
    /// Subresource (`exec`), if any.
    pub subresource: Option<&'static str>,
    /// Verb.
    pub verb: &'static str,
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.subresource {
            Some(sub) => write!(f, "{} {}/{sub}", self.verb, self.resource),
            None => write!(f, "{} {}", self.verb, self.resource),
        }
    }
}

const fn core(verb: &'static str, resource: &'static str) -> Permission {
    Permission {
        group: "",
        resource,
        subresource: None,
        verb,
    }
}

/// Every permission the driver uses, in its namespace: the pod's life
/// (create, the Ready wait's get and watch, the reaper's list, delete),
/// exec (the WebSocket upgrade is authorized as `create` on `pods/exec`),
/// and the per-run Secrets and NetworkPolicy (create, the reaper's list,
/// delete).
pub const NEEDED: &[Permission] = &[
    core("create", "pods"),
    core("get", "pods"),
    core("list", "pods"),
    core("watch", "pods"),
    core("delete", "pods"),
    Permission {
        group: "",
        resource: "pods",
        subresource: Some("exec"),
        verb: "create",
    },
    core("create", "secrets"),
    core("list", "secrets"),
    core("delete", "secrets"),
    Permission {
        group: "networking.k8s.io",
        resource: "networkpolicies",
        subresource: None,
        verb: "create",
    },
    Permission {
        group: "networking.k8s.io",
        resource: "networkpolicies",
        subresource: None,
        verb: "list",
    },
    Permission {
        group: "networking.k8s.io",
        resource: "networkpolicies",
        subresource: None,
        verb: "delete",
    },
];

/// The authorizer's answer for one permission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Allowed.
    Allowed,
    /// Denied, with the authorizer's reason when it gave one.
    Denied {
        /// Why (may be empty).
        reason: String,
    },
    /// The review itself failed (the review API forbidden, a timeout…).
    Unknown {
        /// The error.
        error: String,
    },
}

/// One reviewed permission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRow {
    /// The permission.
    pub permission: Permission,
    /// The answer.
    pub access: Access,
}

/// The doctor's verdict over all rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessSummary {
    /// Every permission allowed.
    pub ok: bool,
    /// Some answer is unknown (and none denied): the doctor warns.
    pub unknown: bool,
    /// One line: what is missing, or that everything is allowed.
    pub detail: String,
}

/// Summarize rows for the doctor: the denied permissions by name, then
/// the unanswered ones, else how many are allowed.
pub fn summarize(namespace: &str, rows: &[AccessRow]) -> AccessSummary {
    let denied: Vec<String> = rows
        .iter()
        .filter_map(|r| match &r.access {
            Access::Denied { reason } if reason.is_empty() => Some(r.permission.to_string()),
            Access::Denied { reason } => Some(format!("{} ({reason})", r.permission)),
            _ => None,
        })
        .collect();
    let unknown: Vec<String> = rows
        .iter()
        .filter_map(|r| match &r.access {
            Access::Unknown { error } => Some(format!("{}: {error}", r.permission)),
            _ => None,
        })
        .collect();
    let mut parts = Vec::new();
    if !denied.is_empty() {
        parts.push(format!(
            "denied in namespace {namespace}: {}",
            denied.join(", ")
        ));
    }
    if !unknown.is_empty() {
        parts.push(format!("not answered: {}", unknown.join("; ")));
    }
    if parts.is_empty() {
        parts.push(format!(
            "all {} permissions the driver uses are allowed in namespace {namespace}",
            rows.len()
        ));
    }
    AccessSummary {
        ok: denied.is_empty() && unknown.is_empty(),
        unknown: denied.is_empty() && !unknown.is_empty(),
        detail: parts.join("; "),
    }
}

impl KubeDriver {
    /// Ask the cluster about every permission in [`NEEDED`], in this
    /// driver's namespace, each call bounded by the apply timeout.
    pub async fn review_access(&self) -> Vec<AccessRow> {
        let api: Api<SelfSubjectAccessReview> = Api::all(self.client().clone());
        let timeout = self.settings().apply_timeout;
        let mut rows = Vec::with_capacity(NEEDED.len());
        for p in NEEDED {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        namespace: Some(self.namespace().to_owned()),
                        verb: Some(p.verb.to_owned()),
                        group: Some(p.group.to_owned()),
                        resource: Some(p.resource.to_owned()),
                        subresource: p.subresource.map(str::to_owned),
                        ..ResourceAttributes::default()
                    }),
                    ..SelfSubjectAccessReviewSpec::default()
                },
                ..SelfSubjectAccessReview::default()
            };
            let access = match bounded(timeout, api.create(&PostParams::default(), &review)).await {
                Err(e) => Access::Unknown {
                    error: e.to_string(),
                },
                Ok(Err(e)) => Access::Unknown {
                    error: e.to_string(),
                },
                Ok(Ok(answer)) => match answer.status {
                    Some(s) if s.allowed => Access::Allowed,
                    Some(s) => Access::Denied {
                        reason: s.reason.unwrap_or_default(),
                    },
                    None => Access::Unknown {
                        error: "the answer had no status".to_owned(),
                    },
                },
            };
            rows.push(AccessRow {
                permission: *p,
                access,
            });
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(i: usize, access: Access) -> AccessRow {
        AccessRow {
            permission: NEEDED[i],
            access,
        }
    }

    #[test]
    fn summaries_name_what_is_missing() {
        let all: Vec<AccessRow> = (0..NEEDED.len()).map(|i| row(i, Access::Allowed)).collect();
        let s = summarize("sbx", &all);
        assert!(s.ok && !s.unknown, "{s:?}");
        assert_eq!(
            s.detail,
            "all 12 permissions the driver uses are allowed in namespace sbx"
        );
        let mut some = all.clone();
        some[5] = row(
            5,
            Access::Denied {
                reason: String::new(),
            },
        );
        some[8] = row(
            8,
            Access::Denied {
                reason: "no RBAC policy matched".into(),
            },
        );
        let s = summarize("sbx", &some);
        assert!(!s.ok && !s.unknown);
        assert_eq!(
            s.detail,
            "denied in namespace sbx: create pods/exec, delete secrets (no RBAC policy matched)"
        );
        let mut unanswered = all;
        unanswered[0] = row(
            0,
            Access::Unknown {
                error: "timeout".into(),
            },
        );
        let s = summarize("sbx", &unanswered);
        assert!(!s.ok && s.unknown);
        assert_eq!(s.detail, "not answered: create pods: timeout");
    }
}
