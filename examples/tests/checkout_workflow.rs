//! The checkout-workflow example's round, run against a real server in a database of its own
//! (dropped afterwards), with the checks: 20 orders for 15 units → 15 shipped, 5 with
//! `ship` cancelled "upstream `reserve` failed"; no unit reserved twice; every shipped order
//! charged once and receipted; no step claimed before its dependencies completed; an order
//! rolled back leaves no order, no job and no workflow.
//!
//! Uses `DATABASE_URL` or `mysql://root@127.0.0.1:3306`; fails (never skips) when no server
//! answers.

use mysqlq_examples::checkout_workflow::{self, Options, UPSTREAM_RESERVE_FAILED};
use mysqlq_examples::server::{drop_database, url_or_local};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_checkouts_for_fifteen_units_ship_fifteen_and_cancel_five() {
    let url = url_or_local();
    let options = Options {
        verbose: false,
        ..Options::default()
    };
    assert_eq!((options.orders, options.units), (20, 15));
    let result = checkout_workflow::run_once_with(&url, &options).await;
    // The round's database is its own (unique per run): drop it whatever happened.
    let _ = drop_database(&url, &options.database).await;
    let summary = result
        .unwrap_or_else(|e| panic!("the checkout-workflow round against {url} could not run: {e}"));
    println!("{summary}");
    let o = summary.outcomes;
    // Every workflow ended: 15 shipped, 5 sold out.
    assert_eq!((o.orders, o.workflows, o.jobs), (20, 20, 80), "{summary}");
    assert_eq!(o.shipped, 15, "{summary}");
    assert_eq!(o.ship_completed, 15, "{summary}");
    assert_eq!(o.reserve_failed, 5, "{summary}");
    assert_eq!(
        o.ship_cancelled_upstream, 5,
        "ship cancelled with \"{UPSTREAM_RESERVE_FAILED}\": {summary}"
    );
    assert_eq!(
        (o.workflows_completed, o.workflows_failed),
        (15, 5),
        "{summary}"
    );
    // No unit reserved twice; every shipped order has its payment (once), receipt and units.
    assert_eq!(o.units_reserved, 15, "{summary}");
    assert_eq!(o.units_reserved_twice, 0, "{summary}");
    assert_eq!(o.shipped_incomplete, 0, "{summary}");
    assert_eq!(o.charged_twice, 0, "{summary}");
    assert!(o.charges_retried > 0, "some answers were lost: {summary}");
    // No step was claimed before every dependency had completed (ship after reserve and
    // receipt, those after charge).
    assert_eq!(o.started_early, 0, "{summary}");
    // The rolled-back order left nothing.
    assert_eq!(summary.rolled_back_traces, (0, 0, 0), "{summary}");
    assert_eq!(o.orphan_jobs, 0, "{summary}");
    assert!(summary.ok(), "invariants broken: {summary}");
    assert!(summary.to_string().ends_with("— OK"), "{summary}");
}
