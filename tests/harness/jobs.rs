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

/// A `noop` written by hand on the [`Job`](mysqlq::Job) trait's defaults (5 attempts, the
/// default backoff), doing nothing when run: for tests that enqueue and read the rows back. Its
/// rows are [`Noop`]'s (kind `noop`, queue `test`, payload `{"n": …}`) but for `max_attempts`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct PlainNoop {
    /// The payload's only field.
    pub n: u64,
}

impl mysqlq::Job for PlainNoop {
    const KIND: &'static str = "noop";
    const QUEUE: &'static str = "test";

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
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

/// Always fails with a transient error, retried quickly: dead after 3 attempts.
#[mysqlq::job(queue = "test", retries = 2, backoff = "50ms")]
pub async fn flaky_forever(ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "flaky_forever", "start").await?;
    Err(JobError::retry("upstream returned 503"))
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

/// A job of queue `rated` that records its start under `tag` (its rate key, enqueued with
/// [`mysqlq::EnqueueOptions::rate_limit`] by the tests), with the time taken first thing in
/// the handler (µs on this host's clock, [`now_micros`]): the start a rate limit counts.
#[mysqlq::job(queue = "rated", retries = 3, backoff = "100ms")]
pub async fn rated(ctx: JobContext, tag: String) -> Result<(), JobError> {
    let at = now_micros();
    let pool = ctx
        .pool()
        .ok_or_else(|| JobError::fail("no pool in the context"))?;
    let run = (ctx.id().0, ctx.attempt(), tag, ctx.claim_token().to_owned());
    record_at(pool, &run, "start", at).await
}

/// Sleeps `ms` and completes, touching no database: its run time is its sleep (the latency
/// histograms' tests send it to other queues too).
#[mysqlq::job(queue = "test", retries = 0)]
pub async fn nap(ctx: JobContext, ms: u64) -> Result<(), JobError> {
    let _ = ctx;
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(())
}

/// Its first run ends as `how` says, recording its start: `"cancel"` cancels the job, `"429"`
/// is rate-limited by the service for 50 ms (the attempt given back, its queue held), then the
/// next run completes.
#[mysqlq::job(queue = "ends", retries = 0)]
pub async fn ends(ctx: JobContext, how: String) -> Result<(), JobError> {
    let pool = ctx.pool().ok_or_else(|| JobError::fail("no pool"))?;
    let runs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM test_runs WHERE job_id = ?")
        .bind(ctx.id().0)
        .fetch_one(pool)
        .await?;
    record(&ctx, "ends", "start").await?;
    match how.as_str() {
        _ if runs > 0 => Ok(()),
        "cancel" => Err(JobError::cancel("told to cancel")),
        "429" => Err(JobError::rate_limited(Duration::from_millis(50))),
        other => Err(JobError::fail(format!("no such ending: {other}"))),
    }
}

/// A job enqueued by a periodic schedule in the tests.
#[mysqlq::job(queue = "ticks", retries = 0)]
pub async fn tick(ctx: JobContext) -> Result<(), JobError> {
    record(&ctx, "tick", "done").await
}

/// Microseconds since the Unix epoch (UTC) on this machine's clock: the time base of the
/// torture history (the server's `UTC_TIMESTAMP(6)` reads the same clock).
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Inserts one `test_runs` row with an explicit time, retrying (connections are cut and the
/// server stalls during a torture run) for up to 30 s.
async fn record_at(
    pool: &sqlx::MySqlPool,
    run: &(u64, u32, String, String),
    event: &str,
    at: i64,
) -> Result<(), JobError> {
    let (job_id, attempt, tag, token) = run;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = sqlx::query(
            "INSERT INTO test_runs (job_id, attempt, pid, tag, event, claim_token, at) \
             VALUES (?, ?, ?, ?, ?, ?, TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00'))",
        )
        .bind(job_id)
        .bind(attempt)
        .bind(std::process::id())
        .bind(tag)
        .bind(event)
        .bind(token)
        .bind(at)
        .execute(pool)
        .await;
        match r {
            Ok(_) => return Ok(()),
            Err(e) if std::time::Instant::now() > deadline => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// One handler run of [`torture`]: `start` is recorded when it is made; `finish` records how
/// the handler ended. Dropped unfinished (aborted after a timeout, a lost lease or at
/// shutdown), it records `dropped` with the time of the drop from a task of its own.
struct RunRecord {
    pool: sqlx::MySqlPool,
    run: (u64, u32, String, String),
    finished: bool,
}

impl RunRecord {
    async fn start(ctx: &JobContext, tag: &str) -> Result<Self, JobError> {
        let pool = ctx
            .pool()
            .ok_or_else(|| JobError::fail("no pool in the context"))?
            .clone();
        let at = now_micros();
        let run = (
            ctx.id().0,
            ctx.attempt(),
            tag.to_owned(),
            ctx.claim_token().to_owned(),
        );
        // The guard exists before the `start` row is written: a handler aborted while that
        // INSERT is in flight (it may have committed) still records `dropped`.
        let record = Self {
            pool,
            run,
            finished: false,
        };
        record_at(&record.pool, &record.run, "start", at).await?;
        Ok(record)
    }

    async fn finish(&mut self, event: &str) -> Result<(), JobError> {
        // Aborted while this INSERT is in flight, the drop still records `dropped` (later).
        let recorded = record_at(&self.pool, &self.run, event, now_micros()).await;
        self.finished = true;
        recorded
    }
}

impl Drop for RunRecord {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let at = now_micros();
        let (pool, run) = (self.pool.clone(), self.run.clone());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = record_at(&pool, &run, "dropped", at).await;
            });
        }
    }
}

/// What a [`torture`] job does (its `act`).
pub mod act {
    /// Sleeps `ms` (stops early when cancelled) and succeeds.
    pub const OK: &str = "ok";
    /// Fails with a permanent error on its first run: ends `failed`.
    pub const FAIL: &str = "fail";
    /// `snooze(0)` on its first run, then succeeds.
    pub const SNOOZE0: &str = "snooze0";
    /// Panics on attempt 1, then succeeds.
    pub const PANIC: &str = "panic";
    /// On attempt 1 never returns and ignores cancellation (its 1.5 s timeout stops it), then
    /// succeeds.
    pub const HANG: &str = "hang";
    /// Blocks its thread for `ms` (`std::thread::sleep`), then succeeds.
    pub const BLOCK: &str = "block";
    /// Holds a connection of the worker's pool (`ctx.pool()`) for `ms`, then succeeds.
    pub const HOLD: &str = "hold";
    /// A workflow step that grafts two steps (`ok`, a fan-out named `grafted`) onto its
    /// workflow, then sleeps `ms` and succeeds; a job of no workflow just succeeds.
    pub const GRAFT: &str = "graft";
    /// On its first run, the service said "429": `JobError::rate_limited(ms)` holds its rate
    /// key (its queue when it has none) for `ms` and gives its attempt back; then succeeds.
    pub const LIMITED: &str = "limited";
    /// Every act.
    pub const ALL: [&str; 9] = [OK, FAIL, SNOOZE0, PANIC, HANG, BLOCK, HOLD, GRAFT, LIMITED];
}

/// The torture test's job (`tests/torture.rs`): behaves as its `act` says (see [`act`]) and
/// records every handler start and end in `test_runs` with its claim token and the time.
#[mysqlq::job(queue = "torture", retries = 7, backoff = "20ms", timeout = "1500ms")]
pub async fn torture(ctx: JobContext, act: String, ms: u64) -> Result<(), JobError> {
    let mut run = RunRecord::start(&ctx, &act).await?;
    let first = ctx.attempt() == 1;
    let result = match act.as_str() {
        act::FAIL => Err(JobError::fail("torture: deliberate permanent failure")),
        act::SNOOZE0 => {
            if ended_before(&ctx, "snooze").await? {
                Ok(())
            } else {
                Err(JobError::snooze(Duration::ZERO))
            }
        }
        act::LIMITED => {
            if ended_before(&ctx, "limited").await? {
                Ok(())
            } else {
                Err(JobError::rate_limited(Duration::from_millis(ms)))
            }
        }
        act::PANIC if first => {
            run.finish("panic").await?;
            panic!("torture: deliberate panic on attempt 1");
        }
        act::HANG if first => {
            std::future::pending::<()>().await;
            Ok(())
        }
        act::BLOCK => {
            std::thread::sleep(Duration::from_millis(ms));
            Ok(())
        }
        act::HOLD => {
            let pool = ctx.pool().ok_or_else(|| JobError::fail("no pool"))?;
            let mut conn = pool.acquire().await?;
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                () = ctx.cancelled() => {}
            }
            sqlx::query("SELECT 1").execute(&mut *conn).await?;
            Ok(())
        }
        act::GRAFT if ctx.workflow_id().is_some() => {
            let grafted = (0..2).map(|_| Torture {
                act: act::OK.to_owned(),
                ms,
            });
            match ctx.graft().fan_out("grafted", grafted, [""; 0]) {
                Ok(g) => match g.enqueue().await {
                    Ok(_) => {
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                            () = ctx.cancelled() => {}
                        }
                        Ok(())
                    }
                    Err(e) => Err(JobError::retry(e)),
                },
                Err(e) => Err(JobError::fail(e)),
            }
        }
        _ => {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                () = ctx.cancelled() => {}
            }
            Ok(())
        }
    };
    let event = match &result {
        Ok(()) => "ok",
        Err(e) if matches!(e.class(), mysqlq::ErrorClass::Snooze(_)) => "snooze",
        Err(e) if matches!(e.class(), mysqlq::ErrorClass::RateLimited(_)) => "limited",
        Err(_) => "error",
    };
    run.finish(event).await?;
    result
}

/// Whether an earlier run of this job recorded `event` as its end.
async fn ended_before(ctx: &JobContext, event: &str) -> Result<bool, JobError> {
    let pool = ctx.pool().ok_or_else(|| JobError::fail("no pool"))?;
    let n: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM test_runs WHERE job_id = ? AND event = ?")
            .bind(ctx.id().0)
            .bind(event)
            .fetch_one(pool)
            .await?;
    Ok(n > 0)
}
