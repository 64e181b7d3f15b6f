//! Maintenance statements run by the leader: the reaper of expired leases, the pruner of
//! finished jobs, and the leader lease itself.

use std::time::Duration;

use sqlx::{AssertSqlSafe, MySqlConnection};

use super::sql::{bind_ids, micros, padded_len, placeholders};
use crate::{Error, JobId};

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

/// The reason the reaper gives, in `last_error` and in the attempt history, for a lost lease.
macro_rules! lease_lost {
    () => {
        "CONCAT('lease expired while held by ', IFNULL(locked_by, '?'), ' (worker presumed dead)')"
    };
}

/// One reaper step, in a transaction of its own: locks up to `limit` expired leases matching
/// `cond`, oldest first, **skipping rows another transaction holds** (a worker frozen inside a
/// transaction — SIGSTOP, a paused VM — keeps its row locks for as long as the freeze lasts; a
/// plain locking scan would stop the whole round at the first such row; the skipped rows come
/// back in a later round); records their lost attempts in the history as `outcome`
/// (`job_attempt_reaped`, not trimmed here: the next attempt a worker records trims it; none
/// with `None`); then sets `set` on them by id and clears the claim. Returns the jobs updated.
async fn reap_step(
    conn: &mut MySqlConnection,
    tag: &str,
    cond: &str,
    outcome: Option<&str>,
    set: &str,
    limit: u32,
) -> Result<u64, Error> {
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let ids: Vec<u64> = sqlx::query_scalar(AssertSqlSafe(format!(
        "/* mysqlq:{tag} */ SELECT id FROM job_queue \
         WHERE status = 'processing' AND lease_expires_at < UTC_TIMESTAMP(6) AND {cond} \
         ORDER BY lease_expires_at LIMIT ? FOR UPDATE SKIP LOCKED"
    )))
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    if ids.is_empty() {
        tx.commit().await?;
        return Ok(0);
    }
    let ids: Vec<JobId> = ids.into_iter().map(JobId).collect();
    let list = placeholders(padded_len(ids.len()));
    if let Some(outcome) = outcome {
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:job_attempt_reaped */ INSERT INTO mysqlq_job_attempt \
             (job_id, attempt, outcome, worker, started_at, finished_at, error, error_bytes) \
             SELECT id, attempts, '{outcome}', locked_by, NULL, UTC_TIMESTAMP(6), {lost}, \
                    LENGTH({lost}) \
             FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({list})",
            lost = lease_lost!()
        ));
        bind_ids(sqlx::query(sql), &ids).execute(&mut *tx).await?;
    }
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:{tag} */ UPDATE job_queue FORCE INDEX (PRIMARY) SET {set}, \
         locked_by = NULL, claim_token = NULL, lease_expires_at = NULL \
         WHERE id IN ({list}) AND status = 'processing'"
    ));
    let updated = bind_ids(sqlx::query(sql), &ids)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(updated)
}

/// Rows the reaper's own steps take: not held by a Redis relay (those took no attempt; see
/// [`RELAY_HELD`]).
const NOT_RELAY_HELD: &str = "(locked_by IS NULL OR locked_by NOT LIKE 'redis-relay:%')";
/// Rows held by a Redis relay (`locked_by` [`RELAY_PREFIX`](super::relay::RELAY_PREFIX)…): in
/// a stream, not taken.
const RELAY_HELD: &str = "locked_by LIKE 'redis-relay:%'";

/// `job_reap_expired`: the article's recovery SQL — expired leases go back to `pending` when
/// attempts remain, else to `failed` — in batches of `limit`, with `last_error` saying why.
/// Relayed jobs (held by a Redis relay, `locked_by` `redis-relay:…`) took no attempt: they go
/// back to `pending` untouched first (`job_relay_expire`), and the statements below skip them.
/// Each step locks its rows with `FOR UPDATE SKIP LOCKED`, so rows a frozen worker's open
/// transaction holds are left for a later round instead of stalling this one, and records the
/// lost attempts in the same transaction ([`reap_step`]).
pub async fn job_reap_expired(conn: &mut MySqlConnection, limit: u32) -> Result<ReapReport, Error> {
    // `job_reap_due`: one index-only look (`idx_job_recover`) first, so that a round with no
    // expired lease — nearly every round — costs one statement instead of three transactions.
    let due: Option<i32> = sqlx::query_scalar(
        "/* mysqlq:job_reap_due */ SELECT 1 FROM job_queue \
         WHERE status = 'processing' AND lease_expires_at < UTC_TIMESTAMP(6) LIMIT 1",
    )
    .fetch_optional(&mut *conn)
    .await?;
    if due.is_none() {
        return Ok(ReapReport::default());
    }
    // Relayed jobs whose relay died: back to `pending`, nothing else changes (no attempt was
    // taken, no history, `last_error` kept).
    let relayed = reap_step(
        conn,
        "job_relay_expire",
        RELAY_HELD,
        None,
        "status = 'pending'",
        limit,
    )
    .await?;
    let retried = reap_step(
        conn,
        "job_reap_expired",
        &format!("{NOT_RELAY_HELD} AND attempts < max_attempts"),
        Some("retry"),
        concat!(
            "status = 'pending', available_at = UTC_TIMESTAMP(6), last_error = CONCAT(",
            lease_lost!(),
            ", '; attempt ', attempts)"
        ),
        limit,
    )
    .await?;
    let failed = reap_step(
        conn,
        "job_reap_expired",
        &format!("{NOT_RELAY_HELD} AND attempts >= max_attempts"),
        Some("fail"),
        "status = 'failed', finished_at = UTC_TIMESTAMP(6), \
         last_error = CONCAT('lease expired while held by ', IFNULL(locked_by, '?'), \
                             ' on the last attempt (', attempts, ' of ', max_attempts, ')')",
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
/// deleted. One transaction: the batch's rows are locked first (`FOR UPDATE SKIP LOCKED`: a row
/// another transaction holds, such as an operator's retry, is left for the next pass), then
/// `job_attempt_prune` deletes their history and the article's DELETE the rows, by id; an
/// operator's purge adds the count to its audit record (`audit`) in the same transaction.
///
/// The pruner never waits for a lock: a retry locks the row, then changes its index entries,
/// and a pruner that read `idx_job_finished` with locks (entry, then row) while it waited for
/// the row deadlocked with it (`tests/operator_races.rs`).
pub async fn job_prune(
    conn: &mut MySqlConnection,
    status: PruneStatus,
    older_than: Duration,
    limit: u32,
    audit: Option<u64>,
) -> Result<u64, Error> {
    // Workflow steps go with their workflow (`store::workflow::wf_prune`), never alone.
    let find = "/* mysqlq:job_prune */ SELECT id FROM job_queue WHERE status = ? \
        AND finished_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AND workflow_id IS NULL \
        ORDER BY finished_at LIMIT ? FOR UPDATE SKIP LOCKED";
    // READ COMMITTED: the deletes lock the rows they delete, no gaps, so a pruner stopped
    // mid-transaction holds up no other worker's inserts of attempts or jobs.
    let mut tx = sqlx::Connection::begin_with(
        &mut *conn,
        "/* mysqlq:job_prune */ SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION",
    )
    .await?;
    let ids: Vec<JobId> = sqlx::query_scalar::<_, u64>(find)
        .bind(status.as_str())
        .bind(micros(older_than))
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .map(JobId)
        .collect();
    let mut n = 0;
    if !ids.is_empty() {
        let list = placeholders(padded_len(ids.len()));
        let history = AssertSqlSafe(format!(
            "/* mysqlq:job_attempt_prune */ DELETE FROM mysqlq_job_attempt WHERE job_id IN ({list})"
        ));
        bind_ids(sqlx::query(history), &ids)
            .execute(&mut *tx)
            .await?;
        let rows = AssertSqlSafe(format!(
            "/* mysqlq:job_prune */ DELETE job_queue FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({list})"
        ));
        n = bind_ids(sqlx::query(rows), &ids)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    }
    super::admin::audit_count(&mut tx, audit, n).await?;
    tx.commit().await?;
    Ok(n)
}

/// `job_prunable_count`: how many jobs [`job_prune`] would delete (`purge --dry-run`, the
/// confirmation), counted on `idx_job_finished`.
pub async fn job_prunable_count(
    conn: &mut MySqlConnection,
    status: PruneStatus,
    older_than: Duration,
) -> Result<u64, Error> {
    let n: i64 = sqlx::query_scalar(
        "/* mysqlq:job_prunable_count */ SELECT COUNT(*) FROM job_queue WHERE status = ? \
         AND finished_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AND workflow_id IS NULL",
    )
    .bind(status.as_str())
    .bind(micros(older_than))
    .fetch_one(&mut *conn)
    .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// `keys_prune`: deletes up to `limit` lock rows of ordering and concurrency keys that no waiting
/// or running job names any more (one row was left per key ever used, e.g. one per customer).
/// Rows a claim holds right now are skipped (`SKIP LOCKED`); a key used again later gets its row
/// back from the next claim. Returns the rows deleted.
pub async fn keys_prune(conn: &mut MySqlConnection, limit: u32) -> Result<u64, Error> {
    let mut deleted = 0;
    // `<key>_status`: the job's status when it has the key (migration 13), what the key's
    // index holds.
    for (table, column, status) in [
        ("mysqlq_ordering", "ordering_key", "ordering_status"),
        (
            "mysqlq_concurrency",
            "concurrency_key",
            "concurrency_status",
        ),
    ] {
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let select = sqlx::AssertSqlSafe(format!(
            "/* mysqlq:keys_prune */ SELECT k.{column} FROM {table} k WHERE NOT EXISTS ( \
               SELECT 1 FROM job_queue j WHERE j.{column} = k.{column} \
               AND j.{status} IN ('pending', 'processing')) \
             LIMIT ? FOR UPDATE SKIP LOCKED"
        ));
        let keys: Vec<String> = sqlx::query_scalar(select)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        if !keys.is_empty() {
            let delete = sqlx::AssertSqlSafe(format!(
                "/* mysqlq:keys_prune */ DELETE FROM {table} WHERE {column} IN ({})",
                super::sql::placeholders(keys.len())
            ));
            let mut q = sqlx::query(delete);
            for k in &keys {
                q = q.bind(k);
            }
            deleted += q.execute(&mut *tx).await?.rows_affected();
        }
        tx.commit().await?;
    }
    Ok(deleted)
}

/// `cron_prune`: deletes up to `limit` rows of the periodic jobs' ledger older than `keep`,
/// never a schedule's latest tick (the scheduler goes on from it, and the ledger's key keeps
/// each later tick exactly-once). Returns the rows deleted.
pub async fn cron_prune(
    conn: &mut MySqlConnection,
    keep: Duration,
    limit: u32,
) -> Result<u64, Error> {
    Ok(sqlx::query(
        "/* mysqlq:cron_prune */ DELETE FROM mysqlq_cron \
         WHERE created_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND \
         AND (name, tick) NOT IN (SELECT name, latest FROM ( \
               SELECT name, MAX(tick) AS latest FROM mysqlq_cron GROUP BY name) AS l) \
         LIMIT ?",
    )
    .bind(micros(keep))
    .bind(limit)
    .execute(&mut *conn)
    .await?
    .rows_affected())
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

impl PruneStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relay_conditions_name_the_relay_prefix() {
        let like = format!("'{}%'", super::super::relay::RELAY_PREFIX);
        assert!(RELAY_HELD.ends_with(&format!("LIKE {like}")));
        assert!(NOT_RELAY_HELD.contains(&format!("NOT LIKE {like}")));
    }
}
