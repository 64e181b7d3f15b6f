//! One job by id, every column an operator looks at (`failed show`, the dashboard's job page).

use serde::Serialize;
use sqlx::{MySqlConnection, Row};

use crate::state::{JobState, Timestamp};
use crate::{Error, JobId};

pub(crate) const JOB_GET_SQL: &str =
    concat!("/* mysqlq:job_get */ ", job_select!(), " WHERE j.id = ?");

/// One job, every column an operator looks at ([`Admin::job`](crate::admin::Admin::job)).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    /// The job's id.
    pub id: JobId,
    /// Its queue.
    pub queue: String,
    /// Its kind (`None` for rows inserted by plain SQL without one).
    pub kind: Option<String>,
    /// Its state.
    pub state: JobState,
    /// The payload as JSON text.
    pub payload: String,
    /// Priority (lower runs first).
    pub priority: i16,
    /// Attempts started.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// The last attempt's error.
    pub last_error: Option<String>,
    /// Dedupe key.
    pub dedupe_key: Option<String>,
    /// Ordering key.
    pub ordering_key: Option<String>,
    /// Concurrency key.
    pub concurrency_key: Option<String>,
    /// Rate key (`docs/rate-limits.md`).
    pub rate_key: Option<String>,
    /// The rate key's limit, as written (`"10/s"`).
    pub rate_limit: Option<String>,
    /// The worker holding the job, or that ran its last attempt.
    pub locked_by: Option<String>,
    /// When it was enqueued.
    pub created_at: Timestamp,
    /// When it was first claimed.
    pub first_claimed_at: Option<Timestamp>,
    /// Not claimed before this.
    pub available_at: Timestamp,
    /// When the holder's lease ends (while `processing`).
    pub lease_expires_at: Option<Timestamp>,
    /// When it reached a final state.
    pub finished_at: Option<Timestamp>,
    /// Last change of the row.
    pub updated_at: Timestamp,
    /// When an operator cancelled the job (`None` if none did; a handler's own cancel
    /// decision leaves it `None`).
    pub cancelled_at: Option<Timestamp>,
    /// Who cancelled it.
    pub cancelled_by: Option<String>,
    /// Why.
    pub cancel_reason: Option<String>,
    /// The database's clock when the row was read (to show ages without the host's clock).
    pub read_at: Timestamp,
    /// The job's meta (a JSON object: set at enqueue and by hooks, updated by the running
    /// handler: progress, checkpoints), `None` when empty.
    pub meta: Option<serde_json::Value>,
}

/// `job_get`: one job by id, any state.
pub async fn job_get(conn: &mut MySqlConnection, id: JobId) -> Result<Option<Job>, Error> {
    let Some(r) = sqlx::query(JOB_GET_SQL)
        .bind(id.0)
        .fetch_optional(&mut *conn)
        .await?
    else {
        return Ok(None);
    };
    job_from_row(&r).map(Some)
}

/// A [`Job`] from a row of [`job_select!`].
pub(crate) fn job_from_row(r: &sqlx::mysql::MySqlRow) -> Result<Job, Error> {
    let status: String = r.try_get("status")?;
    let meta: Option<String> = r.try_get("meta")?;
    Ok(Job {
        id: JobId(r.try_get("id")?),
        queue: r.try_get("queue_name")?,
        kind: r.try_get("kind")?,
        state: status.parse()?,
        payload: r.try_get("payload")?,
        priority: r.try_get("priority")?,
        attempts: r.try_get("attempts")?,
        max_attempts: r.try_get("max_attempts")?,
        last_error: r.try_get("last_error")?,
        dedupe_key: r.try_get("dedupe_key")?,
        ordering_key: r.try_get("ordering_key")?,
        concurrency_key: r.try_get("concurrency_key")?,
        rate_key: r.try_get("rate_key")?,
        rate_limit: super::super::rate::stored_rate(
            r.try_get("rate_limit")?,
            r.try_get("rate_period_us")?,
        )
        .map(|r| r.to_string()),
        locked_by: r.try_get("locked_by")?,
        created_at: r.try_get("created_at")?,
        first_claimed_at: r.try_get("first_claimed_at")?,
        available_at: r.try_get("available_at")?,
        lease_expires_at: r.try_get("lease_expires_at")?,
        finished_at: r.try_get("finished_at")?,
        updated_at: r.try_get("updated_at")?,
        cancelled_at: r.try_get("cancelled_at")?,
        cancelled_by: r.try_get("cancelled_by")?,
        cancel_reason: r.try_get("cancel_reason")?,
        read_at: r.try_get("now")?,
        meta: meta
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| Error::invalid("job meta", format!("not valid JSON: {e}")))?,
    })
}
