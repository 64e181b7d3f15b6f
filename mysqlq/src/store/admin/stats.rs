//! Statistics for operators: per-queue counts, leases, activity, workers, kinds, table size, and
//! the plans of these statements.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
#[cfg(feature = "__internal-store")]
use sqlx::AssertSqlSafe;
use sqlx::{MySqlConnection, Row};

#[cfg(feature = "__internal-store")]
use super::super::explain::PlanRow;
use super::super::states;
#[cfg(feature = "__internal-store")]
use super::failed::{FAILED_LIST_SQL, FAILED_PAGE_NULL_SQL, FAILED_PAGE_SQL, FIRST_FINISHED};
use super::non_negative;
use crate::Error;
use crate::state::{Capped, StateCounts, Timestamp};

/// Per-queue statistics: the queue names come from a loose index scan of `idx_job_claim` plus the
/// paused-queue table; the unfinished jobs of every queue are counted in one index-only pass
/// over `idx_job_recover` (`status IN ('pending', 'processing')`, grouped by queue), the failed
/// ones in one over `idx_job_finished`, so `completed` rows are never read and no queue reads
/// another's jobs. `ready` and `oldest_ready_age_seconds` are the article's monitoring query
/// (`WHERE status = 'pending' AND available_at <= now GROUP BY queue_name`).
///
/// (Until the bench of issue 32 it joined every queue × status to `job_queue`; with
/// migration 10's wider `idx_job_recover` MariaDB read every job of the status per queue, and
/// re-planned the prepared statement to read 1.4 million entries for 94,500 jobs: ~0.5 s.)
const STATS_QUEUES_SQL: &str = "/* mysqlq:stats_queues */ \
    SELECT CAST(q.queue_name AS CHAR) AS queue_name, \
      CAST(IFNULL(u.ready, 0) AS SIGNED) AS ready, \
      TIMESTAMPDIFF(SECOND, u.oldest, UTC_TIMESTAMP(6)) AS oldest_s, \
      TIMESTAMPDIFF(MICROSECOND, u.oldest, UTC_TIMESTAMP(6)) AS oldest_us, \
      CAST(IFNULL(u.scheduled, 0) AS SIGNED) AS scheduled, \
      CAST(IFNULL(u.processing, 0) AS SIGNED) AS processing, \
      CAST(IFNULL(u.expired, 0) AS SIGNED) AS expired, \
      CAST(IFNULL(f.failed, 0) AS SIGNED) AS failed, \
      CAST(IFNULL(p.paused, 0) AS SIGNED) AS paused \
    FROM (SELECT DISTINCT queue_name FROM job_queue UNION SELECT queue_name FROM mysqlq_queue) q \
    LEFT JOIN (SELECT queue_name, \
        SUM(status = 'pending' AND available_at <= UTC_TIMESTAMP(6)) AS ready, \
        MIN(IF(status = 'pending' AND available_at <= UTC_TIMESTAMP(6), available_at, NULL)) AS oldest, \
        SUM(status = 'pending' AND available_at > UTC_TIMESTAMP(6)) AS scheduled, \
        SUM(status = 'processing') AS processing, \
        SUM(status = 'processing' AND lease_expires_at < UTC_TIMESTAMP(6)) AS expired \
      FROM job_queue FORCE INDEX (idx_job_recover) WHERE status IN ('pending', 'processing') \
      GROUP BY queue_name) u ON u.queue_name = q.queue_name \
    LEFT JOIN (SELECT queue_name, COUNT(*) AS failed FROM job_queue FORCE INDEX (idx_job_finished) \
      WHERE status = 'failed' GROUP BY queue_name) f ON f.queue_name = q.queue_name \
    LEFT JOIN mysqlq_queue p ON p.queue_name = q.queue_name \
    ORDER BY q.queue_name";

/// Leases: jobs processing and those whose lease expired (the reaper's backlog), over
/// `idx_job_recover`.
const STATS_LEASES_SQL: &str = "/* mysqlq:stats_leases */ \
    SELECT CAST(COUNT(*) AS SIGNED) AS processing, \
      CAST(IFNULL(SUM(lease_expires_at < UTC_TIMESTAMP(6)), 0) AS SIGNED) AS expired, \
      TIMESTAMPDIFF(SECOND, MIN(lease_expires_at), UTC_TIMESTAMP(6)) AS oldest_expiry_s \
    FROM job_queue WHERE status = 'processing'";

/// Worker activity summed over the window (`mysqlq_stats_minute`, primary key range on `minute`).
const STATS_ACTIVITY_SQL: &str = "/* mysqlq:stats_activity */ \
    SELECT CAST(IFNULL(SUM(claims), 0) AS SIGNED) AS claims, \
      CAST(IFNULL(SUM(completions), 0) AS SIGNED) AS completions, \
      CAST(IFNULL(SUM(retries), 0) AS SIGNED) AS retries, \
      CAST(IFNULL(SUM(failures), 0) AS SIGNED) AS failures, \
      CAST(IFNULL(SUM(snoozes), 0) AS SIGNED) AS snoozes, \
      CAST(IFNULL(SUM(cancels), 0) AS SIGNED) AS cancels, \
      CAST(IFNULL(SUM(lost), 0) AS SIGNED) AS lost, \
      CAST(IFNULL(SUM(polls), 0) AS SIGNED) AS polls, \
      CAST(IFNULL(SUM(empty_polls), 0) AS SIGNED) AS empty_polls, \
      CAST(IFNULL(SUM(deadlocks), 0) AS SIGNED) AS deadlocks, \
      CAST(IFNULL(SUM(lock_waits), 0) AS SIGNED) AS lock_waits, \
      CAST(IFNULL(SUM(db_errors), 0) AS SIGNED) AS db_errors \
    FROM mysqlq_stats_minute WHERE minute > UTC_TIMESTAMP() - INTERVAL ? SECOND";

/// Workers seen within the window or still registered as running, with their counters over the
/// window.
const STATS_WORKERS_SQL: &str = "/* mysqlq:stats_workers */ \
    SELECT CAST(w.worker_id AS CHAR) AS worker_id, CAST(w.host AS CHAR) AS host, w.pid, \
      CAST(w.queues AS CHAR) AS queues, w.concurrency, w.running, \
      w.started_at, w.last_seen_at, \
      TIMESTAMPDIFF(SECOND, w.last_seen_at, UTC_TIMESTAMP(6)) AS last_seen_age_s, w.stopped_at, \
      CAST(IFNULL(s.claims, 0) AS SIGNED) AS claims, \
      CAST(IFNULL(s.completions, 0) AS SIGNED) AS completions, \
      CAST(IFNULL(s.retries, 0) AS SIGNED) AS retries, \
      CAST(IFNULL(s.failures, 0) AS SIGNED) AS failures, \
      CAST(IFNULL(s.db_errors, 0) AS SIGNED) AS db_errors \
    FROM mysqlq_worker w \
    LEFT JOIN (SELECT worker_id, SUM(claims) AS claims, SUM(completions) AS completions, \
                 SUM(retries) AS retries, SUM(failures) AS failures, SUM(db_errors) AS db_errors \
               FROM mysqlq_stats_minute WHERE minute > UTC_TIMESTAMP() - INTERVAL ? SECOND \
               GROUP BY worker_id) s ON s.worker_id = w.worker_id \
    WHERE w.stopped_at IS NULL OR w.last_seen_at > UTC_TIMESTAMP(6) - INTERVAL ? SECOND \
    ORDER BY w.worker_id";

/// Processing time per kind over the window (`mysqlq_kind_minute`).
const STATS_KINDS_SQL: &str = "/* mysqlq:stats_kinds */ \
    SELECT CAST(kind AS CHAR) AS kind, CAST(SUM(runs) AS SIGNED) AS runs, \
      CAST(SUM(errors) AS SIGNED) AS errors, CAST(SUM(total_us) AS SIGNED) AS total_us, \
      CAST(MAX(max_us) AS SIGNED) AS max_us \
    FROM mysqlq_kind_minute WHERE minute > UTC_TIMESTAMP() - INTERVAL ? SECOND \
    GROUP BY kind ORDER BY kind";

/// Size of `job_queue` from the data dictionary (estimates; nothing is counted).
const STATS_TABLE_SIZE_SQL: &str = "/* mysqlq:stats_table */ \
    SELECT CAST(IFNULL(data_length, 0) AS SIGNED) AS data_bytes, \
      CAST(IFNULL(index_length, 0) AS SIGNED) AS index_bytes, \
      CAST(IFNULL(table_rows, 0) AS SIGNED) AS rows_estimate \
    FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'job_queue'";

/// Cleanup lag: the oldest finished row of a status, read from the end of `idx_job_finished`.
const STATS_OLDEST_FINISHED_SQL: &str = "/* mysqlq:stats_cleanup_lag */ \
    SELECT TIMESTAMPDIFF(SECOND, MIN(finished_at), UTC_TIMESTAMP(6)) AS age_s, \
      MIN(finished_at) AS oldest \
    FROM job_queue WHERE status = ?";

/// One queue's row of `stats`. [`states`](Self::states) counts its jobs by operator state
/// ([`OpState`](crate::state::OpState)); the other counts are kept for compatibility with what
/// they always meant (`ready` counts every due pending job, the rate-limited ones included;
/// `scheduled` every pending job due later, retries included; `processing` every claimed job,
/// relayed ones included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueStats {
    /// `queue_name`.
    pub queue: String,
    /// Kept for compatibility: pending jobs that are due now (`available_at <= now`), the
    /// rate-limited ones included (`states.ready` leaves them out).
    pub ready: u64,
    /// Age of the oldest due pending job in whole seconds, as the job-queue article's query
    /// computes it.
    pub oldest_ready_age_seconds: Option<i64>,
    /// Age of the oldest due pending job in microseconds.
    pub oldest_ready_age_us: Option<i64>,
    /// Kept for compatibility: pending jobs due later (`states.scheduled` + `states.retrying` +
    /// the 429'd ones).
    pub scheduled: u64,
    /// Kept for compatibility: jobs `processing` (`states.running` + `states.in_stream`).
    pub processing: u64,
    /// Processing jobs whose lease has expired (the reaper will recover them).
    pub expired_leases: u64,
    /// Jobs in `failed` (the same as `states.failed`, exact here).
    pub failed: u64,
    /// Kept for compatibility: of the `ready` jobs, those waiting for a rate limit, a global
    /// limit or a 429 hold (`states.rate_limited` also counts the 429'd jobs due later).
    pub rate_limited: u64,
    /// The queue's pause flag (`mysqlq_queue`).
    pub paused: bool,
    /// Its jobs by operator state (`completed` and `cancelled` not counted here).
    pub states: StateCounts,
}

/// `stats_queues`: ready count, oldest ready age, scheduled, processing, expired leases, failed
/// and the pause flag of every queue that has a row, or a row in `mysqlq_queue`; and its jobs
/// by state (`store/states.rs`: the unfinished states; `failed` is this statement's count).
pub async fn stats_queues(conn: &mut MySqlConnection) -> Result<Vec<QueueStats>, Error> {
    let rows = sqlx::query(STATS_QUEUES_SQL).fetch_all(&mut *conn).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let q = QueueStats {
            queue: r.try_get("queue_name")?,
            ready: non_negative(r.try_get("ready")?),
            oldest_ready_age_seconds: r.try_get("oldest_s")?,
            oldest_ready_age_us: r.try_get("oldest_us")?,
            scheduled: non_negative(r.try_get("scheduled")?),
            processing: non_negative(r.try_get("processing")?),
            expired_leases: non_negative(r.try_get("expired")?),
            failed: non_negative(r.try_get("failed")?),
            paused: r.try_get::<i64, _>("paused")? != 0,
            rate_limited: 0,
            states: StateCounts::default(),
        };
        out.push(q);
    }
    let counted = states::queue_counts(
        conn,
        states::Counting {
            finished: &[],
            cap: None,
            max_queues: u32::MAX,
        },
    )
    .await?;
    let by_name: HashMap<&str, &states::Counted> =
        counted.iter().map(|c| (c.queue.as_str(), c)).collect();
    for q in &mut out {
        if let Some(c) = by_name.get(q.queue.as_str()) {
            q.rate_limited = c.limited.min(q.ready);
            q.states = c.states();
        }
        q.states.failed = Capped::exact(q.failed);
    }
    Ok(out)
}

/// Leases across all queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LeaseStats {
    /// Jobs in `processing`.
    pub processing: u64,
    /// Of those, jobs whose lease has expired.
    pub expired: u64,
    /// Seconds since the earliest lease expiry (negative: the earliest lease is still valid).
    pub oldest_expiry_age_seconds: Option<i64>,
}

/// `stats_leases`: processing jobs and expired leases over `idx_job_recover`.
pub async fn stats_leases(conn: &mut MySqlConnection) -> Result<LeaseStats, Error> {
    let r = sqlx::query(STATS_LEASES_SQL).fetch_one(&mut *conn).await?;
    Ok(LeaseStats {
        processing: non_negative(r.try_get("processing")?),
        expired: non_negative(r.try_get("expired")?),
        oldest_expiry_age_seconds: r.try_get("oldest_expiry_s")?,
    })
}

/// Worker counters summed over a window (from `mysqlq_stats_minute`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ActivityStats {
    /// Jobs claimed.
    pub claims: u64,
    /// Jobs completed.
    pub completions: u64,
    /// Attempts that failed and were scheduled again.
    pub retries: u64,
    /// Jobs that moved to `failed`.
    pub failures: u64,
    /// Jobs snoozed.
    pub snoozes: u64,
    /// Jobs cancelled.
    pub cancels: u64,
    /// Guarded writes that found ownership lost.
    pub lost: u64,
    /// Claim queries run.
    pub polls: u64,
    /// Claim queries that found nothing.
    pub empty_polls: u64,
    /// Deadlocks (1213) seen by workers.
    pub deadlocks: u64,
    /// Lock wait timeouts (1205) seen by workers.
    pub lock_waits: u64,
    /// Other database errors seen by workers.
    pub db_errors: u64,
}

/// Whole seconds of a window, for `INTERVAL ? SECOND`.
fn window_secs(window: Duration) -> i64 {
    i64::try_from(window.as_secs().max(1)).unwrap_or(i64::MAX)
}

/// `stats_activity`: worker counters of the minute rows that started within `window` of now.
pub async fn stats_activity(
    conn: &mut MySqlConnection,
    window: Duration,
) -> Result<ActivityStats, Error> {
    let r = sqlx::query(STATS_ACTIVITY_SQL)
        .bind(window_secs(window))
        .fetch_one(&mut *conn)
        .await?;
    let get = |name: &str| -> Result<u64, Error> { Ok(non_negative(r.try_get(name)?)) };
    Ok(ActivityStats {
        claims: get("claims")?,
        completions: get("completions")?,
        retries: get("retries")?,
        failures: get("failures")?,
        snoozes: get("snoozes")?,
        cancels: get("cancels")?,
        lost: get("lost")?,
        polls: get("polls")?,
        empty_polls: get("empty_polls")?,
        deadlocks: get("deadlocks")?,
        lock_waits: get("lock_waits")?,
        db_errors: get("db_errors")?,
    })
}

/// One worker's row of `stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerStats {
    /// `worker_id`.
    pub worker_id: String,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Queues it serves, comma-separated.
    pub queues: String,
    /// Configured concurrency.
    pub concurrency: u32,
    /// Jobs running at its last report.
    pub running: u32,
    /// Start time.
    pub started_at: Timestamp,
    /// Last report.
    pub last_seen_at: Timestamp,
    /// Seconds since the last report.
    pub last_seen_age_seconds: i64,
    /// Clean stop time, if it stopped.
    pub stopped_at: Option<Timestamp>,
    /// Jobs claimed in the window.
    pub claims: u64,
    /// Jobs completed in the window.
    pub completions: u64,
    /// Retries in the window.
    pub retries: u64,
    /// Final failures in the window.
    pub failures: u64,
    /// Database errors in the window.
    pub db_errors: u64,
}

/// `stats_workers`: workers registered as running or seen within `window`, with their counters
/// over `window`.
pub async fn stats_workers(
    conn: &mut MySqlConnection,
    window: Duration,
) -> Result<Vec<WorkerStats>, Error> {
    let secs = window_secs(window);
    let rows = sqlx::query(STATS_WORKERS_SQL)
        .bind(secs)
        .bind(secs)
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(WorkerStats {
            worker_id: r.try_get("worker_id")?,
            host: r.try_get("host")?,
            pid: r.try_get("pid")?,
            queues: r.try_get("queues")?,
            concurrency: r.try_get("concurrency")?,
            running: r.try_get("running")?,
            started_at: r.try_get("started_at")?,
            last_seen_at: r.try_get("last_seen_at")?,
            last_seen_age_seconds: r.try_get("last_seen_age_s")?,
            stopped_at: r.try_get("stopped_at")?,
            claims: non_negative(r.try_get("claims")?),
            completions: non_negative(r.try_get("completions")?),
            retries: non_negative(r.try_get("retries")?),
            failures: non_negative(r.try_get("failures")?),
            db_errors: non_negative(r.try_get("db_errors")?),
        });
    }
    Ok(out)
}

/// Processing time of one job kind over the window (`mysqlq_kind_minute`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KindStats {
    /// The kind name.
    pub kind: String,
    /// Attempts run.
    pub runs: u64,
    /// Attempts that returned an error.
    pub errors: u64,
    /// Mean run time in microseconds.
    pub avg_us: u64,
    /// Longest run time in microseconds.
    pub max_us: u64,
}

/// `stats_kinds`: runs, errors, mean and longest processing time per kind over `window`.
pub async fn stats_kinds(
    conn: &mut MySqlConnection,
    window: Duration,
) -> Result<Vec<KindStats>, Error> {
    let rows = sqlx::query(STATS_KINDS_SQL)
        .bind(window_secs(window))
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let runs = non_negative(r.try_get("runs")?);
        let total = non_negative(r.try_get("total_us")?);
        out.push(KindStats {
            kind: r.try_get("kind")?,
            runs,
            errors: non_negative(r.try_get("errors")?),
            avg_us: total.checked_div(runs).unwrap_or(0),
            max_us: non_negative(r.try_get("max_us")?),
        });
    }
    Ok(out)
}

/// Size of `job_queue` and how far behind the cleanup is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableStats {
    /// `information_schema.tables.data_length`.
    pub data_bytes: u64,
    /// `information_schema.tables.index_length`.
    pub index_bytes: u64,
    /// `information_schema.tables.table_rows` (an InnoDB estimate).
    pub rows_estimate: u64,
    /// Age in seconds of the oldest `completed` row by `finished_at` (the cleanup lag).
    pub oldest_completed_age_seconds: Option<i64>,
    /// `finished_at` of the oldest `completed` row.
    pub oldest_completed_finished_at: Option<Timestamp>,
    /// Age in seconds of the oldest `failed` row by `finished_at`.
    pub oldest_failed_age_seconds: Option<i64>,
}

/// `stats_table`: table size estimates and the cleanup lag (oldest completed row).
pub async fn stats_table(conn: &mut MySqlConnection) -> Result<TableStats, Error> {
    let size = sqlx::query(STATS_TABLE_SIZE_SQL)
        .fetch_optional(&mut *conn)
        .await?;
    let (data_bytes, index_bytes, rows_estimate) = match size {
        Some(r) => (
            non_negative(r.try_get("data_bytes")?),
            non_negative(r.try_get("index_bytes")?),
            non_negative(r.try_get("rows_estimate")?),
        ),
        None => (0, 0, 0),
    };
    let completed = sqlx::query(STATS_OLDEST_FINISHED_SQL)
        .bind("completed")
        .fetch_one(&mut *conn)
        .await?;
    let failed = sqlx::query(STATS_OLDEST_FINISHED_SQL)
        .bind("failed")
        .fetch_one(&mut *conn)
        .await?;
    Ok(TableStats {
        data_bytes,
        index_bytes,
        rows_estimate,
        oldest_completed_age_seconds: completed.try_get("age_s")?,
        oldest_completed_finished_at: completed.try_get("oldest")?,
        oldest_failed_age_seconds: failed.try_get("age_s")?,
    })
}

/// `EXPLAIN`s every statement `stats`, the state counts, the failed-job commands and the bulk
/// cancel's walk run against `job_queue`, with the text and binds they run with. Returns
/// `(statement tag, plan)` pairs.
#[cfg(feature = "__internal-store")]
pub async fn stats_explain(
    conn: &mut MySqlConnection,
) -> Result<Vec<(&'static str, Vec<PlanRow>)>, Error> {
    let secs = 60i64;
    let mut out = Vec::new();
    let plans: [(&'static str, &'static str, Vec<Bind>); 11] = [
        ("stats_queues", STATS_QUEUES_SQL, vec![]),
        ("stats_leases", STATS_LEASES_SQL, vec![]),
        ("stats_activity", STATS_ACTIVITY_SQL, vec![Bind::I(secs)]),
        (
            "stats_workers",
            STATS_WORKERS_SQL,
            vec![Bind::I(secs), Bind::I(secs)],
        ),
        ("stats_kinds", STATS_KINDS_SQL, vec![Bind::I(secs)]),
        ("stats_table", STATS_TABLE_SIZE_SQL, vec![]),
        (
            "stats_cleanup_lag",
            STATS_OLDEST_FINISHED_SQL,
            vec![Bind::S("completed")],
        ),
        ("job_failed_list", FAILED_LIST_SQL, vec![Bind::U(50)]),
        (
            "job_failed_page",
            FAILED_PAGE_SQL,
            vec![
                Bind::S(FIRST_FINISHED),
                Bind::S(FIRST_FINISHED),
                Bind::U(0),
                Bind::S("9999-12-31 23:59:59"),
                Bind::U(500),
            ],
        ),
        (
            "job_failed_page_null",
            FAILED_PAGE_NULL_SQL,
            vec![Bind::U(0), Bind::U(500)],
        ),
        (
            "job_active_page",
            super::cancel::ACTIVE_PAGE_SQL,
            vec![Bind::U(0), Bind::U(1024)],
        ),
    ];
    for (tag, sql, binds) in plans {
        let mut q = sqlx::query(AssertSqlSafe(format!("EXPLAIN {sql}")));
        for b in binds {
            q = match b {
                Bind::I(v) => q.bind(v),
                Bind::U(v) => q.bind(v),
                Bind::S(v) => q.bind(v),
            };
        }
        let rows = q.fetch_all(&mut *conn).await?;
        out.push((tag, rows.iter().map(PlanRow::read).collect()));
    }
    // The state counts `stats_queues` and `Admin::state_counts` add, with the first queue.
    let queue: Option<String> =
        sqlx::query_scalar("SELECT CAST(MIN(queue_name) AS CHAR) FROM job_queue")
            .fetch_one(&mut *conn)
            .await?;
    let queue = queue.unwrap_or_else(|| "default".to_owned());
    out.extend(states::states_explain(conn, &queue).await?);
    Ok(out)
}

#[cfg(feature = "__internal-store")]
enum Bind {
    I(i64),
    U(u64),
    S(&'static str),
}
