//! `mysqlq::testing` (issue 29): the unit-test context, the assertions inside a test's
//! transaction, and `drain` / `work_one` / `work_job`, which run jobs through the worker's own
//! path and leave the rows a worker leaves (compared column by column below).

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use mysqlq::testing::{
    EnqueuedMatch, TestContext, assert_enqueued, assert_enqueued_with, enqueued, enqueued_with,
    refute_enqueued, refute_enqueued_with, run_inline, run_inline_with,
};
use mysqlq::{CancelReason, EnqueueOptions, Job, JobContext, JobError};
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
