//! The queue's errors, each with a stable [`QueueError::code`]; the ones an
//! operator fixes in their settings are bad input (exit 2).

/// A boxed cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of cloud mode.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// A cloud setting is missing or unreadable.
    #[error("{variable}: {reason}")]
    Config {
        /// The variable.
        variable: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// NATS cannot be reached at start.
    #[error("{variable}: cannot reach NATS at {endpoint}: {source}")]
    Unreachable {
        /// The variable naming the server.
        variable: &'static str,
        /// Host and port (never the credentials of the URL).
        endpoint: String,
        /// Cause.
        #[source]
        source: BoxError,
    },
    /// A stream, consumer or bucket exists with a config this runner cannot
    /// work with; it is never recreated or changed silently.
    #[error(
        "{what} exists with an incompatible config ({}); fix or delete it deliberately, iterion does not change it",
        .differences.join("; ")
    )]
    Incompatible {
        /// Which object (`stream ITERION_RUNS`, …).
        what: String,
        /// `field: expected X, found Y`, one per difference.
        differences: Vec<String>,
    },
    /// A NATS operation failed.
    #[error("NATS {operation} failed: {source}")]
    Nats {
        /// What was being done.
        operation: &'static str,
        /// Cause.
        #[source]
        source: BoxError,
    },
    /// The run store failed.
    #[error("run store: {0}")]
    Store(#[from] iterion_core::StoreError),
}

impl QueueError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Config { .. } => "QUEUE_CONFIG_INVALID",
            Self::Unreachable { .. } => "QUEUE_NATS_UNREACHABLE",
            Self::Incompatible { .. } => "QUEUE_TOPOLOGY_INCOMPATIBLE",
            Self::Nats { .. } => "QUEUE_NATS_ERROR",
            Self::Store(e) => e.code(),
        }
    }

    /// Whether the operator's settings are at fault (exit 2).
    pub fn is_user_input(&self) -> bool {
        matches!(
            self,
            Self::Config { .. } | Self::Unreachable { .. } | Self::Incompatible { .. }
        )
    }

    pub(crate) fn nats(
        operation: &'static str,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Nats {
            operation,
            source: Box::new(e),
        }
    }
}
