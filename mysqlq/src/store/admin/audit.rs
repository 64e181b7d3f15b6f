//! The audit trail of operator actions (migration 7): `mysqlq_audit`, a row per action, and
//! `mysqlq_audit_job`, a row per job an action changed, written by the operator statements in
//! the transaction that changes the job, so the trail never names a change that did not happen
//! nor misses one that did.

use std::time::Duration;

use serde::Serialize;
use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use crate::state::Timestamp;
use crate::{Error, JobId};

/// One operator action about to be taken ([`audit_insert`]).
#[derive(Debug, Clone, Copy)]
pub struct AuditEntry<'a> {
    /// Who (1 to 128 characters).
    pub actor: &'a str,
    /// What: `cancel`, `retry`, `discard`, `delete`, `pause`, `resume`, `purge`.
    pub action: &'a str,
    /// The queue it was aimed at, if one.
    pub queue: Option<&'a str>,
    /// The kind it was aimed at, if one.
    pub kind: Option<&'a str>,
    /// Why, as the operator said.
    pub reason: Option<&'a str>,
    /// What was asked, in words (the ids, "every failed job", the purge's age).
    pub detail: Option<&'a str>,
}

/// One recorded operator action ([`Admin::audit`](crate::admin::Admin::audit)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditRecord {
    /// The action's id (increasing).
    pub id: u64,
    /// When it began (UTC).
    pub at: Timestamp,
    /// Who took it.
    pub actor: String,
    /// What: `cancel`, `retry`, `discard`, `delete`, `pause`, `resume`, `purge`.
    pub action: String,
    /// The queue it was aimed at.
    pub queue: Option<String>,
    /// The kind it was aimed at.
    pub kind: Option<String>,
    /// Jobs it changed (cancelled, retried, deleted…), counted as they were changed.
    pub jobs: u64,
    /// Why, as the operator said.
    pub reason: Option<String>,
    /// What was asked.
    pub detail: Option<String>,
    /// A bulk action's confirmed count (at most this many jobs change).
    pub expected: Option<u64>,
    /// A bulk action's state: `running`, `done`, `stopped` or `failed` (`None` for the
    /// actions that run in one go).
    pub state: Option<String>,
    /// When a bulk action last changed a chunk or its state.
    pub progress_at: Option<Timestamp>,
}

/// Which recorded actions [`Admin::audit`](crate::admin::Admin::audit) returns, newest first.
#[derive(Debug, Clone, Copy, Default)]
pub struct AuditQuery<'a> {
    /// Only actions aimed at this queue.
    pub queue: Option<&'a str>,
    /// Only actions that changed this job.
    pub job: Option<JobId>,
    /// Only actions older than this id (keyset paging).
    pub before: Option<u64>,
    /// At most this many (1 to 1000).
    pub limit: u32,
}

/// Longest `detail` kept, in characters (longer text is cut with an ellipsis).
const MAX_DETAIL: usize = 1000;

/// `audit_insert`: records that an action begins; returns its id, which the action's
/// statements pass to [`audit_jobs`]. Its own statement (autocommit): an action that dies
/// halfway is still on record, with the jobs it had changed by then.
pub async fn audit_insert(conn: &mut MySqlConnection, e: &AuditEntry<'_>) -> Result<u64, Error> {
    let detail = e.detail.map(|d| {
        if d.chars().count() > MAX_DETAIL {
            let mut cut: String = d.chars().take(MAX_DETAIL).collect();
            cut.push('…');
            cut
        } else {
            d.to_owned()
        }
    });
    let done = sqlx::query(
        "/* mysqlq:audit_insert */ INSERT INTO mysqlq_audit \
         (at, actor, action, queue_name, kind, reason, detail) \
         VALUES (UTC_TIMESTAMP(6), ?, ?, ?, ?, ?, ?)",
    )
    .bind(e.actor)
    .bind(e.action)
    .bind(e.queue)
    .bind(e.kind)
    .bind(e.reason)
    .bind(detail)
    .execute(&mut *conn)
    .await?;
    Ok(done.last_insert_id())
}

/// `audit_jobs`: inside the transaction that changed `ids`, links them to action `audit` and
/// adds them to its count. Nothing for `None` (a caller that records no trail).
pub(crate) async fn audit_jobs(
    conn: &mut MySqlConnection,
    audit: Option<u64>,
    ids: &[JobId],
) -> Result<(), Error> {
    let Some(audit) = audit else {
        return Ok(());
    };
    audit_count(conn, Some(audit), ids.len() as u64).await?;
    for chunk in ids.chunks(500) {
        let values = vec!["(?, ?)"; chunk.len()].join(", ");
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:audit_jobs */ INSERT IGNORE INTO mysqlq_audit_job (job_id, audit_id) VALUES {values}"
        ));
        let mut q = sqlx::query(sql);
        for id in chunk {
            q = q.bind(id.0).bind(audit);
        }
        q.execute(&mut *conn).await?;
    }
    Ok(())
}

/// `audit_count`: adds `n` to action `audit`'s count of jobs (a purge, which links none).
pub async fn audit_count(
    conn: &mut MySqlConnection,
    audit: Option<u64>,
    n: u64,
) -> Result<(), Error> {
    if let (Some(audit), 1..) = (audit, n) {
        sqlx::query(
            "/* mysqlq:audit_count */ UPDATE mysqlq_audit SET jobs = jobs + ? WHERE id = ?",
        )
        .bind(n)
        .bind(audit)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// `audit_list`: recorded actions, newest first: all, those aimed at a queue, or those that
/// changed one job (through `mysqlq_audit_job`'s primary key).
pub async fn audit_list(
    conn: &mut MySqlConnection,
    q: &AuditQuery<'_>,
) -> Result<Vec<AuditRecord>, Error> {
    let mut sql = String::from(
        "/* mysqlq:audit_list */ SELECT a.id, a.at, CAST(a.actor AS CHAR) AS actor, \
         CAST(a.action AS CHAR) AS action, CAST(a.queue_name AS CHAR) AS queue_name, \
         CAST(a.kind AS CHAR) AS kind, a.jobs, CAST(a.reason AS CHAR) AS reason, \
         CAST(a.detail AS CHAR) AS detail, a.expected, CAST(a.state AS CHAR) AS state, \
         a.progress_at FROM mysqlq_audit a",
    );
    if q.job.is_some() {
        sql.push_str(" JOIN mysqlq_audit_job j ON j.audit_id = a.id AND j.job_id = ?");
    }
    sql.push_str(" WHERE a.id < ?");
    if q.queue.is_some() {
        sql.push_str(" AND a.queue_name = ?");
    }
    sql.push_str(" ORDER BY a.id DESC LIMIT ?");
    let mut query = sqlx::query(AssertSqlSafe(sql));
    if let Some(job) = q.job {
        query = query.bind(job.0);
    }
    query = query.bind(q.before.unwrap_or(u64::MAX));
    if let Some(queue) = q.queue {
        query = query.bind(queue);
    }
    let rows = query
        .bind(q.limit.clamp(1, 1000))
        .fetch_all(&mut *conn)
        .await?;
    rows.iter()
        .map(|r| {
            Ok(AuditRecord {
                id: r.try_get("id")?,
                at: r.try_get("at")?,
                actor: r.try_get("actor")?,
                action: r.try_get("action")?,
                queue: r.try_get("queue_name")?,
                kind: r.try_get("kind")?,
                jobs: r.try_get("jobs")?,
                reason: r.try_get("reason")?,
                detail: r.try_get("detail")?,
                expected: r.try_get("expected")?,
                state: r.try_get("state")?,
                progress_at: r.try_get("progress_at")?,
            })
        })
        .collect()
}

/// `audit_prune`: deletes the oldest actions recorded more than `keep` ago, with their job
/// links, at most `limit` rows of each table per call. Returns the rows deleted.
pub async fn audit_prune(
    conn: &mut MySqlConnection,
    keep: Duration,
    limit: u32,
) -> Result<u64, Error> {
    let ids: Vec<u64> = sqlx::query_scalar(
        "/* mysqlq:audit_prune */ SELECT id FROM mysqlq_audit \
         WHERE at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY id LIMIT 100",
    )
    .bind(u64::try_from(keep.as_micros()).unwrap_or(u64::MAX))
    .fetch_all(&mut *conn)
    .await?;
    if ids.is_empty() {
        return Ok(0);
    }
    let list = ids
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    // Integers read from the table itself: written into the text, no placeholders needed.
    let links = AssertSqlSafe(format!(
        "/* mysqlq:audit_prune */ DELETE FROM mysqlq_audit_job WHERE audit_id IN ({list}) LIMIT ?"
    ));
    let deleted_links = sqlx::query(links)
        .bind(limit)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    if deleted_links >= u64::from(limit) {
        // Links of these actions are left: the actions go once they are gone.
        return Ok(deleted_links);
    }
    let actions = AssertSqlSafe(format!(
        "/* mysqlq:audit_prune */ DELETE FROM mysqlq_audit WHERE id IN ({list})"
    ));
    let deleted = sqlx::query(actions)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    Ok(deleted_links + deleted)
}
