//! Follow = read what is there, then wait for more, until the run is
//! terminal and everything appended before that was delivered.
//!
//! In-process appends wake followers through a `watch` channel; appends by
//! another process (a second `iterion` on the same store) are seen by a
//! short poll, since neither backend notifies across processes here.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

use futures_util::stream;
use tokio::sync::watch;

use iterion_core::StoreError;
use iterion_core::failure::RunStatus;
use iterion_core::id::RunId;
use iterion_core::store::StoreStream;

/// Poll interval for appends made by other processes.
const POLL: Duration = Duration::from_millis(200);

struct State<F, S, T> {
    after: u64,
    buf: VecDeque<T>,
    wake: watch::Receiver<u64>,
    fetch: F,
    status: S,
    run: RunId,
    done: bool,
}

/// Build a follow stream from a batch reader and a status probe.
pub fn follow<T, F, FF, S, SF>(
    after: u64,
    wake: watch::Receiver<u64>,
    fetch: F,
    seq_of: fn(&T) -> u64,
    status: S,
    run: RunId,
) -> StoreStream<T>
where
    T: Send + 'static,
    F: Fn(u64) -> FF + Send + Sync + 'static,
    FF: Future<Output = Result<Vec<T>, StoreError>> + Send + 'static,
    S: Fn() -> SF + Send + Sync + 'static,
    SF: Future<Output = Result<Option<RunStatus>, StoreError>> + Send + 'static,
{
    let state = State {
        after,
        buf: VecDeque::new(),
        wake,
        fetch,
        status,
        run,
        done: false,
    };
    Box::pin(stream::unfold(state, move |mut st| async move {
        loop {
            if let Some(item) = st.buf.pop_front() {
                st.after = seq_of(&item);
                return Some((Ok(item), st));
            }
            if st.done {
                return None;
            }
            st.wake.mark_unchanged();
            // Status first, then the read: a terminal status seen before
            // the final read means that read holds everything appended
            // before the run ended.
            let status = match (st.status)().await {
                Ok(Some(s)) => s,
                Ok(None) => {
                    st.done = true;
                    let run = st.run.clone();
                    return Some((Err(StoreError::RunNotFound(run)), st));
                }
                Err(e) => {
                    st.done = true;
                    return Some((Err(e), st));
                }
            };
            match (st.fetch)(st.after).await {
                Ok(batch) if !batch.is_empty() => st.buf.extend(batch),
                Ok(_) if status.is_terminal() => return None,
                Ok(_) => {
                    let _ = tokio::time::timeout(POLL, st.wake.changed()).await;
                }
                Err(e) => {
                    st.done = true;
                    return Some((Err(e), st));
                }
            }
        }
    }))
}
