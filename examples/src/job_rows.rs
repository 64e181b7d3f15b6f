//! The examples' checks read their jobs back from `job_queue` the same way: every row of one
//! job type, its payload decoded into that type.

use std::collections::HashMap;

use mysqlq::Job;
use sqlx::MySqlPool;

/// A row of `job_queue` of job type `J`.
#[derive(Debug, Clone)]
pub(crate) struct JobRow<J> {
    pub(crate) id: u64,
    pub(crate) status: String,
    /// The payload as a `J`; `None` when it does not decode (a row written by hand).
    pub(crate) job: Option<J>,
    pub(crate) last_error: Option<String>,
}

/// Every row of kind `J::KIND`, by id.
pub(crate) async fn job_rows<J: Job>(pool: &MySqlPool) -> Result<HashMap<u64, JobRow<J>>, String> {
    let rows: Vec<(u64, String, String, Option<String>)> = sqlx::query_as(
        "SELECT id, CAST(status AS CHAR), CAST(payload AS CHAR), last_error FROM job_queue WHERE kind = ?",
    )
    .bind(J::KIND)
    .fetch_all(pool)
    .await
    .map_err(|e| format!("cannot read job_queue: {e}"))?;
    Ok(rows
        .into_iter()
        .map(|(id, status, payload, last_error)| {
            let job = serde_json::from_str::<J>(&payload).ok();
            (
                id,
                JobRow {
                    id,
                    status,
                    job,
                    last_error,
                },
            )
        })
        .collect())
}
