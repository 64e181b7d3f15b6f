//! Operator statements: stats, failed jobs, purge, doctor.
//!
//! Read by `mysqlq-cli` (and any dashboard). Every statement reaches `job_queue` through an
//! index, never by a full scan:
//!
//! | statement | index |
//! |---|---|
//! | [`stats_queues`] | `idx_job_claim`: a loose scan for the queue names, then `(queue_name, status)` refs for `pending`, `processing`, `failed` |
//! | [`stats_leases`] | `idx_job_recover` (`status = 'processing'`) |
//! | [`stats_table`] | `idx_job_finished` (`MIN(finished_at)` per status: no rows read) |
//! | [`job_failed_list`], [`job_failed_page`], [`job_failed_count`] | `idx_job_finished` (`status = 'failed'`, keyset on `(finished_at, id)`) |
//!
//! [`stats_explain`] EXPLAINs the stats statements with the same text they run with, so a test
//! (and `doctor`) can check the plans. The per-minute tables (`mysqlq_stats_minute`,
//! `mysqlq_kind_minute`, `mysqlq_worker`) are written by workers; these functions only read them.

use std::time::Duration;

use serde::Serialize;
use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use super::{bind_ids, padded_len, placeholders};
use crate::store::server::{ServerFlavor, ServerInfo};
use crate::{Error, JobId};

/// Most ids one bulk retry/discard statement touches.
pub const BULK_CHUNK: usize = 500;

fn non_negative(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// stats

/// Per-queue statistics: the queue names come from a loose index scan of `idx_job_claim` plus the
/// paused-queue table, and each `(queue_name, status)` pair is a ref on `idx_job_claim`, so
/// `completed` rows are never read. `ready` and `oldest_ready_age_seconds` are the article's
/// monitoring query (`WHERE status = 'pending' AND available_at <= now GROUP BY queue_name`).
const STATS_QUEUES_SQL: &str = "/* mysqlq:stats_queues */ \
    SELECT CAST(q.queue_name AS CHAR) AS queue_name, \
      CAST(IFNULL(SUM(j.status = 'pending' AND j.available_at <= UTC_TIMESTAMP(6)), 0) AS SIGNED) AS ready, \
      TIMESTAMPDIFF(SECOND, MIN(IF(j.status = 'pending' AND j.available_at <= UTC_TIMESTAMP(6), j.available_at, NULL)), UTC_TIMESTAMP(6)) AS oldest_s, \
      TIMESTAMPDIFF(MICROSECOND, MIN(IF(j.status = 'pending' AND j.available_at <= UTC_TIMESTAMP(6), j.available_at, NULL)), UTC_TIMESTAMP(6)) AS oldest_us, \
      CAST(IFNULL(SUM(j.status = 'pending' AND j.available_at > UTC_TIMESTAMP(6)), 0) AS SIGNED) AS scheduled, \
      CAST(IFNULL(SUM(j.status = 'processing'), 0) AS SIGNED) AS processing, \
      CAST(IFNULL(SUM(j.status = 'processing' AND j.lease_expires_at < UTC_TIMESTAMP(6)), 0) AS SIGNED) AS expired, \
      CAST(IFNULL(SUM(j.status = 'failed'), 0) AS SIGNED) AS failed, \
      CAST(IFNULL(MAX(p.paused), 0) AS SIGNED) AS paused \
    FROM (SELECT DISTINCT queue_name FROM job_queue UNION SELECT queue_name FROM mysqlq_queue) q \
    CROSS JOIN (SELECT 'pending' AS s UNION ALL SELECT 'processing' UNION ALL SELECT 'failed') st \
    LEFT JOIN job_queue j ON j.queue_name = q.queue_name AND j.status = st.s \
    LEFT JOIN mysqlq_queue p ON p.queue_name = q.queue_name \
    GROUP BY q.queue_name ORDER BY q.queue_name";

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
      DATE_FORMAT(w.started_at, '%Y-%m-%d %H:%i:%s.%f') AS started_at, \
      DATE_FORMAT(w.last_seen_at, '%Y-%m-%d %H:%i:%s.%f') AS last_seen_at, \
      TIMESTAMPDIFF(SECOND, w.last_seen_at, UTC_TIMESTAMP(6)) AS last_seen_age_s, \
      DATE_FORMAT(w.stopped_at, '%Y-%m-%d %H:%i:%s.%f') AS stopped_at, \
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
      DATE_FORMAT(MIN(finished_at), '%Y-%m-%d %H:%i:%s.%f') AS oldest \
    FROM job_queue WHERE status = ?";

/// One queue's row of `stats`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueStats {
    /// `queue_name`.
    pub queue: String,
    /// Pending jobs that are runnable now (`available_at <= now`).
    pub ready: u64,
    /// Age of the oldest ready job in whole seconds, as the article's query computes it.
    pub oldest_ready_age_seconds: Option<i64>,
    /// Age of the oldest ready job in microseconds.
    pub oldest_ready_age_us: Option<i64>,
    /// Pending jobs scheduled for later (delayed, or waiting for a retry).
    pub scheduled: u64,
    /// Jobs being processed.
    pub processing: u64,
    /// Processing jobs whose lease has expired (the reaper will recover them).
    pub expired_leases: u64,
    /// Jobs in `failed`.
    pub failed: u64,
    /// The queue's pause flag (`mysqlq_queue`).
    pub paused: bool,
}

/// `stats_queues`: ready count, oldest ready age, scheduled, processing, expired leases, failed
/// and the pause flag of every queue that has unfinished or failed jobs, or a pause row.
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
        };
        out.push(q);
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
    /// Start time (UTC).
    pub started_at: String,
    /// Last report (UTC).
    pub last_seen_at: String,
    /// Seconds since the last report.
    pub last_seen_age_seconds: i64,
    /// Clean stop time (UTC), if it stopped.
    pub stopped_at: Option<String>,
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
    /// `finished_at` of the oldest `completed` row (UTC).
    pub oldest_completed_finished_at: Option<String>,
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

/// One row of an `EXPLAIN`, with the access type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanRow {
    /// `table` (an alias, `<derivedN>`, or none).
    pub table: Option<String>,
    /// `type`: `ALL` is a full scan.
    pub access: Option<String>,
    /// `key`: the index used.
    pub key: Option<String>,
    /// `Extra`.
    pub extra: Option<String>,
}

/// `EXPLAIN`s every statement `stats` and the failed-job commands run against `job_queue`,
/// with the text and binds they run with. Returns `(statement tag, plan)` pairs.
pub async fn stats_explain(
    conn: &mut MySqlConnection,
) -> Result<Vec<(&'static str, Vec<PlanRow>)>, Error> {
    let secs = 60i64;
    let mut out = Vec::new();
    let plans: [(&'static str, &'static str, Vec<Bind>); 10] = [
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
                Bind::U(500),
            ],
        ),
        (
            "job_failed_page_null",
            FAILED_PAGE_NULL_SQL,
            vec![Bind::U(0), Bind::U(500)],
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
        let mut plan = Vec::new();
        for r in rows {
            plan.push(PlanRow {
                table: r.try_get::<Option<String>, _>("table").unwrap_or_default(),
                access: r.try_get::<Option<String>, _>("type").unwrap_or_default(),
                key: r.try_get::<Option<String>, _>("key").unwrap_or_default(),
                extra: r.try_get::<Option<String>, _>("Extra").unwrap_or_default(),
            });
        }
        out.push((tag, plan));
    }
    Ok(out)
}

enum Bind {
    I(i64),
    U(u64),
    S(&'static str),
}

// ---------------------------------------------------------------------------------------------
// failed jobs

/// Newest failures first, over `idx_job_finished` read backwards.
const FAILED_LIST_SQL: &str = "/* mysqlq:job_failed_list */ \
    SELECT id, CAST(queue_name AS CHAR) AS queue_name, CAST(kind AS CHAR) AS kind, attempts, \
      max_attempts, DATE_FORMAT(finished_at, '%Y-%m-%d %H:%i:%s.%f') AS finished_at, \
      CAST(LEFT(last_error, 200) AS CHAR) AS last_error \
    FROM job_queue WHERE status = 'failed' \
    ORDER BY finished_at DESC, id DESC LIMIT ?";

const FAILED_LIST_QUEUE_SQL: &str = "/* mysqlq:job_failed_list */ \
    SELECT id, CAST(queue_name AS CHAR) AS queue_name, CAST(kind AS CHAR) AS kind, attempts, \
      max_attempts, DATE_FORMAT(finished_at, '%Y-%m-%d %H:%i:%s.%f') AS finished_at, \
      CAST(LEFT(last_error, 200) AS CHAR) AS last_error \
    FROM job_queue WHERE queue_name = ? AND status = 'failed' \
    ORDER BY finished_at DESC, id DESC LIMIT ?";

/// A failed job in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedJob {
    /// `id`.
    pub id: JobId,
    /// `queue_name`.
    pub queue: String,
    /// `kind`.
    pub kind: Option<String>,
    /// Attempts made.
    pub attempts: u32,
    /// `max_attempts`.
    pub max_attempts: u32,
    /// When it failed (UTC); NULL for rows failed by hand-written SQL.
    pub finished_at: Option<String>,
    /// The first 200 characters of `last_error`.
    pub last_error: Option<String>,
}

/// Parameters of [`job_failed_list`].
#[derive(Debug, Clone, Copy)]
pub struct FailedListParams<'a> {
    /// Only this queue.
    pub queue: Option<&'a str>,
    /// Most rows.
    pub limit: u32,
}

/// `job_failed_list`: failed jobs, newest failure first.
pub async fn job_failed_list(
    conn: &mut MySqlConnection,
    p: &FailedListParams<'_>,
) -> Result<Vec<FailedJob>, Error> {
    let rows = match p.queue {
        Some(queue) => {
            crate::enqueue::validate_queue_name(queue)?;
            sqlx::query(FAILED_LIST_QUEUE_SQL)
                .bind(queue)
                .bind(p.limit)
                .fetch_all(&mut *conn)
                .await?
        }
        None => {
            sqlx::query(FAILED_LIST_SQL)
                .bind(p.limit)
                .fetch_all(&mut *conn)
                .await?
        }
    };
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(FailedJob {
            id: JobId(r.try_get("id")?),
            queue: r.try_get("queue_name")?,
            kind: r.try_get("kind")?,
            attempts: r.try_get("attempts")?,
            max_attempts: r.try_get("max_attempts")?,
            finished_at: r.try_get("finished_at")?,
            last_error: r.try_get("last_error")?,
        });
    }
    Ok(out)
}

pub(crate) const JOB_GET_SQL: &str = "/* mysqlq:job_get */ SELECT j.id, \
    CAST(j.queue_name AS CHAR) AS queue_name, CAST(j.kind AS CHAR) AS kind, \
    CAST(j.status AS CHAR) AS status, CAST(j.payload AS CHAR) AS payload, j.priority, j.attempts, \
    j.max_attempts, CAST(j.last_error AS CHAR) AS last_error, \
    CAST(j.dedupe_key AS CHAR) AS dedupe_key, CAST(j.ordering_key AS CHAR) AS ordering_key, \
    CAST(j.concurrency_key AS CHAR) AS concurrency_key, CAST(j.locked_by AS CHAR) AS locked_by, \
    DATE_FORMAT(j.created_at, '%Y-%m-%d %H:%i:%s.%f') AS created_at, \
    DATE_FORMAT(j.first_claimed_at, '%Y-%m-%d %H:%i:%s.%f') AS first_claimed_at, \
    DATE_FORMAT(j.available_at, '%Y-%m-%d %H:%i:%s.%f') AS available_at, \
    DATE_FORMAT(j.lease_expires_at, '%Y-%m-%d %H:%i:%s.%f') AS lease_expires_at, \
    DATE_FORMAT(j.finished_at, '%Y-%m-%d %H:%i:%s.%f') AS finished_at, \
    DATE_FORMAT(j.updated_at, '%Y-%m-%d %H:%i:%s.%f') AS updated_at, \
    DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%d %H:%i:%s.%f') AS now \
    FROM job_queue j WHERE j.id = ?";

/// Every column of one job the dashboard shows, with the database's clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobDetail {
    /// `id`.
    pub id: JobId,
    /// `queue_name`.
    pub queue: String,
    /// `kind`.
    pub kind: Option<String>,
    /// `status`.
    pub status: String,
    /// `payload` as JSON text.
    pub payload: String,
    /// `priority`.
    pub priority: i16,
    /// Attempts started.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// `last_error`.
    pub last_error: Option<String>,
    /// `dedupe_key`.
    pub dedupe_key: Option<String>,
    /// `ordering_key`.
    pub ordering_key: Option<String>,
    /// `concurrency_key`.
    pub concurrency_key: Option<String>,
    /// `locked_by`: the worker holding the job.
    pub locked_by: Option<String>,
    /// `created_at` (UTC).
    pub created_at: String,
    /// `first_claimed_at` (UTC).
    pub first_claimed_at: Option<String>,
    /// `available_at` (UTC).
    pub available_at: String,
    /// `lease_expires_at` (UTC).
    pub lease_expires_at: Option<String>,
    /// `finished_at` (UTC).
    pub finished_at: Option<String>,
    /// `updated_at` (UTC).
    pub updated_at: String,
    /// `UTC_TIMESTAMP(6)` when read.
    pub now: String,
}

/// `job_get`: one job by id, any state (`failed show`, the dashboard's job page).
pub async fn job_get(conn: &mut MySqlConnection, id: JobId) -> Result<Option<JobDetail>, Error> {
    let Some(r) = sqlx::query(JOB_GET_SQL)
        .bind(id.0)
        .fetch_optional(&mut *conn)
        .await?
    else {
        return Ok(None);
    };
    Ok(Some(JobDetail {
        id: JobId(r.try_get("id")?),
        queue: r.try_get("queue_name")?,
        kind: r.try_get("kind")?,
        status: r.try_get("status")?,
        payload: r.try_get("payload")?,
        priority: r.try_get("priority")?,
        attempts: r.try_get("attempts")?,
        max_attempts: r.try_get("max_attempts")?,
        last_error: r.try_get("last_error")?,
        dedupe_key: r.try_get("dedupe_key")?,
        ordering_key: r.try_get("ordering_key")?,
        concurrency_key: r.try_get("concurrency_key")?,
        locked_by: r.try_get("locked_by")?,
        created_at: r.try_get("created_at")?,
        first_claimed_at: r.try_get("first_claimed_at")?,
        available_at: r.try_get("available_at")?,
        lease_expires_at: r.try_get("lease_expires_at")?,
        finished_at: r.try_get("finished_at")?,
        updated_at: r.try_get("updated_at")?,
        now: r.try_get("now")?,
    }))
}

/// Number of failed jobs (of one queue), counted on an index.
pub async fn job_failed_count(
    conn: &mut MySqlConnection,
    queue: Option<&str>,
) -> Result<u64, Error> {
    let n: i64 = match queue {
        Some(q) => {
            crate::enqueue::validate_queue_name(q)?;
            sqlx::query_scalar(
                "/* mysqlq:job_failed_count */ SELECT COUNT(*) FROM job_queue \
                 WHERE queue_name = ? AND status = 'failed'",
            )
            .bind(q)
            .fetch_one(&mut *conn)
            .await?
        }
        None => sqlx::query_scalar(
            "/* mysqlq:job_failed_count */ SELECT COUNT(*) FROM job_queue WHERE status = 'failed'",
        )
        .fetch_one(&mut *conn)
        .await?,
    };
    Ok(non_negative(n))
}

/// Failed rows without `finished_at` (failed by hand-written SQL such as the article's recovery
/// statement) come first, keyset by id on `idx_job_finished (status, NULL, id)`.
const FAILED_PAGE_NULL_SQL: &str = "/* mysqlq:job_failed_page */ \
    SELECT id, CAST(queue_name AS CHAR) AS queue_name, NULL AS finished_at FROM job_queue \
    WHERE status = 'failed' AND finished_at IS NULL AND id > ? ORDER BY id LIMIT ?";

/// Then keyset on `(finished_at, id)`, in the order of `idx_job_finished`.
const FAILED_PAGE_SQL: &str = "/* mysqlq:job_failed_page */ \
    SELECT id, CAST(queue_name AS CHAR) AS queue_name, \
      DATE_FORMAT(finished_at, '%Y-%m-%d %H:%i:%s.%f') AS finished_at FROM job_queue \
    WHERE status = 'failed' AND (finished_at > ? OR (finished_at = ? AND id > ?)) \
    ORDER BY finished_at, id LIMIT ?";

const FIRST_FINISHED: &str = "1000-01-01 00:00:00.000000";

/// Where [`job_failed_page`] goes on from. Start with [`FailedCursor::default`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailedCursor {
    /// `None` while walking the rows without `finished_at`.
    finished_at: Option<String>,
    id: u64,
    done: bool,
}

impl FailedCursor {
    /// `true` once every failed job was returned.
    pub fn is_done(&self) -> bool {
        self.done
    }
}

/// Parameters of [`job_failed_page`].
#[derive(Debug, Clone, Copy)]
pub struct FailedPageParams<'a> {
    /// Only this queue (filtered while walking `idx_job_finished`).
    pub queue: Option<&'a str>,
    /// Most ids per page.
    pub limit: u32,
}

/// `job_failed_page`: the next page of failed job ids after `cursor` (keyset on
/// `idx_job_finished`, never OFFSET), advancing the cursor. Jobs that leave `failed` meanwhile
/// do not disturb the walk. A page may be shorter than `limit` (or empty) when filtered by
/// queue; stop when [`FailedCursor::is_done`].
pub async fn job_failed_page(
    conn: &mut MySqlConnection,
    p: &FailedPageParams<'_>,
    cursor: &mut FailedCursor,
) -> Result<Vec<JobId>, Error> {
    if let Some(q) = p.queue {
        crate::enqueue::validate_queue_name(q)?;
    }
    if cursor.done {
        return Ok(Vec::new());
    }
    let limit = p.limit.max(1);
    let rows = match &cursor.finished_at {
        None => {
            sqlx::query(FAILED_PAGE_NULL_SQL)
                .bind(cursor.id)
                .bind(limit)
                .fetch_all(&mut *conn)
                .await?
        }
        Some(at) => {
            sqlx::query(FAILED_PAGE_SQL)
                .bind(at.as_str())
                .bind(at.as_str())
                .bind(cursor.id)
                .bind(limit)
                .fetch_all(&mut *conn)
                .await?
        }
    };
    let full = rows.len() >= usize::try_from(limit).unwrap_or(usize::MAX);
    let mut ids = Vec::with_capacity(rows.len());
    for r in &rows {
        let id: u64 = r.try_get("id")?;
        let queue: String = r.try_get("queue_name")?;
        cursor.id = id;
        if let Some(at) = r.try_get::<Option<String>, _>("finished_at")? {
            cursor.finished_at = Some(at);
        }
        if p.queue.is_none_or(|q| q == queue) {
            ids.push(JobId(id));
        }
    }
    if !full {
        if cursor.finished_at.is_none() {
            // The NULL section is exhausted: walk the dated rows from the start.
            cursor.finished_at = Some(FIRST_FINISHED.to_owned());
            cursor.id = 0;
        } else {
            cursor.done = true;
        }
    }
    Ok(ids)
}

/// A retry refused because another job now holds the dedupe key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DedupeConflict {
    /// The failed job that stays failed.
    pub id: JobId,
    /// Its dedupe key.
    pub dedupe_key: Option<String>,
    /// The pending or processing job holding the key, if it could be found.
    pub holder: Option<JobId>,
}

/// What [`job_retry_failed`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RetryReport {
    /// Jobs back in `pending`.
    pub retried: Vec<JobId>,
    /// Jobs left in `failed` because their dedupe key is taken.
    pub conflicts: Vec<DedupeConflict>,
    /// Ids that were not failed jobs (unknown, or in another state).
    pub skipped: Vec<JobId>,
}

/// Which of `ids` are failed jobs now.
async fn failed_among(conn: &mut MySqlConnection, ids: &[JobId]) -> Result<Vec<JobId>, Error> {
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_failed_check */ SELECT id FROM job_queue WHERE id IN ({}) AND status = 'failed'",
        placeholders(padded_len(ids.len()))
    ));
    let found: Vec<u64> = bind_ids(sqlx::query(sql), ids)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| r.try_get("id"))
        .collect::<Result<_, _>>()?;
    Ok(ids
        .iter()
        .copied()
        .filter(|id| found.contains(&id.0))
        .collect())
}

fn retry_sql(n: usize) -> AssertSqlSafe<String> {
    AssertSqlSafe(format!(
        "/* mysqlq:job_retry_failed */ UPDATE job_queue SET status = 'pending', attempts = 0, \
         available_at = UTC_TIMESTAMP(6), finished_at = NULL, locked_by = NULL, \
         claim_token = NULL, lease_expires_at = NULL WHERE id IN ({}) AND status = 'failed'",
        placeholders(padded_len(n))
    ))
}

/// `job_retry_failed`: moves failed jobs back to `pending` (attempts reset to 0, runnable now,
/// `finished_at` cleared; `last_error` kept until the next attempt), up to [`BULK_CHUNK`] ids per
/// statement. A job whose dedupe key another job now holds (error 1062) stays failed and is
/// reported in [`RetryReport::conflicts`]; the others go ahead.
pub async fn job_retry_failed(
    conn: &mut MySqlConnection,
    ids: &[JobId],
) -> Result<RetryReport, Error> {
    let mut report = RetryReport::default();
    for chunk in ids.chunks(BULK_CHUNK) {
        let failed = failed_among(conn, chunk).await?;
        report
            .skipped
            .extend(chunk.iter().filter(|id| !failed.contains(id)));
        if failed.is_empty() {
            continue;
        }
        match bind_ids(sqlx::query(retry_sql(failed.len())), &failed)
            .execute(&mut *conn)
            .await
        {
            Ok(_) => report.retried.extend(&failed),
            Err(e) if super::is_duplicate_key(&e) => {
                // The statement was rolled back whole: redo it one job at a time.
                for &id in &failed {
                    match bind_ids(sqlx::query(retry_sql(1)), &[id])
                        .execute(&mut *conn)
                        .await
                    {
                        Ok(done) if done.rows_affected() == 1 => report.retried.push(id),
                        Ok(_) => report.skipped.push(id),
                        Err(e) if super::is_duplicate_key(&e) => {
                            report.conflicts.push(dedupe_conflict(conn, id).await?);
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(report)
}

async fn dedupe_conflict(conn: &mut MySqlConnection, id: JobId) -> Result<DedupeConflict, Error> {
    let key: Option<String> = sqlx::query_scalar(
        "/* mysqlq:job_dedupe_key */ SELECT CAST(dedupe_key AS CHAR) FROM job_queue WHERE id = ?",
    )
    .bind(id.0)
    .fetch_optional(&mut *conn)
    .await?
    .flatten();
    let holder = match &key {
        Some(k) => super::job_dedupe_holder(conn, k).await?,
        None => None,
    };
    Ok(DedupeConflict {
        id,
        dedupe_key: key,
        holder,
    })
}

/// What [`job_discard_failed`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DiscardReport {
    /// Jobs deleted.
    pub discarded: Vec<JobId>,
    /// Ids that were not failed jobs (unknown, or in another state).
    pub skipped: Vec<JobId>,
}

/// `job_discard_failed`: deletes failed jobs, up to [`BULK_CHUNK`] ids per statement. Jobs in
/// any other state are left alone and reported as skipped.
pub async fn job_discard_failed(
    conn: &mut MySqlConnection,
    ids: &[JobId],
) -> Result<DiscardReport, Error> {
    let mut report = DiscardReport::default();
    for chunk in ids.chunks(BULK_CHUNK) {
        let failed = failed_among(conn, chunk).await?;
        report
            .skipped
            .extend(chunk.iter().filter(|id| !failed.contains(id)));
        if failed.is_empty() {
            continue;
        }
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:job_discard_failed */ DELETE FROM job_queue WHERE id IN ({}) AND status = 'failed'",
            placeholders(padded_len(failed.len()))
        ));
        bind_ids(sqlx::query(sql), &failed)
            .execute(&mut *conn)
            .await?;
        report.discarded.extend(&failed);
    }
    Ok(report)
}

// ---------------------------------------------------------------------------------------------
// queues

/// `queue_has_jobs`: `true` when any job row (any state) names `queue` (a ref on `idx_job_claim`).
pub async fn queue_has_jobs(conn: &mut MySqlConnection, queue: &str) -> Result<bool, Error> {
    crate::enqueue::validate_queue_name(queue)?;
    let found: Option<i64> = sqlx::query_scalar(
        "/* mysqlq:queue_has_jobs */ SELECT 1 FROM job_queue WHERE queue_name = ? LIMIT 1",
    )
    .bind(queue)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(found.is_some())
}

// ---------------------------------------------------------------------------------------------
// doctor

/// Server settings that decide whether SKIP LOCKED claims are safe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerSettings {
    /// `@@global.log_bin`.
    pub log_bin: bool,
    /// `@@session.binlog_format` of a fresh connection (what mysqlq's sessions get).
    pub binlog_format: String,
    /// `@@global.read_only`.
    pub read_only: bool,
    /// `@@global.super_read_only` (MySQL only).
    pub super_read_only: Option<bool>,
    /// `@@global.innodb_read_only`.
    pub innodb_read_only: bool,
    /// The session's isolation level (`transaction_isolation` or `tx_isolation`).
    pub isolation: String,
    /// `@@global.time_zone`: what a new session (a DBA's client) gets. sqlx sessions, mysqlq's
    /// included, set `+00:00` themselves.
    pub time_zone: String,
    /// `@@global.system_time_zone`.
    pub system_time_zone: String,
    /// Offset of the global time zone from UTC now, in seconds: 0 when `NOW()` in a new session
    /// equals `UTC_TIMESTAMP()`. `None` when the zone is named and the time zone tables are not
    /// loaded.
    pub utc_offset_seconds: Option<i64>,
}

/// `server_settings`: binlog, read-only and time settings of the server (doctor).
pub async fn server_settings(
    conn: &mut MySqlConnection,
    info: &ServerInfo,
) -> Result<ServerSettings, Error> {
    let super_ro = match info.flavor {
        ServerFlavor::MySql => "CAST(@@global.super_read_only AS SIGNED)",
        ServerFlavor::MariaDb => "NULL",
    };
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:server_settings */ SELECT CAST(@@global.log_bin AS SIGNED) AS log_bin, \
           CAST(@@session.binlog_format AS CHAR) AS binlog_format, \
           CAST(@@global.read_only AS SIGNED) AS read_only, {super_ro} AS super_read_only, \
           CAST(@@global.innodb_read_only AS SIGNED) AS innodb_read_only, \
           CAST(@@session.{} AS CHAR) AS isolation, CAST(@@global.time_zone AS CHAR) AS time_zone, \
           CAST(@@global.system_time_zone AS CHAR) AS system_time_zone, \
           TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), \
             CONVERT_TZ(UTC_TIMESTAMP(), '+00:00', @@global.time_zone)) AS utc_offset",
        info.isolation_variable()
    ));
    let r = sqlx::query(sql).fetch_one(&mut *conn).await?;
    Ok(ServerSettings {
        log_bin: r.try_get::<i64, _>("log_bin")? != 0,
        binlog_format: r.try_get("binlog_format")?,
        read_only: r.try_get::<i64, _>("read_only")? != 0,
        super_read_only: r
            .try_get::<Option<i64>, _>("super_read_only")?
            .map(|v| v != 0),
        innodb_read_only: r.try_get::<i64, _>("innodb_read_only")? != 0,
        isolation: r.try_get("isolation")?,
        time_zone: r.try_get("time_zone")?,
        system_time_zone: r.try_get("system_time_zone")?,
        utc_offset_seconds: r.try_get("utc_offset")?,
    })
}

/// `table_indexes`: the index names of `table` in the current database.
pub async fn table_indexes(conn: &mut MySqlConnection, table: &str) -> Result<Vec<String>, Error> {
    let names: Vec<String> = sqlx::query_scalar(
        "/* mysqlq:table_indexes */ SELECT DISTINCT CAST(index_name AS CHAR) FROM information_schema.statistics \
         WHERE table_schema = DATABASE() AND table_name = ? ORDER BY 1",
    )
    .bind(table)
    .fetch_all(&mut *conn)
    .await?;
    Ok(names)
}
