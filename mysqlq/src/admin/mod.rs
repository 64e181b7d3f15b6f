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

use std::time::Duration;

use serde::Serialize;
use sqlx::MySqlPool;

use crate::store::admin as sql;
use crate::{Error, JobId};

mod audit;
mod bulk;
mod cancel;
mod causal;
mod check;
mod doctor;
mod doctor_galera;
mod insight;
mod latency;
mod search;
mod search_fields;
mod states;
mod stats;
mod workers;
mod workflow;

pub use crate::store::admin::{AuditQuery, AuditRecord};
pub use crate::store::search::{Action, Cursor, SearchPage, SearchRow, Walk, Window};
pub use crate::store::workflow::admin::{
    StepCounts, WorkflowDetail, WorkflowQuery, WorkflowStep, WorkflowSummary,
};
pub use bulk::{ActReport, Target};
pub use cancel::{CancelReport, DeleteReport, JobSelection};
pub use check::{Check, Level};
pub use insight::{DEPTH_STATES, DepthRow, QueueHistory, QueueSettings, ThroughputRow};
pub use latency::{LatencyRow, Percentiles, SeriesCounts};
pub use search::{COUNT_TIMEOUT_SECONDS, Counted};
pub use search_fields::{SearchField, SearchFieldAdded};
pub use stats::{PerMinute, Stats};
pub use workers::{
    Holder, LiveWorker, RUNNING_CAP, RunningJob, RunningJobs, STALE_AFTER, WorkerQueue, Workers,
};

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

pub use crate::state::{
    AttemptOutcome, Capped, JobState, OpState, QueueStates, RowFacts, StateCounts, Timestamp,
};
pub use crate::store::admin::{
    ActivityStats, DedupeConflict, FailedJob, Job, KindStats, LeaseStats, QueueStats, TableStats,
    WorkerStats,
};
pub use crate::store::dashboard::MinutePoint;
pub use crate::store::{Attempt, MAX_PAGE_ROWS, PageRow, QueueLimits};

/// What [`Admin::retry_failed`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RetryReport {
    /// Jobs moved back to `pending` (attempts reset, runnable now).
    pub retried: u64,
    /// Jobs left failed because another job holds their dedupe key now.
    pub conflicts: Vec<DedupeConflict>,
    /// Of the ids asked for, those that are not failed jobs (unknown, or in another state).
    pub not_failed: Vec<JobId>,
    /// Workflow steps that had been cancelled because a retried job failed ("upstream … failed"),
    /// waiting for it again.
    pub revived: u64,
    /// Such steps left `cancelled`, because another job holds their dedupe key now (the
    /// holder is named); cancel or finish the holder, then retry again.
    pub not_revived: Vec<DedupeConflict>,
}

/// What [`Admin::discard_failed`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DiscardReport {
    /// Jobs deleted.
    pub discarded: u64,
    /// Of the ids asked for, those that are not failed jobs.
    pub not_failed: Vec<JobId>,
}

/// The operator API over a pool. Cheap to clone. Every action it takes (cancel, retry,
/// discard, delete, pause, resume, purge) is recorded in the audit trail under the name given
/// to [`by`](Self::by) ([`Admin::audit`]).
#[derive(Debug, Clone)]
pub struct Admin {
    pool: MySqlPool,
    /// Who acts, for the audit trail.
    actor: String,
    /// Why, for the audit trail.
    reason: Option<String>,
}

impl Admin {
    /// Operations on the database behind `pool`, recorded as taken by
    /// [`DEFAULT_ACTOR`](Self::DEFAULT_ACTOR) until [`by`](Self::by) names someone.
    pub fn new(pool: MySqlPool) -> Self {
        Self {
            pool,
            actor: Self::DEFAULT_ACTOR.to_owned(),
            reason: None,
        }
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

    /// One job by id, in any state.
    pub async fn job(&self, id: JobId) -> Result<Option<Job>, Error> {
        let mut conn = self.pool.acquire().await?;
        sql::job_get(&mut conn, id).await
    }

    /// Failed jobs, newest failure first, at most `limit`.
    pub async fn failed(&self, queue: Option<&str>, limit: u32) -> Result<Vec<FailedJob>, Error> {
        let mut conn = self.pool.acquire().await?;
        sql::job_failed_list(&mut conn, &sql::FailedListParams { queue, limit }).await
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
        let audit = self.record(&mut conn, "retry", &which).await?;
        let mut pages = Pages::new(which);
        while let Some(ids) = pages.next(&mut conn).await? {
            let r = sql::job_retry_failed(&mut conn, &ids, audit).await?;
            report.retried += r.retried.len() as u64;
            report.conflicts.extend(r.conflicts);
            report.not_failed.extend(r.skipped);
            report.revived += r.revived.len() as u64;
            report.not_revived.extend(r.not_revived);
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
        let audit = self.record(&mut conn, "discard", &which).await?;
        let mut pages = Pages::new(which);
        while let Some(ids) = pages.next(&mut conn).await? {
            let r = sql::job_discard_failed(&mut conn, &ids, audit).await?;
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
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        crate::store::queue_set_paused(&mut tx, queue, paused).await?;
        let action = if paused { "pause" } else { "resume" };
        self.record_entry(&mut tx, action, Some(queue), None, None)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// `queue`'s limits that every worker obeys (`work --rate`, `--global`,
    /// [`Admin::set_queue_limits`]); none when unset.
    pub async fn queue_limits(&self, queue: &str) -> Result<QueueLimits, Error> {
        let mut conn = self.pool.acquire().await?;
        crate::store::queue_limits(&mut conn, queue).await
    }

    /// Sets `queue`'s limits (`QueueLimits::default()` clears them), for every worker from its
    /// next claim of the queue; written to the audit trail (`limits`, with the new values).
    pub async fn set_queue_limits(&self, queue: &str, limits: QueueLimits) -> Result<(), Error> {
        let mut conn = self.pool.acquire().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        crate::store::queue_limits_set(&mut tx, queue, limits).await?;
        let detail = format!(
            "rate {}, global {}",
            limits
                .rate
                .map_or_else(|| "none".to_owned(), |r| r.to_string()),
            limits
                .global
                .map_or_else(|| "none".to_owned(), |g| g.to_string())
        );
        self.record_entry(&mut tx, "limits", Some(queue), None, Some(&detail))
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The queues that live workers serve: those seen within the last minute (their row is
    /// refreshed every statistics interval, 5 s by default) and not stopped. Sorted.
    pub async fn live_queues(&self) -> Result<Vec<String>, Error> {
        let mut conn = self.pool.acquire().await?;
        crate::store::queue_live(&mut conn, Duration::from_secs(60)).await
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
        let status = prune_status(state)?;
        let mut conn = self.pool.acquire().await?;
        let detail = format!(
            "{state} jobs finished more than {} ago",
            crate::backoff::format_duration(older_than)
        );
        let audit = self
            .record_entry(&mut conn, "purge", None, None, Some(&detail))
            .await?;
        let mut total = 0;
        loop {
            let n =
                crate::store::job_prune(&mut conn, status, older_than, batch.max(1), audit).await?;
            total += n;
            progress(n);
            if n < u64::from(batch.max(1)) {
                return Ok(total);
            }
        }
    }
}

/// The pruner's name of a final state; an error for the others.
fn prune_status(state: JobState) -> Result<crate::store::PruneStatus, Error> {
    match state {
        JobState::Completed => Ok(crate::store::PruneStatus::Completed),
        JobState::Failed => Ok(crate::store::PruneStatus::Failed),
        JobState::Cancelled => Ok(crate::store::PruneStatus::Cancelled),
        other => Err(Error::invalid(
            "purge",
            format!("only final states can be purged, not `{other}`"),
        )),
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
