//! Maintenance statements run by the leader: the reaper of expired leases, the pruner of
//! finished jobs, and the leader lease itself.

use std::time::Duration;

use sqlx::MySqlConnection;

use super::sql::micros;
use crate::Error;

/// What [`job_reap_expired`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Jobs returned to `pending` (attempts left).
    pub retried: u64,
    /// Relayed jobs (Redis transport) whose relay died: back to `pending`, no attempt taken.
    pub relayed: u64,
    /// Jobs moved to `failed` (no attempts left).
    pub failed: u64,
}

/// `job_attempt_reaped`: the attempt history row of each job the next reaper UPDATE takes
/// (same `WHERE`, order and limit; the locking read keeps the rows for that UPDATE). The start is
/// unknown (NULL): the worker that knew it is presumed dead.
macro_rules! reaped_attempts_sql {
    ($outcome:literal, $cond:literal) => {
        concat!(
            "/* mysqlq:job_attempt_reaped */ INSERT INTO mysqlq_job_attempt \
             (job_id, attempt, outcome, worker, started_at, finished_at, error, error_bytes) \
             SELECT id, attempts, '",
            $outcome,
            "', locked_by, NULL, UTC_TIMESTAMP(6), \
               CONCAT('lease expired while held by ', IFNULL(locked_by, '?'), \
                      ' (worker presumed dead)'), \
               LENGTH(CONCAT('lease expired while held by ', IFNULL(locked_by, '?'), \
                      ' (worker presumed dead)')) \
             FROM job_queue WHERE status = 'processing' AND lease_expires_at < UTC_TIMESTAMP(6) \
               AND (locked_by IS NULL OR locked_by NOT LIKE 'redis-relay:%') AND ",
            $cond,
            " ORDER BY lease_expires_at LIMIT ?"
        )
    };
}

/// `job_reap_expired`'s UPDATE of expired leases matching `$cond` (the same rows as
/// [`reaped_attempts_sql`]), setting `$set` and clearing the claim.
macro_rules! reap_sql {
    ($set:literal, $cond:literal) => {
        concat!(
            "/* mysqlq:job_reap_expired */ UPDATE job_queue SET ",
            $set,
            ", locked_by = NULL, claim_token = NULL, lease_expires_at = NULL \
             WHERE status = 'processing' AND lease_expires_at < UTC_TIMESTAMP(6) \
               AND (locked_by IS NULL OR locked_by NOT LIKE 'redis-relay:%') AND ",
            $cond,
            " ORDER BY lease_expires_at LIMIT ?"
        )
    };
}

/// One reaper step in a transaction of its own: the lost attempts' history rows, then the
/// UPDATE of the same rows. Returns the jobs updated.
async fn reap_step(
    conn: &mut MySqlConnection,
    attempts_sql: &'static str,
    update_sql: &'static str,
    limit: u32,
) -> Result<u64, Error> {
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    sqlx::query(attempts_sql)
        .bind(limit)
        .execute(&mut *tx)
        .await?;
    let updated = sqlx::query(update_sql)
        .bind(limit)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(updated)
}

/// `job_reap_expired`: the article's recovery SQL — expired leases go back to `pending` when
/// attempts remain, else to `failed` — in batches of `limit`, with `last_error` saying why.
/// Relayed jobs (held by a Redis relay, `locked_by` `redis-relay:…`) took no attempt: they go
/// back to `pending` untouched first (`job_relay_expire`), and the statements below skip them.
/// Each UPDATE runs in one transaction with `job_attempt_reaped`, which records the lost
/// attempt in the job's history (not trimmed here: the next attempt a worker records trims
/// it).
pub async fn job_reap_expired(conn: &mut MySqlConnection, limit: u32) -> Result<ReapReport, Error> {
    // `job_reap_due`: one index-only look (`idx_job_recover`) first, so that a round with no
    // expired lease — nearly every round — costs one statement instead of two transactions.
    let due: Option<i32> = sqlx::query_scalar(
        "/* mysqlq:job_reap_due */ SELECT 1 FROM job_queue \
         WHERE status = 'processing' AND lease_expires_at < UTC_TIMESTAMP(6) LIMIT 1",
    )
    .fetch_optional(&mut *conn)
    .await?;
    if due.is_none() {
        return Ok(ReapReport::default());
    }
    let relayed = super::relay::job_relay_expire(&mut *conn, limit).await?;
    let retried = reap_step(
        conn,
        reaped_attempts_sql!("retry", "attempts < max_attempts"),
        reap_sql!(
            "status = 'pending', available_at = UTC_TIMESTAMP(6), \
             last_error = CONCAT('lease expired while held by ', IFNULL(locked_by, '?'), \
                                 ' (worker presumed dead); attempt ', attempts)",
            "attempts < max_attempts"
        ),
        limit,
    )
    .await?;
    let failed = reap_step(
        conn,
        reaped_attempts_sql!("fail", "attempts >= max_attempts"),
        reap_sql!(
            "status = 'failed', finished_at = UTC_TIMESTAMP(6), \
             last_error = CONCAT('lease expired while held by ', IFNULL(locked_by, '?'), \
                                 ' on the last attempt (', attempts, ' of ', max_attempts, ')')",
            "attempts >= max_attempts"
        ),
        limit,
    )
    .await?;
    Ok(ReapReport {
        retried,
        relayed,
        failed,
    })
}

/// `job_prune`: deletes up to `limit` jobs in `status` finished more than `older_than` ago,
/// oldest first (the article's batched cleanup), with their attempt history. Returns rows
/// deleted. One transaction: `job_attempt_prune` deletes the history rows of the same batch
/// (its read of `job_queue` locks the batch's rows), then the article's DELETE.
pub async fn job_prune(
    conn: &mut MySqlConnection,
    status: PruneStatus,
    older_than: Duration,
    limit: u32,
) -> Result<u64, Error> {
    let status = match status {
        PruneStatus::Completed => "completed",
        PruneStatus::Failed => "failed",
        PruneStatus::Cancelled => "cancelled",
    };
    let history = "/* mysqlq:job_attempt_prune */ DELETE a FROM mysqlq_job_attempt a \
        JOIN (SELECT id FROM job_queue WHERE status = ? \
              AND finished_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND \
              ORDER BY finished_at LIMIT ?) p ON a.job_id = p.id";
    let sql = "/* mysqlq:job_prune */ DELETE FROM job_queue WHERE status = ? \
               AND finished_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY finished_at LIMIT ?";
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    sqlx::query(history)
        .bind(status)
        .bind(micros(older_than))
        .bind(limit)
        .execute(&mut *tx)
        .await?;
    let n = sqlx::query(sql)
        .bind(status)
        .bind(micros(older_than))
        .bind(limit)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(n)
}

/// Which finished jobs [`job_prune`] deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneStatus {
    /// `completed`.
    Completed,
    /// `failed`.
    Failed,
    /// `cancelled`.
    Cancelled,
}

/// `leader_elect`: takes or keeps the named leader lease for `ttl`. `true` when `leader_id`
/// holds it afterwards. The lease row exists from the migration.
pub async fn leader_elect(
    conn: &mut MySqlConnection,
    name: &str,
    leader_id: &str,
    ttl: Duration,
) -> Result<bool, Error> {
    let done = sqlx::query(
        "/* mysqlq:leader_elect */ UPDATE mysqlq_leader \
         SET elected_at = IF(leader_id <=> ?, elected_at, UTC_TIMESTAMP(6)), leader_id = ?, \
             expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
         WHERE name = ? AND (leader_id <=> ? OR expires_at < UTC_TIMESTAMP(6))",
    )
    .bind(leader_id)
    .bind(leader_id)
    .bind(micros(ttl))
    .bind(name)
    .bind(leader_id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok(done == 1)
}

/// `leader_resign`: gives the lease up at once (clean shutdown), so another worker takes over
/// without waiting for it to expire.
pub async fn leader_resign(
    conn: &mut MySqlConnection,
    name: &str,
    leader_id: &str,
) -> Result<(), Error> {
    sqlx::query(
        "/* mysqlq:leader_resign */ UPDATE mysqlq_leader SET leader_id = NULL, \
         expires_at = '1970-01-01 00:00:01' WHERE name = ? AND leader_id = ?",
    )
    .bind(name)
    .bind(leader_id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
