//! [`drain`]: the available jobs run one at a time through the worker's own path (a worker's
//! state built from the options, one claim at a time, the executor's supervisor awaited in
//! place, the completer's flush: `worker::inline`), and its report.

use sqlx::MySqlPool;

use super::options::{DrainOptions, WorkOptions};
use crate::store::Next;
use crate::worker::{Inline, Ran};
use crate::{Error, JobId};

/// How an attempt ended, as the worker wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The handler returned `Ok`: the job is `completed`.
    Completed,
    /// It failed with attempts left: `pending` again, after its backoff.
    Retried,
    /// The handler snoozed it (or said its service rate-limits it): `pending` again, after the
    /// delay, its attempt given back.
    Snoozed,
    /// Out of attempts, or a permanent error: `failed`.
    Failed,
    /// The handler cancelled it, or an operator did while it ran: `cancelled`.
    Cancelled,
    /// Nothing of this attempt was written: its claim was lost (a reaper took the job back) or
    /// handed back (its lease could not be renewed).
    NotRecorded,
}

impl Outcome {
    fn from_event(outcome: Option<&str>) -> Self {
        match outcome {
            Some("completed") => Self::Completed,
            Some("retry") => Self::Retried,
            Some("snooze" | "rate_limited") => Self::Snoozed,
            Some("fail") => Self::Failed,
            Some("cancel" | "cancelled") => Self::Cancelled,
            _ => Self::NotRecorded,
        }
    }
}

/// One attempt that [`drain`] or [`work_job`](super::work_job) ran.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempted {
    /// The job.
    pub id: JobId,
    /// Its kind (`None` for a row without one).
    pub kind: Option<String>,
    /// Its queue.
    pub queue: String,
    /// This attempt's number.
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// How it ended.
    pub outcome: Outcome,
    /// What the worker recorded as the job's `last_error` (`None` when it completed): the
    /// handler's error with what happens next, `handler panicked: …`, `timed out after …`.
    pub error: Option<String>,
    /// The handler panicked (the worker caught it).
    pub panicked: bool,
    /// The handler ran past its timeout (the worker stopped it).
    pub timed_out: bool,
}

/// What [`drain`] did: attempts counted by how they ended, and each attempt in the order run.
/// A job retried twice and then completed counts 2 in `retried` and 1 in `completed`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DrainReport {
    /// Attempts that completed their job.
    pub completed: usize,
    /// Attempts that failed with attempts left: their job will run again.
    pub retried: usize,
    /// Attempts snoozed by their handler.
    pub snoozed: usize,
    /// Attempts that failed their job for good (no attempts left, or a permanent error).
    pub failed: usize,
    /// Attempts whose job was cancelled (by its handler, or by an operator while it ran).
    pub cancelled: usize,
    /// Every attempt, in the order run.
    pub attempts: Vec<Attempted>,
}

impl DrainReport {
    /// Attempts run.
    pub fn ran(&self) -> usize {
        self.attempts.len()
    }

    /// The attempts that failed (retried or failed), with their errors.
    pub fn failures(&self) -> impl Iterator<Item = &Attempted> {
        self.attempts
            .iter()
            .filter(|a| matches!(a.outcome, Outcome::Retried | Outcome::Failed))
    }

    fn add(&mut self, a: Attempted) {
        match a.outcome {
            Outcome::Completed => self.completed += 1,
            Outcome::Retried => self.retried += 1,
            Outcome::Snoozed => self.snoozed += 1,
            Outcome::Failed => self.failed += 1,
            Outcome::Cancelled => self.cancelled += 1,
            Outcome::NotRecorded => {}
        }
        self.attempts.push(a);
    }
}

/// Runs the available jobs of the queues one at a time, through the worker's own path: each is
/// claimed with a fresh token (taking an attempt), decoded, run with its timeout and the state
/// given, its panic caught, its outcome decided by its retry policy and written with the
/// attempt's history row and the hooks called, exactly as a worker would. Returns when no job
/// qualifies any more (see [`DrainOptions`]).
///
/// Jobs are taken by id, lowest first, in passes: a pass runs each job that qualifies once;
/// the next pass takes those that qualify again (a retry that is due, or with
/// [`with_scheduled`](DrainOptions::with_scheduled) any retry or snooze). A paused queue is not
/// drained, and ordering and concurrency keys hold as in a worker. The jobs must be committed:
/// the worker claims on connections of its own.
///
/// ```no_run
/// # async fn demo(pool: sqlx::MySqlPool) -> Result<(), Box<dyn std::error::Error>> {
/// use mysqlq::testing::{DrainOptions, drain};
///
/// #[mysqlq::job(queue = "orders")]
/// async fn place(order_id: u64) -> Result<(), mysqlq::JobError> {
///     // … and enqueue the next step
///     Ok(())
/// }
///
/// Place { order_id: 1 }.enqueue(&pool).await?;
/// let report = drain(&pool, DrainOptions::new().queues(["orders"]).with_recursion(true)).await?;
/// assert_eq!(report.completed, 1);
/// assert_eq!(report.failures().count(), 0);
/// # Ok(()) }
/// ```
pub async fn drain(pool: &MySqlPool, options: DrainOptions) -> Result<DrainReport, Error> {
    let mut w = Inline::start(options.work.builder(pool, &options.queues)).await?;
    let result = drain_with(&mut w, &options).await;
    w.stop().await;
    result
}

async fn drain_with(w: &mut Inline, o: &DrainOptions) -> Result<DrainReport, Error> {
    let queues = w.queues().to_vec();
    let up_to = if o.recursion {
        JobId(u64::MAX)
    } else {
        let mut conn = w.db().acquire().await?;
        crate::store::job_max_id(&mut conn).await?
    };
    let limit = o.limit.unwrap_or(DrainOptions::DEFAULT_LIMIT);
    let mut report = DrainReport::default();
    let mut after = JobId(0);
    let mut ran_in_pass = false;
    loop {
        let next = Next::InQueues {
            queues: &queues,
            after,
            up_to,
        };
        match w.run_next(next, o.scheduled).await? {
            Some(ran) => {
                after = ran.id;
                ran_in_pass = true;
                let a = attempted(w, ran).await?;
                check(&o.work, &a)?;
                report.add(a);
                if report.ran() >= limit {
                    return Err(Error::invalid(
                        "drain",
                        format!(
                            "ran {limit} attempts and jobs are still left: does a job snooze or \
                             enqueue itself forever? Raise DrainOptions::limit if this is expected"
                        ),
                    ));
                }
            }
            None if ran_in_pass => {
                after = JobId(0);
                ran_in_pass = false;
            }
            None => return Ok(report),
        }
    }
}

/// The public account of one attempt: the worker's, with the error it recorded.
pub(super) async fn attempted(w: &Inline, ran: Ran) -> Result<Attempted, Error> {
    let outcome = Outcome::from_event(ran.outcome);
    let error = if outcome == Outcome::Completed {
        None
    } else {
        let mut conn = w.db().acquire().await?;
        crate::store::admin::job_get(&mut conn, ran.id)
            .await?
            .and_then(|row| row.last_error)
    };
    Ok(Attempted {
        id: ran.id,
        kind: ran.kind,
        queue: ran.queue,
        attempt: ran.attempt,
        max_attempts: ran.max_attempts,
        outcome,
        error,
        panicked: ran.panicked,
        timed_out: ran.timed_out,
    })
}

/// Without safety, a failed attempt ends the call (see [`WorkOptions::with_safety`]).
pub(super) fn check(work: &WorkOptions, a: &Attempted) -> Result<(), Error> {
    if work.safety || !matches!(a.outcome, Outcome::Retried | Outcome::Failed) {
        return Ok(());
    }
    let kind = a.kind.clone().unwrap_or_default();
    let error = a.error.clone().unwrap_or_default();
    if a.panicked {
        panic!(
            "job {} (`{kind}`) attempt {} of {} panicked: {error}",
            a.id, a.attempt, a.max_attempts
        );
    }
    Err(Error::JobFailed {
        id: a.id,
        kind,
        attempt: a.attempt,
        max_attempts: a.max_attempts,
        error,
    })
}
