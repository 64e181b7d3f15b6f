//! The checkout-workflow example's scenario driver: its options, the round (schema, the orders,
//! one order rolled back, the worker), the summary and the `--once` verdict. The story — the
//! steps and the transaction that places an order — is in the parent module.

use std::fmt;
use std::time::Duration;

use mysqlq::{Registry, Worker, WorkerHandle};
use sqlx::MySqlPool;

use super::checks::{Outcomes, outcomes, traces_of, wait_workflows_done};
use super::{
    ChargeCard, CheckoutState, QUEUE, RECEIPT_QUEUE, ReserveStock, SKU, SendReceipt, Ship,
    UPSTREAM_RESERVE_FAILED, place_order,
};
use crate::runner::{self, Finished};
use crate::server::{error_chain, fresh_database};

/// The scenario's knobs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Database to drop, recreate and use.
    pub database: String,
    /// Orders of one unit of [`SKU`] each (committed; one more is rolled back).
    pub orders: u32,
    /// Units of [`SKU`] in stock.
    pub units: u32,
    /// Jobs the worker runs at once.
    pub concurrency: usize,
    /// The fake payment provider loses the answer to the first charge of every order whose id
    /// is a multiple of this (0: never).
    pub lose_charge_answer_every: u64,
    /// How long to wait for the workflows.
    pub timeout: Duration,
    /// Print what happens.
    pub verbose: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            database: crate::server::unique_database("checkout_workflow"),
            orders: 20,
            units: 15,
            concurrency: 8,
            lose_charge_answer_every: 7,
            timeout: Duration::from_secs(60),
            verbose: true,
        }
    }
}

/// What a round did, and the invariants that broke.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Orders committed.
    pub orders: u32,
    /// Units in stock.
    pub units: u32,
    /// The database afterwards.
    pub outcomes: Outcomes,
    /// What the rolled-back order left: `orders` rows, jobs, workflow rows and steps.
    pub rolled_back_traces: (u64, u64, u64),
    /// How long the workflows took to end.
    pub elapsed: Duration,
    /// Broken invariants; empty when everything held.
    pub violations: Vec<String>,
}

impl Summary {
    /// `true` when every invariant held.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.outcomes;
        let (orders, jobs, workflows) = self.rolled_back_traces;
        write!(
            f,
            "checkout-workflow: {} orders for {} units → {} shipped, {} with ship cancelled \
             (\"{UPSTREAM_RESERVE_FAILED}\"); workflows {} completed, {} failed; {} units reserved, \
             {} reserved twice, {} charged twice ({} charges retried), {} steps started before their \
             dependencies completed; the rolled-back order left {orders} orders, {jobs} jobs, \
             {workflows} workflow rows; {:.1} s — ",
            self.orders,
            self.units,
            o.shipped,
            o.ship_cancelled_upstream,
            o.workflows_completed,
            o.workflows_failed,
            o.units_reserved,
            o.units_reserved_twice,
            o.charged_twice,
            o.charges_retried,
            o.started_early,
            self.elapsed.as_secs_f64(),
        )?;
        runner::verdict(f, &self.violations)
    }
}

/// A finished round whose worker is still running.
#[derive(Debug)]
pub struct Round {
    /// What happened, and whether the invariants held.
    pub summary: Summary,
    /// The pool on the round's database.
    pub pool: MySqlPool,
    worker: WorkerHandle,
}

impl Round {
    /// Shuts the worker down gracefully.
    pub async fn shutdown(self) -> Result<(), String> {
        self.worker
            .shutdown()
            .await
            .map_err(|e| format!("worker shutdown failed: {}", error_chain(&e)))?;
        self.pool.close().await;
        Ok(())
    }
}

impl Finished<Options> for Round {
    fn database(options: &Options) -> &str {
        &options.database
    }

    fn summary(&self) -> String {
        self.summary.to_string()
    }

    fn ok(&self) -> bool {
        self.summary.ok()
    }

    fn still_running(&self, _options: &Options) -> String {
        format!("worker still running on queues `{QUEUE}` and `{RECEIPT_QUEUE}`; Ctrl-C to stop")
    }

    fn shutdown(self) -> impl Future<Output = Result<(), String>> {
        Round::shutdown(self)
    }
}

/// One complete round with the default [`Options`] against the server at `url` (the round uses
/// a database of its own, `mysqlq_example_checkout_workflow_<pid>_<random>`, dropped at the end
/// by the caller).
pub async fn run_once(url: &str) -> Result<Summary, String> {
    run_once_with(url, &Options::default()).await
}

/// One complete round with `options`; the worker is shut down before this returns.
pub async fn run_once_with(url: &str, options: &Options) -> Result<Summary, String> {
    let round = run_round(url, options).await?;
    let summary = round.summary.clone();
    round.shutdown().await?;
    Ok(summary)
}

/// Creates the example's tables and puts `options.units` units of [`SKU`] in stock.
pub async fn create_schema(pool: &MySqlPool, options: &Options) -> Result<(), String> {
    let statements = [
        "CREATE TABLE orders (\
           id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, \
           sku VARCHAR(64) NOT NULL, \
           quantity INT UNSIGNED NOT NULL, \
           total_cents BIGINT NOT NULL, \
           status ENUM('placed', 'shipped') NOT NULL, \
           created_at DATETIME(6) NOT NULL DEFAULT UTC_TIMESTAMP(6), \
           shipped_at DATETIME(6) NULL\
         ) ENGINE = InnoDB",
        // The fake payment provider's ledger: one charge per idempotency key.
        "CREATE TABLE payment (\
           idempotency_key VARCHAR(64) NOT NULL PRIMARY KEY, \
           order_id BIGINT UNSIGNED NOT NULL, \
           amount_cents BIGINT NOT NULL, \
           charged_at DATETIME(6) NOT NULL DEFAULT UTC_TIMESTAMP(6), \
           KEY idx_payment_order (order_id)\
         ) ENGINE = InnoDB",
        "CREATE TABLE receipt (\
           order_id BIGINT UNSIGNED NOT NULL PRIMARY KEY, \
           amount_cents BIGINT NOT NULL, \
           payment_key VARCHAR(64) NOT NULL, \
           sent_at DATETIME(6) NOT NULL DEFAULT UTC_TIMESTAMP(6)\
         ) ENGINE = InnoDB",
        // One row per sellable unit, as in the inventory example: the filter columns are the
        // primary key, so a reservation locks one index record per unit.
        "CREATE TABLE stock_unit (\
           sku VARCHAR(64) NOT NULL, \
           unit_no INT UNSIGNED NOT NULL, \
           status ENUM('available', 'reserved') NOT NULL DEFAULT 'available', \
           order_id BIGINT UNSIGNED NULL, \
           PRIMARY KEY (sku, unit_no), \
           KEY idx_unit_order (order_id)\
         ) ENGINE = InnoDB",
        // Every reservation ever made, to check that no unit was reserved twice.
        "CREATE TABLE reservation_log (\
           order_id BIGINT UNSIGNED NOT NULL, \
           sku VARCHAR(64) NOT NULL, \
           unit_no INT UNSIGNED NOT NULL, \
           reserved_at DATETIME(6) NOT NULL DEFAULT UTC_TIMESTAMP(6), \
           PRIMARY KEY (order_id, sku, unit_no)\
         ) ENGINE = InnoDB",
    ];
    for sql in statements {
        sqlx::query(sql)
            .execute(pool)
            .await
            .map_err(|e| format!("cannot create the example's tables: {e}"))?;
    }
    if options.units > 0 {
        let sql = format!(
            "INSERT INTO stock_unit (sku, unit_no) VALUES {}",
            vec!["(?, ?)"; options.units as usize].join(", ")
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for n in 1..=options.units {
            q = q.bind(SKU).bind(n);
        }
        q.execute(pool)
            .await
            .map_err(|e| format!("cannot stock {SKU}: {e}"))?;
    }
    Ok(())
}

/// Runs the scenario and checks the invariants; the worker keeps running in the returned
/// [`Round`].
pub async fn run_round(url: &str, options: &Options) -> Result<Round, String> {
    let verbose = options.verbose;
    let say = |line: String| {
        if verbose {
            println!("{line}");
        }
    };
    let pool = fresh_database(
        url,
        &options.database,
        Worker::recommended_pool_size(options.concurrency) + 4,
    )
    .await?;
    create_schema(&pool, options).await?;
    say(format!(
        "database `{}` recreated, mysqlq schema v{} applied; {SKU}: {} units in stock",
        options.database,
        mysqlq::SCHEMA_VERSION,
        options.units
    ));

    // Orders first, worker second: every workflow waits in the queue, then they all race for
    // the units at once.
    let mut v = Vec::new();
    for _ in 0..options.orders {
        let placed = place_order(&pool, SKU, 1, true).await?;
        say(format!(
            "order {:>3} placed: order row + checkout workflow {} committed together",
            placed.order_id, placed.workflow
        ));
    }
    let rolled_back = place_order(&pool, SKU, 1, false).await?;
    say(format!(
        "order {:>3} rolled back: its order row and workflow {} vanish together",
        rolled_back.order_id, rolled_back.workflow
    ));

    let registry = Registry::new()
        .register::<ChargeCard>()
        .and_then(|r| r.register::<ReserveStock>())
        .and_then(|r| r.register::<SendReceipt>())
        .and_then(|r| r.register::<Ship>())
        .map_err(|e| format!("cannot register the steps: {}", error_chain(&e)))?;
    let worker = Worker::builder(pool.clone())
        .registry(registry)
        .queues([QUEUE, RECEIPT_QUEUE])
        .concurrency(options.concurrency)
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
        .lease(Duration::from_secs(10))
        // The sweep (which cancels the dependents of a failed step and finishes workflows)
        // runs every maintenance interval.
        .maintenance(Duration::from_millis(500), Duration::from_secs(5))
        .shutdown_timeout(Duration::from_secs(10))
        .state(CheckoutState {
            verbose,
            lose_charge_answer_every: options.lose_charge_answer_every,
        })
        .start()
        .await
        .map_err(|e| format!("cannot start the worker: {}", error_chain(&e)))?;
    say(format!(
        "worker {} started on queues `{QUEUE}` and `{RECEIPT_QUEUE}`",
        worker.id()
    ));
    let round_result = async {
        let elapsed = wait_workflows_done(&pool, options.timeout).await?;
        let o = outcomes(&pool).await?;
        let traces = traces_of(&pool, rolled_back).await?;
        Ok::<_, String>((elapsed, o, traces))
    }
    .await;
    let (elapsed, o, traces) = match round_result {
        Ok(r) => r,
        Err(e) => {
            let _ = worker.shutdown().await;
            return Err(e);
        }
    };

    // The invariants.
    let orders = u64::from(options.orders);
    let sellable = orders.min(u64::from(options.units));
    let sold_out = orders - sellable;
    let mut check = |ok: bool, what: String| {
        if !ok {
            v.push(what);
        }
    };
    check(
        o.orders == orders && o.workflows == orders && o.jobs == 4 * orders,
        format!(
            "{} orders, {} workflows, {} jobs for {orders} committed orders",
            o.orders, o.workflows, o.jobs
        ),
    );
    check(
        o.shipped == sellable && o.ship_completed == sellable,
        format!(
            "{} orders shipped ({} ship steps completed), expected {sellable}",
            o.shipped, o.ship_completed
        ),
    );
    check(
        o.reserve_failed == sold_out && o.ship_cancelled_upstream == sold_out,
        format!(
            "{} reserve steps failed and {} ship steps cancelled \"{UPSTREAM_RESERVE_FAILED}\", expected {sold_out}",
            o.reserve_failed, o.ship_cancelled_upstream
        ),
    );
    check(
        o.workflows_completed == sellable && o.workflows_failed == sold_out,
        format!(
            "workflows: {} completed, {} failed",
            o.workflows_completed, o.workflows_failed
        ),
    );
    check(
        o.units_reserved == sellable && o.units_reserved_twice == 0,
        format!(
            "{} units reserved, {} reserved twice",
            o.units_reserved, o.units_reserved_twice
        ),
    );
    check(
        o.shipped_incomplete == 0 && o.charged_twice == 0,
        format!(
            "{} shipped orders without one payment, one receipt and their units; {} orders charged twice",
            o.shipped_incomplete, o.charged_twice
        ),
    );
    check(
        o.started_early == 0,
        format!(
            "{} steps claimed before a dependency completed",
            o.started_early
        ),
    );
    check(
        o.orphan_jobs == 0 && traces == (0, 0, 0),
        format!(
            "the rolled-back order left (orders, jobs, workflow rows) = {traces:?}; {} jobs without an order",
            o.orphan_jobs
        ),
    );
    let summary = Summary {
        orders: options.orders,
        units: options.units,
        outcomes: o,
        rolled_back_traces: traces,
        elapsed,
        violations: v,
    };
    Ok(Round {
        summary,
        pool,
        worker,
    })
}
