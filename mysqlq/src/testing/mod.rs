//! Testing applications that use mysqlq, through the code path a worker runs (peers:
//! Oban.Testing, River's `rivertest`, Sidekiq::Testing).
//!
//! - **Unit tests of a handler, no database**: build its [`JobContext`] with [`TestContext`]
//!   (application state, attempt, meta, pool, a [`CancelHandle`]) and run it with
//!   [`run_inline_with`]; [`run_inline`] uses the defaults. Both send the job through its JSON
//!   payload first, as an enqueue and a worker do, so a field that does not survive serde fails
//!   the test instead of production.
//! - **What business code enqueued**: [`enqueued`] and [`assert_enqueued`], read through your
//!   test's own transaction, so jobs it enqueued and will roll back are seen.

mod context;

pub use context::{CancelHandle, TestContext};

use sqlx::{Acquire, MySql};

use crate::{EnqueueOptions, Error, Job, JobContext, JobError, JobId, JobRegistration, NewJob};

/// The pending jobs of type `J` visible through `target` (your test's transaction sees its own
/// uncommitted jobs), oldest first, decoded.
pub async fn enqueued<'c, J, A>(target: A) -> Result<Vec<(JobId, J)>, Error>
where
    J: Job,
    A: Acquire<'c, Database = MySql> + Send + 'c,
{
    let mut conn = target.acquire().await?;
    let rows = crate::store::job_list_pending_of_kind(&mut conn, J::KIND).await?;
    rows.into_iter()
        .map(|(id, payload)| {
            serde_json::from_str(&payload)
                .map(|job| (id, job))
                .map_err(|e| {
                    Error::invalid(
                        "payload",
                        format!("job {id} of kind `{}` does not decode: {e}", J::KIND),
                    )
                })
        })
        .collect()
}

/// Panics unless at least one pending job of type `J` matching `pred` is visible through
/// `target`; returns the matching jobs.
pub async fn assert_enqueued<'c, J, A, P>(target: A, pred: P) -> Vec<(JobId, J)>
where
    J: Job,
    A: Acquire<'c, Database = MySql> + Send + 'c,
    P: Fn(&J) -> bool,
{
    let all = enqueued::<J, A>(target)
        .await
        .expect("read the enqueued jobs");
    let total = all.len();
    let matching: Vec<(JobId, J)> = all.into_iter().filter(|(_, j)| pred(j)).collect();
    assert!(
        !matching.is_empty(),
        "expected a pending `{}` job matching the predicate; found {total} pending `{}` jobs, none matching",
        J::KIND,
        J::KIND
    );
    matching
}

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
/// happened. (A worker catches it and records a retry.)
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
