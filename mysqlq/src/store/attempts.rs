//! The history of a job's attempts (`mysqlq_job_attempt`): one row per attempt that did not
//! complete, written in the transaction that records the attempt's outcome
//! ([`super::job_finish_attempt_logged`]) and trimmed to the newest N per job there. Every
//! statement of mysqlq that deletes jobs deletes their rows too (no foreign key: see migration
//! 4).

use std::time::Duration;

use serde::Serialize;
use sqlx::{MySqlConnection, Row};

use super::sql::{bind_ids, micros, padded_len, placeholders};
use crate::state::{AttemptOutcome, Timestamp};
use crate::{Error, JobId};

/// Longest error text kept per attempt, in bytes. Longer messages are cut at a character
/// boundary and end with [`TRUNCATED_MARK`] (the row's `error_bytes` keeps the full length).
pub const MAX_ATTEMPT_ERROR_BYTES: usize = 8192;

/// What ends an error cut to [`MAX_ATTEMPT_ERROR_BYTES`].
pub const TRUNCATED_MARK: &str = " …[truncated]";

/// Cuts `s` to [`MAX_ATTEMPT_ERROR_BYTES`] (marker included) at a character boundary.
pub fn truncate_attempt_error(s: &str) -> std::borrow::Cow<'_, str> {
    if s.len() <= MAX_ATTEMPT_ERROR_BYTES {
        return s.into();
    }
    let mut end = MAX_ATTEMPT_ERROR_BYTES - TRUNCATED_MARK.len();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{TRUNCATED_MARK}", &s[..end]).into()
}

/// One attempt to record ([`job_attempt_record`]).
#[derive(Debug, Clone, Copy)]
pub struct AttemptRecord<'a> {
    /// The attempt's number (the claim's `attempts`).
    pub attempt: u32,
    /// `retry`, `snooze`, `fail` or `cancel`.
    pub outcome: &'a str,
    /// The worker that ran it.
    pub worker: &'a str,
    /// How long it ran (its start is the database's now minus this).
    pub ran_for: Duration,
    /// Attempts kept per job, newest first; older rows are deleted. At least 1.
    pub keep: u32,
}

const INSERT_SQL: &str = "/* mysqlq:job_attempt_record */ INSERT INTO mysqlq_job_attempt \
    (job_id, attempt, outcome, worker, started_at, finished_at, error, error_bytes) \
    VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6), ?, ?)";

/// The job's rows older than its `keep`-th newest: read plainly, then deleted by primary key.
/// A range DELETE on `idx_attempt_job` would take next-key locks up to the next job's rows at
/// REPEATABLE READ (the default of a worker's session): a worker stopped inside its outcome
/// transaction would then block every other worker's attempt of a job with a nearby id.
const TRIM_FIND_SQL: &str = "/* mysqlq:job_attempt_trim */ SELECT id FROM mysqlq_job_attempt \
    WHERE job_id = ? ORDER BY id DESC LIMIT 1000 OFFSET ?";

/// `job_attempt_record`: appends one attempt of job `id` and trims its history to
/// [`AttemptRecord::keep`] rows. Run it in the transaction that writes the attempt's outcome.
pub async fn job_attempt_record(
    conn: &mut MySqlConnection,
    id: JobId,
    r: &AttemptRecord<'_>,
    error: &str,
) -> Result<(), Error> {
    let cut = truncate_attempt_error(error);
    sqlx::query(INSERT_SQL)
        .bind(id.0)
        .bind(r.attempt)
        .bind(r.outcome)
        .bind(r.worker)
        .bind(micros(r.ran_for))
        .bind(cut.as_ref())
        .bind(u32::try_from(error.len()).unwrap_or(u32::MAX))
        .execute(&mut *conn)
        .await?;
    let old: Vec<u64> = sqlx::query_scalar(TRIM_FIND_SQL)
        .bind(id.0)
        .bind(r.keep.max(1))
        .fetch_all(&mut *conn)
        .await?;
    if !old.is_empty() {
        let ids: Vec<JobId> = old.into_iter().map(JobId).collect();
        let sql = sqlx::AssertSqlSafe(format!(
            "/* mysqlq:job_attempt_trim */ DELETE FROM mysqlq_job_attempt WHERE id IN ({})",
            placeholders(padded_len(ids.len()))
        ));
        bind_ids(sqlx::query(sql), &ids).execute(&mut *conn).await?;
    }
    Ok(())
}

/// `job_attempt_delete`: deletes the attempt history of `ids` (run it in the transaction that
/// deletes the jobs).
pub async fn job_attempt_delete(conn: &mut MySqlConnection, ids: &[JobId]) -> Result<u64, Error> {
    if ids.is_empty() {
        return Ok(0);
    }
    let sql = sqlx::AssertSqlSafe(format!(
        "/* mysqlq:job_attempt_delete */ DELETE FROM mysqlq_job_attempt WHERE job_id IN ({})",
        placeholders(padded_len(ids.len()))
    ));
    Ok(bind_ids(sqlx::query(sql), ids)
        .execute(&mut *conn)
        .await?
        .rows_affected())
}

/// One attempt that did not complete ([`Admin::attempts`](crate::admin::Admin::attempts)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attempt {
    /// The attempt's number (1 for the first; it restarts at 1 after `failed retry`).
    pub attempt: u32,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The worker that ran it.
    pub worker: Option<String>,
    /// When it started (the database's clock minus the handler's run time); `None` for an
    /// attempt whose worker died, recorded by the reaper when its lease expired.
    pub started_at: Option<Timestamp>,
    /// When its outcome was written.
    pub finished_at: Timestamp,
    /// Its error, cut to 8 KiB at a character boundary (ending with ` …[truncated]` when
    /// cut).
    pub error: String,
    /// `true` when `error` was cut.
    pub truncated: bool,
    /// The error's full length in bytes.
    pub error_bytes: u32,
}

/// `job_attempts`: the recorded attempts of job `id`, newest first.
pub async fn job_attempts(conn: &mut MySqlConnection, id: JobId) -> Result<Vec<Attempt>, Error> {
    let rows = sqlx::query(
        "/* mysqlq:job_attempts */ SELECT attempt, CAST(outcome AS CHAR) AS outcome, \
         CAST(worker AS CHAR) AS worker, started_at, finished_at, \
         CAST(error AS CHAR) AS error, error_bytes \
         FROM mysqlq_job_attempt WHERE job_id = ? ORDER BY id DESC",
    )
    .bind(id.0)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| {
            let error: String = r.try_get("error")?;
            let error_bytes: u32 = r.try_get("error_bytes")?;
            Ok(Attempt {
                attempt: r.try_get("attempt")?,
                outcome: r.try_get::<String, _>("outcome")?.parse()?,
                worker: r.try_get("worker")?,
                started_at: r.try_get("started_at")?,
                finished_at: r.try_get("finished_at")?,
                truncated: error.len() < error_bytes as usize,
                error,
                error_bytes,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_errors_are_cut_at_a_char_boundary_and_marked() {
        let long = "é".repeat(MAX_ATTEMPT_ERROR_BYTES);
        let cut = truncate_attempt_error(&long);
        assert!(cut.len() <= MAX_ATTEMPT_ERROR_BYTES, "{}", cut.len());
        assert!(cut.ends_with(TRUNCATED_MARK));
        let body = cut.strip_suffix(TRUNCATED_MARK).unwrap();
        assert!(!body.is_empty() && body.chars().all(|c| c == 'é'));
        assert_eq!(truncate_attempt_error("short"), "short");
        let exact = "a".repeat(MAX_ATTEMPT_ERROR_BYTES);
        assert_eq!(truncate_attempt_error(&exact), exact.as_str());
    }
}
