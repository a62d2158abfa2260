//! The Docker and Podman sandbox driver of iterion, on the Engine API
//! (bollard, pinned to API 1.41 which both engines here speak).
//!
//! It owns: finding an engine ([`DockerDriver::discover`]), naming itself
//! `docker` or `podman` from the engine's version answer, image inspect /
//! bounded pull / offline build, the one long-lived container per run
//! (labels, mounts, sorted env, init as PID 1, `no-new-privileges`, pids,
//! memory and CPU limits, per-run internal network for egress enforcement,
//! per-run named volumes in bindless mode), exec sessions that stream and
//! can really be killed, tar streams in and out, idempotent cleanup, and
//! listing/removing labelled leftovers. It does not decide policy (which
//! mounts survive, which mode runs): `iterion-sandbox` does, and the
//! runtime orchestrates the orphan reaper.
//!
//! Containment defaults of every sandbox: `no-new-privileges`, pids limit
//! (plan, default 4096), never privileged, every capability dropped but
//! [`SANDBOX_CAPABILITIES`] (`security.rs`), no engine socket, memory/CPU
//! from the plan or else from the settings below; every bind source
//! re-checked by real path immediately before create (`footprint.rs`);
//! with a writable host bind on an engine where container root is host
//! root, the policy's host-root guard: a numeric unprivileged user,
//! resolved in the image, or root under the seccomp profile with `FSETID`
//! dropped too (`security.rs`), either verified before the first exec
//! (`identity.rs`); PID 1 is the engine's init
//! (docker-init / catatonit) in front of a long sleep, or — on a Podman
//! without catatonit — a shell whose `wait` reaps orphans. With enforced
//! egress the container sits only on a per-run `--internal` network with
//! IPv6 off inside it, and per-run nftables tables on this host
//! (`firewall.rs`) let it reach the proxy's port on the gateway and
//! nothing else, IPv6 and non-IP frames included; the proxy listens on
//! that gateway only ([`Driver::egress_binding`](iterion_core::Driver::egress_binding)).
//!
//! Environment (read by [`DockerSettings::from_env`]):
//! - `DOCKER_HOST`: engine endpoint (`unix://`, `tcp://`); remote ⇒ bindless.
//! - `ITERION_SANDBOX_PULL_TIMEOUT`: Go duration bounding a pull (default `10m`).
//! - `ITERION_SANDBOX_POST_CREATE_TIMEOUT`: Go duration bounding the
//!   post-create commands (default `30m`; past it `SANDBOX_SETUP_TIMEOUT`).
//! - `ITERION_SANDBOX_MEMORY`: default memory limit (`512MiB`, `2G`…).
//! - `ITERION_SANDBOX_CPUS`: default CPU limit (`1.5`).
//! - `ITERION_SANDBOX_DOCKER_BINDS=none`: force bindless mode on a local engine.

mod build;
mod container;
mod create;
mod driver;
mod endpoint;
mod engine;
mod exec;
mod firewall;
mod footprint;
mod identity;
mod labels;
mod managed;
mod rawlist;
mod run;
mod security;
pub mod settings;
mod tarfix;

pub use driver::DockerDriver;
pub use endpoint::Endpoint;
pub use exec::DockerExec;
pub use firewall::{EgressHostSupport, RULES_SUMMARY, egress_host_support};
pub use labels::{MANAGED_LABEL, RUN_ID_LABEL, RUN_NAME_LABEL, STORE_LABEL};
pub use run::{DockerRun, drain_len};
pub use security::SANDBOX_CAPABILITIES;
pub use settings::{BindsMode, DockerSettings, SettingsError};
