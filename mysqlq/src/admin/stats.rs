//! `Admin::stats`: the statistics snapshot `stats` and the dashboard show.

use std::time::Duration;

use serde::Serialize;

use super::{ActivityStats, Admin, KindStats, LeaseStats, QueueStats, TableStats, WorkerStats};
use crate::Error;
use crate::store::admin as sql;

/// Everything `stats` and the dashboard's overview show, read in one go from indexes and the
/// workers' per-minute tables (never a scan of `job_queue`).
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    /// The activity window, in seconds.
    pub window_seconds: u64,
    /// Per queue: ready, oldest ready age, scheduled, processing, expired leases, failed.
    pub queues: Vec<QueueStats>,
    /// Processing jobs and expired leases.
    pub leases: LeaseStats,
    /// Worker counters summed over the window.
    pub activity: ActivityStats,
    /// The same counters per minute.
    pub per_minute: PerMinute,
    /// Share of claims that found nothing (`None` without claims in the window).
    pub empty_poll_ratio: Option<f64>,
    /// Workers running or seen within the window.
    pub workers: Vec<WorkerStats>,
    /// Runs, errors and time per job kind over the window.
    pub kinds: Vec<KindStats>,
    /// Table size and cleanup lag.
    pub table: TableStats,
}

/// Activity counters divided by the window's length in minutes (two decimals).
#[derive(Debug, Clone, Serialize)]
pub struct PerMinute {
    /// Jobs claimed.
    pub claims: f64,
    /// Jobs completed.
    pub completions: f64,
    /// Attempts retried.
    pub retries: f64,
    /// Jobs failed.
    pub failures: f64,
    /// Deadlocks hit.
    pub deadlocks: f64,
    /// Lock wait timeouts hit.
    pub lock_waits: f64,
}

#[allow(clippy::cast_precision_loss)]
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

impl Admin {
    /// The statistics snapshot over the last `window` (at least a minute: workers count per
    /// minute). On a Galera node it is read with `wsrep_sync_wait = 1`, so it counts what other
    /// nodes committed before it.
    pub async fn stats(&self, window: Duration) -> Result<Stats, Error> {
        if window < Duration::from_secs(60) {
            return Err(Error::invalid(
                "statistics window",
                format!("{window:?} is shorter than a minute: the workers count per minute"),
            ));
        }
        let mut causal = super::causal::CausalReads::acquire(&self.pool).await?;
        let conn = &mut *causal;
        let queues = sql::stats_queues(conn).await?;
        let leases = sql::stats_leases(conn).await?;
        let activity = sql::stats_activity(conn, window).await?;
        let workers = sql::stats_workers(conn, window).await?;
        let kinds = sql::stats_kinds(conn, window).await?;
        let table = sql::stats_table(conn).await?;
        causal.done().await;
        let minutes = (window.as_secs() / 60).max(1);
        let per = |n: u64| (ratio(n, minutes) * 100.0).round() / 100.0;
        Ok(Stats {
            window_seconds: window.as_secs(),
            per_minute: PerMinute {
                claims: per(activity.claims),
                completions: per(activity.completions),
                retries: per(activity.retries),
                failures: per(activity.failures),
                deadlocks: per(activity.deadlocks),
                lock_waits: per(activity.lock_waits),
            },
            empty_poll_ratio: (activity.polls > 0)
                .then(|| ratio(activity.empty_polls, activity.polls)),
            queues,
            leases,
            activity,
            workers,
            kinds,
            table,
        })
    }
}
