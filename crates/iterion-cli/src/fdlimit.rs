//! The descriptor limit of the `iterion` process, raised at start from its
//! soft value to its hard bound (what Go programs get from their runtime;
//! Rust's leaves the soft 1,024). Why: each run's egress proxy may hold
//! [`iterion_netproxy::DEFAULT_MAX_CONNECTIONS`] connections, each up to
//! two sockets and two pipes, beside the engine client and the store — at
//! 1,024 a run's own flood exhausted the process (issue 19 item 9).

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Raise `RLIMIT_NOFILE`'s soft limit to its hard limit; silent when the
/// host refuses (the limit stays what it was, and the proxy's cap and its
/// `EMFILE` back-off still hold).
pub(crate) fn raise_nofile() {
    let limit = getrlimit(Resource::Nofile);
    if let Some(max) = limit.maximum
        && limit.current.is_some_and(|cur| cur < max)
    {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(max),
                maximum: Some(max),
            },
        );
    }
}
