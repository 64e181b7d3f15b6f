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

/// The e-mail job without what its worker gives it fails for good, as in a worker started
/// without `.state(MailEndpoint { .. })`: a unit test, no database.
#[tokio::test]
async fn the_email_job_needs_its_mail_endpoint_state_and_a_pool() {
    use mysqlq::testing::{TestContext, run_inline, run_inline_with};
    use mysqlq_examples::order_email::{MailEndpoint, SendOrderEmail};

    let err = run_inline(SendOrderEmail { order_id: 1 })
        .await
        .unwrap_err();
    assert_eq!(err.class(), mysqlq::ErrorClass::Fail);
    assert_eq!(
        err.to_string(),
        "the worker has no MailEndpoint state or no pool"
    );
    let ctx = TestContext::new::<SendOrderEmail>()
        .state(MailEndpoint {
            addr: "127.0.0.1:9".parse().unwrap(),
            verbose: false,
        })
        .build();
    let err = run_inline_with(SendOrderEmail { order_id: 1 }, ctx)
        .await
        .unwrap_err();
    assert_eq!(err.class(), mysqlq::ErrorClass::Fail, "still no pool");
}

/// With `mysqlq::testing`: the order's job is seen in its transaction and gone with a
/// rollback; `drain` sends the committed orders' mails with the endpoint as state (the bounce
/// fails for good); `work_job` shows what the worker records during an outage.
#[tokio::test]
async fn orders_and_their_mails_through_the_testing_helpers() {
    use mysqlq::testing::{
        DrainOptions, Outcome, WorkOptions, assert_enqueued, drain, refute_enqueued, work_job,
    };
    use mysqlq_examples::order_email::{
        BOUNCE_ADDRESS, FakeMailServer, Faults, MailEndpoint, QUEUE, SendOrderEmail,
    };
    use mysqlq_examples::server::{drop_database, fresh_database, unique_database, url_or_local};

    let url = url_or_local();
    let name = unique_database("order_email_testing");
    let result: Result<(), Box<dyn std::error::Error>> = async {
        let pool = fresh_database(&url, &name, 10).await?;
        order_email::create_schema(&pool).await?;
        let place = |email: &'static str, commit: bool| {
            let pool = pool.clone();
            async move {
                let mut tx = pool.begin().await?;
                let order_id = sqlx::query(
                    "INSERT INTO orders (customer_email, total_cents) VALUES (?, 1999)",
                )
                .bind(email)
                .execute(&mut *tx)
                .await?
                .last_insert_id();
                let job = SendOrderEmail { order_id }.enqueue(&mut tx).await?;
                assert_enqueued::<SendOrderEmail, _, _>(&mut *tx, |j| j.order_id == order_id).await;
                if commit {
                    tx.commit().await?;
                } else {
                    tx.rollback().await?;
                }
                Ok::<_, Box<dyn std::error::Error>>(job.id())
            }
        };
        place("gone@example.com", false).await?;
        refute_enqueued::<SendOrderEmail, _, _>(&pool, |_| true).await;

        place("ada@example.com", true).await?;
        place(BOUNCE_ADDRESS, true).await?;
        let no_faults = Faults {
            outage_every: 0,
            lost_ack_every: 0,
        };
        let mail = FakeMailServer::start(no_faults, false).await?;
        let endpoint = MailEndpoint {
            addr: mail.addr(),
            verbose: false,
        };
        let report = drain(
            &pool,
            DrainOptions::new().queues([QUEUE]).state(endpoint.clone()),
        )
        .await?;
        assert_eq!((report.completed, report.failed), (1, 1), "{report:?}");
        let bounce = report.failures().next().unwrap().error.clone().unwrap();
        assert!(
            bounce.starts_with("mail server rejected the message: HTTP 422"),
            "{bounce}"
        );
        assert!(bounce.ends_with("(permanent error)"), "{bounce}");
        let delivered: Vec<String> = mail
            .stats()
            .deliveries
            .values()
            .map(|d| d.to.clone())
            .collect();
        assert_eq!(delivered, ["ada@example.com"]);

        // The mail server is down: the worker retries after the job's backoff.
        let down = FakeMailServer::start(
            Faults {
                outage_every: 1,
                lost_ack_every: 0,
            },
            false,
        )
        .await?;
        let id = place("bob@example.com", true).await?;
        let worked = work_job(
            &pool,
            id,
            WorkOptions::new().state(MailEndpoint {
                addr: down.addr(),
                verbose: false,
            }),
        )
        .await?;
        assert_eq!(worked.outcome, Outcome::Retried);
        let error = worked.row.last_error.unwrap_or_default();
        assert!(
            error.starts_with("mail server unavailable: HTTP 503"),
            "{error}"
        );
        assert!(error.contains("(attempt 1 of 6; retry in "), "{error}");
        Ok(())
    }
    .await;
    let _ = drop_database(&url, &name).await;
    result.unwrap();
}
