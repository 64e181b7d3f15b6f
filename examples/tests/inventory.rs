//! The inventory example's round, run against a real server, with the checks:
//! 200 concurrent checkouts for 50 units → exactly 50 succeed, no unit sold twice, ledger equals
//! sales; abandoned reservations return to the pool after their expiry job runs.
//!
//! Uses `DATABASE_URL` or `mysql://root@127.0.0.1:3306`; fails (never skips) when no server
//! answers.

use mysqlq_examples::inventory::{self, Options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checkouts_never_oversell_and_abandoned_reservations_return() {
    let url = mysqlq_examples::server::url_or_local();
    let options = Options {
        verbose: false,
        ..Options::default()
    };
    assert_eq!((options.checkouts, options.rush_units), (200, 50));
    let result = inventory::run_once_with(&url, &options).await;
    // The round's database is its own (unique per run): drop it whatever happened.
    let _ = mysqlq_examples::server::drop_database(&url, &options.database).await;
    let summary =
        result.unwrap_or_else(|e| panic!("the inventory round against {url} could not run: {e}"));
    println!("{summary}");
    assert!(summary.ok(), "invariants broken: {summary}");
    // 200 concurrent checkouts for 50 units → exactly 50 succeed, 150 are refused.
    assert_eq!(summary.succeeded, 50, "{summary}");
    assert_eq!(summary.refused, 150, "{summary}");
    // No unit sold twice; the ledger equals the sales.
    assert_eq!(summary.sold_twice, 0, "{summary}");
    assert_eq!(summary.units_sold, 50, "{summary}");
    assert_eq!(summary.ledger_rows, 50, "{summary}");
    // Abandoned reservations return to the pool after their expiry job runs.
    assert!(summary.abandoned_carts > 0, "{summary}");
    assert!(summary.abandoned_units > 0, "{summary}");
    assert_eq!(summary.released_units, summary.abandoned_units, "{summary}");
    // Many low-stock notices, one Replenish job per SKU.
    assert!(
        summary.low_stock_notices > summary.replenish_jobs,
        "{summary}"
    );
    assert_eq!(summary.replenish_jobs, summary.replenish_skus, "{summary}");
    assert!(summary.to_string().ends_with("— OK"), "{summary}");
}

/// With `mysqlq::testing`: a reservation's expiry job is enqueued for its end, a drain leaves it
/// until then, and run now it releases the units of an abandoned cart and nothing of a cart
/// that was checked out.
#[tokio::test]
async fn an_abandoned_reservation_is_released_by_its_expiry_job_run_now() {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use mysqlq::testing::{DrainOptions, EnqueuedMatch, Outcome, WorkOptions};
    use mysqlq::testing::{assert_enqueued_with, drain, work_job};
    use mysqlq_examples::inventory::{CAP_SKU, Claimed, ExpireReservation, QUEUE, Reserved};
    use mysqlq_examples::server::{drop_database, fresh_database, unique_database, url_or_local};

    let url = url_or_local();
    let name = unique_database("inventory_testing");
    let result: Result<(), Box<dyn std::error::Error>> = async {
        let pool = fresh_database(&url, &name, 10).await?;
        inventory::create_schema(&pool, &Options::default()).await?;
        let available = || {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM inventory_unit WHERE sku = ? AND status = 'available'",
            )
            .bind(CAP_SKU)
            .fetch_one(&pool)
        };
        let cart = BTreeMap::from([(CAP_SKU.to_owned(), 2)]);
        let hour = Duration::from_secs(3600);
        let Reserved::Held(abandoned) = inventory::reserve(&pool, &cart, hour).await? else {
            panic!("10 caps in stock");
        };
        assert_eq!(available().await?, 8);
        assert_enqueued_with(
            &pool,
            EnqueuedMatch::of::<ExpireReservation>()
                .args(serde_json::json!({ "reservation_id": abandoned.id }))
                .scheduled_in(hour, Duration::from_secs(60)),
        )
        .await;
        let report = drain(&pool, DrainOptions::new().queues([QUEUE])).await?;
        assert_eq!(report.ran(), 0, "not due for an hour");
        let report = drain(
            &pool,
            DrainOptions::new().queues([QUEUE]).with_scheduled(true),
        )
        .await?;
        assert_eq!(report.completed, 1, "{report:?}");
        assert_eq!(available().await?, 10, "the abandoned units are back");

        let Reserved::Held(bought) = inventory::reserve(&pool, &cart, hour).await? else {
            panic!("10 caps in stock");
        };
        assert_eq!(inventory::claim(&pool, &bought).await?, Claimed::Sold);
        let worked = work_job(&pool, mysqlq::JobId(bought.expiry_job), WorkOptions::new()).await?;
        assert_eq!(worked.outcome, Outcome::Completed);
        assert_eq!(available().await?, 8, "sold units stay sold");
        Ok(())
    }
    .await;
    let _ = drop_database(&url, &name).await;
    result.unwrap();
}

/// Low stock is noticed once per SKU (the dedupe key), and the replenishment tops the pool up
/// from the backlog.
#[tokio::test]
async fn low_stock_is_noticed_once_and_replenished_from_the_backlog() {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use mysqlq::testing::{DrainOptions, EnqueuedMatch, assert_enqueued_with, drain};
    use mysqlq_examples::inventory::{MUG_SKU, REPLENISH_QUEUE, Replenish, Reserved};
    use mysqlq_examples::server::{drop_database, fresh_database, unique_database, url_or_local};

    let url = url_or_local();
    let name = unique_database("inventory_replenish");
    let result: Result<(), Box<dyn std::error::Error>> = async {
        let pool = fresh_database(&url, &name, 10).await?;
        inventory::create_schema(&pool, &Options::default()).await?;
        let cart = BTreeMap::from([(MUG_SKU.to_owned(), 5)]);
        let Reserved::Held(_) = inventory::reserve(&pool, &cart, Duration::from_secs(3600)).await?
        else {
            panic!("20 mugs in stock");
        };
        inventory::notice_low_stock(&pool, MUG_SKU).await?;
        let again = inventory::notice_low_stock(&pool, MUG_SKU).await?;
        assert!(matches!(again, mysqlq::Enqueued::Duplicate(_)), "{again:?}");
        let jobs = assert_enqueued_with(
            &pool,
            EnqueuedMatch::of::<Replenish>()
                .queue(REPLENISH_QUEUE)
                .dedupe_key(format!("replenish:{MUG_SKU}")),
        )
        .await;
        assert_eq!(jobs.len(), 1);
        let report = drain(&pool, DrainOptions::new().queues([REPLENISH_QUEUE])).await?;
        assert_eq!(report.completed, 1, "{report:?}");
        let (available, backlog): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM inventory_unit WHERE sku = ? AND status = 'available'), \
             (SELECT CAST(backlog AS SIGNED) FROM sku_stock WHERE sku = ?)",
        )
        .bind(MUG_SKU)
        .bind(MUG_SKU)
        .fetch_one(&pool)
        .await?;
        assert_eq!(
            (available, backlog),
            (20, 5),
            "5 units moved from the backlog"
        );
        Ok(())
    }
    .await;
    let _ = drop_database(&url, &name).await;
    result.unwrap();
}
