//! The in-process wake-up between enqueue and idle workers: an enqueue in this process notifies
//! its workers so a new job is claimed without waiting for the next poll.

use std::sync::LazyLock;

use tokio::sync::Notify;

/// Wakes this process's idle workers: called after an enqueue, so a job enqueued here is
/// picked up without waiting for the next poll.
pub(crate) static LOCAL_WAKE: LazyLock<Notify> = LazyLock::new(Notify::new);

/// Notifies the idle workers of this process (see [`LOCAL_WAKE`]).
pub(crate) fn wake_local() {
    LOCAL_WAKE.notify_waiters();
}
