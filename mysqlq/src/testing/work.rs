//! [`work_one`] and [`work_job`]: one job run now through the worker's own path (River's
//! `rivertest.Worker`), with the row it left.

use sqlx::MySqlPool;

use super::drain::{Attempted, Outcome, attempted, check};
use super::options::WorkOptions;
use crate::admin::{Attempt, Job as JobRow};
use crate::store::Next;
use crate::worker::Inline;
use crate::{Error, Job, JobId};

/// One job run by [`work_one`] or [`work_job`]: how the attempt ended and the row it left.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct WorkedJob {
    /// The job.
    pub id: JobId,
    /// How the attempt ended.
    pub outcome: Outcome,
    /// The attempt, with the error the worker recorded.
    pub attempt: Attempted,
    /// The job's row afterwards (state, attempts, `last_error`, `available_at` of a retry, …).
    pub row: JobRow,
    /// Its recorded attempts that did not complete, newest first
    /// ([`Admin::attempts`](crate::admin::Admin::attempts)).
    pub history: Vec<Attempt>,
}

/// Enqueues `job` (with [`WorkOptions::enqueue_options`]) and runs it now, whatever its
/// schedule, through the worker's own path (River's `rivertest.Worker`): see [`drain`](super::drain) for what
/// that path does. Returns the outcome and the row it left. A dedupe key another job holds runs
/// that job.
///
/// ```no_run
/// # async fn demo(pool: sqlx::MySqlPool) -> Result<(), Box<dyn std::error::Error>> {
/// use mysqlq::admin::JobState;
/// use mysqlq::testing::{Outcome, WorkOptions, work_job, work_one};
/// use mysqlq::JobError;
///
/// #[mysqlq::job(retries = 2, backoff = "10s")]
/// async fn flaky(ctx: mysqlq::JobContext) -> Result<(), JobError> {
///     if ctx.attempt() < 3 { Err(JobError::retry("not yet")) } else { Ok(()) }
/// }
///
/// let first = work_one(&pool, Flaky {}, WorkOptions::new()).await?;
/// assert_eq!(first.outcome, Outcome::Retried);
/// assert_eq!(first.row.state, JobState::Pending);
/// let error = first.row.last_error.as_deref().unwrap_or_default();
/// assert!(error.starts_with("not yet (attempt 1 of 3; retry in ")); // 10 s ± 10 % jitter
/// let second = work_job(&pool, first.id, WorkOptions::new()).await?;
/// let third = work_job(&pool, first.id, WorkOptions::new()).await?;
/// assert_eq!((second.outcome, third.outcome), (Outcome::Retried, Outcome::Completed));
/// # Ok(()) }
/// ```
pub async fn work_one<J: Job>(
    pool: &MySqlPool,
    job: J,
    options: WorkOptions,
) -> Result<WorkedJob, Error> {
    let enqueued = job.enqueue_with(pool, &options.enqueue).await?;
    work_job(pool, enqueued.id(), options).await
}

/// Runs the pending job `id` now, whatever its schedule (its next attempt, after a retry), as
/// [`work_one`] does.
///
/// # Errors
/// [`Error::Invalid`] when the job is not there, not `pending`, or cannot run now (its queue is
/// paused, an earlier job of its ordering key is unfinished, its concurrency key is at its
/// limit); [`Error::JobFailed`] without safety.
pub async fn work_job(
    pool: &MySqlPool,
    id: JobId,
    options: WorkOptions,
) -> Result<WorkedJob, Error> {
    let mut w = Inline::start(options.builder(pool, &[])).await?;
    let result = work_with(&mut w, id, &options).await;
    w.stop().await;
    result
}

async fn work_with(w: &mut Inline, id: JobId, o: &WorkOptions) -> Result<WorkedJob, Error> {
    let Some(ran) = w.run_next(Next::Id(id), true).await? else {
        return Err(not_runnable(w, id).await);
    };
    let attempt = attempted(w, ran).await?;
    check(o, &attempt)?;
    let mut conn = w.db().acquire().await?;
    let row = crate::store::admin::job_get(&mut conn, id)
        .await?
        .ok_or_else(|| Error::invalid("job", format!("job {id} was deleted while it ran")))?;
    let history = crate::store::job_attempts(&mut conn, id).await?;
    Ok(WorkedJob {
        id,
        outcome: attempt.outcome,
        attempt,
        row,
        history,
    })
}

/// Why job `id` could not be claimed.
async fn not_runnable(w: &Inline, id: JobId) -> Error {
    let row = match w.db().acquire().await {
        Ok(mut conn) => crate::store::admin::job_get(&mut conn, id).await,
        Err(e) => Err(e.into()),
    };
    let reason = match row {
        Err(e) => return e,
        Ok(None) => format!("there is no job {id}"),
        Ok(Some(row)) if row.state != crate::admin::JobState::Pending => {
            format!("job {id} is {}, not pending", row.state)
        }
        Ok(Some(_)) => format!(
            "job {id} cannot run now: its queue is paused, an earlier job of its ordering key is \
             unfinished, its concurrency key is at its limit, or another session holds its row"
        ),
    };
    Error::invalid("job", reason)
}
