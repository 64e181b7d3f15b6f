//! Jobs the integration tests run. Each records its executions in `test_runs` (created by
//! [`crate::TestDb`]) through the worker's pool, so tests can check what ran, when, where and
//! how often.

use std::time::Duration;

use mysqlq::{JobContext, JobError};

/// Referencing this from a binary links these jobs (and their registrations) in.
pub fn link() {}

/// Records one execution event of the job in `ctx`.
pub async fn record(ctx: &JobContext, tag: &str, event: &str) -> Result<(), JobError> {
    let pool = ctx
        .pool()
        .ok_or_else(|| JobError::fail("no pool in the context"))?;
    sqlx::query(
        "INSERT INTO test_runs (job_id, attempt, pid, tag, event, claim_token, at) \
         VALUES (?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))",
    )
    .bind(ctx.id().0)
    .bind(ctx.attempt())
    .bind(std::process::id())
    .bind(tag)
    .bind(event)
    .bind(ctx.claim_token())
    .execute(pool)
    .await?;
    Ok(())
}

/// Does nothing but record that it ran.
#[mysqlq::job(queue = "test", retries = 3, backoff = "100ms")]
pub async fn noop(ctx: JobContext, n: u64) -> Result<(), JobError> {
    let _ = n;
    record(&ctx, "noop", "done").await
}

/// Records start, sleeps `ms` (stopping early if cancelled), records the end.
#[mysqlq::job(queue = "test", retries = 3, backoff = "100ms")]
pub async fn sleepy(ctx: JobContext, ms: u64) -> Result<(), JobError> {
    record(&ctx, "sleepy", "start").await?;
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(ms)) => {}
        () = ctx.cancelled() => return Err(JobError::retry(format!("cancelled: {:?}", ctx.cancel_reason()))),
    }
    record(&ctx, "sleepy", "done").await
}

/// Always fails with a transient error, on the article's style of schedule.
#[mysqlq::job(queue = "test", retries = 3, backoff = "10s, 20s, 40s")]
pub async fn always_fails(ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "always_fails", "start").await?;
    Err(JobError::retry(std::io::Error::other(
        "upstream returned 503",
    )))
}

/// A permanent error: fails at once whatever attempts are left.
#[mysqlq::job(queue = "test", retries = 5)]
pub async fn permanent(ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "permanent", "start").await?;
    Err(JobError::fail("invalid e-mail address"))
}

/// Snoozes on its first run, succeeds on the second.
#[mysqlq::job(queue = "test", retries = 0)]
pub async fn snoozer(ctx: JobContext) -> Result<(), JobError> {
    let pool = ctx.pool().ok_or_else(|| JobError::fail("no pool"))?;
    let runs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM test_runs WHERE job_id = ?")
        .bind(ctx.id().0)
        .fetch_one(pool)
        .await?;
    record(&ctx, "snoozer", "start").await?;
    if runs == 0 {
        return Err(JobError::snooze(Duration::from_millis(300)));
    }
    record(&ctx, "snoozer", "done").await
}

/// Panics on its first attempt.
#[mysqlq::job(queue = "test", retries = 2, backoff = "200ms")]
pub async fn panicker(ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "panicker", "start").await?;
    if ctx.attempt() == 1 {
        panic!("deliberate panic on attempt 1");
    }
    record(&ctx, "panicker", "done").await
}

/// Never returns (ignores cancellation); its timeout fires.
#[mysqlq::job(queue = "test", retries = 1, backoff = "100ms", timeout = "1s")]
pub async fn forever(ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "forever", "start").await?;
    std::future::pending::<()>().await;
    Ok(())
}

/// A job ordered by `key`: records its start and end under the key, sleeping `ms` between.
#[mysqlq::job(queue = "keyed", retries = 3, backoff = "100ms", ordering_key = key)]
pub async fn keyed(ctx: JobContext, key: String, ms: u64) -> Result<(), JobError> {
    record(&ctx, &key, "start").await?;
    tokio::time::sleep(Duration::from_millis(ms)).await;
    record(&ctx, &key, "done").await
}

/// A job of queue `limited` that records start and end under `tag`, sleeping `ms` between
/// (enqueued with a per-key concurrency limit by the tests).
#[mysqlq::job(queue = "limited", retries = 3, backoff = "100ms")]
pub async fn limited(ctx: JobContext, tag: String, ms: u64) -> Result<(), JobError> {
    record(&ctx, &tag, "start").await?;
    tokio::time::sleep(Duration::from_millis(ms)).await;
    record(&ctx, &tag, "done").await
}

/// A job enqueued by a periodic schedule in the tests.
#[mysqlq::job(queue = "ticks", retries = 0)]
pub async fn tick(ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "tick", "done").await
}
