//! Domain types and the two async seams of iterion.
//!
//! This crate owns the vocabulary every other crate speaks: ids, sandbox
//! [`Mode`]s, the desired sandbox [`Spec`] and the finalized [`LaunchPlan`] a
//! driver consumes, [`Capabilities`], the [`Driver`]/[`SandboxRun`] seam, the
//! [`RunStore`] seam, events, run statuses, failure codes and dispositions,
//! size and duration parsing, the one parser of each sandbox-block rule
//! (egress rules and presets in [`net`], container and read-back paths in
//! [`path`]), escaping run-supplied text for a terminal, and the
//! machine-readable [`view`]s of the store (the `--json` documents and the
//! studio's API). It performs no IO and depends on no engine, database or
//! HTTP crate: those live behind the traits, in their own crates.

/// `serde` through the one parser of a parsed word or path: deserialising
/// is its `FromStr`, serialising its `Display` (issue 16 item 2).
macro_rules! serde_via_parser {
    ($($t:ty),+ $(,)?) => {$(
        impl TryFrom<String> for $t {
            type Error = <$t as std::str::FromStr>::Err;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                s.parse()
            }
        }
        impl From<$t> for String {
            fn from(v: $t) -> Self {
                v.to_string()
            }
        }
    )+};
}

pub mod agent;
pub mod attachment;
pub mod boxed;
pub mod capabilities;
pub mod display;
pub mod driver;
pub mod duration;
pub mod event;
pub mod failure;
pub mod hostvars;
pub mod id;
pub mod mode;
pub mod net;
pub mod path;
pub mod plan;
pub mod redact;
pub mod size;
pub mod spec;
pub mod store;
pub mod view;

pub use boxed::ByteStream;
pub use capabilities::Capabilities;
pub use driver::{
    Driver, DriverError, DriverName, DriverObserver, EgressBinding, ExecOutput, ExecRequest,
    ExecSession, OutputChunk, OutputStream, Prepared, RunInfo, SandboxRun,
};
pub use event::{EventDraft, EventKind, EventRecord};
pub use failure::{Disposition, FailureCode, RunStatus};
pub use id::{NodeId, RunId};
pub use mode::{HostState, Mode, Trust};
pub use net::{NetPreset, NetRule};
pub use path::{ContainerPath, ReadBackPath};
pub use plan::{LaunchPlan, Mount, MountKind, MountOrigin, ReadBackDecl, WorkspaceCopy};
pub use size::{ByteSize, parse_size};
pub use spec::{BuildSpec, InvalidNetworkWord, NetworkInherit, NetworkMode, NetworkSpec, Spec};
pub use store::{RunStore, StoreError};
