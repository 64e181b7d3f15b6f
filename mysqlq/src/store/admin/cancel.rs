//! Operator cancellation and deletion of jobs in any state but final (cancel) or running
//! (delete), by id or walking the waiting and running jobs in windows of ids.

use serde::Serialize;
use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use super::BULK_CHUNK;
use crate::store::sql::{bind_ids, padded_len, placeholders};
use crate::{Error, JobId};

/// One window of the walk over waiting and running jobs: both states in one statement (one
/// snapshot), on `idx_job_finished (status, finished_at, id)`, where waiting and running jobs have
/// no `finished_at`. No `ORDER BY`: the whole window is taken, so nothing is sorted.
pub(super) const ACTIVE_PAGE_SQL: &str = "/* mysqlq:job_active_page */ \
    SELECT id, CAST(queue_name AS CHAR) AS queue_name, CAST(kind AS CHAR) AS kind \
    FROM job_queue WHERE status IN ('waiting', 'pending', 'processing') AND finished_at IS NULL \
    AND id > ? AND id <= ?";

/// Where the walk starts and ends: the lowest waiting or running id, and the highest id of all.
const ACTIVE_BOUNDS_SQL: &str = "/* mysqlq:job_active_page */ SELECT \
    (SELECT MIN(id) FROM job_queue WHERE status IN ('waiting', 'pending', 'processing') AND finished_at IS NULL) AS low, \
    (SELECT MAX(id) FROM job_queue) AS high";

/// Ids per window at first; a window adapts to hold about [`WINDOW_ROWS`] jobs.
const FIRST_WINDOW: u64 = 1024;
/// The widest window, in ids: so that no statement returns more than this many jobs.
const MAX_WINDOW: u64 = 1 << 16;
/// Jobs a window aims at.
const WINDOW_ROWS: usize = 1000;

/// Where [`job_active_page`] goes on from. Start with [`ActiveCursor::default`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActiveCursor {
    /// Ids up to here were walked.
    after: u64,
    /// The highest id when the walk began (`None` before the first page).
    until: Option<u64>,
    /// Ids in the next window.
    window: u64,
}

impl ActiveCursor {
    /// `true` once every job that was waiting or running when the walk began was returned.
    pub fn is_done(&self) -> bool {
        self.until.is_some_and(|u| self.after >= u)
    }
}

/// Parameters of [`job_active_page`].
#[derive(Debug, Clone, Copy)]
pub struct ActivePageParams<'a> {
    /// Only this queue.
    pub queue: Option<&'a str>,
    /// Only this kind.
    pub kind: Option<&'a str>,
}

/// `job_active_page`: the waiting (pending: ready, scheduled, retrying) and running jobs of the
/// next window of ids after `cursor`, filtered by queue and kind, advancing the cursor; stop when
/// [`ActiveCursor::is_done`]. The walk goes by id over both states at once, each window in one
/// statement, so a job moving between them (a retry, a snooze, a release, the reaper) while the
/// walk runs is found all the same; it ends at the highest id of the first page, so jobs enqueued
/// after the walk began are not included. A page may be empty.
pub async fn job_active_page(
    conn: &mut MySqlConnection,
    p: &ActivePageParams<'_>,
    cursor: &mut ActiveCursor,
) -> Result<Vec<JobId>, Error> {
    if let Some(q) = p.queue {
        crate::queue::validate_queue_name(q)?;
    }
    let until = match cursor.until {
        Some(u) => u,
        None => {
            let row = sqlx::query(ACTIVE_BOUNDS_SQL).fetch_one(&mut *conn).await?;
            let low: Option<u64> = row.try_get("low")?;
            let high: Option<u64> = row.try_get("high")?;
            let high = high.unwrap_or(0);
            cursor.after = low.map_or(high, |l| l.saturating_sub(1));
            cursor.until = Some(high);
            cursor.window = FIRST_WINDOW;
            high
        }
    };
    if cursor.after >= until {
        return Ok(Vec::new());
    }
    let to = cursor.after.saturating_add(cursor.window).min(until);
    let rows = sqlx::query(ACTIVE_PAGE_SQL)
        .bind(cursor.after)
        .bind(to)
        .fetch_all(&mut *conn)
        .await?;
    cursor.after = to;
    // Aim the next window at about WINDOW_ROWS jobs: wide across finished rows, narrow across
    // a backlog.
    if rows.len() < WINDOW_ROWS / 4 {
        cursor.window = cursor.window.saturating_mul(4).min(MAX_WINDOW);
    } else if rows.len() > WINDOW_ROWS * 2 {
        cursor.window = (cursor.window / 2).max(1);
    }
    let mut ids = Vec::with_capacity(rows.len());
    for r in &rows {
        let id: u64 = r.try_get("id")?;
        let queue: String = r.try_get("queue_name")?;
        let kind: Option<String> = r.try_get("kind")?;
        if p.queue.is_none_or(|q| q == queue) && p.kind.is_none_or(|k| kind.as_deref() == Some(k)) {
            ids.push(JobId(id));
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// `job_active_count`: how many waiting and running jobs of `p`'s queue and kind there are now
/// (what a filtered cancel would take: its confirmation and `--dry-run`).
pub async fn job_active_count(
    conn: &mut MySqlConnection,
    p: &ActivePageParams<'_>,
) -> Result<u64, Error> {
    let n: i64 = sqlx::query_scalar(
        "/* mysqlq:job_active_count */ SELECT COUNT(*) FROM job_queue \
         WHERE status IN ('waiting', 'pending', 'processing') \
         AND (? IS NULL OR queue_name = ?) AND (? IS NULL OR kind = ?)",
    )
    .bind(p.queue)
    .bind(p.queue)
    .bind(p.kind)
    .bind(p.kind)
    .fetch_one(&mut *conn)
    .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Who cancels, and why ([`job_cancel_many`]).
#[derive(Debug, Clone, Copy)]
pub struct CancelParams<'a> {
    /// `cancelled_by`: the operator (at most 128 characters).
    pub by: &'a str,
    /// `cancel_reason` (at most 1024 characters).
    pub reason: Option<&'a str>,
    /// The audit trail's record of this cancel ([`super::audit_insert`]), if one.
    pub audit: Option<u64>,
}

/// What [`job_cancel_many`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CancelReport {
    /// Jobs that were waiting (pending: ready, scheduled or waiting for a retry), now cancelled.
    pub waiting: Vec<JobId>,
    /// Jobs that were running, now cancelled; their workers stop them at their next heartbeat.
    pub running: Vec<JobId>,
    /// Ids that were not waiting or running jobs (unknown, or already final).
    pub skipped: Vec<JobId>,
}

/// `job_cancel_many`: moves `waiting` (workflow steps), `pending` and `processing` jobs to
/// `cancelled` with who, when and
/// why, up to [`BULK_CHUNK`] ids per transaction (a locking read of the ids, then the UPDATE,
/// guarded by `status IN ('waiting', 'pending', 'processing')`). A running job keeps its `claim_token` and
/// `locked_by`: its worker's next token-guarded write fails, and `job_ownership` reads
/// `cancelled_by` to tell the worker it was cancelled, not lost.
pub async fn job_cancel_many(
    conn: &mut MySqlConnection,
    ids: &[JobId],
    p: &CancelParams<'_>,
) -> Result<CancelReport, Error> {
    let mut report = CancelReport::default();
    for chunk in ids.chunks(BULK_CHUNK) {
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let found = lock_active(&mut tx, chunk).await?;
        report.skipped.extend(
            chunk
                .iter()
                .filter(|id| !found.iter().any(|(f, _)| f == *id)),
        );
        if found.is_empty() {
            tx.rollback().await?;
            continue;
        }
        let found_ids: Vec<JobId> = found.iter().map(|(id, _)| *id).collect();
        cancel_locked(&mut tx, &found_ids, p).await?;
        super::audit::audit_jobs(&mut tx, p.audit, &found_ids).await?;
        tx.commit().await?;
        for (id, running) in found {
            if running {
                report.running.push(id);
            } else {
                report.waiting.push(id);
            }
        }
    }
    Ok(report)
}

/// The UPDATE of [`job_cancel_many`], inside a transaction that has locked `ids`.
pub(crate) async fn cancel_locked(
    tx: &mut MySqlConnection,
    ids: &[JobId],
    p: &CancelParams<'_>,
) -> Result<u64, Error> {
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_cancel_operator */ UPDATE job_queue FORCE INDEX (PRIMARY) SET status = 'cancelled', \
         finished_at = UTC_TIMESTAMP(6), lease_expires_at = NULL, \
         cancelled_at = UTC_TIMESTAMP(6), cancelled_by = ?, cancel_reason = ? \
         WHERE id IN ({}) AND status IN ('waiting', 'pending', 'processing')",
        placeholders(padded_len(ids.len()))
    ));
    let q = sqlx::query(sql).bind(p.by).bind(p.reason);
    Ok(bind_ids(q, ids).execute(&mut *tx).await?.rows_affected())
}

/// Locks the `waiting`/`pending`/`processing` rows among `ids`; `(id, running)` for each.
async fn lock_active(
    conn: &mut MySqlConnection,
    ids: &[JobId],
) -> Result<Vec<(JobId, bool)>, Error> {
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_cancel_lock */ SELECT id, CAST(status AS CHAR) AS status FROM job_queue FORCE INDEX (PRIMARY) \
         WHERE id IN ({}) AND status IN ('waiting', 'pending', 'processing') FOR UPDATE",
        placeholders(padded_len(ids.len()))
    ));
    let rows = bind_ids(sqlx::query(sql), ids)
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let id = JobId(r.try_get("id")?);
        let status: String = r.try_get("status")?;
        if !out.iter().any(|(f, _)| *f == id) {
            out.push((id, status == "processing"));
        }
    }
    Ok(out)
}

/// What [`job_delete_many`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeleteReport {
    /// Jobs deleted (with their attempt history).
    pub deleted: Vec<JobId>,
    /// Ids of running jobs, left alone: cancel them first.
    pub running: Vec<JobId>,
    /// Ids of no job.
    pub unknown: Vec<JobId>,
    /// Ids of workflow steps, left alone: a step goes with its workflow (cancel it, and the
    /// pruner deletes the finished workflow whole).
    pub in_workflow: Vec<JobId>,
}

/// `job_delete_many`: deletes jobs in any state but `processing` (their attempt history goes
/// with them), up to [`BULK_CHUNK`] ids per transaction. Running jobs are reported, not touched:
/// cancel them first, so that their worker stops them.
pub async fn job_delete_many(
    conn: &mut MySqlConnection,
    ids: &[JobId],
    audit: Option<u64>,
) -> Result<DeleteReport, Error> {
    let mut report = DeleteReport::default();
    for chunk in ids.chunks(BULK_CHUNK) {
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:job_delete_lock */ SELECT id, CAST(status AS CHAR) AS status, \
             workflow_id IS NOT NULL AS step FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({}) FOR UPDATE",
            placeholders(padded_len(chunk.len()))
        ));
        let rows = bind_ids(sqlx::query(sql), chunk)
            .fetch_all(&mut *tx)
            .await?;
        let mut deletable = Vec::new();
        for &id in chunk {
            let row = rows
                .iter()
                .find(|r| r.try_get::<u64, _>("id").ok() == Some(id.0));
            let status = row.map(|r| r.try_get::<String, _>("status")).transpose()?;
            let step = row.map(|r| r.try_get::<bool, _>("step")).transpose()?;
            match status.as_deref() {
                None if !report.unknown.contains(&id) => report.unknown.push(id),
                Some(_) if step == Some(true) && !report.in_workflow.contains(&id) => {
                    report.in_workflow.push(id);
                }
                Some(_) if step == Some(true) => {}
                Some("processing") if !report.running.contains(&id) => report.running.push(id),
                Some(s) if s != "processing" && !deletable.contains(&id) => deletable.push(id),
                _ => {}
            }
        }
        if deletable.is_empty() {
            tx.rollback().await?;
            continue;
        }
        delete_locked(&mut tx, &deletable).await?;
        super::audit::audit_jobs(&mut tx, audit, &deletable).await?;
        tx.commit().await?;
        report.deleted.extend(deletable);
    }
    Ok(report)
}

/// The DELETE of [`job_delete_many`] (attempt history included), inside a transaction that has
/// locked `ids`; guarded: running jobs and workflow steps stay.
pub(crate) async fn delete_locked(tx: &mut MySqlConnection, ids: &[JobId]) -> Result<u64, Error> {
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_delete */ DELETE job_queue FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({}) \
         AND status <> 'processing' AND workflow_id IS NULL",
        placeholders(padded_len(ids.len()))
    ));
    crate::store::job_attempt_delete(&mut *tx, ids).await?;
    Ok(bind_ids(sqlx::query(sql), ids)
        .execute(&mut *tx)
        .await?
        .rows_affected())
}
