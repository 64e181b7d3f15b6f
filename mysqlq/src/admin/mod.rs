//! The operator API: what `mysqlq-cli` and the dashboard show and do, typed. States are a
//! [`JobState`], times are [`Timestamp`]s (UTC), bulk operations walk the failed jobs in keyset
//! pages inside the library. The CLI and the dashboard are presentation over this module; the
//! SQL lives in the store.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::MySqlPool) -> Result<(), mysqlq::Error> {
//! use mysqlq::admin::{Admin, Selection};
//! let admin = Admin::new(pool);
//! for job in admin.failed(Some("emails"), 20).await? {
//!     println!("{} failed at {:?}: {:?}", job.id, job.failed_at, job.last_error);
//! }
//! let report = admin.retry_failed(Selection::All { queue: Some("emails") }, |_| {}).await?;
//! println!("{} back to pending", report.retried);
//! # Ok(()) }
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Serialize;
use sqlx::MySqlPool;

use crate::store::admin as sql;
use crate::{Error, JobId};

mod cancel;
mod causal;
mod doctor;
mod doctor_galera;
mod stats;

pub use cancel::{Attempt, AttemptOutcome, CancelReport, DeleteReport, JobSelection};
pub use doctor::{Check, Level};
pub use stats::{PerMinute, Stats};

/// A point in time, UTC.
pub type Timestamp = DateTime<Utc>;

/// A job's state (`job_queue.status`). "Ready" and "scheduled" are not states: a
/// [`Pending`](Self::Pending) job is ready once its `available_at` has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum JobState {
    /// Waiting to run at `available_at`.
    Pending,
    /// Claimed by a worker, which holds it until its lease ends.
    Processing,
    /// The handler returned `Ok` (final).
    Completed,
    /// Attempts exhausted or a permanent error (final, kept for inspection).
    Failed,
    /// Cancelled (final).
    Cancelled,
}

impl JobState {
    /// Every state, in the order of the state machine.
    pub const ALL: [Self; 5] = [
        Self::Pending,
        Self::Processing,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The value stored in `job_queue.status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Processing => "processing",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// `true` for the states a job never leaves by itself.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "job state",
                    format!(
                        "`{s}` is not one of pending, processing, completed, failed, cancelled"
                    ),
                )
            })
    }
}

/// One job, every column an operator looks at.
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

/// A failed job in a listing.
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

/// Which failed jobs a bulk operation touches.
#[derive(Debug, Clone, Copy)]
pub enum Selection<'a> {
    /// These ids (ids that are not failed jobs are reported, not touched).
    Ids(&'a [JobId]),
    /// Every failed job, of one queue or of all, walked in keyset pages.
    All {
        /// Only this queue.
        queue: Option<&'a str>,
    },
}

pub use crate::store::admin::{
    ActivityStats, DedupeConflict, KindStats, LeaseStats, QueueStats, TableStats, WorkerStats,
};
pub use crate::store::dashboard::{JobPageParams, MAX_PAGE, MinutePoint, SCAN_WINDOW};

/// A job in a listing ([`Admin::jobs`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobRow {
    /// The job's id.
    pub id: JobId,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: Option<String>,
    /// Its state.
    pub state: JobState,
    /// Attempts started.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// When it was enqueued (to the second).
    pub created_at: Timestamp,
    /// Not claimed before this (to the second).
    pub available_at: Timestamp,
    /// When it reached a final state (to the second).
    pub finished_at: Option<Timestamp>,
}

/// One page of [`Admin::jobs`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobPage {
    /// The jobs, newest id first.
    pub jobs: Vec<JobRow>,
    /// The cursor of the next page (pass it as [`JobPageParams::before`]), `None` at the end.
    pub next: Option<u64>,
    /// `true` when the page was filtered over a bounded window of index entries and may hold
    /// fewer jobs than asked for although more follow.
    pub windowed: bool,
}

/// What [`Admin::retry_failed`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RetryReport {
    /// Jobs moved back to `pending` (attempts reset, runnable now).
    pub retried: u64,
    /// Jobs left failed because another job holds their dedupe key now.
    pub conflicts: Vec<DedupeConflict>,
    /// Of the ids asked for, those that are not failed jobs (unknown, or in another state).
    pub not_failed: Vec<JobId>,
}

/// What [`Admin::discard_failed`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DiscardReport {
    /// Jobs deleted.
    pub discarded: u64,
    /// Of the ids asked for, those that are not failed jobs.
    pub not_failed: Vec<JobId>,
}

/// The operator API over a pool. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Admin {
    pool: MySqlPool,
}

impl Admin {
    /// Operations on the database behind `pool`.
    pub fn new(pool: MySqlPool) -> Self {
        Self { pool }
    }

    /// Per queue: ready, oldest ready age, scheduled, processing, expired leases, failed,
    /// paused (from indexes). Like [`Admin::chart`] and [`Admin::failed_count`], read with
    /// causal reads on a Galera node (`wsrep_sync_wait = 1`).
    pub async fn queues(&self) -> Result<Vec<QueueStats>, Error> {
        let mut conn = causal::CausalReads::acquire(&self.pool).await?;
        let queues = sql::stats_queues(&mut conn).await?;
        conn.done().await;
        Ok(queues)
    }

    /// Claims and completions per minute over the last hour (the workers' minute rows).
    pub async fn chart(&self) -> Result<Vec<MinutePoint>, Error> {
        let mut conn = causal::CausalReads::acquire(&self.pool).await?;
        let points = crate::store::dashboard::dashboard_chart(&mut conn).await?;
        conn.done().await;
        Ok(points)
    }

    /// One page of jobs, newest id first, filtered by state, queue and kind (keyset on the id:
    /// pass [`JobPage::next`] as [`JobPageParams::before`]).
    pub async fn jobs(&self, params: &JobPageParams<'_>) -> Result<JobPage, Error> {
        if let Some(st) = params.state {
            st.parse::<JobState>()?;
        }
        let mut conn = self.pool.acquire().await?;
        let page = crate::store::dashboard::job_page(&mut conn, params).await?;
        Ok(JobPage {
            jobs: page
                .jobs
                .into_iter()
                .map(|r| {
                    Ok(JobRow {
                        id: r.id,
                        queue: r.queue,
                        kind: r.kind,
                        state: r.status.parse()?,
                        attempts: r.attempts,
                        max_attempts: r.max_attempts,
                        created_at: time(&r.created_at)?,
                        available_at: time(&r.available_at)?,
                        finished_at: opt_time(r.finished_at.as_deref())?,
                    })
                })
                .collect::<Result<_, Error>>()?,
            next: page.next,
            windowed: page.windowed,
        })
    }

    /// One job by id, in any state.
    pub async fn job(&self, id: JobId) -> Result<Option<Job>, Error> {
        let mut conn = self.pool.acquire().await?;
        sql::job_get(&mut conn, id)
            .await?
            .map(Job::try_from)
            .transpose()
    }

    /// Failed jobs, newest failure first, at most `limit`.
    pub async fn failed(&self, queue: Option<&str>, limit: u32) -> Result<Vec<FailedJob>, Error> {
        let mut conn = self.pool.acquire().await?;
        let rows = sql::job_failed_list(&mut conn, &sql::FailedListParams { queue, limit }).await?;
        rows.into_iter()
            .map(|r| {
                Ok(FailedJob {
                    id: r.id,
                    queue: r.queue,
                    kind: r.kind,
                    attempts: r.attempts,
                    max_attempts: r.max_attempts,
                    failed_at: opt_time(r.finished_at.as_deref())?,
                    last_error: r.last_error,
                })
            })
            .collect()
    }

    /// How many jobs are failed (of one queue), counted on an index.
    pub async fn failed_count(&self, queue: Option<&str>) -> Result<u64, Error> {
        let mut conn = causal::CausalReads::acquire(&self.pool).await?;
        let n = sql::job_failed_count(&mut conn, queue).await?;
        conn.done().await;
        Ok(n)
    }

    /// Moves failed jobs back to `pending`. `progress` is called with the number of jobs
    /// looked at after each page. A job whose dedupe key another job holds now stays failed
    /// and is reported in [`RetryReport::conflicts`].
    pub async fn retry_failed(
        &self,
        which: Selection<'_>,
        mut progress: impl FnMut(usize),
    ) -> Result<RetryReport, Error> {
        let mut report = RetryReport::default();
        let mut conn = self.pool.acquire().await?;
        let mut pages = Pages::new(which);
        while let Some(ids) = pages.next(&mut conn).await? {
            let r = sql::job_retry_failed(&mut conn, &ids).await?;
            report.retried += r.retried.len() as u64;
            report.conflicts.extend(r.conflicts);
            report.not_failed.extend(r.skipped);
            progress(ids.len());
        }
        Ok(report)
    }

    /// Deletes failed jobs. `progress` as in [`retry_failed`](Self::retry_failed).
    pub async fn discard_failed(
        &self,
        which: Selection<'_>,
        mut progress: impl FnMut(usize),
    ) -> Result<DiscardReport, Error> {
        let mut report = DiscardReport::default();
        let mut conn = self.pool.acquire().await?;
        let mut pages = Pages::new(which);
        while let Some(ids) = pages.next(&mut conn).await? {
            let r = sql::job_discard_failed(&mut conn, &ids).await?;
            report.discarded += r.discarded.len() as u64;
            report.not_failed.extend(r.skipped);
            progress(ids.len());
        }
        Ok(report)
    }

    /// Stops workers from claiming jobs of `queue` (they see it on their next claim).
    pub async fn pause(&self, queue: &str) -> Result<(), Error> {
        self.set_paused(queue, true).await
    }

    /// Lets workers claim jobs of `queue` again.
    pub async fn resume(&self, queue: &str) -> Result<(), Error> {
        self.set_paused(queue, false).await
    }

    async fn set_paused(&self, queue: &str, paused: bool) -> Result<(), Error> {
        let mut conn = self.pool.acquire().await?;
        crate::store::queue_set_paused(&mut conn, queue, paused).await
    }

    /// `true` when any job (in any state) names `queue`.
    pub async fn queue_has_jobs(&self, queue: &str) -> Result<bool, Error> {
        let mut conn = self.pool.acquire().await?;
        sql::queue_has_jobs(&mut conn, queue).await
    }

    /// Deletes jobs in a final `state` that finished more than `older_than` ago, `batch` rows
    /// per statement, until none are left; returns how many were deleted. `progress` is called
    /// with each batch's count.
    pub async fn purge(
        &self,
        state: JobState,
        older_than: Duration,
        batch: u32,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, Error> {
        let status = match state {
            JobState::Completed => crate::store::PruneStatus::Completed,
            JobState::Failed => crate::store::PruneStatus::Failed,
            JobState::Cancelled => crate::store::PruneStatus::Cancelled,
            other => {
                return Err(Error::invalid(
                    "purge",
                    format!("only final states can be purged, not `{other}`"),
                ));
            }
        };
        let mut conn = self.pool.acquire().await?;
        let mut total = 0;
        loop {
            let n = crate::store::job_prune(&mut conn, status, older_than, batch.max(1)).await?;
            total += n;
            progress(n);
            if n < u64::from(batch.max(1)) {
                return Ok(total);
            }
        }
    }
}

/// The selected failed jobs, page by page: the ids given (one page), or keyset pages of the
/// failed jobs (never OFFSET; jobs leaving `failed` meanwhile do not disturb the walk).
struct Pages<'a> {
    which: Selection<'a>,
    cursor: sql::FailedCursor,
    given: bool,
}

impl<'a> Pages<'a> {
    fn new(which: Selection<'a>) -> Self {
        Self {
            which,
            cursor: sql::FailedCursor::default(),
            given: false,
        }
    }

    async fn next(
        &mut self,
        conn: &mut sqlx::MySqlConnection,
    ) -> Result<Option<Vec<JobId>>, Error> {
        match self.which {
            Selection::Ids(ids) => {
                let first = !self.given;
                self.given = true;
                Ok((first && !ids.is_empty()).then(|| ids.to_vec()))
            }
            Selection::All { queue } => {
                let page = sql::FailedPageParams {
                    queue,
                    limit: u32::try_from(sql::BULK_CHUNK).unwrap_or(500),
                };
                while !self.cursor.is_done() {
                    let ids = sql::job_failed_page(conn, &page, &mut self.cursor).await?;
                    if !ids.is_empty() {
                        return Ok(Some(ids));
                    }
                }
                Ok(None)
            }
        }
    }
}

impl TryFrom<sql::JobDetail> for Job {
    type Error = Error;

    fn try_from(d: sql::JobDetail) -> Result<Self, Error> {
        Ok(Self {
            id: d.id,
            queue: d.queue,
            kind: d.kind,
            state: d.status.parse()?,
            payload: d.payload,
            priority: d.priority,
            attempts: d.attempts,
            max_attempts: d.max_attempts,
            last_error: d.last_error,
            dedupe_key: d.dedupe_key,
            ordering_key: d.ordering_key,
            concurrency_key: d.concurrency_key,
            locked_by: d.locked_by,
            created_at: time(&d.created_at)?,
            first_claimed_at: opt_time(d.first_claimed_at.as_deref())?,
            available_at: time(&d.available_at)?,
            lease_expires_at: opt_time(d.lease_expires_at.as_deref())?,
            finished_at: opt_time(d.finished_at.as_deref())?,
            updated_at: time(&d.updated_at)?,
            cancelled_at: opt_time(d.cancelled_at.as_deref())?,
            cancelled_by: d.cancelled_by,
            cancel_reason: d.cancel_reason,
            read_at: time(&d.now)?,
            meta: d
                .meta
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|e| Error::invalid("job meta", format!("not valid JSON: {e}")))?,
        })
    }
}

/// A `DATETIME(6)` as the store reads it (`YYYY-MM-DD HH:MM:SS[.ffffff]`, UTC).
fn time(s: &str) -> Result<Timestamp, Error> {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
        .map(|t| t.and_utc())
        .map_err(|e| Error::invalid("database time", format!("`{s}`: {e}")))
}

fn opt_time(s: Option<&str>) -> Result<Option<Timestamp>, Error> {
    s.map(time).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_their_stored_names() {
        for st in JobState::ALL {
            assert_eq!(st.as_str().parse::<JobState>().unwrap(), st);
        }
        let err = "done".parse::<JobState>().unwrap_err().to_string();
        assert!(err.contains("`done` is not one of"), "{err}");
        assert!(JobState::Failed.is_final() && !JobState::Pending.is_final());
    }

    #[test]
    fn database_times_parse_as_utc() {
        let t = time("2024-05-01 10:00:00.123456").unwrap();
        assert_eq!(t.to_rfc3339(), "2024-05-01T10:00:00.123456+00:00");
        assert!(time("2024-05-01 10:00:00").is_ok());
        assert!(time("yesterday").is_err());
    }
}
