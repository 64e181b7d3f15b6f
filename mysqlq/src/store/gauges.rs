//! The queue gauges behind `/metrics`: per queue, jobs ready, scheduled, running and failed,
//! the age of the oldest ready job (`mysqlq_queue_*`), and the jobs by operator state
//! (`mysqlq_jobs{queue,state}`). Run by the leader at an interval (`worker/maintenance.rs`),
//! never a full scan: the state counts of `states.rs` (the queue names from a loose index scan
//! of `idx_job_claim`, every unfinished job from one range of `idx_job_recover`, index only),
//! then per queue its `failed` entries of `idx_job_claim`. Finished rows, however many, are
//! never read for the other states.

use std::time::Duration;

use sqlx::MySqlConnection;

use super::admin::non_negative;
use super::states::{Counting, queue_counts};
use crate::Error;
use crate::metrics::QueueGauges;
use crate::state::JobState;

/// Most queues reported; the rest (by name) are left out of the gauges.
const MAX_GAUGE_QUEUES: u32 = 1000;

/// `queue_gauges`: the gauges of every queue that has a row or a `mysqlq_queue` row (at most
/// [`MAX_GAUGE_QUEUES`]), by queue name. The `mysqlq_queue_*` figures keep their meaning
/// (`ready`: every due pending job; `scheduled`: every pending job due later; `running`: every
/// `processing` job; `failed`: exact).
pub async fn queue_gauges(conn: &mut MySqlConnection) -> Result<Vec<QueueGauges>, Error> {
    let counted = queue_counts(
        conn,
        Counting {
            finished: &[JobState::Failed],
            cap: None,
            max_queues: MAX_GAUGE_QUEUES,
        },
    )
    .await?;
    Ok(counted
        .iter()
        .map(|c| QueueGauges {
            queue: c.queue.clone(),
            waiting: c.waiting,
            ready: c.due,
            scheduled: c.pending.saturating_sub(c.due),
            running: c.processing,
            rate_limited: c.limited,
            failed: c.failed.n,
            oldest_ready_age: c
                .oldest_us
                .map(|us| Duration::from_micros(non_negative(us))),
            states: c.states(),
        })
        .collect())
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

/// `EXPLAIN`s the statements [`queue_gauges`] runs, with the binds they run with (`queue` for
/// the per-queue ones). Returns `(statement tag, plan)` pairs.
#[cfg(feature = "__internal-store")]
pub async fn gauges_explain(
    conn: &mut MySqlConnection,
    queue: &str,
) -> Result<Vec<(&'static str, Vec<super::admin::PlanRow>)>, Error> {
    let mut plans = super::states::states_explain(conn, queue).await?;
    plans.retain(|(tag, _)| {
        matches!(
            *tag,
            "state_queues"
                | "state_counts"
                | "state_relayed"
                | "state_held"
                | "state_finished_exact"
                | "queue_rate_limited"
        )
    });
    Ok(plans)
}
