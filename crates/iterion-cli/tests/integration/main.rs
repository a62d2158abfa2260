//! End-to-end tests of the `iterion` binary against the real engines
//! (dockerd and Podman, started by `scripts/test.sh`) and the real stores.
//! A missing backend fails the test; nothing skips.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test scaffolding panics by design

mod agents_e2e;
mod attachments_e2e;
mod attacks_e2e;
mod bounds_e2e;
mod builtins_e2e;
mod cloud_e2e;
mod cloud_support;
mod decision_e2e;
mod docs_e2e;
mod egress_e2e;
mod engine_tools_e2e;
mod graph_e2e;
mod hostguard_e2e;
mod log_flood_e2e;
mod manifests_e2e;
mod mcp_e2e;
mod messages_e2e;
mod one_parser;
mod output_e2e;
mod provider_keys_e2e;
mod queue_chaos_e2e;
mod queue_e2e;
mod queue_takeover_e2e;
mod queue_trust_e2e;
mod readback_e2e;
mod resume_e2e;
mod run_e2e;
mod run_flags_e2e;
mod runner_refusal_e2e;
mod runtime_semantics_e2e;
mod secret_egress_e2e;
mod secrets_e2e;
mod setup_e2e;
mod signals_e2e;
mod store_schema_e2e;
mod studio_e2e;
mod support;
mod tools_e2e;
mod upstream_agents_e2e;
mod upstream_corpus;
mod upstream_patterns;
mod upstream_patterns_landed;
mod users_e2e;
mod validate_bounds;
mod workspace_copy_e2e;
mod worktree_e2e;
