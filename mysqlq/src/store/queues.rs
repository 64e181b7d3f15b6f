//! Queue statements: the pause flag workers read on every claim, and whether a queue has jobs.

use sqlx::MySqlConnection;

use crate::Error;

/// `queue_pause` / `queue_resume`: sets a queue's pause flag. Workers see it on their next claim.
pub async fn queue_set_paused(
    conn: &mut MySqlConnection,
    queue: &str,
    paused: bool,
) -> Result<(), Error> {
    crate::queue::validate_queue_name(queue)?;
    sqlx::query(
        "/* mysqlq:queue_pause */ INSERT INTO mysqlq_queue (queue_name, paused) VALUES (?, ?) \
         ON DUPLICATE KEY UPDATE paused = VALUES(paused)",
    )
    .bind(queue)
    .bind(paused)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// `queue_has_jobs`: `true` when any job row (any state) names `queue` (a ref on `idx_job_claim`).
pub async fn queue_has_jobs(conn: &mut MySqlConnection, queue: &str) -> Result<bool, Error> {
    crate::queue::validate_queue_name(queue)?;
    let found: Option<i64> = sqlx::query_scalar(
        "/* mysqlq:queue_has_jobs */ SELECT 1 FROM job_queue WHERE queue_name = ? LIMIT 1",
    )
    .bind(queue)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(found.is_some())
}
