//! What the workers page reads: the workers' rows, the leader lease, and the running jobs.
//!
//! | statement | reads |
//! |---|---|
//! | `workers_live` (W1) | `mysqlq_worker` rows seen within a day, a range of `idx_worker_seen` (the leader prunes rows silent for a day) |
//! | `workers_leader` (W2) | the `maintenance` row of `mysqlq_leader`, by primary key |
//! | `workers_running` (W3) | the `processing` entries of `idx_job_recover`, at most [`RUNNING_READ`] rows |

use sqlx::{MySqlConnection, Row};

use crate::state::Timestamp;
use crate::{Error, JobId};

/// Most running jobs [`workers_running`] reads: one more than the page lists, so it knows
/// when there are more.
pub const RUNNING_READ: u32 = 5001;

/// Most worker rows [`workers_live`] reads.
const MAX_WORKERS: u32 = 1000;

/// A worker's row as the workers page reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerLiveRow {
    /// `worker_id`.
    pub worker_id: String,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Queues, comma-separated.
    pub queues: String,
    /// Slots.
    pub concurrency: u32,
    /// Jobs running at its last report.
    pub running: u32,
    /// When it started.
    pub started_at: Timestamp,
    /// Its last report (statistics flush).
    pub last_seen_at: Timestamp,
    /// Microseconds since its last report, by the database's clock.
    pub last_seen_age_us: u64,
    /// When it stopped cleanly.
    pub stopped_at: Option<Timestamp>,
    /// `config`, the JSON of its settings (`None` for a worker older than schema 10).
    pub config: Option<String>,
    /// The database's clock when read.
    pub now: Timestamp,
}

const LIVE_SQL: &str = "/* mysqlq:workers_live */ \
    SELECT CAST(worker_id AS CHAR) AS worker_id, CAST(host AS CHAR) AS host, pid, \
      CAST(queues AS CHAR) AS queues, concurrency, running, started_at, last_seen_at, stopped_at, \
      CAST(config AS CHAR) AS config, \
      TIMESTAMPDIFF(MICROSECOND, last_seen_at, UTC_TIMESTAMP(6)) AS seen_us, \
      UTC_TIMESTAMP(6) AS now \
    FROM mysqlq_worker FORCE INDEX (idx_worker_seen) \
    WHERE last_seen_at > UTC_TIMESTAMP(6) - INTERVAL 1 DAY \
      AND (stopped_at IS NULL OR last_seen_at > UTC_TIMESTAMP(6) - INTERVAL 1 HOUR) \
    ORDER BY last_seen_at DESC LIMIT ?";

/// `workers_live` (W1): the workers not stopped, or stopped within the last hour, newest
/// report first; at most 1,000. A worker silent for a day is left out (the leader prunes its
/// row at that age).
pub async fn workers_live(conn: &mut MySqlConnection) -> Result<Vec<WorkerLiveRow>, Error> {
    let rows = sqlx::query(LIVE_SQL)
        .bind(MAX_WORKERS)
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(WorkerLiveRow {
            worker_id: r.try_get("worker_id")?,
            host: r.try_get("host")?,
            pid: r.try_get("pid")?,
            queues: r.try_get("queues")?,
            concurrency: r.try_get("concurrency")?,
            running: r.try_get("running")?,
            started_at: r.try_get("started_at")?,
            last_seen_at: r.try_get("last_seen_at")?,
            last_seen_age_us: u64::try_from(r.try_get::<Option<i64>, _>("seen_us")?.unwrap_or(0))
                .unwrap_or(0),
            stopped_at: r.try_get("stopped_at")?,
            config: r.try_get("config")?,
            now: r.try_get("now")?,
        });
    }
    Ok(out)
}

const LEADER_SQL: &str = "/* mysqlq:workers_leader */ \
    SELECT CAST(leader_id AS CHAR) AS leader_id FROM mysqlq_leader \
    WHERE name = 'maintenance' AND expires_at > UTC_TIMESTAMP(6)";

/// `workers_leader` (W2): the identity holding the maintenance lease (`worker_id#random`),
/// `None` when the lease is free or expired.
pub async fn workers_leader(conn: &mut MySqlConnection) -> Result<Option<String>, Error> {
    let id: Option<Option<String>> = sqlx::query_scalar(LEADER_SQL)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(id.flatten())
}

/// A running (`processing`) job as the workers page lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningRow {
    /// The job.
    pub id: JobId,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: Option<String>,
    /// Who holds it: a worker's id, or `redis-relay:<instance>`.
    pub locked_by: Option<String>,
    /// When the current attempt was claimed (`None` for a row claimed before schema 10).
    pub claimed_at: Option<Timestamp>,
    /// Microseconds since the claim, by the database's clock.
    pub running_us: Option<u64>,
    /// When its lease ends.
    pub lease_expires_at: Option<Timestamp>,
    /// Microseconds until the lease ends (negative: expired; the reaper takes it back).
    pub lease_left_us: Option<i64>,
    /// The attempt running (attempts counted so far).
    pub attempts: u32,
    /// Its most attempts.
    pub max_attempts: u32,
}

const RUNNING_SQL: &str = "/* mysqlq:workers_running */ \
    SELECT id, CAST(queue_name AS CHAR) AS queue_name, CAST(kind AS CHAR) AS kind, \
      CAST(locked_by AS CHAR) AS locked_by, claimed_at, lease_expires_at, attempts, max_attempts, \
      TIMESTAMPDIFF(MICROSECOND, claimed_at, UTC_TIMESTAMP(6)) AS running_us, \
      TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_expires_at) AS lease_left_us \
    FROM job_queue FORCE INDEX (idx_job_recover) WHERE status = 'processing' LIMIT ?";

/// `workers_running` (W3): the `processing` jobs, in lease order, at most [`RUNNING_READ`].
pub async fn workers_running(conn: &mut MySqlConnection) -> Result<Vec<RunningRow>, Error> {
    let rows = sqlx::query(RUNNING_SQL)
        .bind(RUNNING_READ)
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(RunningRow {
            id: JobId(r.try_get("id")?),
            queue: r.try_get("queue_name")?,
            kind: r.try_get("kind")?,
            locked_by: r.try_get("locked_by")?,
            claimed_at: r.try_get("claimed_at")?,
            running_us: r
                .try_get::<Option<i64>, _>("running_us")?
                .map(|us| u64::try_from(us).unwrap_or(0)),
            lease_expires_at: r.try_get("lease_expires_at")?,
            lease_left_us: r.try_get("lease_left_us")?,
            attempts: r.try_get("attempts")?,
            max_attempts: r.try_get("max_attempts")?,
        });
    }
    Ok(out)
}

/// `EXPLAIN`s W1–W3 with the binds they run with. Returns `(tag, plan)` pairs.
#[cfg(feature = "__internal-store")]
pub async fn workers_page_explain(
    conn: &mut MySqlConnection,
) -> Result<Vec<(&'static str, Vec<super::admin::PlanRow>)>, Error> {
    let mut out = Vec::new();
    let explain = |sql: &str| sqlx::AssertSqlSafe(format!("EXPLAIN {sql}"));
    let rows = sqlx::query(explain(LIVE_SQL))
        .bind(MAX_WORKERS)
        .fetch_all(&mut *conn)
        .await?;
    out.push(("workers_live", rows));
    let rows = sqlx::query(explain(LEADER_SQL))
        .fetch_all(&mut *conn)
        .await?;
    out.push(("workers_leader", rows));
    let rows = sqlx::query(explain(RUNNING_SQL))
        .bind(RUNNING_READ)
        .fetch_all(&mut *conn)
        .await?;
    out.push(("workers_running", rows));
    Ok(out
        .into_iter()
        .map(|(tag, rows)| (tag, rows.iter().map(super::admin::PlanRow::read).collect()))
        .collect())
}
