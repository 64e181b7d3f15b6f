//! The order-email example's round, run against a real server, with its numbers checked.
//!
//! Uses `DATABASE_URL` or `mysql://root@127.0.0.1:3306`; fails (never skips) when no server
//! answers.

use mysqlq_examples::order_email::{self, Options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_commits_rolls_back_retries_and_fails_as_described() {
    let url = mysqlq_examples::server::url_or_local();
    let options = Options {
        verbose: false,
        ..Options::default()
    };
    let result = order_email::run_once_with(&url, &options).await;
    // The round's database is its own (unique per run): drop it whatever happened.
    let _ = mysqlq_examples::server::drop_database(&url, &options.database).await;
    let summary =
        result.unwrap_or_else(|e| panic!("the order-email round against {url} could not run: {e}"));
    println!("{summary}");
    assert!(summary.ok(), "invariants broken: {summary}");
    // 20 orders, every 5th rolled back; order 7 bounces.
    assert_eq!(summary.committed, 16, "{summary}");
    assert_eq!(summary.rolled_back, 4, "{summary}");
    assert_eq!(summary.delivered_once, 15, "{summary}");
    assert_eq!(summary.failed, 1, "{summary}");
    assert!(summary.bounce_job.is_some(), "{summary}");
    // Every third request is an outage, and every seventh answer is lost: both must have
    // happened, been retried, and the lost answers absorbed by the idempotency key.
    assert!(summary.outages > 0, "{summary}");
    assert!(summary.duplicates_absorbed > 0, "{summary}");
    assert!(
        summary.retries >= summary.outages + summary.duplicates_absorbed,
        "{summary}"
    );
    assert!(summary.to_string().ends_with("— OK"), "{summary}");
}

#[tokio::test]
async fn a_bounce_order_that_would_roll_back_is_refused() {
    let options = Options {
        bounce_order: 10,
        rollback_every: 5,
        ..Options::default()
    };
    let err = order_email::run_once_with(&mysqlq_examples::server::url_or_local(), &options)
        .await
        .expect_err("order 10 rolls back, so it cannot be the bounce");
    assert!(err.contains("bounce order 10"), "{err}");
}
