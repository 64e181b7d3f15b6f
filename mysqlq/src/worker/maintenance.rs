//! Maintenance, every interval (jittered so workers do not move in step), each step isolated so
//! that one failing step never skips the others:
//!
//! 1. the **reaper**, on every worker: the article's recovery SQL for expired leases. It is
//!    idempotent and index-backed, so running it everywhere costs little and means a dead
//!    worker's jobs come back within lease + one interval, whether or not it was the leader;
//! 2. the **leader lease** (a row in `mysqlq_leader`), held under a per-process identity;
//! 3. on the leader only, the **pruner**: batched deletes of old finished rows and statistics,
//!    every twelfth round at most (every minute at the default interval), each round while a
//!    backlog remains;
//! 4. on the leader only, the **queue gauges** (`mysqlq_queue_*` in `/metrics`), read at most
//!    every `gauge_interval` with index-backed statements (`store/gauges.rs`). A worker that is
//!    not the leader, or stops being it, shows none, so exactly one worker reports them; a
//!    reading the leader could not renew disappears after two intervals instead of going stale.
//!    Once a minute the same reading is also written as the minute's **depth history**
//!    (`mysqlq_depth_minute`, one statement for every queue; the queues page charts it).
//!
//! When the leader dies its lease expires and another worker takes over within `leader_ttl`;
//! a clean shutdown resigns at once. Periodic jobs are not enqueued here but by a service of
//! their own that wakes at each tick ([`super::scheduler`]).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::store::{self, PruneStatus};
use crate::worker::{Shared, WorkerEvent, sleep_or_cancel, unit_random};

const LEADER_NAME: &str = "maintenance";
/// Rows per reaper or pruner statement.
const BATCH: u32 = 1000;
/// Statistics rows kept.
const STATS_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) leader: bool,
    pub(crate) reaped: u64,
    pub(crate) pruned: u64,
}

pub(crate) async fn run(s: Arc<Shared>) {
    let mut was_leader = false;
    // When the pruner last ran (`None`: due at the next round as leader).
    let mut last_prune = None;
    // The minute (this host's clock) of the last depth row written.
    let mut last_depth = None;
    loop {
        let r = run_once(&s, &mut last_prune, &mut last_depth).await;
        if r.leader != was_leader {
            tracing::info!(worker = %s.worker_id, instance = %s.instance, leader = r.leader, "leadership changed");
            s.emit(WorkerEvent::Leadership { leader: r.leader });
            was_leader = r.leader;
        }
        s.emit(WorkerEvent::MaintenanceRound);
        let every = s
            .config
            .maintenance_interval
            .mul_f64(0.8 + 0.2 * unit_random());
        if !sleep_or_cancel(every, &s.stop_services).await {
            break;
        }
    }
    if was_leader && let Ok(mut conn) = s.db.acquire().await {
        let _ = store::leader_resign(&mut conn, LEADER_NAME, &s.instance).await;
    }
    s.metrics.set_leader(false);
}

/// One round; a step that fails is logged and counted, and the next steps still run.
pub(crate) async fn run_once(
    s: &Arc<Shared>,
    last_prune: &mut Option<tokio::time::Instant>,
    last_depth: &mut Option<u64>,
) -> Report {
    let mut report = Report::default();
    let mut conn = match s.db.acquire().await {
        Ok(c) => c,
        Err(e) => {
            failed(s, "maintenance", &e.into());
            return report;
        }
    };
    match reap(s, &mut conn).await {
        Ok(n) => report.reaped = n,
        Err(e) => failed(s, "reaper", &e),
    }
    match store::leader_elect(&mut conn, LEADER_NAME, &s.instance, s.config.leader_ttl).await {
        Ok(leader) => report.leader = leader,
        Err(e) => failed(s, "leader election", &e),
    }
    s.metrics.set_leader(report.leader);
    if report.leader && prune_due(s, last_prune) {
        match prune(s, &mut conn).await {
            Ok((n, backlog)) => {
                report.pruned = n;
                if backlog {
                    // Come back next round for the rest.
                    *last_prune = None;
                }
            }
            Err(e) => failed(s, "pruner", &e),
        }
    }
    // Every round, not only with the pruner: `gauges` reads at most every `gauge_interval`
    // (and the depth row once a minute), and a reading is valid for two of those intervals.
    if report.leader
        && let Err(e) = gauges(s, &mut conn, last_depth).await
    {
        failed(s, "queue gauges and depth history", &e);
    }
    report
}

fn failed(s: &Shared, step: &str, e: &crate::Error) {
    let m = &s.metrics;
    m.add(&m.counters.db_errors, 1);
    tracing::warn!(error = %crate::worker::write::error_chain(e), "{step} failed this round; the other maintenance steps still ran");
}

async fn reap(s: &Shared, conn: &mut sqlx::MySqlConnection) -> Result<u64, crate::Error> {
    let mut reaped = 0;
    loop {
        let r = store::job_reap_expired(conn, BATCH).await?;
        let n = r.retried + r.failed + r.relayed;
        if n > 0 {
            tracing::warn!(
                retried = r.retried,
                failed = r.failed,
                relayed = r.relayed,
                "reaped jobs with expired leases"
            );
        }
        reaped += n;
        if r.retried < u64::from(BATCH)
            && r.failed < u64::from(BATCH)
            && r.relayed < u64::from(BATCH)
        {
            break;
        }
    }
    if reaped > 0 {
        let m = &s.metrics;
        m.add(&m.counters.reaped, reaped);
        s.emit(WorkerEvent::Reaped { jobs: reaped });
    }
    Ok(reaped)
}

/// The pruner runs every twelfth round (every minute at the default interval), so that an idle
/// leader does not send its half-dozen statements every few seconds; a round that left a
/// backlog (a full batch deleted) runs again next round.
fn prune_due(s: &Shared, last: &mut Option<tokio::time::Instant>) -> bool {
    let every = (s.config.maintenance_interval * 12).min(PRUNE_AT_MOST_EVERY);
    let now = tokio::time::Instant::now();
    match *last {
        Some(t) if now < t + every => false,
        _ => {
            *last = Some(now);
            true
        }
    }
}

/// How long the periodic jobs' ledger keeps a tick that is not its schedule's latest.
const CRON_KEEP: Duration = Duration::from_secs(24 * 3600);
/// How long a completion receipt is kept when its worker did not delete it (it died first;
/// `docs/schema.md`): far longer than a retried completion write waits.
const RECEIPT_KEEP: Duration = Duration::from_secs(24 * 3600);

/// Longest gap between two pruner runs on the leader.
const PRUNE_AT_MOST_EVERY: Duration = Duration::from_secs(60);

/// Deletes what is past its retention; returns the rows deleted and whether a backlog is left.
async fn prune(s: &Shared, conn: &mut sqlx::MySqlConnection) -> Result<(u64, bool), crate::Error> {
    let mut pruned = 0;
    let mut backlog = false;
    let plan = [
        (PruneStatus::Completed, s.config.completed_retention),
        (PruneStatus::Cancelled, s.config.completed_retention),
        (PruneStatus::Failed, s.config.failed_retention),
    ];
    for (status, age) in plan {
        // A few batches per round keeps each round short; the backlog goes over several rounds.
        for _ in 0..10 {
            let n = store::job_prune(conn, status, age, BATCH, None).await?;
            pruned += n;
            if n < u64::from(BATCH) {
                break;
            }
            backlog = true;
        }
    }
    // Finished workflows, whole, with the jobs' retention.
    let (workflows, steps) = store::workflow::wf_prune(
        conn,
        s.config.completed_retention,
        s.config.failed_retention,
        BATCH / 10,
    )
    .await?;
    pruned += steps;
    backlog |= workflows >= u64::from(BATCH / 10);
    let m = &s.metrics;
    m.add(&m.counters.pruned, pruned);
    backlog |= store::stats_prune(conn, STATS_RETENTION).await?;
    // The tables that gain a row per key or per tick: a batch per round, like the jobs above.
    let keys = store::keys_prune(conn, BATCH).await?;
    let ticks = store::cron_prune(conn, CRON_KEEP, BATCH).await?;
    let receipts = store::receipt_prune(conn, RECEIPT_KEEP, BATCH).await?;
    // The operators' audit trail is kept as long as the failed jobs it may explain.
    let audit = store::admin::audit_prune(conn, s.config.failed_retention, BATCH).await?;
    // Rate limits: expired holds, idle buckets, and the buckets keyed jobs lack.
    let rate = store::rate_prune(conn, BATCH).await?;
    for q in &s.config.queues {
        store::rate_bucket_backstop(conn, q).await?;
    }
    backlog |= rate >= u64::from(BATCH);
    backlog |= keys >= u64::from(BATCH) || ticks >= u64::from(BATCH) || audit >= u64::from(BATCH);
    backlog |= receipts >= u64::from(BATCH);
    Ok((pruned, backlog))
}

/// Reads the queue gauges when the last reading is `gauge_interval` old, or a depth row is
/// due ([`depth_due`]); then writes that reading as the minute's depth rows (the leader only).
async fn gauges(
    s: &Shared,
    conn: &mut sqlx::MySqlConnection,
    last_depth: &mut Option<u64>,
) -> Result<(), crate::Error> {
    let every = s.config.gauge_interval;
    let now = wall_minute();
    let depth = depth_due(*last_depth, now);
    if s.metrics.queue_gauges_due(every) || depth {
        let queues = store::queue_gauges(conn).await?;
        let written = if depth {
            let rows: Vec<(&str, crate::state::StateCounts)> = queues
                .iter()
                .map(|g| (g.queue.as_str(), g.states))
                .collect();
            store::depth_minute_write(conn, &rows).await.map(|_| {
                *last_depth = Some(now.0);
            })
        } else {
            Ok(())
        };
        let workflows = store::workflow_gauges(conn).await?;
        // A reading is renewed within `every` + one round; one missed renewal is tolerated.
        let valid_for = (every + s.config.maintenance_interval) * 2;
        s.metrics.set_queue_gauges(queues, workflows, valid_for);
        written?;
    }
    Ok(())
}

/// This host's minute (since the Unix epoch) and the second within it.
fn wall_minute() -> (u64, u64) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    (secs / 60, secs % 60)
}

/// From this second of a minute on, the minute's depth row is due.
const DEPTH_AT_SECOND: u64 = 10;

/// Whether a depth row is due at `(minute, second)` of this host's clock, the last written in
/// minute `last`: at the first round as leader, then at the first round of each later minute
/// that is [`DEPTH_AT_SECOND`] seconds into it. The row carries the database's minute
/// (`UTC_TIMESTAMP()`), so writing 10 s into the host's minute writes each database minute
/// once while the two clocks are within 10 s of each other; the rounds (every
/// `maintenance_interval`, 5 s by default) leave no minute without its row.
fn depth_due(last: Option<u64>, (minute, second): (u64, u64)) -> bool {
    match last {
        None => true,
        Some(m) => minute > m && second >= DEPTH_AT_SECOND,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_depth_row_is_due_once_a_minute_ten_seconds_in() {
        assert!(
            depth_due(None, (100, 59)),
            "the first round as leader writes"
        );
        assert!(!depth_due(Some(100), (100, 59)), "never twice in a minute");
        assert!(
            !depth_due(Some(100), (101, 9)),
            "not before 10 s into the next"
        );
        assert!(depth_due(Some(100), (101, 10)));
        assert!(depth_due(Some(100), (103, 30)), "a late round writes");
        // Rounds every 5 s write every minute exactly once.
        let mut last = None;
        let mut written = Vec::new();
        for t in (7..=7 + 600).step_by(5) {
            let now = (t / 60, t % 60);
            if depth_due(last, now) {
                last = Some(now.0);
                written.push(now.0);
            }
        }
        assert_eq!(written, (0..10).collect::<Vec<u64>>());
    }
}
