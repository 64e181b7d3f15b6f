//! The inventory example's scenario driver: its options, the round (schema, the checkout rush,
//! abandoned carts, replenishment), the summary and the `--once` verdict. The story — the jobs,
//! reserve, claim, release and top-up — is in the parent module.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mysqlq::{Enqueued, Job, Registry, Worker, WorkerHandle};
use sqlx::MySqlPool;

use super::checks::{replenish_rows, rush_state, units_available, wait_jobs_done};

use super::{
    CAP_SKU, Claimed, DEADLOCK_RETRIES, ExpireReservation, InventoryState, MUG_SKU, QUEUE,
    REPLENISH_QUEUE, RUSH_SKU, Replenish, Reservation, Reserved, claim, insert_units,
    notice_low_stock, plural, reserve, with_deadlock_retry,
};
use crate::runner::{self, Finished};
use crate::server::{error_chain, fresh_database};

/// The scenario's knobs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Database to drop, recreate and use.
    pub database: String,
    /// Units of [`RUSH_SKU`] in the pool (and in stock: its backlog is 0).
    pub rush_units: u32,
    /// Concurrent checkouts of one unit of [`RUSH_SKU`].
    pub checkouts: u32,
    /// Connections the checkouts share (each checkout uses one for each of its transactions).
    pub connections: u32,
    /// A checkout that leaves fewer available units than this notices low stock.
    pub low_water: u32,
    /// How long the rush's reservations last.
    pub checkout_ttl: Duration,
    /// How long abandoned carts' reservations last before their expiry job releases them.
    pub abandon_ttl: Duration,
    /// How long to wait for jobs.
    pub timeout: Duration,
    /// Print what happens.
    pub verbose: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            database: crate::server::unique_database("inventory"),
            rush_units: 50,
            checkouts: 200,
            connections: 32,
            low_water: 10,
            checkout_ttl: Duration::from_secs(60),
            abandon_ttl: Duration::from_secs(1),
            timeout: Duration::from_secs(30),
            verbose: true,
        }
    }
}

/// What a round did, and the invariants that broke.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Checkouts of the rush.
    pub checkouts: u32,
    /// Units of the rush SKU.
    pub units: u32,
    /// Rush checkouts that sold their unit.
    pub succeeded: u32,
    /// Rush checkouts refused because the SKU was sold out.
    pub refused: u32,
    /// Units of the rush SKU with status `sold`.
    pub units_sold: u64,
    /// Ledger rows of the rush SKU.
    pub ledger_rows: u64,
    /// Units of the rush SKU with more than one ledger row, or whose ledger row disagrees with
    /// the unit.
    pub sold_twice: u64,
    /// Abandoned carts.
    pub abandoned_carts: u32,
    /// Units the abandoned carts held.
    pub abandoned_units: u32,
    /// Of those, units `available` again after the expiry jobs ran.
    pub released_units: u32,
    /// Low-stock notices during the round.
    pub low_stock_notices: u64,
    /// Replenish jobs enqueued by those notices (the others were duplicates).
    pub replenish_jobs: u64,
    /// SKUs that noticed low stock.
    pub replenish_skus: u64,
    /// Units the replenishment added to the pools.
    pub replenished_units: u64,
    /// Transactions redone after a deadlock or lock wait timeout.
    pub deadlock_retries: u64,
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
        write!(
            f,
            "inventory: {} concurrent checkouts for {} units → {} sold, {} refused (sold out), {} sold twice, \
             ledger {} = sold {}; {} abandoned carts ({} units) → {} units back in the pool after their expiry jobs; \
             {} low-stock notices → {} Replenish job{} for {} SKU{} (+{} units) — ",
            self.checkouts,
            self.units,
            self.succeeded,
            self.refused,
            self.sold_twice,
            self.ledger_rows,
            self.units_sold,
            self.abandoned_carts,
            self.abandoned_units,
            self.released_units,
            self.low_stock_notices,
            self.replenish_jobs,
            plural(usize::try_from(self.replenish_jobs).unwrap_or(0)),
            self.replenish_skus,
            plural(usize::try_from(self.replenish_skus).unwrap_or(0)),
            self.replenished_units,
        )?;
        runner::verdict(f, &self.violations)
    }
}

/// A finished round whose workers are still running.
#[derive(Debug)]
pub struct Round {
    /// What happened, and whether the invariants held.
    pub summary: Summary,
    /// The pool on the round's database.
    pub pool: MySqlPool,
    workers: Vec<WorkerHandle>,
}

impl Round {
    /// Shuts the workers down gracefully.
    pub async fn shutdown(self) -> Result<(), String> {
        for w in self.workers {
            w.shutdown()
                .await
                .map_err(|e| format!("worker shutdown failed: {}", error_chain(&e)))?;
        }
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

    fn still_running(&self, options: &Options) -> String {
        format!(
            "workers still running on queues `{QUEUE}` and `{REPLENISH_QUEUE}` (the rush's reservations expire in {:?}); Ctrl-C to stop",
            options.checkout_ttl
        )
    }

    fn shutdown(self) -> impl Future<Output = Result<(), String>> {
        Round::shutdown(self)
    }
}

/// One complete round with the default [`Options`] against the server at `url` (the round uses
/// a database of its own, `mysqlq_example_inventory_<pid>_<random>`, dropped at the end).
pub async fn run_once(url: &str) -> Result<Summary, String> {
    run_once_with(url, &Options::default()).await
}

/// One complete round with `options`; the workers are shut down before this returns.
pub async fn run_once_with(url: &str, options: &Options) -> Result<Summary, String> {
    let round = run_round(url, options).await?;
    let summary = round.summary.clone();
    round.shutdown().await?;
    Ok(summary)
}

/// Shared counters of the checkouts.
#[derive(Debug, Default)]
struct Tally {
    notices: AtomicU64,
    replenish_inserted: AtomicU64,
}

/// Runs the scenario and checks the invariants; the workers keep running in the returned
/// [`Round`].
pub async fn run_round(url: &str, options: &Options) -> Result<Round, String> {
    let verbose = options.verbose;
    let say = |line: String| {
        if verbose {
            println!("{line}");
        }
    };
    DEADLOCK_RETRIES.store(0, Ordering::Relaxed);
    let pool = fresh_database(
        url,
        &options.database,
        options.connections + 2 * Worker::recommended_pool_size(4),
    )
    .await?;
    create_schema(&pool, options).await?;
    say(format!(
        "database `{}` recreated, mysqlq schema v{} applied; pools: {RUSH_SKU} {} units (backlog 0), \
         {MUG_SKU} 20 units (backlog 10), {CAP_SKU} 10 units",
        options.database,
        mysqlq::SCHEMA_VERSION,
        options.rush_units
    ));

    let state = InventoryState { verbose };
    let expiry_worker = Worker::builder(pool.clone())
        .registry(
            Registry::new()
                .register::<ExpireReservation>()
                .map_err(|e| format!("cannot register the job: {}", error_chain(&e)))?,
        )
        .queues([QUEUE])
        .concurrency(4)
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
        .lease(Duration::from_secs(10))
        .maintenance(Duration::from_secs(1), Duration::from_secs(5))
        .shutdown_timeout(Duration::from_secs(10))
        .state(state.clone())
        .start()
        .await
        .map_err(|e| format!("cannot start the expiry worker: {}", error_chain(&e)))?;
    say(format!(
        "expiry worker {} started on queue `{QUEUE}`; no worker on `{REPLENISH_QUEUE}` yet, so low-stock notices pile up on one job per SKU",
        expiry_worker.id()
    ));
    let mut workers = vec![expiry_worker];
    let tally = Arc::new(Tally::default());
    let mut v = Vec::new();

    // 1. The rush.
    say(format!(
        "— rush: {} concurrent checkouts of 1 × {RUSH_SKU}, {} connections —",
        options.checkouts, options.connections
    ));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for n in 1..=options.checkouts {
        let pool = pool.clone();
        let tally = tally.clone();
        let options = options.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..40))).await;
            let cart = BTreeMap::from([(RUSH_SKU.to_owned(), 1)]);
            checkout(
                &pool,
                n,
                &cart,
                options.checkout_ttl,
                true,
                &options,
                &tally,
            )
            .await
        }));
    }
    let mut succeeded = 0;
    let mut refused = 0;
    for t in tasks {
        match t.await {
            Ok(Ok(Outcome::Sold)) => succeeded += 1,
            Ok(Ok(Outcome::SoldOut)) => refused += 1,
            Ok(Ok(Outcome::Expired | Outcome::Abandoned(_))) => {
                v.push("a rush checkout's reservation expired before its claim".to_owned());
            }
            Ok(Err(e)) => v.push(format!("a checkout failed: {e}")),
            Err(e) => v.push(format!("a checkout task panicked: {e}")),
        }
    }
    say(format!(
        "rush over in {:.2} s: {succeeded} sold, {refused} refused",
        started.elapsed().as_secs_f64()
    ));
    let rush = rush_state(&pool).await?;
    let replenish_rows_after_rush = replenish_rows(&pool).await?;
    say(format!(
        "{RUSH_SKU}: {} sold, {} reserved, {} available; ledger {} rows over {} distinct units; \
         {} low-stock notices so far → {} Replenish row(s) in job_queue",
        rush.sold,
        rush.reserved,
        rush.available,
        rush.ledger_rows,
        rush.ledger_distinct,
        tally.notices.load(Ordering::Relaxed),
        replenish_rows_after_rush
            .get(RUSH_SKU)
            .copied()
            .unwrap_or(0)
    ));

    // 2. Abandoned carts (and a few that check out) on two other SKUs.
    say(format!(
        "— abandoned carts: reservations with a {:?} ttl that are never checked out —",
        options.abandon_ttl
    ));
    let carts: Vec<(BTreeMap<String, u32>, bool)> = vec![
        (BTreeMap::from([(MUG_SKU.to_owned(), 2)]), false),
        (
            BTreeMap::from([(MUG_SKU.to_owned(), 1), (CAP_SKU.to_owned(), 1)]),
            false,
        ),
        (BTreeMap::from([(MUG_SKU.to_owned(), 1)]), true),
        (BTreeMap::from([(MUG_SKU.to_owned(), 2)]), false),
        (BTreeMap::from([(MUG_SKU.to_owned(), 1)]), true),
        (
            BTreeMap::from([(CAP_SKU.to_owned(), 2), (MUG_SKU.to_owned(), 1)]),
            false,
        ),
        (BTreeMap::from([(MUG_SKU.to_owned(), 2)]), false),
        (BTreeMap::from([(MUG_SKU.to_owned(), 1)]), true),
        (BTreeMap::from([(MUG_SKU.to_owned(), 2)]), false),
    ];
    let mut tasks = Vec::new();
    for (i, (cart, checks_out)) in carts.into_iter().enumerate() {
        let pool = pool.clone();
        let tally = tally.clone();
        let options = options.clone();
        let n = options.checkouts + 1 + u32::try_from(i).unwrap_or(0);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..40))).await;
            checkout(
                &pool,
                n,
                &cart,
                options.abandon_ttl,
                checks_out,
                &options,
                &tally,
            )
            .await
        }));
    }
    let mut abandoned: Vec<Reservation> = Vec::new();
    let mut other_sold = 0u32;
    for t in tasks {
        match t.await {
            Ok(Ok(Outcome::Abandoned(r))) => abandoned.push(r),
            Ok(Ok(Outcome::Sold)) => other_sold += 1,
            Ok(Ok(other)) => v.push(format!("an abandoned-cart checkout ended {other:?}")),
            Ok(Err(e)) => v.push(format!("a checkout failed: {e}")),
            Err(e) => v.push(format!("a checkout task panicked: {e}")),
        }
    }
    let abandoned_units: Vec<(String, u32)> =
        abandoned.iter().flat_map(|r| r.units.clone()).collect();
    say(format!(
        "{} carts abandoned holding {} units, {other_sold} checked out; waiting for the expiry jobs …",
        abandoned.len(),
        abandoned_units.len()
    ));
    let expiry_jobs: Vec<u64> = abandoned.iter().map(|r| r.expiry_job).collect();
    let waited = wait_jobs_done(&pool, &expiry_jobs, options.timeout).await?;
    say(format!(
        "the {} expiry jobs ran {:.1} s after the carts were abandoned",
        expiry_jobs.len(),
        waited.as_secs_f64()
    ));
    let released = units_available(&pool, &abandoned_units).await?;

    // 3. Replenishment: exactly one job per SKU, however many notices.
    let replenish = replenish_rows(&pool).await?;
    say(format!(
        "— replenishment: {} low-stock notices → Replenish rows per SKU {:?}; starting a worker on `{REPLENISH_QUEUE}` —",
        tally.notices.load(Ordering::Relaxed),
        replenish
    ));
    let before: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM inventory_unit")
        .fetch_one(&pool)
        .await
        .map_err(|e| format!("cannot count units: {e}"))?;
    let replenisher = Worker::builder(pool.clone())
        .registry(
            Registry::new()
                .register::<Replenish>()
                .map_err(|e| format!("cannot register the job: {}", error_chain(&e)))?,
        )
        .queues([REPLENISH_QUEUE])
        .concurrency(2)
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
        .lease(Duration::from_secs(10))
        .maintenance(Duration::from_secs(1), Duration::from_secs(5))
        .shutdown_timeout(Duration::from_secs(10))
        .state(state)
        .start()
        .await
        .map_err(|e| format!("cannot start the replenish worker: {}", error_chain(&e)))?;
    workers.push(replenisher);
    let replenish_ids: Vec<u64> =
        sqlx::query_scalar("SELECT id FROM job_queue WHERE kind = ? ORDER BY id")
            .bind(Replenish::KIND)
            .fetch_all(&pool)
            .await
            .map_err(|e| format!("cannot read job_queue: {e}"))?;
    wait_jobs_done(&pool, &replenish_ids, options.timeout).await?;
    let after: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM inventory_unit")
        .fetch_one(&pool)
        .await
        .map_err(|e| format!("cannot count units: {e}"))?;

    // The invariants.
    let notices = tally.notices.load(Ordering::Relaxed);
    let expected_sold = options.rush_units.min(options.checkouts);
    if succeeded != expected_sold {
        v.push(format!(
            "{succeeded} rush checkouts succeeded, expected {expected_sold}"
        ));
    }
    if succeeded + refused != options.checkouts {
        v.push(format!(
            "{} of {} rush checkouts ended",
            succeeded + refused,
            options.checkouts
        ));
    }
    if rush.sold != u64::from(succeeded) {
        v.push(format!(
            "{} units of {RUSH_SKU} sold for {succeeded} successful checkouts",
            rush.sold
        ));
    }
    if rush.ledger_rows != rush.sold {
        v.push(format!(
            "{RUSH_SKU}: ledger has {} rows, {} units sold",
            rush.ledger_rows, rush.sold
        ));
    }
    let sold_twice =
        rush.ledger_rows - rush.ledger_distinct.min(rush.ledger_rows) + rush.mismatched;
    if sold_twice > 0 {
        v.push(format!(
            "{RUSH_SKU}: {sold_twice} units sold twice or ledger rows without a sold unit"
        ));
    }
    if rush.reserved > 0 {
        v.push(format!(
            "{RUSH_SKU}: {} units still reserved after the rush",
            rush.reserved
        ));
    }
    if released.len() != abandoned_units.len() {
        let stuck: Vec<String> = abandoned_units
            .iter()
            .filter(|u| !released.contains(u))
            .map(|(s, n)| format!("{s}#{n}"))
            .collect();
        v.push(format!(
            "abandoned units not back in the pool: {}",
            stuck.join(", ")
        ));
    }
    let expired: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM reservation WHERE status = 'expired'")
            .fetch_one(&pool)
            .await
            .map_err(|e| format!("cannot read reservations: {e}"))?;
    if usize::try_from(expired).ok() != Some(abandoned.len()) {
        v.push(format!(
            "{expired} reservations expired, {} were abandoned",
            abandoned.len()
        ));
    }
    let (all_sold, all_ledger): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM inventory_unit WHERE status = 'sold'), \
                (SELECT COUNT(*) FROM ledger)",
    )
    .fetch_one(&pool)
    .await
    .map_err(|e| format!("cannot count sales: {e}"))?;
    if all_sold != all_ledger {
        v.push(format!(
            "{all_sold} units sold in all, {all_ledger} ledger rows"
        ));
    }
    let (replenish_jobs, replenish_skus) =
        (replenish.values().sum::<u64>(), replenish.len() as u64);
    if replenish.values().any(|&n| n != 1) {
        v.push(format!(
            "expected one Replenish job per SKU, found {replenish:?}"
        ));
    }
    if replenish_jobs != tally.replenish_inserted.load(Ordering::Relaxed) {
        v.push(format!(
            "{replenish_jobs} Replenish rows but {} enqueues reported Inserted",
            tally.replenish_inserted.load(Ordering::Relaxed)
        ));
    }
    if replenish_jobs == 0 || notices <= replenish_jobs {
        v.push(format!(
            "the dedupe was not exercised: {notices} notices, {replenish_jobs} jobs"
        ));
    }
    let replenish_failed: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM job_queue WHERE kind = ? AND status <> 'completed'",
    )
    .bind(Replenish::KIND)
    .fetch_one(&pool)
    .await
    .map_err(|e| format!("cannot read job_queue: {e}"))?;
    if replenish_failed > 0 {
        v.push(format!(
            "{replenish_failed} Replenish jobs did not complete"
        ));
    }
    // After the expiry jobs and the replenishment: TEE sold out for real (backlog 0), the mug
    // and cap pools back at their targets.
    let available: Vec<(String, i64)> = sqlx::query_as(
        "SELECT sku, CAST(SUM(status = 'available') AS SIGNED) FROM inventory_unit GROUP BY sku ORDER BY sku",
    )
    .fetch_all(&pool)
    .await
    .map_err(|e| format!("cannot count units: {e}"))?;
    let expected: Vec<(String, i64)> = vec![
        (CAP_SKU.to_owned(), 10),
        (MUG_SKU.to_owned(), 20),
        (RUSH_SKU.to_owned(), 0),
    ];
    if available != expected {
        v.push(format!(
            "available units per SKU after expiry and replenishment: {available:?}, expected {expected:?}"
        ));
    }
    say(format!("available units per SKU at the end: {available:?}"));
    let rush_after = rush_state(&pool).await?;
    if rush_after.available != 0 || rush_after.sold != rush.sold {
        v.push(format!(
            "{RUSH_SKU} changed after the rush: {} available, {} sold (its backlog is 0)",
            rush_after.available, rush_after.sold
        ));
    }

    let summary = Summary {
        checkouts: options.checkouts,
        units: options.rush_units,
        succeeded,
        refused,
        units_sold: rush.sold,
        ledger_rows: rush.ledger_rows,
        sold_twice,
        abandoned_carts: u32::try_from(abandoned.len()).unwrap_or(u32::MAX),
        abandoned_units: u32::try_from(abandoned_units.len()).unwrap_or(u32::MAX),
        released_units: u32::try_from(released.len()).unwrap_or(u32::MAX),
        low_stock_notices: notices,
        replenish_jobs,
        replenish_skus,
        replenished_units: u64::try_from(after - before).unwrap_or(0),
        deadlock_retries: DEADLOCK_RETRIES.load(Ordering::Relaxed),
        violations: v,
    };
    if summary.deadlock_retries > 0 {
        say(format!(
            "{} transactions were redone after a deadlock or lock wait timeout",
            summary.deadlock_retries
        ));
    }
    Ok(Round {
        summary,
        pool,
        workers,
    })
}

/// Creates the example's tables (units, reservations, the ledger, stock per SKU) and stocks
/// [`RUSH_SKU`] (`options.rush_units`, no backlog), [`MUG_SKU`] (20, backlog 10) and [`CAP_SKU`]
/// (10, no backlog).
pub async fn create_schema(pool: &MySqlPool, options: &Options) -> Result<(), String> {
    let statements = [
        // One row per sellable unit; the composite primary key is the reservation's index.
        "CREATE TABLE inventory_unit (\
           sku VARCHAR(64) NOT NULL, \
           unit_no INT UNSIGNED NOT NULL, \
           status ENUM('available', 'reserved', 'sold') NOT NULL DEFAULT 'available', \
           reservation_id BIGINT UNSIGNED NULL, \
           reserved_until DATETIME(6) NULL, \
           PRIMARY KEY (sku, unit_no), \
           KEY idx_unit_reservation (reservation_id)\
         ) ENGINE = InnoDB",
        "CREATE TABLE reservation (\
           id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, \
           status ENUM('active', 'claimed', 'expired') NOT NULL, \
           expires_at DATETIME(6) NOT NULL, \
           created_at DATETIME(6) NOT NULL DEFAULT UTC_TIMESTAMP(6), \
           finished_at DATETIME(6) NULL\
         ) ENGINE = InnoDB",
        // The sales ledger: one row per unit sold; its key refuses selling a unit twice.
        "CREATE TABLE ledger (\
           sku VARCHAR(64) NOT NULL, \
           unit_no INT UNSIGNED NOT NULL, \
           reservation_id BIGINT UNSIGNED NOT NULL, \
           sold_at DATETIME(6) NOT NULL DEFAULT UTC_TIMESTAMP(6), \
           PRIMARY KEY (sku, unit_no)\
         ) ENGINE = InnoDB",
        // Per SKU: the warehouse backlog (units in stock without a row yet) and the pool size.
        "CREATE TABLE sku_stock (\
           sku VARCHAR(64) NOT NULL PRIMARY KEY, \
           backlog INT UNSIGNED NOT NULL, \
           pool_target INT UNSIGNED NOT NULL, \
           low_water INT UNSIGNED NOT NULL\
         ) ENGINE = InnoDB",
    ];
    for sql in statements {
        sqlx::query(sql)
            .execute(pool)
            .await
            .map_err(|e| format!("cannot create the schema: {e}"))?;
    }
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    for (sku, units, backlog, low_water) in [
        (RUSH_SKU, options.rush_units, 0, options.low_water),
        (MUG_SKU, 20, 10, 10),
        (CAP_SKU, 10, 0, 2),
    ] {
        insert_units(&mut conn, sku, 1, units)
            .await
            .map_err(|e| format!("cannot seed {sku}: {e}"))?;
        sqlx::query(
            "INSERT INTO sku_stock (sku, backlog, pool_target, low_water) VALUES (?, ?, ?, ?)",
        )
        .bind(sku)
        .bind(backlog)
        .bind(units)
        .bind(low_water)
        .execute(&mut *conn)
        .await
        .map_err(|e| format!("cannot seed {sku}: {e}"))?;
    }
    Ok(())
}

/// How a checkout ended.
#[derive(Debug, Clone)]
enum Outcome {
    Sold,
    SoldOut,
    Expired,
    Abandoned(Reservation),
}

/// Reserve → (payment) → claim, or reserve and walk away. Notices low stock after reserving.
async fn checkout(
    pool: &MySqlPool,
    n: u32,
    cart: &BTreeMap<String, u32>,
    ttl: Duration,
    checks_out: bool,
    options: &Options,
    tally: &Tally,
) -> Result<Outcome, String> {
    let say = |line: String| {
        if options.verbose {
            println!("{line}");
        }
    };
    let what = cart
        .iter()
        .map(|(s, q)| format!("{q} × {s}"))
        .collect::<Vec<_>>()
        .join(" + ");
    let reserved = with_deadlock_retry(|| reserve(pool, cart, ttl))
        .await
        .map_err(|e| format!("checkout {n}: reserve failed: {e}"))?;
    let r = match reserved {
        Reserved::Held(r) => r,
        Reserved::SoldOut { sku, wanted, free } => {
            say(format!(
                "checkout {n:>3}: {what}: refused, {sku} sold out (wanted {wanted}, {free} free)"
            ));
            notice(pool, &sku, n, options, tally).await?;
            return Ok(Outcome::SoldOut);
        }
    };
    for sku in cart.keys() {
        let (available, low_water): (i64, u32) = sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM inventory_unit WHERE sku = ? AND status = 'available'), \
                    (SELECT low_water FROM sku_stock WHERE sku = ?)",
        )
        .bind(sku)
        .bind(sku)
        .fetch_one(pool)
        .await
        .map_err(|e| format!("checkout {n}: {e}"))?;
        if available < i64::from(low_water) {
            notice(pool, sku, n, options, tally).await?;
        }
    }
    let units = r
        .units
        .iter()
        .map(|(s, u)| format!("{s}#{u}"))
        .collect::<Vec<_>>()
        .join(", ");
    if !checks_out {
        say(format!(
            "checkout {n:>3}: {what}: reserved {units} as reservation {} (expiry job {}), then the buyer walks away",
            r.id, r.expiry_job
        ));
        return Ok(Outcome::Abandoned(r));
    }
    // Payment takes a moment.
    tokio::time::sleep(Duration::from_millis(fastrand::u64(0..30))).await;
    match with_deadlock_retry(|| claim(pool, &r))
        .await
        .map_err(|e| format!("checkout {n}: claim failed: {e}"))?
    {
        Claimed::Sold => {
            say(format!(
                "checkout {n:>3}: {what}: reserved {units}, paid, SOLD (reservation {})",
                r.id
            ));
            Ok(Outcome::Sold)
        }
        Claimed::Expired => {
            say(format!(
                "checkout {n:>3}: {what}: reservation {} expired before payment",
                r.id
            ));
            Ok(Outcome::Expired)
        }
    }
}

async fn notice(
    pool: &MySqlPool,
    sku: &str,
    n: u32,
    options: &Options,
    tally: &Tally,
) -> Result<(), String> {
    tally.notices.fetch_add(1, Ordering::Relaxed);
    let e = notice_low_stock(pool, sku)
        .await
        .map_err(|e| format!("checkout {n}: low-stock notice failed: {}", error_chain(&e)))?;
    match e {
        Enqueued::Inserted(id) => {
            tally.replenish_inserted.fetch_add(1, Ordering::Relaxed);
            if options.verbose {
                println!(
                    "checkout {n:>3}: {sku} runs low → Replenish job {id} enqueued (key replenish:{sku})"
                );
            }
        }
        Enqueued::Duplicate(_) | Enqueued::Replaced(_) => {}
    }
    Ok(())
}
