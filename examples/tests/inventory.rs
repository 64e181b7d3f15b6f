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
