//! Failed jobs for operators: listing, keyset paging, counting, retry and discard in bulk.

use chrono::NaiveDateTime;
use serde::Serialize;
use sqlx::{AssertSqlSafe, Connection as _, MySqlConnection, Row};

use super::{BULK_CHUNK, non_negative};
use crate::state::Timestamp;
use crate::store::sql::{bind_ids, padded_len, placeholders};
use crate::{Error, JobId};

/// Newest failures first, over `idx_job_finished` read backwards.
pub(super) const FAILED_LIST_SQL: &str = "/* mysqlq:job_failed_list */ \
    SELECT id, CAST(queue_name AS CHAR) AS queue_name, CAST(kind AS CHAR) AS kind, attempts, \
      max_attempts, finished_at, CAST(LEFT(last_error, 200) AS CHAR) AS last_error \
    FROM job_queue WHERE status = 'failed' \
    ORDER BY finished_at DESC, id DESC LIMIT ?";

const FAILED_LIST_QUEUE_SQL: &str = "/* mysqlq:job_failed_list */ \
    SELECT id, CAST(queue_name AS CHAR) AS queue_name, CAST(kind AS CHAR) AS kind, attempts, \
      max_attempts, finished_at, CAST(LEFT(last_error, 200) AS CHAR) AS last_error \
    FROM job_queue WHERE queue_name = ? AND status = 'failed' \
    ORDER BY finished_at DESC, id DESC LIMIT ?";

/// A failed job in a listing ([`Admin::failed`](crate::admin::Admin::failed)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedJob {
    /// The job's id.
    pub id: JobId,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: Option<String>,
    /// Attempts made.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// When it failed (`None` for rows failed by hand-written SQL).
    pub failed_at: Option<Timestamp>,
    /// The first 200 characters of its last error.
    pub last_error: Option<String>,
}

/// Parameters of [`job_failed_list`].
#[derive(Debug, Clone, Copy)]
pub struct FailedListParams<'a> {
    /// Only this queue.
    pub queue: Option<&'a str>,
    /// Most rows.
    pub limit: u32,
}

/// `job_failed_list`: failed jobs, newest failure first.
pub async fn job_failed_list(
    conn: &mut MySqlConnection,
    p: &FailedListParams<'_>,
) -> Result<Vec<FailedJob>, Error> {
    let rows = match p.queue {
        Some(queue) => {
            crate::queue::validate_queue_name(queue)?;
            sqlx::query(FAILED_LIST_QUEUE_SQL)
                .bind(queue)
                .bind(p.limit)
                .fetch_all(&mut *conn)
                .await?
        }
        None => {
            sqlx::query(FAILED_LIST_SQL)
                .bind(p.limit)
                .fetch_all(&mut *conn)
                .await?
        }
    };
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(FailedJob {
            id: JobId(r.try_get("id")?),
            queue: r.try_get("queue_name")?,
            kind: r.try_get("kind")?,
            attempts: r.try_get("attempts")?,
            max_attempts: r.try_get("max_attempts")?,
            failed_at: r.try_get("finished_at")?,
            last_error: r.try_get("last_error")?,
        });
    }
    Ok(out)
}

/// Number of failed jobs (of one queue), counted on an index.
pub async fn job_failed_count(
    conn: &mut MySqlConnection,
    queue: Option<&str>,
) -> Result<u64, Error> {
    let n: i64 = match queue {
        Some(q) => {
            crate::queue::validate_queue_name(q)?;
            sqlx::query_scalar(
                "/* mysqlq:job_failed_count */ SELECT COUNT(*) FROM job_queue \
                 WHERE queue_name = ? AND status = 'failed'",
            )
            .bind(q)
            .fetch_one(&mut *conn)
            .await?
        }
        None => sqlx::query_scalar(
            "/* mysqlq:job_failed_count */ SELECT COUNT(*) FROM job_queue WHERE status = 'failed'",
        )
        .fetch_one(&mut *conn)
        .await?,
    };
    Ok(non_negative(n))
}

/// Failed rows without `finished_at` (failed by hand-written SQL such as the article's recovery
/// statement) come first, keyset by id on `idx_job_finished (status, NULL, id)`.
pub(super) const FAILED_PAGE_NULL_SQL: &str = "/* mysqlq:job_failed_page */ \
    SELECT id, CAST(queue_name AS CHAR) AS queue_name, NULL AS finished_at FROM job_queue \
    WHERE status = 'failed' AND finished_at IS NULL AND id > ? ORDER BY id LIMIT ?";

/// Then keyset on `(finished_at, id)`, in the order of `idx_job_finished`.
/// Rows that failed after the walk began (`finished_at` past its horizon) are not included: a job
/// the walk retried that fails again is not retried again.
pub(super) const FAILED_PAGE_SQL: &str = "/* mysqlq:job_failed_page */ \
    SELECT id, CAST(queue_name AS CHAR) AS queue_name, finished_at FROM job_queue \
    WHERE status = 'failed' AND (finished_at > ? OR (finished_at = ? AND id > ?)) \
    AND finished_at <= ? ORDER BY finished_at, id LIMIT ?";

/// Before every `finished_at` (the smallest `DATETIME`).
pub(super) const FIRST_FINISHED: &str = "1000-01-01 00:00:00.000000";

fn first_finished() -> NaiveDateTime {
    NaiveDateTime::parse_from_str(FIRST_FINISHED, "%Y-%m-%d %H:%M:%S%.f")
        .unwrap_or(NaiveDateTime::MIN)
}

/// Where [`job_failed_page`] goes on from. Start with [`FailedCursor::default`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailedCursor {
    /// `None` while walking the rows without `finished_at`.
    finished_at: Option<NaiveDateTime>,
    id: u64,
    done: bool,
    /// The database's time when the walk began: rows that failed later are not walked.
    horizon: Option<NaiveDateTime>,
}

impl FailedCursor {
    /// `true` once every failed job was returned.
    pub fn is_done(&self) -> bool {
        self.done
    }
}

/// Parameters of [`job_failed_page`].
#[derive(Debug, Clone, Copy)]
pub struct FailedPageParams<'a> {
    /// Only this queue (filtered while walking `idx_job_finished`).
    pub queue: Option<&'a str>,
    /// Most ids per page.
    pub limit: u32,
}

/// `job_failed_page`: the next page of failed job ids after `cursor` (keyset on
/// `idx_job_finished`, never OFFSET), advancing the cursor. Jobs that leave `failed` meanwhile
/// do not disturb the walk, and jobs that fail after its first page (also jobs it retried that
/// failed again) are not walked: a retry or discard of all failed jobs acts at most once per
/// job and always ends. A page may be shorter than `limit` (or empty) when filtered by
/// queue; stop when [`FailedCursor::is_done`].
pub async fn job_failed_page(
    conn: &mut MySqlConnection,
    p: &FailedPageParams<'_>,
    cursor: &mut FailedCursor,
) -> Result<Vec<JobId>, Error> {
    if let Some(q) = p.queue {
        crate::queue::validate_queue_name(q)?;
    }
    if cursor.done {
        return Ok(Vec::new());
    }
    let horizon = match cursor.horizon {
        Some(h) => h,
        None => {
            let now: NaiveDateTime =
                sqlx::query_scalar("/* mysqlq:job_failed_page */ SELECT UTC_TIMESTAMP(6)")
                    .fetch_one(&mut *conn)
                    .await?;
            *cursor.horizon.insert(now)
        }
    };
    let limit = p.limit.max(1);
    let rows = match &cursor.finished_at {
        None => {
            sqlx::query(FAILED_PAGE_NULL_SQL)
                .bind(cursor.id)
                .bind(limit)
                .fetch_all(&mut *conn)
                .await?
        }
        Some(at) => {
            sqlx::query(FAILED_PAGE_SQL)
                .bind(*at)
                .bind(*at)
                .bind(cursor.id)
                .bind(horizon)
                .bind(limit)
                .fetch_all(&mut *conn)
                .await?
        }
    };
    let full = rows.len() >= usize::try_from(limit).unwrap_or(usize::MAX);
    let mut ids = Vec::with_capacity(rows.len());
    for r in &rows {
        let id: u64 = r.try_get("id")?;
        let queue: String = r.try_get("queue_name")?;
        cursor.id = id;
        if let Some(at) = r.try_get::<Option<NaiveDateTime>, _>("finished_at")? {
            cursor.finished_at = Some(at);
        }
        if p.queue.is_none_or(|q| q == queue) {
            ids.push(JobId(id));
        }
    }
    if !full {
        if cursor.finished_at.is_none() {
            // The NULL section is exhausted: walk the dated rows from the start.
            cursor.finished_at = Some(first_finished());
            cursor.id = 0;
        } else {
            cursor.done = true;
        }
    }
    Ok(ids)
}

/// A retry refused because another job now holds the dedupe key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DedupeConflict {
    /// The job that stays failed (in `RetryReport::not_revived`: the workflow step that stays
    /// cancelled).
    pub id: JobId,
    /// Its dedupe key.
    pub dedupe_key: Option<String>,
    /// The pending, waiting or processing job holding the key, if it could be found.
    pub holder: Option<JobId>,
}

/// What [`job_retry_failed`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RetryReport {
    /// Jobs back in `pending`.
    pub retried: Vec<JobId>,
    /// Jobs left in `failed` because their dedupe key is taken.
    pub conflicts: Vec<DedupeConflict>,
    /// Ids that were not failed jobs (unknown, or in another state).
    pub skipped: Vec<JobId>,
    /// Workflow steps that had been cancelled because a job retried here failed, back in
    /// `waiting` (`store::workflow::wf_revive`).
    pub revived: Vec<JobId>,
    /// Such steps left `cancelled`: another job holds their dedupe key now.
    pub not_revived: Vec<DedupeConflict>,
}

/// The failed jobs among `ids`, in their order, each once; the others go to `skipped`. The rows are
/// locked (`FOR UPDATE`) until the caller's transaction ends, so they stay failed while it
/// acts on them: a concurrent retry, discard or delete waits, then finds them changed.
async fn failed_among(
    conn: &mut MySqlConnection,
    ids: &[JobId],
    skipped: &mut Vec<JobId>,
) -> Result<Vec<JobId>, Error> {
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_failed_check */ SELECT id FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({}) AND status = 'failed' FOR UPDATE",
        placeholders(padded_len(ids.len()))
    ));
    let found: Vec<u64> = bind_ids(sqlx::query(sql), ids)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| r.try_get("id"))
        .collect::<Result<_, _>>()?;
    // An id named twice is one job: acted on, counted and reported once.
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    let mut failed = Vec::with_capacity(found.len());
    for &id in ids {
        if !seen.insert(id.0) {
            continue;
        }
        if found.contains(&id.0) {
            failed.push(id);
        } else {
            skipped.push(id);
        }
    }
    Ok(failed)
}

fn retry_sql(n: usize) -> AssertSqlSafe<String> {
    AssertSqlSafe(format!(
        "/* mysqlq:job_retry_failed */ UPDATE job_queue FORCE INDEX (PRIMARY) SET status = 'pending', attempts = 0, \
         available_at = UTC_TIMESTAMP(6), finished_at = NULL, locked_by = NULL, \
         claim_token = NULL, lease_expires_at = NULL WHERE id IN ({}) AND status = 'failed'",
        placeholders(padded_len(n))
    ))
}

/// `job_retry_failed`: moves failed jobs back to `pending` (attempts reset to 0, runnable now,
/// `finished_at` cleared; `last_error` kept until the next attempt), up to [`BULK_CHUNK`] ids per
/// statement. A job whose dedupe key another job now holds (error 1062) stays failed and is
/// reported in [`RetryReport::conflicts`]; the others go ahead.
pub async fn job_retry_failed(
    conn: &mut MySqlConnection,
    ids: &[JobId],
    audit: Option<u64>,
) -> Result<RetryReport, Error> {
    let mut report = RetryReport::default();
    for chunk in ids.chunks(BULK_CHUNK) {
        // The check locks the rows, so each job counted as retried was. READ COMMITTED: the
        // revival below reads the latest committed edges after locking the dependents.
        let mut tx = conn
            .begin_with("/* mysqlq:job_retry_failed */ SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION")
            .await?;
        let failed = failed_among(&mut tx, chunk, &mut report.skipped).await?;
        if failed.is_empty() {
            continue;
        }
        let before = report.retried.len();
        match bind_ids(sqlx::query(retry_sql(failed.len())), &failed)
            .execute(&mut *tx)
            .await
        {
            Ok(_) => report.retried.extend(&failed),
            Err(e) if crate::store::is_duplicate_key(&e) => {
                // The statement was rolled back whole: redo it one job at a time.
                for &id in &failed {
                    match bind_ids(sqlx::query(retry_sql(1)), &[id])
                        .execute(&mut *tx)
                        .await
                    {
                        Ok(done) if done.rows_affected() == 1 => report.retried.push(id),
                        Ok(_) => report.skipped.push(id),
                        Err(e) if crate::store::is_duplicate_key(&e) => {
                            report.conflicts.push(dedupe_conflict(&mut tx, id).await?);
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Err(e) => return Err(e.into()),
        }
        let (revived, taken) =
            crate::store::workflow::wf_revive(&mut tx, &report.retried[before..]).await?;
        for id in taken {
            report.not_revived.push(dedupe_conflict(&mut tx, id).await?);
        }
        super::audit::audit_jobs(&mut tx, audit, &report.retried[before..]).await?;
        super::audit::audit_jobs(&mut tx, audit, &revived).await?;
        report.revived.extend(revived);
        tx.commit().await?;
    }
    Ok(report)
}

async fn dedupe_conflict(conn: &mut MySqlConnection, id: JobId) -> Result<DedupeConflict, Error> {
    let key: Option<String> = sqlx::query_scalar(
        "/* mysqlq:job_dedupe_key */ SELECT CAST(dedupe_key AS CHAR) FROM job_queue WHERE id = ?",
    )
    .bind(id.0)
    .fetch_optional(&mut *conn)
    .await?
    .flatten();
    let holder = match &key {
        Some(k) => crate::store::job_dedupe_holder(conn, k).await?,
        None => None,
    };
    Ok(DedupeConflict {
        id,
        dedupe_key: key,
        holder,
    })
}

/// What [`job_discard_failed`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DiscardReport {
    /// Jobs deleted.
    pub discarded: Vec<JobId>,
    /// Ids that were not failed jobs (unknown, or in another state).
    pub skipped: Vec<JobId>,
}

/// `job_discard_failed`: deletes failed jobs and their attempt history, up to [`BULK_CHUNK`]
/// ids per transaction. Jobs in any other state are left alone and reported as skipped.
pub async fn job_discard_failed(
    conn: &mut MySqlConnection,
    ids: &[JobId],
    audit: Option<u64>,
) -> Result<DiscardReport, Error> {
    let mut report = DiscardReport::default();
    for chunk in ids.chunks(BULK_CHUNK) {
        // The check locks the rows, so a job retried meanwhile keeps its history.
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let failed = failed_among(&mut tx, chunk, &mut report.skipped).await?;
        // A failed workflow step goes with its workflow (retry it, or let the pruner delete
        // the finished workflow whole): discarding it would leave its dependents' gates open.
        let steps = workflow_steps(&mut tx, &failed).await?;
        report
            .skipped
            .extend(failed.iter().filter(|id| steps.contains(id)));
        let failed: Vec<JobId> = failed
            .into_iter()
            .filter(|id| !steps.contains(id))
            .collect();
        if failed.is_empty() {
            continue;
        }
        let sql = AssertSqlSafe(format!(
            "/* mysqlq:job_discard_failed */ DELETE job_queue FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({}) AND status = 'failed'",
            placeholders(padded_len(failed.len()))
        ));
        crate::store::job_attempt_delete(&mut tx, &failed).await?;
        bind_ids(sqlx::query(sql), &failed)
            .execute(&mut *tx)
            .await?;
        super::audit::audit_jobs(&mut tx, audit, &failed).await?;
        tx.commit().await?;
        report.discarded.extend(&failed);
    }
    Ok(report)
}

/// The workflow steps among `ids`.
async fn workflow_steps(conn: &mut MySqlConnection, ids: &[JobId]) -> Result<Vec<JobId>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = AssertSqlSafe(format!(
        "/* mysqlq:job_discard_failed */ SELECT id FROM job_queue FORCE INDEX (PRIMARY) WHERE id IN ({}) AND workflow_id IS NOT NULL",
        placeholders(padded_len(ids.len()))
    ));
    bind_ids(sqlx::query(sql), ids)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| r.try_get::<u64, _>("id").map(JobId))
        .collect::<Result<_, _>>()
        .map_err(Into::into)
}
