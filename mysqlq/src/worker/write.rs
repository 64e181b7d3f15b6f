//! Writes that must land: a statement retried through deadlocks, lock wait timeouts and lost
//! connections for as long as the worker runs; the connection a service keeps across rounds; and
//! the one-line error text the services log.

use std::future::Future;
use std::time::Duration;

use sqlx::MySql;
use sqlx::pool::PoolConnection;
use tokio::time::Instant;

use crate::Error;
use crate::store;
use crate::worker::{Shared, unit_random};

/// Why [`write_retrying`] gave up.
#[derive(Debug)]
pub(crate) enum WriteFailed {
    /// The worker is stopping and the write still fails.
    Stopping(Error),
    /// The server refused the write for a reason retrying will not fix.
    Refused(Error),
    /// A lock wait or deadlock, with `fail_fast_on_lock`.
    Locked(Error),
}

impl std::fmt::Display for WriteFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Stopping(e) => write!(f, "abandoned at shutdown: {}", error_chain(e)),
            Self::Refused(e) => write!(f, "refused: {}", error_chain(e)),
            Self::Locked(e) => write!(f, "lock conflict: {}", error_chain(e)),
        }
    }
}

/// Tries of a write the server refuses with a non-transient error before giving up.
const REFUSED_TRIES: u32 = 3;

/// Runs a write until it succeeds. Connection errors, and deadlocks or lock wait timeouts
/// unless `fail_fast_on_lock`, are retried with jittered backoff for as long as the worker runs;
/// other errors a few times. Each error is logged once, on one line.
pub(crate) async fn write_retrying<T, F, Fut>(
    s: &Shared,
    what: &str,
    fail_fast_on_lock: bool,
    mut f: F,
) -> Result<T, WriteFailed>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let m = &s.metrics;
    let mut pause = Duration::from_millis(5);
    let mut refused = 0;
    loop {
        let e = match f().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        match e.server_code() {
            Some(1213) => m.add(&m.counters.deadlocks, 1),
            Some(1205) => m.add(&m.counters.lock_waits, 1),
            _ => m.add(&m.counters.db_errors, 1),
        }
        if fail_fast_on_lock && store::is_lock_error(&e) {
            return Err(WriteFailed::Locked(e));
        }
        if !e.is_transient() {
            refused += 1;
            if refused >= REFUSED_TRIES {
                return Err(WriteFailed::Refused(e));
            }
        }
        tracing::warn!(error = %error_chain(&e), "{what} failed; retrying");
        if s.stop_services.is_cancelled() {
            return Err(WriteFailed::Stopping(e));
        }
        let wait = pause.mul_f64(0.5 + unit_random());
        if !crate::worker::sleep_or_cancel(wait, &s.stop_services).await {
            // One last try after the stop signal.
            return f().await.map_err(WriteFailed::Stopping);
        }
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

pub(crate) use crate::error_chain::error_chain;

/// How long a service (a claim loop, the heartbeats) keeps one connection from the worker's pool
/// before handing it back and taking one again: long enough that a busy or idle loop does not
/// pay the pool's ping-on-release per round, short enough that a switch of writer ([`crate::cluster`], which
/// retires connections at acquire) reaches the loop within a second.
const HOLD_CONNECTION: Duration = Duration::from_secs(1);

/// The connection a service works on, kept across rounds (see [`HOLD_CONNECTION`]).
#[derive(Default)]
pub(crate) struct Held(Option<(PoolConnection<MySql>, Instant)>);

impl Held {
    pub(crate) async fn get(
        &mut self,
        s: &Shared,
    ) -> Result<&mut sqlx::MySqlConnection, crate::Error> {
        if self
            .0
            .as_ref()
            .is_some_and(|(_, since)| since.elapsed() >= HOLD_CONNECTION)
        {
            self.0 = None;
        }
        if self.0.is_none() {
            self.0 = Some((s.db.acquire().await?, Instant::now()));
        }
        Ok(&mut **self.0.as_mut().map(|(c, _)| c).expect("just set"))
    }

    pub(crate) fn release(&mut self) {
        self.0 = None;
    }

    /// Closes the connection instead of handing it back: for one whose statement was cut off
    /// (a timeout dropped it mid-flight). Cut off inside its `START TRANSACTION`, a connection
    /// is in a transaction on the server that sqlx does not count as begun (it counts one only
    /// once the reply is read); back in the pool it would carry that transaction into the next
    /// user's statements, which would then never commit and hold their row locks (issue 26: a
    /// heartbeat timed out during a server stall, and one worker's completions stayed
    /// uncommitted for a minute). Closed, the server rolls it back.
    pub(crate) fn discard(&mut self) {
        if let Some((mut conn, _)) = self.0.take() {
            conn.close_on_drop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(Inner);
    #[derive(Debug)]
    struct Inner;
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "error returned from database: {}", self.0)
        }
    }
    impl std::fmt::Display for Inner {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("1213 (40001): Deadlock found")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    impl std::error::Error for Inner {}

    #[test]
    fn an_error_chain_says_each_text_once() {
        assert_eq!(
            error_chain(&Outer(Inner)),
            "error returned from database: 1213 (40001): Deadlock found"
        );
    }
}
