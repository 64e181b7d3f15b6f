//! Testing applications that use mysqlq, through the code path a worker runs (peers:
//! Oban.Testing, River's `rivertest`, Sidekiq::Testing).
//!
//! - **Unit tests of a handler, no database**: build its [`JobContext`] with [`TestContext`]
//!   (application state, attempt, meta, pool, a [`CancelHandle`]) and run it with
//!   [`run_inline_with`]; [`run_inline`] uses the defaults. Both send the job through its JSON
//!   payload first, as an enqueue and a worker do, so a field that does not survive serde fails
//!   the test instead of production.
//! - **What business code enqueued**: [`assert_enqueued`], [`refute_enqueued`], [`enqueued`]
//!   (typed, with a predicate) and [`assert_enqueued_with`] / [`enqueued_with`] (the options:
//!   queue, priority, schedule window, meta, arguments, keys, through [`EnqueuedMatch`]). They
//!   read through your test's own transaction, so jobs it enqueued and will roll back are seen.
//!   Their panic messages list what was found.
//! - **Running jobs in an integration test**: [`drain`] runs the available jobs one at a time
//!   through the worker's own executor and outcome writes (claim with a token, timeout, panic
//!   capture, retry decision, attempt history, hooks), optionally also the jobs they enqueue
//!   and the scheduled ones; [`work_one`] enqueues one job and runs it now, [`work_job`] runs
//!   a job already enqueued. They leave exactly the rows a worker leaves.
//! - **A fresh database per test**: `#[sqlx::test]` creates one per test on MySQL; one line,
//!   [`mysqlq::migrate(&pool)`](crate::migrate), adds mysqlq's tables (see `docs/testing.md`).
//!
//! A guide with every case (state and attempts, the retry path, a rolled-back transaction, a
//! chain of jobs, cancel and timeout) is `docs/testing.md` in the repository.

mod assert;
mod context;
mod drain;
mod matching;
mod options;
mod work;

pub use assert::{
    assert_enqueued, assert_enqueued_with, enqueued, enqueued_with, refute_enqueued,
    refute_enqueued_with,
};
pub use context::{CancelHandle, TestContext};
pub use drain::{Attempted, DrainReport, Outcome, drain};
pub use matching::EnqueuedMatch;
pub use options::{DrainOptions, WorkOptions};
pub use work::{WorkedJob, work_job, work_one};

use crate::{EnqueueOptions, Job, JobContext, JobError, JobRegistration, NewJob};

/// Runs `job`'s handler now, in this task, with [`TestContext::new::<J>()`](TestContext::new)
/// (attempt 1 of the job's attempts, no state, no pool): for unit tests of handlers that need
/// nothing from a worker. See [`run_inline_with`].
///
/// ```
/// use mysqlq::{ErrorClass, JobError};
///
/// #[mysqlq::job]
/// async fn charge(amount_cents: i64) -> Result<(), JobError> {
///     if amount_cents <= 0 {
///         return Err(JobError::fail("nothing to charge"));
///     }
///     Ok(())
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let err = mysqlq::testing::run_inline(Charge { amount_cents: 0 }).await.unwrap_err();
/// assert_eq!(err.class(), ErrorClass::Fail);
/// # }
/// ```
pub async fn run_inline<J: Job>(job: J) -> Result<(), JobError> {
    run_inline_with(job, TestContext::new::<J>().build()).await
}

/// Runs `job`'s handler now, in this task, with `ctx` (built with [`TestContext`]).
///
/// The job goes the way a worker sees it: it is checked and serialised as an enqueue does it
/// (payload size, keys), and the handler runs on the value decoded from that JSON by the same
/// decoder a worker uses. A panic in the handler is not caught: it fails the test where it
/// happened. (A worker catches it and records a retry; [`work_one`] shows that.)
///
/// # Panics
/// When the job cannot be enqueued as it is (its payload does not serialise, is too large, or
/// a key is invalid), or its JSON does not decode back into `J` (a custom `Deserialize` that
/// does not accept what `Serialize` wrote, a map with non-string keys, …): in production that
/// job would be refused or would never run.
pub async fn run_inline_with<J: Job>(job: J, ctx: JobContext) -> Result<(), JobError> {
    let row = NewJob::from_job(&job, &EnqueueOptions::new()).unwrap_or_else(|e| {
        panic!(
            "job `{}` cannot be enqueued as it is: {}",
            J::KIND,
            crate::error_chain(&e)
        )
    });
    drop(job);
    let run = JobRegistration::of::<J>(file!(), line!()).runner();
    match run(ctx, row.payload()) {
        Ok(handler) => handler.await,
        Err(e) => panic!(
            "job `{}` does not survive its JSON payload: {} does not decode back ({e}); a worker \
             could never run it",
            J::KIND,
            row.payload()
        ),
    }
}
