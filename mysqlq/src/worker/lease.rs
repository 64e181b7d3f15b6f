//! Leases. Heartbeats: every interval, one statement extends the leases of all jobs this worker
//! holds (token-guarded); a failed round is retried quickly, not a full interval later. A job
//! the database says another claim owns now is cancelled through its context
//! ([`CancelReason::LeaseLost`]), and its late result is never written over the new owner's
//! state. A job an operator cancelled (the row is `cancelled` with `cancelled_by` set, under
//! this worker's token) is stopped the same way with [`CancelReason::Cancelled`]: not counted as
//! lost.
//!
//! The watchdog: the worker knows, for each job, when the statement that last set its lease was
//! sent. When no heartbeat has renewed a lease by `lease − margin` after that moment (the
//! database is unreachable or stalled), the job is stopped here, before the database can see
//! its lease expire and hand it to another worker, and no new claims are made until a heartbeat
//! succeeds again. The overlap window this leaves is documented in `docs/guarantees.md`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::CancelReason;
use crate::store::{self, GuardedReport, Owned};
use crate::worker::write::Held;
use crate::worker::{Key, Phase, Shared, WorkerEvent, sleep_or_cancel};

/// Most jobs per heartbeat statement.
const CHUNK: usize = 1000;

/// How soon a heartbeat round that had to skip a held row comes again.
const SKIPPED_AGAIN: Duration = Duration::from_millis(100);

pub(crate) async fn run(s: Arc<Shared>) {
    let every = s.config.heartbeat();
    let mut wait = every;
    let mut failures = 0u32;
    // The heartbeats keep a connection of their own: a burst of outcome writes (every slot's
    // handler returning at once) must not queue them behind it for a pool connection.
    let mut conn = Held::default();
    while sleep_or_cancel(wait, &s.stop_services).await {
        if let Ok(all) = run_once(&s, &mut conn).await {
            failures = 0;
            // A job whose row another transaction held was not renewed: try it again soon,
            // not a full interval later.
            wait = if all { every } else { every.min(SKIPPED_AGAIN) };
        } else {
            // Try again soon: the lease keeps running while we wait.
            failures += 1;
            wait = (Duration::from_millis(50) * 2u32.saturating_pow(failures.min(8))).min(every);
        }
    }
}

/// One round of heartbeats over every job held (including those whose outcome is being
/// written: their lease must hold until it is). `Ok(false)` when some job's row was held by
/// another transaction and skipped; `Err(())` when a statement failed.
pub(crate) async fn run_once(s: &Arc<Shared>, conn: &mut Held) -> Result<bool, ()> {
    let keys: Vec<Key> = s.in_flight().keys().cloned().collect();
    if keys.is_empty() {
        conn.release();
        if s.lease_unconfirmed.load(Ordering::SeqCst) {
            // Nothing to renew, but claims stay stopped until the database answers again.
            return ping(s).await.map(|()| true);
        }
        return Ok(true);
    }
    let mut ok = true;
    let mut all = true;
    for chunk in keys.chunks(CHUNK) {
        let sent = Instant::now();
        let owned: Vec<Owned> = chunk.iter().map(Key::owned).collect();
        let result = beat_on(s, conn, &owned).await;
        if result.is_err() {
            // Perhaps broken, or on a server that stopped being the writer: a fresh one next.
            conn.release();
        }
        match result {
            Ok(report) => {
                all &= report.skipped.is_empty();
                settle(s, chunk, &report, sent);
            }
            Err(e) => {
                ok = false;
                count_error(s, &e);
                tracing::warn!(jobs = chunk.len(), error = %crate::worker::write::error_chain(&e), "heartbeat failed; retrying shortly");
            }
        }
    }
    if ok {
        s.lease_unconfirmed.store(false, Ordering::SeqCst);
        Ok(all)
    } else {
        Err(())
    }
}

/// One heartbeat statement on the lease service's own connection, bounded in time.
async fn beat_on(
    s: &Shared,
    conn: &mut Held,
    owned: &[Owned],
) -> Result<GuardedReport, crate::Error> {
    let limit = s.config.heartbeat().max(Duration::from_secs(1));
    let work = async {
        let c = conn.get(s).await?;
        store::job_heartbeat(c, s.config.lease, owned).await
    };
    match tokio::time::timeout(limit, work).await {
        Ok(r) => r,
        Err(_) => {
            // Perhaps cut off inside its transaction's first statement: never reused.
            conn.discard();
            Err(crate::Error::Database(sqlx::Error::Io(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no answer within {} ms (a connection from the worker's pool, then the heartbeat's statements)",
                        limit.as_millis()
                    ),
                ),
            )))
        }
    }
}

/// One heartbeat statement on a connection from the pool ([`beat_one`]).
async fn beat(s: &Shared, owned: &[Owned]) -> Result<GuardedReport, crate::Error> {
    beat_on(s, &mut Held::default(), owned).await
}

async fn ping(s: &Shared) -> Result<(), ()> {
    let work = async {
        let mut conn = s.db.acquire().await?;
        store::db_now(&mut conn).await
    };
    match tokio::time::timeout(s.config.heartbeat().max(Duration::from_secs(1)), work).await {
        Ok(Ok(_)) => {
            s.lease_unconfirmed.store(false, Ordering::SeqCst);
            tracing::info!("database reachable again: claiming resumes");
            Ok(())
        }
        _ => Err(()),
    }
}

fn count_error(s: &Shared, e: &crate::Error) {
    let m = &s.metrics;
    match e.server_code() {
        Some(1213) => m.add(&m.counters.deadlocks, 1),
        Some(1205) => m.add(&m.counters.lock_waits, 1),
        _ => m.add(&m.counters.db_errors, 1),
    }
}

/// Applies a heartbeat's report to exactly the claims it was about.
fn settle(s: &Shared, keys: &[Key], report: &GuardedReport, sent: Instant) {
    let mut lost = Vec::new();
    let mut cancelled = Vec::new();
    {
        let mut map = s.in_flight();
        for key in keys {
            // By claim, never by id: the same chunk may name an earlier claim of this job,
            // lost since this worker claimed it again.
            let (reason, into) = if report.is_lost(key.id, &key.token) {
                // A row gone while the job's outcome is being written may have been deleted by
                // that very write (a worker that deletes completed jobs, committed a moment
                // ago): its writer tells which from its receipt, and the heartbeat leaves it be.
                if report.is_gone(key.id, &key.token)
                    && map.get(key).is_some_and(|f| f.phase == Phase::Finishing)
                {
                    continue;
                }
                (CancelReason::LeaseLost, &mut lost)
            } else if report.is_cancelled(key.id, &key.token) {
                (CancelReason::Cancelled, &mut cancelled)
            } else {
                // Renewed, unless this statement left its row to the transaction holding it.
                if !report.is_settled(key.id, &key.token)
                    && !report.is_skipped(key.id, &key.token)
                    && let Some(f) = map.get_mut(key)
                    && f.lease_from < sent
                {
                    f.lease_from = sent;
                }
                continue;
            };
            // Only this claim's entry: a later claim of the same job is another key.
            if let Some(f) = map.remove(key) {
                f.ctx.cancel(reason);
                if let Some(a) = &f.abort {
                    a.abort();
                }
                // Its handler has returned: no one else will tell the hooks of the cancel.
                if reason == CancelReason::Cancelled && f.phase == Phase::Finishing {
                    s.operator_cancelled(f.run);
                }
                into.push(key.id);
                s.settled(key);
            }
        }
    }
    if !cancelled.is_empty() {
        s.slot_freed.notify_waiters();
        tracing::info!(jobs = ?cancelled.iter().map(|j| j.0).collect::<Vec<_>>(), "cancelled by an operator: stopped here; their results are not written");
        for &id in &cancelled {
            s.emit(WorkerEvent::CancelledByOperator { id });
        }
    }
    if lost.is_empty() {
        if report.skipped.is_empty() {
            s.emit(WorkerEvent::Heartbeat { jobs: keys.len() });
        }
        return;
    }
    s.slot_freed.notify_waiters();
    let m = &s.metrics;
    m.add(&m.counters.lost, lost.len() as u64);
    tracing::warn!(jobs = ?lost.iter().map(|j| j.0).collect::<Vec<_>>(), "lease lost: another worker owns these jobs now; cancelled here");
    for id in lost {
        s.emit(WorkerEvent::LeaseLost { id });
    }
}

/// Renews one job's lease now ([`crate::JobContext::heartbeat`]); `false` when it was lost.
pub(crate) async fn beat_one(s: &Shared, key: &Key) -> Result<bool, crate::Error> {
    let sent = Instant::now();
    let report = beat(s, std::slice::from_ref(&key.owned())).await?;
    settle(s, std::slice::from_ref(key), &report, sent);
    Ok(!report.is_lost(key.id, &key.token) && !report.is_cancelled(key.id, &key.token))
}

/// Stops jobs whose lease could not be renewed in time (see the module docs).
pub(crate) async fn watchdog(s: Arc<Shared>) {
    let lease = s.config.lease;
    let margin = s.config.lease_margin();
    let tick = (margin / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    while sleep_or_cancel(tick, &s.stop_services).await {
        let now = Instant::now();
        let mut stopped = Vec::new();
        {
            let map = s.in_flight();
            for (key, f) in map.iter() {
                if f.phase != Phase::Finishing
                    && !f.ctx.is_cancelled()
                    && f.lease_from + lease <= now + margin
                {
                    f.ctx.cancel(CancelReason::LeaseUnconfirmed);
                    stopped.push(key.id);
                }
            }
        }
        if stopped.is_empty() {
            continue;
        }
        s.lease_unconfirmed.store(true, Ordering::SeqCst);
        tracing::error!(
            jobs = ?stopped.iter().map(|j| j.0).collect::<Vec<_>>(),
            "no heartbeat could renew these leases in time (database unreachable?): jobs stopped \
             here before their lease ends; no new claims until the database answers"
        );
        for id in stopped {
            s.emit(WorkerEvent::LeaseUnconfirmed { id });
        }
    }
}
