//! Leader-only maintenance. Every worker tries to take or renew the leader lease (a row in
//! `mysqlq_leader`) each interval; the holder runs the reaper (the article's recovery SQL for
//! expired leases) and the pruner (batched deletes of old finished rows and statistics). The
//! periodic-job scheduler runs in the same round on every worker that declares schedules.
//! When the leader dies its lease expires and another worker takes over within `leader_ttl`;
//! a clean shutdown resigns at once.

use std::sync::Arc;
use std::time::Duration;

use crate::store::{self, PruneStatus};
use crate::worker::{Shared, sleep_or_cancel};

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
    pub(crate) scheduled: u64,
}

pub(crate) async fn run(s: Arc<Shared>) {
    let mut was_leader = false;
    loop {
        match run_once(&s).await {
            Ok(r) => {
                if r.leader != was_leader {
                    tracing::info!(worker = %s.worker_id, leader = r.leader, "leadership changed");
                    was_leader = r.leader;
                }
            }
            Err(e) => {
                let m = &s.metrics;
                m.add(&m.counters.db_errors, 1);
                tracing::warn!(error = %crate::worker::executor::error_chain(&e), "maintenance round failed");
            }
        }
        if !sleep_or_cancel(s.config.maintenance_interval, &s.stop_services).await {
            break;
        }
    }
    if was_leader && let Ok(mut conn) = s.pool.acquire().await {
        let _ = store::leader_resign(&mut conn, LEADER_NAME, &s.worker_id).await;
    }
}

pub(crate) async fn run_once(s: &Arc<Shared>) -> Result<Report, crate::Error> {
    let mut conn = s.pool.acquire().await?;
    let leader =
        store::leader_elect(&mut conn, LEADER_NAME, &s.worker_id, s.config.leader_ttl).await?;
    let mut report = Report {
        leader,
        ..Report::default()
    };
    // Every worker that declares schedules runs the scheduler (not only the leader, which may
    // declare none): the ledger's primary key makes each tick exactly-once anyway.
    report.scheduled = super::scheduler::run_once(s, &mut conn).await?;
    if !leader {
        return Ok(report);
    }
    let m = &s.metrics;
    loop {
        let r = store::job_reap_expired(&mut conn, BATCH).await?;
        let n = r.retried + r.failed;
        if n > 0 {
            tracing::warn!(
                retried = r.retried,
                failed = r.failed,
                "reaped jobs with expired leases"
            );
        }
        report.reaped += n;
        if r.retried < u64::from(BATCH) && r.failed < u64::from(BATCH) {
            break;
        }
    }
    m.add(&m.counters.reaped, report.reaped);
    let plan = [
        (PruneStatus::Completed, s.config.completed_retention),
        (PruneStatus::Cancelled, s.config.completed_retention),
        (PruneStatus::Failed, s.config.failed_retention),
    ];
    for (status, age) in plan {
        // A few batches per round keeps each round short; the backlog goes over several rounds.
        for _ in 0..10 {
            let n = store::job_prune(&mut conn, status, age, BATCH).await?;
            report.pruned += n;
            if n < u64::from(BATCH) {
                break;
            }
        }
    }
    m.add(&m.counters.pruned, report.pruned);
    store::stats_prune(&mut conn, STATS_RETENTION).await?;
    Ok(report)
}
