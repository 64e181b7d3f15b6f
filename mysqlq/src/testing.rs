//! Helpers for testing applications that use mysqlq (like River's `rivertest`): look at what
//! was enqueued, and run a job inline without a worker.

use sqlx::{Acquire, MySql};

use crate::{Error, Job, JobContext, JobError, JobId};

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

/// Runs `job` now, in this task, with a detached context (attempt 1 of 1, job id 0): for unit
/// tests of handlers.
pub async fn run_inline<J: Job>(job: J) -> Result<(), JobError> {
    job.run(JobContext::detached(JobId(0), J::KIND, J::QUEUE))
        .await
}
