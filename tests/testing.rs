//! `mysqlq::testing` (issue 29): the unit-test context, the assertions inside a test's
//! transaction, and `drain` / `work_one` / `work_job`, which run jobs through the worker's own
//! path and leave the rows a worker leaves (compared column by column below).

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use mysqlq::admin::{Admin, JobSelection, JobState};
use mysqlq::hooks::{Hook, Hooks, JobRun, Next};
use mysqlq::testing::{
    DrainOptions, EnqueuedMatch, Outcome, TestContext, WorkOptions, assert_enqueued,
    assert_enqueued_with, drain, enqueued, enqueued_with, refute_enqueued, refute_enqueued_with,
    run_inline, run_inline_with, work_job, work_one,
};
use mysqlq::{CancelReason, EnqueueOptions, Job, JobContext, JobError, Registry};
use mysqlq_tests::TestDb;
use serde_json::json;

// ---------------------------------------------------------------------------------------------
// Jobs

/// The application's mail client, handed to workers with `.state(…)`.
#[derive(Default)]
struct Mailer {
    sent: Mutex<Vec<String>>,
}

/// A second state type: several can be given at once.
struct Signature(&'static str);

/// Sends a mail through the [`Mailer`] state and says what it knew about its attempt.
#[mysqlq::job(queue = "tt-mail", retries = 2)]
async fn tt_welcome(ctx: JobContext, to: String) -> Result<(), JobError> {
    let mailer = ctx
        .state::<Mailer>()
        .ok_or_else(|| JobError::fail("no Mailer state given to the worker"))?;
    let signature = ctx.state::<Signature>().map_or("-", |s| s.0);
    let tenant = ctx.meta().get("tenant").cloned().unwrap_or(json!(null));
    ctx.set_meta("sent", true).await?;
    let line = format!(
        "{to} {signature} attempt {}/{} last={} tenant={tenant} pool={} key={} {}@{}",
        ctx.attempt(),
        ctx.max_attempts(),
        ctx.is_last_attempt(),
        ctx.pool().is_some(),
        ctx.idempotency_key(),
        ctx.kind(),
        ctx.queue(),
    );
    mailer.sent.lock().unwrap().push(line);
    Ok(())
}

/// `Some(())` is written as `null`, which reads back as `None`: a value that does not survive
/// its JSON payload unchanged.
#[mysqlq::job(queue = "tt-unit")]
async fn tt_optional(flag: Option<()>) -> Result<(), JobError> {
    match flag {
        Some(()) => Ok(()),
        None => Err(JobError::fail("the flag was lost in JSON")),
    }
}

/// `NaN` is written as `null`, which is no `f64`: a job that cannot survive its payload.
#[mysqlq::job(queue = "tt-unit")]
async fn tt_ratio(ratio: f64) -> Result<(), JobError> {
    let _ = ratio;
    Ok(())
}

/// Works through `steps` steps of 5 ms, stopping with the cancel reason when cancelled.
#[mysqlq::job(queue = "tt-unit")]
async fn tt_steps(ctx: JobContext, steps: u32) -> Result<(), JobError> {
    for _ in 0..steps {
        tokio::select! {
            () = ctx.cancelled() => {
                let reason = ctx.cancel_reason().map(|r| r.to_string()).unwrap_or_default();
                return Err(JobError::retry(format!("stopped: {reason}")));
            }
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    }
    Ok(())
}

/// A job whose payload the assertions look at.
#[mysqlq::job(queue = "tt-notes")]
async fn tt_note(n: u64) -> Result<(), JobError> {
    let _ = n;
    Ok(())
}

/// Ends as `action` says: `ok`, `retry`, `snooze`, `snooze0` (snooze for no time), `fail`,
/// `cancel`, `panic`.
#[mysqlq::job(queue = "tt-drain", retries = 2, backoff = "1h")]
async fn tt_outcome(action: String) -> Result<(), JobError> {
    match action.as_str() {
        "ok" => Ok(()),
        "retry" => Err(JobError::retry("mail server busy")),
        "snooze" => Err(JobError::snooze(Duration::from_secs(3600))),
        "snooze0" => Err(JobError::snooze(Duration::ZERO)),
        "fail" => Err(JobError::fail("address rejected")),
        "cancel" => Err(JobError::cancel("order withdrawn")),
        "panic" => panic!("boom"),
        other => Err(JobError::fail(format!("unknown action {other}"))),
    }
}

/// Fails twice, then succeeds.
#[mysqlq::job(queue = "tt-flaky", retries = 3, backoff = "1h")]
async fn tt_flaky(ctx: JobContext) -> Result<(), JobError> {
    if ctx.attempt() < 3 {
        return Err(JobError::retry("not yet"));
    }
    Ok(())
}

/// Step `step` of a chain of three: enqueues the next step through the worker's pool.
#[mysqlq::job(queue = "tt-chain")]
async fn tt_chain(ctx: JobContext, step: u32) -> Result<(), JobError> {
    if step < 3 {
        let pool = ctx.pool().ok_or_else(|| JobError::fail("no pool"))?;
        TtChain { step: step + 1 }.enqueue(pool).await?;
    }
    Ok(())
}

/// Counts its runs in the [`Runs`] state.
#[mysqlq::job(queue = "tt-state")]
async fn tt_count(ctx: JobContext) -> Result<(), JobError> {
    let runs = ctx
        .state::<Runs>()
        .ok_or_else(|| JobError::fail("no Runs state"))?;
    runs.0.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Runs counted by [`tt_count`]; the test keeps a clone.
#[derive(Default, Clone)]
struct Runs(std::sync::Arc<AtomicU32>);

/// Sleeps far past its timeout.
#[mysqlq::job(queue = "tt-slow", retries = 1, timeout = "100ms")]
async fn tt_slow() -> Result<(), JobError> {
    tokio::time::sleep(Duration::from_secs(30)).await;
    Ok(())
}

/// Beats until an operator cancels it (the heartbeat then answers `false`), at most 30 s.
#[mysqlq::job(queue = "tt-cancel")]
async fn tt_until_cancelled(ctx: JobContext) -> Result<(), JobError> {
    for _ in 0..1500 {
        if !ctx.heartbeat().await? {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(JobError::fail("nobody cancelled me"))
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// The message of the panic `f` ends with.
async fn panic_of<F>(f: F) -> String
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let Err(e) = tokio::spawn(f).await else {
        panic!("expected a panic, the future returned");
    };
    let p = e.into_panic();
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

async fn row(db: &TestDb, id: mysqlq::JobId) -> mysqlq::admin::Job {
    Admin::new(db.pool.clone())
        .job(id)
        .await
        .unwrap()
        .expect("the job's row")
}

// ---------------------------------------------------------------------------------------------
// Item 1: the unit-test context

#[tokio::test]
async fn a_test_context_gives_the_handler_state_attempt_meta_and_pool() {
    let db = TestDb::new().await;
    let ctx = TestContext::new::<TtWelcome>()
        .state(Mailer::default())
        .state(Signature("ada"))
        .attempt(3)
        .meta(json!({"tenant": "acme"}))
        .pool(db.pool.clone())
        .id(mysqlq::JobId(41))
        .build();
    assert_eq!(ctx.max_attempts(), 3, "the job's own attempts: retries = 2");
    run_inline_with(TtWelcome { to: "a@x".into() }, ctx.clone())
        .await
        .unwrap();
    assert_eq!(
        *ctx.state::<Mailer>().unwrap().sent.lock().unwrap(),
        [
            "a@x ada attempt 3/3 last=true tenant=\"acme\" pool=true key=mysqlq-job-41 \
             tt_welcome@tt-mail"
        ]
    );
    // The meta write stays in memory: a test context owns no row, pool or not.
    assert_eq!(ctx.meta().get("sent"), Some(&json!(true)));
    assert!(ctx.heartbeat().await.unwrap(), "no worker: nothing to lose");

    // The defaults: attempt 1 of the job's attempts, no state, no pool, job id 0.
    let ctx = TestContext::new::<TtWelcome>()
        .state(Mailer::default())
        .build();
    run_inline_with(TtWelcome { to: "b@x".into() }, ctx.clone())
        .await
        .unwrap();
    assert_eq!(
        *ctx.state::<Mailer>().unwrap().sent.lock().unwrap(),
        ["b@x - attempt 1/3 last=false tenant=null pool=false key=mysqlq-job-0 tt_welcome@tt-mail"]
    );
    // What the issue's user met: no state is a permanent error of the handler, as in a worker.
    let err = run_inline(TtWelcome { to: "c@x".into() })
        .await
        .unwrap_err();
    assert_eq!(err.class(), mysqlq::ErrorClass::Fail);
    assert_eq!(err.to_string(), "no Mailer state given to the worker");
    // Another queue, another attempt count.
    let ctx = TestContext::new::<TtWelcome>()
        .queue("elsewhere")
        .max_attempts(1)
        .build();
    assert_eq!(
        (ctx.queue(), ctx.attempt(), ctx.is_last_attempt()),
        ("elsewhere", 1, true)
    );
}

#[tokio::test]
async fn run_inline_sends_the_job_through_its_json_payload_first() {
    // The handler sees the job as a worker would: `Some(())` came back as `None`.
    let err = run_inline(TtOptional { flag: Some(()) }).await.unwrap_err();
    assert_eq!(err.to_string(), "the flag was lost in JSON");
    // A job that cannot survive its payload fails the test, not production.
    let msg = panic_of(run_inline(TtRatio { ratio: f64::NAN })).await;
    assert!(
        msg.contains("job `tt_ratio` does not survive its JSON payload: {\"ratio\":null}"),
        "{msg}"
    );
    // Nor can one an enqueue would refuse.
    let huge = TtHuge {
        blob: "x".repeat(mysqlq::MAX_PAYLOAD_BYTES + 1),
    };
    let msg = panic_of(run_inline(huge)).await;
    assert!(msg.contains("cannot be enqueued as it is"), "{msg}");
    assert!(msg.contains("over the limit"), "{msg}");
}

/// A job whose payload can be over the size limit.
#[derive(serde::Serialize, serde::Deserialize)]
struct TtHuge {
    blob: String,
}

impl Job for TtHuge {
    const KIND: &'static str = "tt_huge";

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_cancel_handle_stops_the_handler_with_each_reason_a_worker_has() {
    for reason in [
        CancelReason::Timeout,
        CancelReason::Shutdown,
        CancelReason::Cancelled,
    ] {
        let (ctx, cancel) = TestContext::new::<TtSteps>().build_with_cancel();
        let run = tokio::spawn(run_inline_with(TtSteps { steps: 10_000 }, ctx.clone()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!run.is_finished(), "it runs until cancelled");
        cancel.cancel(reason);
        cancel.cancel(CancelReason::LeaseLost); // the first reason stands
        let err = run.await.unwrap().unwrap_err();
        assert_eq!(err.to_string(), format!("stopped: {reason}"));
        assert!(ctx.is_cancelled());
        assert_eq!(ctx.cancel_reason(), Some(reason));
    }
    // Not cancelled: it finishes.
    run_inline(TtSteps { steps: 2 }).await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Item 4: assertions

#[tokio::test]
async fn assertions_see_the_tests_own_uncommitted_jobs() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    TtNote { n: 1 }.enqueue(&mut tx).await.unwrap();
    let options = EnqueueOptions::new()
        .queue("tt-notes-later")
        .priority(3)
        .delay(Duration::from_secs(3600))
        .meta("tenant", json!({"name": "acme", "tier": 2}))
        .dedupe_key("note-2");
    TtNote { n: 2 }
        .enqueue_with(&mut tx, &options)
        .await
        .unwrap();

    let found = assert_enqueued::<TtNote, _, _>(&mut *tx, |j| j.n == 1).await;
    assert_eq!(found.len(), 1);
    refute_enqueued::<TtNote, _, _>(&mut *tx, |j| j.n == 3).await;
    let all = enqueued::<TtNote, _>(&mut *tx).await.unwrap();
    assert_eq!(all.iter().map(|(_, j)| j.n).collect::<Vec<_>>(), [1, 2]);

    let hits = assert_enqueued_with(
        &mut *tx,
        EnqueuedMatch::of::<TtNote>()
            .args(json!({"n": 2}))
            .queue("tt-notes-later")
            .priority(3)
            .scheduled_in(Duration::from_secs(3600), Duration::from_secs(60))
            .meta(json!({"tenant": {"name": "acme"}}))
            .dedupe_key("note-2")
            .max_attempts(5),
    )
    .await;
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].payload, r#"{"n":2}"#);
    let ready = enqueued_with(&mut *tx, &EnqueuedMatch::of::<TtNote>().ready())
        .await
        .unwrap();
    assert_eq!(ready.len(), 1);
    assert_eq!(ready[0].queue, "tt-notes");
    refute_enqueued_with(
        &mut *tx,
        EnqueuedMatch::of::<TtNote>().scheduled_in(Duration::from_secs(60), Duration::from_secs(5)),
    )
    .await;
    let now = chrono::Utc::now();
    assert_enqueued_with(
        &mut *tx,
        EnqueuedMatch::new().scheduled_between(
            now + chrono::Duration::minutes(59),
            now + chrono::Duration::minutes(61),
        ),
    )
    .await;
    // Another transaction sees none of them; after the rollback nothing is left.
    assert!(enqueued::<TtNote, _>(&db.pool).await.unwrap().is_empty());
    tx.rollback().await.unwrap();
    refute_enqueued_with(&db.pool, EnqueuedMatch::new()).await;
}

#[tokio::test]
async fn a_failed_assertion_says_what_it_found() {
    let db = TestDb::new().await;
    TtNote { n: 5 }.enqueue(&db.pool).await.unwrap();
    let options = EnqueueOptions::new().priority(7);
    TtNote { n: 6 }
        .enqueue_with(&db.pool, &options)
        .await
        .unwrap();

    let pool = db.pool.clone();
    let msg = panic_of(async move {
        assert_enqueued::<TtNote, _, _>(&pool, |j| j.n == 9).await;
    })
    .await;
    assert!(
        msg.starts_with(
            "expected a pending `tt_note` job matching the predicate; found 2 pending `tt_note` \
             jobs, none matches:\n  job 1 `tt_note` queue=tt-notes priority=0 max_attempts=5 \
             ready args={\"n\":5}\n  job 2 `tt_note` queue=tt-notes priority=7"
        ),
        "{msg}"
    );

    let pool = db.pool.clone();
    let msg = panic_of(async move {
        refute_enqueued::<TtNote, _, _>(&pool, |j| j.n == 6).await;
    })
    .await;
    assert!(
        msg.starts_with(
            "expected no pending `tt_note` job matching the predicate; found 1 matching jobs:\n  \
             job 2 `tt_note`"
        ),
        "{msg}"
    );

    let pool = db.pool.clone();
    let msg = panic_of(async move {
        assert_enqueued_with(
            &pool,
            EnqueuedMatch::of::<TtNote>().queue("tt-notes").priority(9),
        )
        .await;
    })
    .await;
    assert!(
        msg.starts_with(
            "expected a pending job with kind = `tt_note`, queue = `tt-notes`, priority = 9; \
             found 2 pending `tt_note` jobs, none matches:\n  job 1"
        ),
        "{msg}"
    );

    let pool = db.pool.clone();
    let msg = panic_of(async move {
        refute_enqueued_with(&pool, EnqueuedMatch::new().priority(7)).await;
    })
    .await;
    assert!(
        msg.starts_with(
            "expected no pending job with priority = 7; found 1 matching jobs:\n  job 2 \
             `tt_note` queue=tt-notes priority=7"
        ),
        "{msg}"
    );
    // Nothing at all to show.
    let pool = db.pool.clone();
    let msg = panic_of(async move {
        assert_enqueued_with(&pool, EnqueuedMatch::new().kind("nothing_like_it")).await;
    })
    .await;
    assert_eq!(
        msg,
        "expected a pending job with kind = `nothing_like_it`; found 0 pending `nothing_like_it` jobs"
    );
}

// ---------------------------------------------------------------------------------------------
// Items 2 and 3: drain, work_one, work_job

#[tokio::test]
async fn drain_runs_each_ready_job_once_and_counts_how_each_attempt_ended() {
    let db = TestDb::new().await;
    let mut ids = Vec::new();
    for action in ["ok", "retry", "snooze", "fail", "cancel", "panic", "ok"] {
        let job = TtOutcome {
            action: action.into(),
        };
        ids.push(job.enqueue(&db.pool).await.unwrap().id());
    }
    let later = TtOutcome {
        action: "ok".into(),
    }
    .enqueue_with(
        &db.pool,
        &EnqueueOptions::new().delay(Duration::from_secs(3600)),
    )
    .await
    .unwrap()
    .id();

    let report = drain(&db.pool, DrainOptions::new().queues(["tt-drain"]))
        .await
        .unwrap();
    assert_eq!(
        (
            report.completed,
            report.retried,
            report.snoozed,
            report.failed,
            report.cancelled
        ),
        (2, 2, 1, 1, 1),
        "{report:#?}"
    );
    assert_eq!(report.ran(), 7);
    assert_eq!(
        report.attempts.iter().map(|a| a.id).collect::<Vec<_>>(),
        ids,
        "one at a time, by id"
    );
    let failures: Vec<(&str, bool)> = report
        .failures()
        .map(|a| (a.error.as_deref().unwrap(), a.panicked))
        .collect();
    assert_eq!(failures.len(), 3, "{failures:?}");
    assert!(
        failures[0]
            .0
            .starts_with("mail server busy (attempt 1 of 3; retry in ")
    );
    assert_eq!(failures[1], ("address rejected (permanent error)", false));
    assert!(
        failures[2]
            .0
            .starts_with("handler panicked: boom (attempt 1 of 3; retry in ")
    );
    assert!(failures[2].1, "the panic is reported as one");
    let states: Vec<JobState> = {
        let mut v = Vec::new();
        for id in &ids {
            v.push(row(&db, *id).await.state);
        }
        v
    };
    use JobState::*;
    assert_eq!(
        states,
        [
            Completed, Pending, Pending, Failed, Cancelled, Pending, Completed
        ]
    );
    assert_eq!(row(&db, later).await.state, Pending, "scheduled for later");
    assert_eq!(
        row(&db, ids[0])
            .await
            .locked_by
            .as_deref()
            .map(|w| w.starts_with("mysqlq-testing:")),
        Some(true)
    );
    // A second drain finds nothing ready: the retries wait for their backoff.
    let again = drain(&db.pool, DrainOptions::new().queues(["tt-drain"]))
        .await
        .unwrap();
    assert_eq!(again.ran(), 0);
}

#[tokio::test]
async fn drain_with_scheduled_runs_delayed_jobs_and_retries_until_they_end() {
    let db = TestDb::new().await;
    let flaky = TtFlaky {}.enqueue(&db.pool).await.unwrap().id();
    TtFlaky {}
        .enqueue_with(
            &db.pool,
            &EnqueueOptions::new().delay(Duration::from_secs(24 * 3600)),
        )
        .await
        .unwrap();
    // Without: one attempt of the ready job.
    let first = drain(&db.pool, DrainOptions::new().queues(["tt-flaky"]))
        .await
        .unwrap();
    assert_eq!((first.retried, first.completed), (1, 0));
    // With: the retry and the delayed job run now; the flaky one fails once more, then succeeds.
    let report = drain(
        &db.pool,
        DrainOptions::new()
            .queues(["tt-flaky"])
            .with_scheduled(true),
    )
    .await
    .unwrap();
    // The flaky job's second and third attempts; the delayed one's three.
    assert_eq!((report.retried, report.completed), (3, 2), "{report:#?}");
    let r = row(&db, flaky).await;
    assert_eq!((r.state, r.attempts), (JobState::Completed, 3));
    let history = Admin::new(db.pool.clone()).attempts(flaky).await.unwrap();
    assert_eq!(
        history.iter().map(|a| a.attempt).collect::<Vec<_>>(),
        [2, 1],
        "two failed attempts recorded, newest first"
    );
}

#[tokio::test]
async fn drain_with_recursion_runs_the_jobs_the_drained_jobs_enqueue() {
    let db = TestDb::new().await;
    TtChain { step: 1 }.enqueue(&db.pool).await.unwrap();
    let report = drain(&db.pool, DrainOptions::new().queues(["tt-chain"]))
        .await
        .unwrap();
    assert_eq!(report.completed, 1, "only what was there when it started");
    assert_enqueued::<TtChain, _, _>(&db.pool, |j| j.step == 2).await;
    let report = drain(
        &db.pool,
        DrainOptions::new()
            .queues(["tt-chain"])
            .with_recursion(true),
    )
    .await
    .unwrap();
    assert_eq!(report.completed, 2, "steps 2 and 3");
    refute_enqueued_with(&db.pool, EnqueuedMatch::of::<TtChain>()).await;
}

/// Counts the attempts it wraps and the dead jobs it hears of.
#[derive(Default)]
struct Counting {
    runs: AtomicU32,
    dead: AtomicU32,
}

impl Hook for Counting {
    fn around_run<'a>(&'a self, _job: &'a JobRun, next: Next<'a>) -> Next<'a> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        next
    }

    fn on_dead<'a>(
        &'a self,
        _job: &'a JobRun,
        _error: &'a str,
    ) -> mysqlq::hooks::BoxFuture<'a, ()> {
        self.dead.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {})
    }
}

#[tokio::test]
async fn drain_hands_out_state_calls_hooks_and_keeps_the_timeout() {
    let db = TestDb::new().await;
    for _ in 0..3 {
        TtCount {}.enqueue(&db.pool).await.unwrap();
    }
    let slow = TtSlow {}.enqueue(&db.pool).await.unwrap().id();
    let hook = std::sync::Arc::new(Counting::default());
    let runs = Runs::default();
    let report = drain(
        &db.pool,
        DrainOptions::new()
            .queues(["tt-state", "tt-slow"])
            .state(runs.clone())
            .hooks(Hooks::new().with_arc(hook.clone())),
    )
    .await
    .unwrap();
    assert_eq!((report.completed, report.retried), (3, 1), "{report:#?}");
    let timed_out = &report.attempts[3];
    assert_eq!(timed_out.id, slow);
    assert!(timed_out.timed_out);
    assert!(
        timed_out
            .error
            .as_deref()
            .unwrap()
            .starts_with("timed out after 100ms (attempt 1 of 2; retry in "),
        "{timed_out:?}"
    );
    assert_eq!(
        hook.runs.load(Ordering::SeqCst),
        4,
        "around_run around each attempt"
    );
    assert_eq!(runs.0.load(Ordering::SeqCst), 3, "each job got the state");
    let report = drain(
        &db.pool,
        DrainOptions::new()
            .queues(["tt-slow"])
            .with_scheduled(true)
            .hooks(Hooks::new().with_arc(hook.clone())),
    )
    .await
    .unwrap();
    assert_eq!(report.failed, 1, "the last attempt times out too");
    assert_eq!(hook.dead.load(Ordering::SeqCst), 1, "on_dead heard of it");
}

#[tokio::test]
async fn drain_state_reaches_the_jobs() {
    let db = TestDb::new().await;
    TtCount {}.enqueue(&db.pool).await.unwrap();
    // Without the state the job fails for good, as in a worker started without it.
    let report = drain(&db.pool, DrainOptions::new().queues(["tt-state"]))
        .await
        .unwrap();
    assert_eq!(report.failed, 1);
    assert_eq!(
        report.attempts[0].error.as_deref(),
        Some("no Runs state (permanent error)")
    );
}

#[tokio::test]
async fn drain_without_safety_returns_the_first_error_and_panics_with_the_first_panic() {
    let db = TestDb::new().await;
    for action in ["snooze", "retry", "ok"] {
        TtOutcome {
            action: action.into(),
        }
        .enqueue(&db.pool)
        .await
        .unwrap();
    }
    let err = drain(
        &db.pool,
        DrainOptions::new().queues(["tt-drain"]).with_safety(false),
    )
    .await
    .unwrap_err();
    let mysqlq::Error::JobFailed {
        id,
        kind,
        attempt,
        max_attempts,
        error,
    } = &err
    else {
        panic!("expected JobFailed, got {err:?}");
    };
    assert_eq!(
        (kind.as_str(), *attempt, *max_attempts),
        ("tt_outcome", 1, 3)
    );
    assert!(
        error.starts_with("mail server busy (attempt 1 of 3; retry in "),
        "{error}"
    );
    // Recorded first, as a worker records it; the snooze before it is no failure, and the drain
    // stopped before the job after it.
    let r = row(&db, *id).await;
    assert_eq!((r.state, r.attempts), (JobState::Pending, 1));
    assert_eq!(r.last_error.as_deref(), Some(error.as_str()));
    assert!(err.to_string().starts_with(&format!(
        "job {id} (`tt_outcome`) attempt 1 of 3 failed: mail server busy"
    )));
    assert_eq!(db.count("completed").await, 0);

    let db = TestDb::new().await;
    let panicking = TtOutcome {
        action: "panic".into(),
    }
    .enqueue(&db.pool)
    .await
    .unwrap()
    .id();
    let pool = db.pool.clone();
    let msg = panic_of(async move {
        let _ = drain(
            &pool,
            DrainOptions::new().queues(["tt-drain"]).with_safety(false),
        )
        .await;
    })
    .await;
    assert!(
        msg.starts_with(&format!(
            "job {panicking} (`tt_outcome`) attempt 1 of 3 panicked: handler panicked: boom"
        )),
        "{msg}"
    );
    assert_eq!(row(&db, panicking).await.attempts, 1);
}

#[tokio::test]
async fn drain_keeps_paused_queues_ordering_keys_and_its_limit() {
    let db = TestDb::new().await;
    let admin = Admin::new(db.pool.clone());
    // A paused queue is not drained.
    let paused = TtNote { n: 1 }
        .enqueue_with(&db.pool, &EnqueueOptions::new().queue("tt-paused"))
        .await
        .unwrap()
        .id();
    admin.pause("tt-paused").await.unwrap();
    let report = drain(&db.pool, DrainOptions::new().queues(["tt-paused"]))
        .await
        .unwrap();
    assert_eq!(report.ran(), 0);
    assert_eq!(row(&db, paused).await.state, JobState::Pending);

    // Jobs sharing an ordering key run in order: the second waits for the first's retry.
    let keyed = EnqueueOptions::new()
        .queue("tt-ordered")
        .ordering_key("customer-7");
    let first = TtOutcome {
        action: "retry".into(),
    }
    .enqueue_with(&db.pool, &keyed)
    .await
    .unwrap()
    .id();
    let second = TtOutcome {
        action: "ok".into(),
    }
    .enqueue_with(&db.pool, &keyed)
    .await
    .unwrap()
    .id();
    let report = drain(&db.pool, DrainOptions::new().queues(["tt-ordered"]))
        .await
        .unwrap();
    assert_eq!(
        report.attempts.iter().map(|a| a.id).collect::<Vec<_>>(),
        [first]
    );
    assert_eq!(row(&db, second).await.state, JobState::Pending);

    // A job that snoozes forever ends the drain at its limit, with an error saying so.
    TtOutcome {
        action: "snooze0".into(),
    }
    .enqueue(&db.pool)
    .await
    .unwrap();
    let err = drain(
        &db.pool,
        DrainOptions::new()
            .queues(["tt-drain"])
            .with_scheduled(true)
            .limit(5),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("ran 5 attempts and jobs are still left"),
        "{err}"
    );
}

#[tokio::test]
async fn an_operators_cancel_reaches_a_drained_job_while_it_runs() {
    let db = TestDb::new().await;
    let id = TtUntilCancelled {}.enqueue(&db.pool).await.unwrap().id();
    let pool = db.pool.clone();
    let drained =
        tokio::spawn(async move { drain(&pool, DrainOptions::new().queues(["tt-cancel"])).await });
    db.wait_for(
        "the job runs",
        &format!("SELECT COUNT(*) FROM job_queue WHERE id = {id} AND status = 'processing'"),
        Duration::from_secs(30),
    )
    .await;
    Admin::new(db.pool.clone())
        .cancel(
            JobSelection::Ids(&[id]),
            "tester",
            Some("not needed"),
            |_| {},
        )
        .await
        .unwrap();
    let report = drained.await.unwrap().unwrap();
    assert_eq!(report.cancelled, 1, "{report:#?}");
    assert_eq!(report.attempts[0].outcome, Outcome::Cancelled);
    let r = row(&db, id).await;
    assert_eq!(r.state, JobState::Cancelled);
    assert_eq!(r.cancelled_by.as_deref(), Some("tester"));
}

#[tokio::test]
async fn work_one_runs_one_job_now_and_returns_its_outcome_and_row() {
    let db = TestDb::new().await;
    let first = work_one(&db.pool, TtFlaky {}, WorkOptions::new())
        .await
        .unwrap();
    assert_eq!(first.outcome, Outcome::Retried);
    assert_eq!(
        (first.row.state, first.row.attempts),
        (JobState::Pending, 1)
    );
    let error = first.row.last_error.clone().unwrap();
    assert!(
        error.starts_with("not yet (attempt 1 of 4; retry in "),
        "{error}"
    );
    assert_eq!(first.attempt.error.as_deref(), Some(error.as_str()));
    assert!(
        first.row.available_at > first.row.read_at,
        "after its backoff"
    );
    assert_eq!(first.history.len(), 1);
    assert_eq!(first.history[0].error, error);

    // The next attempts, now, whatever the backoff says.
    let second = work_job(&db.pool, first.id, WorkOptions::new())
        .await
        .unwrap();
    assert_eq!((second.outcome, second.row.attempts), (Outcome::Retried, 2));
    let third = work_job(&db.pool, first.id, WorkOptions::new())
        .await
        .unwrap();
    assert_eq!(third.outcome, Outcome::Completed);
    assert_eq!(
        (third.row.state, third.row.attempts),
        (JobState::Completed, 3)
    );
    assert_eq!(third.attempt.error, None);
    assert_eq!(third.history.len(), 2);
    let err = work_job(&db.pool, first.id, WorkOptions::new())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("invalid job: job {} is completed, not pending", first.id)
    );
    let err = work_job(&db.pool, mysqlq::JobId(999_999), WorkOptions::new())
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "invalid job: there is no job 999999");

    // Enqueue options, state, and a delayed job run now.
    let options = WorkOptions::new().state(Mailer::default()).enqueue_options(
        EnqueueOptions::new()
            .delay(Duration::from_secs(3600))
            .max_attempts(1)
            .meta("tenant", json!("acme")),
    );
    let worked = work_one(&db.pool, TtWelcome { to: "d@x".into() }, options)
        .await
        .unwrap();
    assert_eq!(worked.outcome, Outcome::Completed);
    assert_eq!(
        worked.row.meta,
        Some(json!({"tenant": "acme", "sent": true})),
        "the handler's meta write landed on the row"
    );
    // Its last attempt: a retryable error fails the job.
    let worked = work_one(
        &db.pool,
        TtOutcome {
            action: "retry".into(),
        },
        WorkOptions::new().enqueue_options(EnqueueOptions::new().max_attempts(1)),
    )
    .await
    .unwrap();
    assert_eq!(worked.outcome, Outcome::Failed);
    assert_eq!(
        worked.row.last_error.as_deref(),
        Some("mail server busy (attempt 1 of 1; no attempts left)")
    );
}

#[tokio::test]
async fn work_one_shows_what_the_worker_records_for_a_timeout_and_propagates_without_safety() {
    let db = TestDb::new().await;
    let worked = work_one(&db.pool, TtSlow {}, WorkOptions::new())
        .await
        .unwrap();
    assert_eq!(worked.outcome, Outcome::Retried);
    assert!(worked.attempt.timed_out);
    assert!(
        worked
            .row
            .last_error
            .as_deref()
            .unwrap()
            .starts_with("timed out after 100ms (attempt 1 of 2; retry in "),
        "{worked:?}"
    );
    let err = work_job(&db.pool, worked.id, WorkOptions::new().with_safety(false))
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "job {} (`tt_slow`) attempt 2 of 2 failed: timed out after 100ms (attempt 2 of 2; \
             no attempts left)",
            worked.id
        )),
        "{err}"
    );
    assert_eq!(row(&db, worked.id).await.state, JobState::Failed);
    // A job of a kind the worker does not know: recorded as a worker records it.
    let unknown = work_one(
        &db.pool,
        TtNote { n: 1 },
        WorkOptions::new().registry(Registry::new().register::<TtSlow>().unwrap()),
    )
    .await
    .unwrap();
    assert_eq!(unknown.outcome, Outcome::Retried);
    assert!(
        unknown
            .row
            .last_error
            .as_deref()
            .unwrap()
            .starts_with("unknown job kind `tt_note` on queue `tt-notes`"),
        "{unknown:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Done when: drain and work_one record attempts exactly as the worker does

/// A permanent error on the first attempt.
#[mysqlq::job(queue = "tt-compare", retries = 1, name = "tt_cmp_fail")]
async fn tt_cmp_fail(n: u32) -> Result<(), JobError> {
    Err(JobError::fail(format!("bad input {n}")))
}

/// Retried after its first attempt, failed after its second.
#[mysqlq::job(
    queue = "tt-compare",
    retries = 1,
    backoff = "2h",
    name = "tt_cmp_retry"
)]
async fn tt_cmp_retry(n: u32) -> Result<(), JobError> {
    Err(JobError::retry(format!("busy {n}")))
}

/// Panics on its only attempt.
#[mysqlq::job(queue = "tt-compare", retries = 0, name = "tt_cmp_panic")]
async fn tt_cmp_panic(n: u32) -> Result<(), JobError> {
    panic!("boom {n}")
}

/// Times out on its only attempt.
#[mysqlq::job(
    queue = "tt-compare",
    retries = 0,
    timeout = "100ms",
    name = "tt_cmp_slow"
)]
async fn tt_cmp_slow(n: u32) -> Result<(), JobError> {
    tokio::time::sleep(Duration::from_secs(30 + u64::from(n))).await;
    Ok(())
}

/// Snoozes, writing its meta first.
#[mysqlq::job(queue = "tt-compare", name = "tt_cmp_snooze")]
async fn tt_cmp_snooze(ctx: JobContext, n: u32) -> Result<(), JobError> {
    ctx.set_meta("seen", n).await?;
    Err(JobError::snooze(Duration::from_secs(7200)))
}

/// Completes.
#[mysqlq::job(queue = "tt-compare", name = "tt_cmp_ok")]
async fn tt_cmp_ok(n: u32) -> Result<(), JobError> {
    let _ = n;
    Ok(())
}

/// Enqueues one job of each comparison kind; returns their ids.
async fn enqueue_comparison_set(db: &TestDb) -> Vec<mysqlq::JobId> {
    let mut ids = Vec::new();
    ids.push(TtCmpFail { n: 1 }.enqueue(&db.pool).await.unwrap().id());
    ids.push(TtCmpRetry { n: 1 }.enqueue(&db.pool).await.unwrap().id());
    ids.push(TtCmpPanic { n: 1 }.enqueue(&db.pool).await.unwrap().id());
    ids.push(TtCmpSlow { n: 1 }.enqueue(&db.pool).await.unwrap().id());
    ids.push(TtCmpSnooze { n: 1 }.enqueue(&db.pool).await.unwrap().id());
    ids.push(TtCmpOk { n: 1 }.enqueue(&db.pool).await.unwrap().id());
    ids
}

/// Every column of the job's row and of its attempt history, as text, with what must differ
/// between two runs blanked: ids, times (kept as set or not set, and as past or future for
/// `available_at`), claim tokens (kept as set or not), and the jittered delay of a retry in
/// its message.
async fn comparable(db: &TestDb, id: mysqlq::JobId) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (table, key) in [("job_queue", "id"), ("mysqlq_job_attempt", "job_id")] {
        let columns: Vec<(String, String)> = sqlx::query_as(
            "SELECT CAST(column_name AS CHAR), CAST(data_type AS CHAR) FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position",
        )
        .bind(table)
        .fetch_all(&db.pool)
        .await
        .unwrap();
        let exprs: Vec<String> = columns
            .iter()
            .map(|(c, ty)| match (c.as_str(), ty.as_str()) {
                ("id" | "job_id", _) => "''".to_owned(),
                ("available_at", _) => {
                    format!("CASE WHEN `{c}` > UTC_TIMESTAMP(6) THEN 'future' ELSE 'past' END")
                }
                ("claim_token", _) | (_, "datetime" | "timestamp") => {
                    format!("IF(`{c}` IS NULL, 'null', 'set')")
                }
                _ => format!("IFNULL(CAST(`{c}` AS CHAR), 'null')"),
            })
            .collect();
        let sql = format!(
            "SELECT CONCAT_WS('\\t', {}) FROM {table} WHERE {key} = ? ORDER BY 1",
            exprs.join(", ")
        );
        let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(id.0)
            .fetch_all(&db.pool)
            .await
            .unwrap();
        let names: Vec<&str> = columns.iter().map(|(c, _)| c.as_str()).collect();
        for (i, r) in rows.iter().enumerate() {
            for (name, value) in names.iter().zip(r.split('\t')) {
                let value = match value.find("; retry in ") {
                    Some(at) => format!("{}; retry in …", &value[..at]),
                    None => value.to_owned(),
                };
                let value = if *name == "error_bytes" && r.contains("; retry in ") {
                    "(jittered)".to_owned()
                } else {
                    value
                };
                out.push((format!("{table}[{i}].{name}"), value));
            }
        }
    }
    out
}

#[tokio::test]
async fn drain_and_work_one_leave_the_rows_a_worker_leaves() {
    let db = TestDb::new().await;
    let registry = Registry::new()
        .register::<TtCmpFail>()
        .and_then(|r| r.register::<TtCmpRetry>())
        .and_then(|r| r.register::<TtCmpPanic>())
        .and_then(|r| r.register::<TtCmpSlow>())
        .and_then(|r| r.register::<TtCmpSnooze>())
        .and_then(|r| r.register::<TtCmpOk>())
        .unwrap();

    // A real worker runs one of each, first attempts only (the retry and the snooze are due in
    // hours).
    let by_worker = enqueue_comparison_set(&db).await;
    let worker = mysqlq::Worker::builder(db.pool.clone())
        .registry(registry.clone())
        .queues(["tt-compare"])
        .worker_id("tt-compare-worker")
        .poll_interval(Duration::from_millis(5), Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let mut events = worker.events();
    let mut ended = std::collections::HashSet::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        while ended.len() < by_worker.len() {
            match events.recv().await.unwrap() {
                mysqlq::WorkerEvent::Completed { id }
                | mysqlq::WorkerEvent::Recorded { id, .. } => {
                    ended.insert(id);
                }
                _ => {}
            }
        }
    })
    .await
    .expect("the worker ran every job");
    worker.shutdown().await.unwrap();

    // The same jobs, drained.
    let by_drain = enqueue_comparison_set(&db).await;
    let report = drain(
        &db.pool,
        DrainOptions::new()
            .queues(["tt-compare"])
            .registry(registry.clone())
            .worker_id("tt-compare-worker"),
    )
    .await
    .unwrap();
    assert_eq!(report.ran(), by_drain.len(), "{report:#?}");
    // And each worked on its own.
    let by_work_one = [
        work_one(&db.pool, TtCmpFail { n: 1 }, opts(&registry)).await,
        work_one(&db.pool, TtCmpRetry { n: 1 }, opts(&registry)).await,
        work_one(&db.pool, TtCmpPanic { n: 1 }, opts(&registry)).await,
        work_one(&db.pool, TtCmpSlow { n: 1 }, opts(&registry)).await,
        work_one(&db.pool, TtCmpSnooze { n: 1 }, opts(&registry)).await,
        work_one(&db.pool, TtCmpOk { n: 1 }, opts(&registry)).await,
    ]
    .map(|w| w.unwrap().id);

    for (i, ((w, d), o)) in by_worker
        .iter()
        .zip(&by_drain)
        .zip(&by_work_one)
        .enumerate()
    {
        let worker_rows = comparable(&db, *w).await;
        assert!(worker_rows.len() > 20, "{worker_rows:?}");
        assert_eq!(
            worker_rows,
            comparable(&db, *d).await,
            "job {i}: worker vs drain"
        );
        assert_eq!(
            worker_rows,
            comparable(&db, *o).await,
            "job {i}: worker vs work_one"
        );
    }
    // The second attempt of the retried job, too: a worker's after the backoff is cut short,
    // work_job's now.
    let due_now = |id: mysqlq::JobId| {
        sqlx::query("UPDATE job_queue SET available_at = UTC_TIMESTAMP(6) WHERE id = ?")
            .bind(id.0)
            .execute(&db.pool)
    };
    due_now(by_worker[1]).await.unwrap();
    let worker = mysqlq::Worker::builder(db.pool.clone())
        .registry(registry.clone())
        .queues(["tt-compare"])
        .worker_id("tt-compare-worker")
        .poll_interval(Duration::from_millis(5), Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the worker's second attempt",
        &format!(
            "SELECT COUNT(*) FROM job_queue WHERE id = {} AND status = 'failed'",
            by_worker[1]
        ),
        Duration::from_secs(60),
    )
    .await;
    worker.shutdown().await.unwrap();
    due_now(by_work_one[1]).await.unwrap();
    work_job(&db.pool, by_work_one[1], opts(&registry))
        .await
        .unwrap();
    assert_eq!(
        comparable(&db, by_worker[1]).await,
        comparable(&db, by_work_one[1]).await,
        "the retried job's second and last attempt"
    );
}

fn opts(registry: &Registry) -> WorkOptions {
    WorkOptions::new()
        .registry(registry.clone())
        .worker_id("tt-compare-worker")
}
