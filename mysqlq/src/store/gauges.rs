//! The queue gauges behind `/metrics` (`mysqlq_queue_*`): per queue, jobs ready, scheduled,
//! running and failed, and the age of the oldest ready job. Run by the leader at an interval
//! (`worker/maintenance.rs`), never a full scan: the queue names come from a loose index scan
//! of `idx_job_claim` (one index dive per queue), then one statement per queue reads only the
//! `pending`, `processing` and `failed` entries of that queue in `idx_job_claim`
//! (`queue_name, status, priority, available_at, id`: covering, so no row is read). Finished
//! rows, however many, are never touched.

use std::time::Duration;

use sqlx::{MySqlConnection, Row};

use super::admin::non_negative;
use crate::Error;
use crate::metrics::QueueGauges;

/// Most queues reported; the rest (by name) are left out of the gauges.
const MAX_GAUGE_QUEUES: u32 = 1000;

/// Every queue that has a row, by name: a loose index scan of `idx_job_claim`
/// ("Using index for group-by"), one dive per distinct queue.
const GAUGE_QUEUES_SQL: &str = "/* mysqlq:queue_gauges_names */ \
    SELECT CAST(t.q AS CHAR) AS queue_name \
    FROM (SELECT DISTINCT queue_name AS q FROM job_queue ORDER BY queue_name LIMIT ?) t";

/// One queue's unfinished jobs and failed jobs, by state: three ranges of `idx_job_claim`, read
/// from the index alone.
const GAUGE_QUEUE_SQL: &str = "/* mysqlq:queue_gauges */ \
    SELECT CAST(status AS CHAR) AS status, CAST(COUNT(*) AS SIGNED) AS n, \
      CAST(IFNULL(SUM(available_at <= UTC_TIMESTAMP(6)), 0) AS SIGNED) AS due, \
      TIMESTAMPDIFF(MICROSECOND, MIN(IF(available_at <= UTC_TIMESTAMP(6), available_at, NULL)), \
        UTC_TIMESTAMP(6)) AS oldest_us \
    FROM job_queue \
    WHERE queue_name = ? AND status IN ('waiting', 'pending', 'processing', 'failed') \
    GROUP BY status";

/// `queue_gauges`: the gauges of every queue that has a row (at most [`MAX_GAUGE_QUEUES`]),
/// by queue name.
pub async fn queue_gauges(conn: &mut MySqlConnection) -> Result<Vec<QueueGauges>, Error> {
    let names: Vec<String> = sqlx::query_scalar(GAUGE_QUEUES_SQL)
        .bind(MAX_GAUGE_QUEUES)
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Vec::with_capacity(names.len());
    for queue in names {
        let rows = sqlx::query(GAUGE_QUEUE_SQL)
            .bind(&queue)
            .fetch_all(&mut *conn)
            .await?;
        let mut g = QueueGauges {
            queue,
            ..QueueGauges::default()
        };
        for r in rows {
            let n = non_negative(r.try_get("n")?);
            match r.try_get::<String, _>("status")?.as_str() {
                "pending" => {
                    let due = non_negative(r.try_get("due")?);
                    g.ready = due;
                    g.scheduled = n.saturating_sub(due);
                    let us: Option<i64> = r.try_get("oldest_us")?;
                    g.oldest_ready_age = us.map(|us| Duration::from_micros(non_negative(us)));
                }
                "processing" => g.running = n,
                "waiting" => g.waiting = n,
                _ => g.failed = n,
            }
        }
        g.rate_limited =
            super::limits::queue_rate_limited(conn, &g.queue, g.ready, g.running).await?;
        out.push(g);
    }
    Ok(out)
}

/// `workflow_gauges`: workflows and batches by (kind, state), from `idx_workflow_state` alone
/// (its cost grows with the finished workflows kept, which the pruner bounds).
pub async fn workflow_gauges(
    conn: &mut MySqlConnection,
) -> Result<Vec<(String, String, u64)>, Error> {
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "/* mysqlq:workflow_gauges */ SELECT CAST(kind AS CHAR), CAST(state AS CHAR), \
         CAST(COUNT(*) AS SIGNED) FROM mysqlq_workflow GROUP BY state, kind",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(k, s, n)| (k, s, non_negative(n)))
        .collect())
}

/// `EXPLAIN`s both gauge statements with the binds they run with (`queue` for the per-queue
/// one). Returns `(statement tag, plan)` pairs.
#[cfg(feature = "__internal-store")]
pub async fn gauges_explain(
    conn: &mut MySqlConnection,
    queue: &str,
) -> Result<Vec<(&'static str, Vec<super::admin::PlanRow>)>, Error> {
    use sqlx::AssertSqlSafe;
    let names = sqlx::query(AssertSqlSafe(format!("EXPLAIN {GAUGE_QUEUES_SQL}")))
        .bind(MAX_GAUGE_QUEUES)
        .fetch_all(&mut *conn)
        .await?;
    let one = sqlx::query(AssertSqlSafe(format!("EXPLAIN {GAUGE_QUEUE_SQL}")))
        .bind(queue)
        .fetch_all(&mut *conn)
        .await?;
    let read =
        |rows: Vec<sqlx::mysql::MySqlRow>| rows.iter().map(super::admin::PlanRow::read).collect();
    Ok(vec![
        ("queue_gauges_names", read(names)),
        ("queue_gauges", read(one)),
    ])
}
