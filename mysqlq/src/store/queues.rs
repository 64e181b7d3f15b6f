//! Queue statements: the pause flag workers read on every claim, and whether a queue has jobs.

use sqlx::MySqlConnection;

use crate::Error;

/// `queue_pause` / `queue_resume`: sets a queue's pause flag. Workers see it on their next claim.
/// A queue without a row is not paused, so resuming deletes the row (unless it holds the
/// queue's limits): a paused name with no job and no worker (a typo) leaves nothing behind in
/// `stats` or the dashboard once resumed.
pub async fn queue_set_paused(
    conn: &mut MySqlConnection,
    queue: &str,
    paused: bool,
) -> Result<(), Error> {
    crate::queue::validate_queue_name(queue)?;
    if paused {
        sqlx::query(
            "/* mysqlq:queue_pause */ INSERT INTO mysqlq_queue (queue_name, paused) VALUES (?, 1) \
             ON DUPLICATE KEY UPDATE paused = 1",
        )
        .bind(queue)
        .execute(&mut *conn)
        .await?;
        return Ok(());
    }
    for sql in [
        "/* mysqlq:queue_resume */ DELETE FROM mysqlq_queue WHERE queue_name = ? \
         AND rate_limit IS NULL AND global_limit IS NULL",
        "/* mysqlq:queue_resume */ UPDATE mysqlq_queue SET paused = 0 WHERE queue_name = ?",
    ] {
        sqlx::query(sql).bind(queue).execute(&mut *conn).await?;
    }
    Ok(())
}

/// `queue_live`: the queues that workers seen within `within` (and not stopped) serve, sorted,
/// each once (from `mysqlq_worker`'s `queues`, comma-separated).
pub async fn queue_live(
    conn: &mut MySqlConnection,
    within: std::time::Duration,
) -> Result<Vec<String>, Error> {
    let lists: Vec<String> = sqlx::query_scalar(
        "/* mysqlq:queue_live */ SELECT queues FROM mysqlq_worker WHERE stopped_at IS NULL \
         AND last_seen_at > UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND",
    )
    .bind(super::sql::micros(within))
    .fetch_all(&mut *conn)
    .await?;
    let mut queues: Vec<String> = lists
        .iter()
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .map(str::to_owned)
        .collect();
    queues.sort();
    queues.dedup();
    Ok(queues)
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
