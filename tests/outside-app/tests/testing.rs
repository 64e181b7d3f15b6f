//! The application's own tests, written as a user writes them: `mysqlq::testing` through the
//! public API only, and a fresh database per test from `#[sqlx::test]` plus one line,
//! `mysqlq::migrate(&pool)`.
//!
//! The unit tests need no database. The others need `DATABASE_URL` naming a database on the
//! server (where sqlx keeps its list of test databases); each test gets a database of its own.
#![deny(warnings)]

use std::error::Error;
use std::time::Duration;

use mysqlq::admin::JobState;
use mysqlq::testing::{
    DrainOptions, EnqueuedMatch, Outcome, TestContext, WorkOptions, assert_enqueued,
    assert_enqueued_with, drain, refute_enqueued, run_inline, run_inline_with, work_job, work_one,
};
use mysqlq::{CancelReason, EnqueueOptions, ErrorClass};
use outside_app::{AppState, Outbox, RecordVisit, SendWelcome, sign_up};
use sqlx::MySqlPool;

type TestResult = Result<(), Box<dyn Error>>;

fn app_state() -> AppState {
    AppState {
        greeting: "Hello from the tests".to_owned(),
    }
}

#[tokio::test]
async fn a_handler_gets_the_state_and_the_attempt_it_is_given() {
    let outbox = Outbox::default();
    let ctx = TestContext::new::<SendWelcome>()
        .state(outbox.clone())
        .state(app_state())
        .attempt(3)
        .build();
    run_inline_with(
        SendWelcome {
            to: "ada@example.com".into(),
        },
        ctx,
    )
    .await
    .unwrap();
    assert_eq!(
        *outbox.sent.lock().unwrap(),
        ["ada@example.com: Hello from the tests (attempt 3)"]
    );
    // Without the state the worker would be given, it fails for good, as in production.
    let err = run_inline(SendWelcome {
        to: "ada@example.com".into(),
    })
    .await
    .unwrap_err();
    assert_eq!(err.class(), ErrorClass::Fail);
    let err = run_inline(RecordVisit { n: 1 }).await.unwrap_err();
    assert_eq!(err.to_string(), "the worker gave this job no pool");
    // A cancel handle: the context is cancelled for the reason given.
    let (ctx, cancel) = TestContext::new::<SendWelcome>().build_with_cancel();
    cancel.cancel(CancelReason::Timeout);
    assert_eq!(ctx.cancel_reason(), Some(CancelReason::Timeout));
}

#[sqlx::test(migrations = false)]
async fn sign_up_enqueues_the_welcome_in_the_callers_transaction(pool: MySqlPool) -> TestResult {
    mysqlq::migrate(&pool).await?;
    let mut tx = pool.begin().await?;
    sign_up(&mut tx, "ada@example.com").await?;
    assert_enqueued::<SendWelcome, _, _>(&mut *tx, |j| j.to == "ada@example.com").await;
    refute_enqueued::<SendWelcome, _, _>(&mut *tx, |j| j.to == "bob@example.com").await;
    assert_enqueued_with(
        &mut *tx,
        EnqueuedMatch::of::<SendWelcome>()
            .queue("outside-mail")
            .ready()
            .args(serde_json::json!({ "to": "ada@example.com" })),
    )
    .await;
    tx.rollback().await?;
    refute_enqueued::<SendWelcome, _, _>(&pool, |_| true).await;
    Ok(())
}

#[sqlx::test(migrations = false)]
async fn drain_sends_the_welcomes_with_the_apps_state(pool: MySqlPool) -> TestResult {
    mysqlq::migrate(&pool).await?;
    let mut tx = pool.begin().await?;
    sign_up(&mut tx, "ada@example.com").await?;
    sign_up(&mut tx, "not an address").await?;
    tx.commit().await?;
    let outbox = Outbox::default();
    let report = drain(
        &pool,
        DrainOptions::new()
            .queues(["outside-mail"])
            .state(outbox.clone())
            .state(app_state()),
    )
    .await?;
    assert_eq!((report.completed, report.failed), (1, 1), "{report:?}");
    let failure = report.failures().next().unwrap();
    assert_eq!(
        failure.error.as_deref(),
        Some("`not an address` is not an address (permanent error)")
    );
    assert_eq!(
        *outbox.sent.lock().unwrap(),
        ["ada@example.com: Hello from the tests (attempt 1)"]
    );
    Ok(())
}

#[sqlx::test(migrations = false)]
async fn a_job_that_reads_app_state_and_the_pool_runs_as_in_the_worker(
    pool: MySqlPool,
) -> TestResult {
    mysqlq::migrate(&pool).await?;
    sqlx::query("CREATE TABLE outside_app_runs (n BIGINT UNSIGNED PRIMARY KEY, greeting VARCHAR(100) NOT NULL)")
        .execute(&pool)
        .await?;
    let worked = work_one(
        &pool,
        RecordVisit { n: 7 },
        WorkOptions::new().state(app_state()),
    )
    .await?;
    assert_eq!(worked.outcome, Outcome::Completed);
    assert_eq!(worked.row.state, JobState::Completed);
    let greeting: String = sqlx::query_scalar("SELECT greeting FROM outside_app_runs WHERE n = 7")
        .fetch_one(&pool)
        .await?;
    assert_eq!(greeting, "Hello from the tests");
    // The same visit again: the primary key refuses it, and the worker retries.
    let again = work_one(
        &pool,
        RecordVisit { n: 7 },
        WorkOptions::new().enqueue_options(EnqueueOptions::new().delay(Duration::from_secs(60))),
    )
    .await?;
    assert_eq!(again.outcome, Outcome::Retried);
    assert_eq!(
        (again.row.state, again.row.attempts),
        (JobState::Pending, 1)
    );
    assert!(again.row.last_error.unwrap().contains("Duplicate entry"));
    sqlx::query("DELETE FROM outside_app_runs")
        .execute(&pool)
        .await?;
    let last = work_job(&pool, again.id, WorkOptions::new()).await?;
    assert_eq!(last.outcome, Outcome::Completed);
    assert_eq!(
        last.history.len(),
        1,
        "the failed attempt is in the history"
    );
    Ok(())
}
