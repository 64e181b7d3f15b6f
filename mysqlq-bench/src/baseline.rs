//! The baseline's consumers: what a team would write by hand from the article, no framework —
//! a drain loop and an idle polling loop over the claim and completion of [`crate::sql`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use indicatif::ProgressBar;
use mysqlq::WorkerConfig;
use sqlx::MySqlPool;
use tokio::sync::Notify;

use crate::bench::LEASE_SECS;
use crate::error::BenchError;
use crate::job::QUEUE;
use crate::probe::{Probe, new_token};
use crate::sql::RawTable;
use crate::{db, sql};

/// A connection, waiting as long as it takes while other tasks hold them all (the baseline runs
/// more tasks than connections at high concurrency).
pub(crate) async fn acquire_patiently(
    pool: &MySqlPool,
) -> Result<sqlx::pool::PoolConnection<sqlx::MySql>, BenchError> {
    loop {
        match pool.acquire().await {
            Ok(c) => return Ok(c),
            Err(sqlx::Error::PoolTimedOut) => {}
            Err(e) => return Err(BenchError::db("baseline connection", &e)),
        }
    }
}

/// The article's claim, redone from its SELECT on deadlock or lock wait timeout.
pub(crate) async fn claim(
    conn: &mut sqlx::MySqlConnection,
    table: RawTable,
    batch: u32,
    worker: &str,
    token: &str,
) -> Result<Vec<u64>, BenchError> {
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match sql::bench_claim(conn, table, QUEUE, batch, worker, token, LEASE_SECS).await {
            Ok(ids) => return Ok(ids),
            Err(e) if db::is_lock_error(&e) && attempt < 10 => {
                tokio::time::sleep(Duration::from_millis(fastrand::u64(
                    1..=(2 << attempt.min(6)),
                )))
                .await;
            }
            Err(e) => return Err(BenchError::db("baseline claim failed", &e)),
        }
    }
}

/// The token-guarded completion of one batch, retried on deadlock or lock wait timeout.
pub(crate) async fn complete(
    conn: &mut sqlx::MySqlConnection,
    table: RawTable,
    ids: &[u64],
    token: &str,
) -> Result<u64, BenchError> {
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match sql::bench_complete(conn, table, ids, token).await {
            Ok(n) => return Ok(n),
            Err(e) if db::is_lock_error(&e) && attempt < 10 => {
                tokio::time::sleep(Duration::from_millis(fastrand::u64(
                    1..=(2 << attempt.min(6)),
                )))
                .await;
            }
            Err(e) => return Err(BenchError::db("baseline completion failed", &e)),
        }
    }
}

/// What the tasks of one baseline drain run count together.
#[derive(Debug, Default)]
pub(crate) struct DrainCounters {
    /// Completions refused because the token no longer held the row.
    pub(crate) lost: AtomicU64,
    /// Claim transactions (the final empty ones included).
    pub(crate) claims: AtomicU64,
    /// Completion statements (one per claimed batch).
    pub(crate) flushes: AtomicU64,
}

/// One baseline drain task: claim a batch, "run" it, complete it, until the queue is empty.
pub(crate) async fn baseline_drain_loop(
    pool: &MySqlPool,
    table: RawTable,
    probe: &Probe,
    batch: u32,
    worker: &str,
    counters: &DrainCounters,
    bar: &ProgressBar,
) -> Result<(), BenchError> {
    loop {
        let mut conn = acquire_patiently(pool).await?;
        let token = new_token();
        let ids = claim(&mut conn, table, batch, worker, &token).await?;
        counters.claims.fetch_add(1, Ordering::Relaxed);
        if ids.is_empty() {
            return Ok(());
        }
        for &id in &ids {
            probe.ran(id);
        }
        let done = complete(&mut conn, table, &ids, &token).await?;
        counters.flushes.fetch_add(1, Ordering::Relaxed);
        counters
            .lost
            .fetch_add((ids.len() as u64).saturating_sub(done), Ordering::Relaxed);
        bar.inc(done);
    }
}

/// The baseline consumer of the pickup runs: a polling loop with the worker's default idle
/// backoff (floor 5 ms, doubling to the 1 s ceiling, reset when work appears), no wake-up.
pub(crate) async fn baseline_poller(
    pool: &MySqlPool,
    probe: &Probe,
    batch: u32,
    stop: &(AtomicBool, Notify),
) -> Result<(), BenchError> {
    let floor = WorkerConfig::DEFAULT_POLL_FLOOR;
    let ceiling = WorkerConfig::DEFAULT_POLL_CEILING;
    let worker = format!("bench-baseline:{}", std::process::id());
    let mut idle = floor;
    while !stop.0.load(Ordering::SeqCst) {
        let mut conn = acquire_patiently(pool).await?;
        let token = new_token();
        let ids = claim(&mut conn, RawTable::JobQueue, batch, &worker, &token).await?;
        if ids.is_empty() {
            idle = (idle * 2).min(ceiling);
        } else {
            for &id in &ids {
                probe.ran(id);
            }
            complete(&mut conn, RawTable::JobQueue, &ids, &token).await?;
            idle = floor;
            if ids.len() == usize::try_from(batch).unwrap_or(usize::MAX) {
                continue;
            }
        }
        drop(conn);
        let woken = stop.1.notified();
        tokio::select! {
            () = tokio::time::sleep(idle) => {}
            () = woken => {}
        }
    }
    Ok(())
}
