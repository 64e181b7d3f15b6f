//! Pruning finished workflows whole: their jobs (which the job pruner leaves alone), attempt
//! history, steps, edges and gates, once the workflow is older than the jobs' retention.

use std::time::Duration;

use sqlx::{AssertSqlSafe, Connection as _, MySqlConnection};

use crate::Error;
use crate::store::sql::{micros, placeholders};

/// Workflows deleted per transaction.
const PER_TRANSACTION: usize = 20;

/// `wf_prune`: deletes up to `limit` workflows that finished `completed` more than `completed`
/// ago, or `failed` / `cancelled` more than `failed` ago, oldest first, each with every row it
/// owns; the workflow's row goes last, in the same transaction. Returns (workflows, jobs)
/// deleted.
pub async fn wf_prune(
    conn: &mut MySqlConnection,
    completed: Duration,
    failed: Duration,
    limit: u32,
) -> Result<(u64, u64), Error> {
    let ids: Vec<u64> = sqlx::query_scalar(
        "/* mysqlq:wf_prune_find */ SELECT id FROM mysqlq_workflow \
         WHERE (state = 'completed' AND finished_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND) \
            OR (state IN ('failed', 'cancelled') AND finished_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND) \
         ORDER BY finished_at LIMIT ?",
    )
    .bind(micros(completed))
    .bind(micros(failed))
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    let (mut workflows, mut jobs) = (0, 0);
    for chunk in ids.chunks(PER_TRANSACTION) {
        let list = placeholders(chunk.len());
        // READ COMMITTED: no gap locks (see `job_prune`).
        let mut tx = conn
            .begin_with("/* mysqlq:wf_prune */ SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION")
            .await?;
        // Locked first and checked again: a step revived meanwhile set its workflow running.
        // The pruner never waits for a lock (an operator's retry locks a step's row, then its
        // workflow's: waiting here for either would close a cycle): a workflow or a job another
        // transaction holds is left for the next pass.
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:wf_prune_lock */ SELECT id FROM mysqlq_workflow WHERE id IN ({list}) \
             AND state <> 'running' FOR UPDATE SKIP LOCKED"
        ));
        let mut q = sqlx::query_scalar::<_, u64>(sql);
        for id in chunk {
            q = q.bind(id);
        }
        let locked = q.fetch_all(&mut *tx).await?;
        let locked = with_all_jobs_locked(&mut tx, locked).await?;
        if locked.is_empty() {
            continue;
        }
        let list = placeholders(locked.len());
        let statements = [
            "/* mysqlq:wf_prune */ DELETE a FROM mysqlq_job_attempt a JOIN job_queue j ON j.id = a.job_id \
             WHERE j.workflow_id IN ({list})",
            "/* mysqlq:wf_prune */ DELETE e FROM mysqlq_wf_edge e JOIN mysqlq_wf_step s ON s.job_id = e.dependent_id \
             WHERE s.workflow_id IN ({list})",
            "/* mysqlq:wf_prune */ DELETE g FROM mysqlq_wf_gate g JOIN mysqlq_wf_step s ON s.job_id = g.step_id \
             WHERE s.workflow_id IN ({list})",
            "/* mysqlq:wf_prune */ DELETE FROM mysqlq_wf_step WHERE workflow_id IN ({list})",
            "/* mysqlq:wf_prune */ DELETE FROM job_queue WHERE workflow_id IN ({list})",
            "/* mysqlq:wf_prune */ DELETE FROM mysqlq_workflow WHERE id IN ({list})",
        ];
        for (n, sql) in statements.iter().enumerate() {
            let mut q = sqlx::query(AssertSqlSafe(sql.replace("{list}", &list)));
            for id in &locked {
                q = q.bind(id);
            }
            let done = q.execute(&mut *tx).await?.rows_affected();
            match n {
                4 => jobs += done,
                5 => workflows += done,
                _ => {}
            }
        }
        tx.commit().await?;
    }
    Ok((workflows, jobs))
}

/// The workflows among `ids` whose jobs this transaction could lock, every one of them
/// (`SKIP LOCKED`, compared with the latest committed count).
async fn with_all_jobs_locked(
    conn: &mut MySqlConnection,
    ids: Vec<u64>,
) -> Result<Vec<u64>, Error> {
    if ids.is_empty() {
        return Ok(ids);
    }
    let list = placeholders(ids.len());
    let mut all = sqlx::query_as::<_, (u64, i64)>(AssertSqlSafe(format!(
        "/* mysqlq:wf_prune_lock */ SELECT workflow_id, COUNT(*) FROM job_queue \
         WHERE workflow_id IN ({list}) GROUP BY workflow_id"
    )));
    let mut locked = sqlx::query_as::<_, (u64, u64)>(AssertSqlSafe(format!(
        "/* mysqlq:wf_prune_lock */ SELECT workflow_id, id FROM job_queue \
         WHERE workflow_id IN ({list}) FOR UPDATE SKIP LOCKED"
    )));
    for id in &ids {
        all = all.bind(id);
        locked = locked.bind(id);
    }
    let all = all.fetch_all(&mut *conn).await?;
    let locked = locked.fetch_all(&mut *conn).await?;
    Ok(ids
        .into_iter()
        .filter(|w| {
            let want = all.iter().find(|(id, _)| id == w).map_or(0, |(_, n)| *n);
            let got = locked.iter().filter(|(id, _)| id == w).count();
            i64::try_from(got).is_ok_and(|got| got == want)
        })
        .collect())
}
