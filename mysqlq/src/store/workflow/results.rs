//! Steps' results (`ctx.record`, `ctx.upstream`) and a batch's counts (`ctx.batch_counts`).

use sqlx::{MySqlConnection, Row as _};

use crate::Error;
use crate::store::guarded::Owned;

/// `wf_record`: stores a step's result while this claim owns the job (`processing` under its
/// token). `false` when the guard failed (lease lost, or the job ended).
pub async fn wf_record(conn: &mut MySqlConnection, job: &Owned, json: &str) -> Result<bool, Error> {
    let done = sqlx::query(
        "/* mysqlq:wf_record */ UPDATE mysqlq_wf_step s JOIN job_queue j ON j.id = s.job_id \
         SET s.result = ?, s.result_bytes = ? \
         WHERE s.job_id = ? AND j.status = 'processing' AND j.claim_token = ?",
    )
    .bind(json)
    .bind(u32::try_from(json.len()).unwrap_or(u32::MAX))
    .bind(job.id.0)
    .bind(&job.token)
    .execute(&mut *conn)
    .await?;
    // The connection reports rows matched (CLIENT_FOUND_ROWS), so an unchanged value counts.
    Ok(done.rows_affected() == 1)
}

/// One step of a name: its ordinal, whether it completed, its recorded result (JSON text).
pub type StepResult = (u32, bool, Option<String>);

/// `wf_results`: the steps named `name` in workflow `workflow` with ordinals above `after`, at
/// most `limit`, by ordinal (a range on `uq_wf_step_name`).
pub async fn wf_results(
    conn: &mut MySqlConnection,
    workflow: u64,
    name: &str,
    after: Option<u32>,
    limit: u32,
) -> Result<Vec<StepResult>, Error> {
    let rows = sqlx::query(
        "/* mysqlq:wf_results */ SELECT s.ordinal, j.status = 'completed' AS done, \
         CAST(s.result AS CHAR) AS result FROM mysqlq_wf_step s JOIN job_queue j ON j.id = s.job_id \
         WHERE s.workflow_id = ? AND s.name = ? AND (? IS NULL OR s.ordinal > ?) \
         ORDER BY s.ordinal LIMIT ?",
    )
    .bind(workflow)
    .bind(name)
    .bind(after)
    .bind(after)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get("ordinal")?,
                r.try_get::<bool, _>("done")?,
                r.try_get("result")?,
            ))
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(Into::into)
}

/// `wf_batch_counts`: the members of batch `workflow` (steps `jobs`) by status.
pub async fn wf_batch_counts(
    conn: &mut MySqlConnection,
    workflow: u64,
) -> Result<Vec<(String, u64)>, Error> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "/* mysqlq:wf_batch_counts */ SELECT CAST(j.status AS CHAR), COUNT(*) FROM job_queue j \
         JOIN mysqlq_wf_step s ON s.job_id = j.id WHERE j.workflow_id = ? AND s.name = 'jobs' \
         GROUP BY j.status",
    )
    .bind(workflow)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(s, n)| (s, u64::try_from(n).unwrap_or(0)))
        .collect())
}
