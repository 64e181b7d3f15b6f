//! **inventory**: reserving sellable units with `SKIP LOCKED`, without ever overselling.
//!
//! The scenario of Shopify's inventory-reservation article (Redis replaced by MySQL rows):
//!
//! - **One row per sellable unit** in `inventory_unit`, keyed by the composite primary key
//!   `(sku, unit_no)`: the filter columns are the key, so reserving a unit locks one index record
//!   (an auto-increment id plus a secondary index would lock two).
//! - **Reserve** ([`reserve`]) in a READ COMMITTED transaction (`SET TRANSACTION ISOLATION LEVEL
//!   READ COMMITTED` before `BEGIN`: no gap locks, so a replenishment `INSERT` is never blocked by
//!   a reservation's scan): `SELECT … WHERE sku = ? AND status = 'available' ORDER BY unit_no
//!   LIMIT ? FOR UPDATE SKIP LOCKED`, mark the units `reserved`, and enqueue the reservation's
//!   [`ExpireReservation`] job with `.delay(ttl)` **in the same transaction**: a reservation never
//!   exists without the job that will release it if the buyer walks away.
//! - **Claim** ([`claim`]) at checkout: one transaction marks the units `sold` (guarded by the
//!   reservation id, the status and the expiry) and writes the `ledger` rows; a unit is sold at
//!   most once (the ledger's primary key is `(sku, unit_no)`, too).
//! - **Consistent lock order**: every transaction locks units first, in `(sku, unit_no)` order
//!   (multi-SKU carts are sorted by SKU), then the `reservation` row.
//! - **Single-flight replenishment**: a checkout that leaves a SKU's pool below its low-water mark
//!   enqueues [`Replenish`] with the dedupe key `replenish:<sku>`; however many checkouts notice,
//!   one job exists per SKU until it has run.
//!
//! [`run_once`] runs the whole scenario: 200 concurrent checkouts of 1 unit for 50 units, then
//! abandoned carts on two other SKUs released by their expiry jobs, then the replenishment.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mysqlq::{EnqueueOptions, Enqueued, Job, JobContext, JobError, Registry, Worker, WorkerHandle};
use sqlx::{Connection, MySqlPool};

use crate::runner::{self, Finished};
use crate::server::{error_chain, fresh_database};

/// The queue of [`ExpireReservation`].
pub const QUEUE: &str = "inventory";
/// The queue of [`Replenish`].
pub const REPLENISH_QUEUE: &str = "inventory-replenish";
/// The SKU of the checkout rush.
pub const RUSH_SKU: &str = "TEE-BLACK-M";
/// The SKU most abandoned carts hold.
pub const MUG_SKU: &str = "MUG-WHITE";
/// The SKU some abandoned carts hold together with a mug.
pub const CAP_SKU: &str = "CAP-RED";

/// What the jobs need from the example: handed to the worker with `.state(...)`.
#[derive(Debug, Clone)]
pub struct InventoryState {
    /// Print what each job does.
    pub verbose: bool,
}

/// A message for [`JobError`]s.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Problem(String);

/// Releases the units of reservation `reservation_id` if it was never checked out: enqueued with
/// `.delay(ttl)` in the transaction that made the reservation.
#[mysqlq::job(queue = "inventory", retries = 5, backoff = "100ms, 200ms, 500ms, 1s")]
pub async fn expire_reservation(ctx: JobContext, reservation_id: u64) -> Result<(), JobError> {
    let pool = ctx
        .pool()
        .ok_or_else(|| JobError::fail(Problem("the worker has no pool".into())))?;
    let verbose = ctx.state::<InventoryState>().is_some_and(|s| s.verbose);
    let released = with_deadlock_retry(|| release_reservation(pool, reservation_id)).await?;
    if verbose {
        match released {
            Some(units) => println!(
                "  expiry job {:>3}: reservation {reservation_id} abandoned → {} unit{} back in the pool ({})",
                ctx.id(),
                units.len(),
                plural(units.len()),
                units
                    .iter()
                    .map(|(sku, n)| format!("{sku}#{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => println!(
                "  expiry job {:>3}: reservation {reservation_id} was checked out → nothing to release",
                ctx.id()
            ),
        }
    }
    Ok(())
}

/// Tops the pool of `sku` up to its target from the warehouse backlog (units in stock that have
/// no row yet). Enqueued with the dedupe key `replenish:<sku>`.
#[mysqlq::job(queue = "inventory-replenish", retries = 3, backoff = "200ms")]
pub async fn replenish(ctx: JobContext, sku: String) -> Result<(), JobError> {
    let pool = ctx
        .pool()
        .ok_or_else(|| JobError::fail(Problem("the worker has no pool".into())))?;
    let verbose = ctx.state::<InventoryState>().is_some_and(|s| s.verbose);
    let r = with_deadlock_retry(|| top_up(pool, &sku)).await?;
    if verbose {
        if r.added > 0 {
            println!(
                "  replenish job {:>3}: {sku}: {} available, target {} → {} units added from the backlog ({} left)",
                ctx.id(),
                r.available_before,
                r.target,
                r.added,
                r.backlog_after
            );
        } else {
            println!(
                "  replenish job {:>3}: {sku}: {} available, target {}, backlog {} → nothing to add{}",
                ctx.id(),
                r.available_before,
                r.target,
                r.backlog_after,
                if r.available_before == 0 {
                    " (sold out for real)"
                } else {
                    ""
                }
            );
        }
    }
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// A connection whose next transaction runs at READ COMMITTED.
async fn read_committed(
    pool: &MySqlPool,
) -> Result<sqlx::pool::PoolConnection<sqlx::MySql>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    // Without SESSION/GLOBAL: applies to the next transaction of this connection only.
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut *conn)
        .await?;
    Ok(conn)
}

/// `?, ?, ?` for `n` values.
fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

fn is_retryable(e: &sqlx::Error) -> bool {
    // 1213 deadlock, 1205 lock wait timeout: the transaction was rolled back; do it again.
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|d| matches!(d.number(), 1213 | 1205))
}

static DEADLOCK_RETRIES: AtomicU64 = AtomicU64::new(0);

/// Runs `f` again (up to 5 times) when the database rolled it back for a deadlock or lock wait
/// timeout.
async fn with_deadlock_retry<T, F, Fut>(mut f: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    let mut tries = 0;
    loop {
        match f().await {
            Err(e) if is_retryable(&e) && tries < 5 => {
                tries += 1;
                DEADLOCK_RETRIES.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(fastrand::u64(1..20))).await;
            }
            other => return other,
        }
    }
}

/// A reservation that holds units.
#[derive(Debug, Clone)]
pub struct Reservation {
    /// `reservation.id`.
    pub id: u64,
    /// The units held, in lock order.
    pub units: Vec<(String, u32)>,
    /// The job that will release them.
    pub expiry_job: u64,
}

/// What [`reserve`] did.
#[derive(Debug, Clone)]
pub enum Reserved {
    /// Every line of the cart is held.
    Held(Reservation),
    /// A SKU has fewer free units than asked: nothing is held.
    SoldOut {
        /// The SKU that ran out.
        sku: String,
        /// Units asked for.
        wanted: u32,
        /// Units that were free.
        free: u32,
    },
}

/// Reserves `cart` (SKU → quantity) for `ttl`: in one READ COMMITTED transaction, locks free units
/// of each SKU — SKUs in sorted order, units in `unit_no` order, skipping units other
/// transactions hold — marks them `reserved`, writes the `reservation` row and enqueues its
/// [`ExpireReservation`] job to run after `ttl`. All or nothing.
pub async fn reserve(
    pool: &MySqlPool,
    cart: &BTreeMap<String, u32>,
    ttl: Duration,
) -> Result<Reserved, sqlx::Error> {
    let ttl_us = i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX);
    let mut conn = read_committed(pool).await?;
    let mut tx = conn.begin().await?;
    // A BTreeMap iterates in SKU order: the consistent lock order.
    let mut locked: Vec<(String, Vec<u32>)> = Vec::new();
    for (sku, &wanted) in cart {
        let units: Vec<u32> = sqlx::query_scalar(
            "SELECT unit_no FROM inventory_unit \
             WHERE sku = ? AND status = 'available' \
             ORDER BY unit_no LIMIT ? FOR UPDATE SKIP LOCKED",
        )
        .bind(sku)
        .bind(wanted)
        .fetch_all(&mut *tx)
        .await?;
        let free = u32::try_from(units.len()).unwrap_or(u32::MAX);
        if free < wanted {
            tx.rollback().await?;
            return Ok(Reserved::SoldOut {
                sku: sku.clone(),
                wanted,
                free,
            });
        }
        locked.push((sku.clone(), units));
    }
    // Units first, then the reservation row (a new row: nobody else can hold it).
    let id = sqlx::query(
        "INSERT INTO reservation (status, expires_at) \
         VALUES ('active', UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)",
    )
    .bind(ttl_us)
    .execute(&mut *tx)
    .await?
    .last_insert_id();
    for (sku, units) in &locked {
        let sql = format!(
            "UPDATE inventory_unit \
             SET status = 'reserved', reservation_id = ?, \
                 reserved_until = (SELECT expires_at FROM reservation WHERE id = ?) \
             WHERE sku = ? AND unit_no IN ({}) AND status = 'available'",
            placeholders(units.len())
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .bind(id)
            .bind(sku);
        for u in units {
            q = q.bind(u);
        }
        let done = q.execute(&mut *tx).await?.rows_affected();
        if done != units.len() as u64 {
            // Cannot happen: the rows are locked by this transaction and were available.
            tx.rollback().await?;
            return Err(sqlx::Error::Protocol(format!(
                "reserved {done} of {} locked units of {sku}",
                units.len()
            )));
        }
    }
    // The expiry job commits (or rolls back) with the reservation.
    let job = ExpireReservation { reservation_id: id }
        .enqueue_with(&mut tx, &EnqueueOptions::new().delay(ttl))
        .await
        .map_err(|e| match e {
            mysqlq::Error::Database(e) => e,
            other => sqlx::Error::Protocol(error_chain(&other)),
        })?;
    tx.commit().await?;
    Ok(Reserved::Held(Reservation {
        id,
        units: locked
            .into_iter()
            .flat_map(|(sku, units)| units.into_iter().map(move |u| (sku.clone(), u)))
            .collect(),
        expiry_job: job.id().0,
    }))
}

/// What [`claim`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// The units are sold and in the ledger.
    Sold,
    /// The reservation expired (or its units were released) first: nothing sold.
    Expired,
}

/// Checks a reservation out: in one READ COMMITTED transaction, marks its units `sold` (only if
/// they are still `reserved` by it and not expired), writes one `ledger` row per unit and marks
/// the reservation `claimed`. Units first, in `(sku, unit_no)` order, then the reservation.
pub async fn claim(pool: &MySqlPool, r: &Reservation) -> Result<Claimed, sqlx::Error> {
    let mut conn = read_committed(pool).await?;
    let mut tx = conn.begin().await?;
    let mut by_sku: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (sku, u) in &r.units {
        by_sku.entry(sku.as_str()).or_default().push(*u);
    }
    for (sku, units) in &by_sku {
        let sql = format!(
            "UPDATE inventory_unit SET status = 'sold' \
             WHERE sku = ? AND unit_no IN ({}) AND reservation_id = ? AND status = 'reserved' \
               AND reserved_until > UTC_TIMESTAMP(6)",
            placeholders(units.len())
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(*sku);
        for u in units {
            q = q.bind(u);
        }
        let done = q.bind(r.id).execute(&mut *tx).await?.rows_affected();
        if done != units.len() as u64 {
            tx.rollback().await?;
            return Ok(Claimed::Expired);
        }
    }
    let sql = format!(
        "INSERT INTO ledger (sku, unit_no, reservation_id) VALUES {}",
        vec!["(?, ?, ?)"; r.units.len()].join(", ")
    );
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for (sku, u) in &r.units {
        q = q.bind(sku).bind(u).bind(r.id);
    }
    q.execute(&mut *tx).await?;
    let done = sqlx::query(
        "UPDATE reservation SET status = 'claimed', finished_at = UTC_TIMESTAMP(6) \
         WHERE id = ? AND status = 'active'",
    )
    .bind(r.id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if done != 1 {
        tx.rollback().await?;
        return Ok(Claimed::Expired);
    }
    tx.commit().await?;
    Ok(Claimed::Sold)
}

/// The expiry job's transaction: releases the units still reserved by `reservation_id` and marks
/// it `expired`. `None` if it had been claimed (nothing to release).
async fn release_reservation(
    pool: &MySqlPool,
    reservation_id: u64,
) -> Result<Option<Vec<(String, u32)>>, sqlx::Error> {
    let mut conn = read_committed(pool).await?;
    let mut tx = conn.begin().await?;
    // A plain (non-locking) read by the secondary index; the UPDATEs below lock by primary key,
    // in (sku, unit_no) order, and re-check the guard.
    let units: Vec<(String, u32)> = sqlx::query_as(
        "SELECT sku, unit_no FROM inventory_unit \
         WHERE reservation_id = ? AND status = 'reserved' ORDER BY sku, unit_no",
    )
    .bind(reservation_id)
    .fetch_all(&mut *tx)
    .await?;
    let mut by_sku: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (sku, u) in &units {
        by_sku.entry(sku.as_str()).or_default().push(*u);
    }
    let mut released = Vec::new();
    for (sku, nos) in &by_sku {
        let sql = format!(
            "UPDATE inventory_unit SET status = 'available', reservation_id = NULL, reserved_until = NULL \
             WHERE sku = ? AND unit_no IN ({}) AND reservation_id = ? AND status = 'reserved'",
            placeholders(nos.len())
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(*sku);
        for u in nos {
            q = q.bind(u);
        }
        let done = q.bind(reservation_id).execute(&mut *tx).await?;
        if done.rows_affected() > 0 {
            released.extend(nos.iter().map(|u| ((*sku).to_owned(), *u)));
        }
    }
    let expired = sqlx::query(
        "UPDATE reservation SET status = 'expired', finished_at = UTC_TIMESTAMP(6) \
         WHERE id = ? AND status = 'active'",
    )
    .bind(reservation_id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok((expired == 1).then_some(released))
}

/// What one replenishment did.
#[derive(Debug, Clone, Copy)]
struct TopUp {
    available_before: u32,
    target: u32,
    added: u32,
    backlog_after: u32,
}

/// The replenishment transaction: locks the SKU's `sku_stock` row, moves units from the backlog
/// into the pool (new rows after the highest `unit_no`) up to the pool target.
async fn top_up(pool: &MySqlPool, sku: &str) -> Result<TopUp, sqlx::Error> {
    let mut conn = read_committed(pool).await?;
    let mut tx = conn.begin().await?;
    let (backlog, target): (u32, u32) =
        sqlx::query_as("SELECT backlog, pool_target FROM sku_stock WHERE sku = ? FOR UPDATE")
            .bind(sku)
            .fetch_one(&mut *tx)
            .await?;
    let (available, last): (i64, Option<u32>) = sqlx::query_as(
        "SELECT CAST(SUM(status = 'available') AS SIGNED), MAX(unit_no) FROM inventory_unit WHERE sku = ?",
    )
    .bind(sku)
    .fetch_one(&mut *tx)
    .await?;
    let available = u32::try_from(available).unwrap_or(0);
    let added = target.saturating_sub(available).min(backlog);
    if added > 0 {
        let first = last.unwrap_or(0) + 1;
        insert_units(&mut tx, sku, first, added).await?;
        sqlx::query("UPDATE sku_stock SET backlog = backlog - ? WHERE sku = ?")
            .bind(added)
            .bind(sku)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(TopUp {
        available_before: available,
        target,
        added,
        backlog_after: backlog - added,
    })
}

/// Inserts `count` available units of `sku` numbered from `first`.
async fn insert_units(
    conn: &mut sqlx::MySqlConnection,
    sku: &str,
    first: u32,
    count: u32,
) -> Result<(), sqlx::Error> {
    if count == 0 {
        return Ok(());
    }
    let sql = format!(
        "INSERT INTO inventory_unit (sku, unit_no, status) VALUES {}",
        vec!["(?, ?, 'available')"; usize::try_from(count).unwrap_or(0)].join(", ")
    );
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for n in first..first + count {
        q = q.bind(sku).bind(n);
    }
    q.execute(&mut *conn).await?;
    Ok(())
}

/// Tells the replenisher that `sku` runs low: enqueues [`Replenish`] with the dedupe key
/// `replenish:<sku>` (outside the checkout's transaction, so checkouts never wait on each other
/// for the key). At most one such job is pending or running per SKU.
pub async fn notice_low_stock(pool: &MySqlPool, sku: &str) -> Result<Enqueued, mysqlq::Error> {
    Replenish {
        sku: sku.to_owned(),
    }
    .enqueue_with(
        pool,
        &EnqueueOptions::new().dedupe_key(format!("replenish:{sku}")),
    )
    .await
}

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

async fn create_schema(pool: &MySqlPool, options: &Options) -> Result<(), String> {
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
        Enqueued::Duplicate(_) => {}
    }
    Ok(())
}

/// The rush SKU's counts.
#[derive(Debug, Clone, Copy)]
struct RushState {
    sold: u64,
    reserved: u64,
    available: u64,
    ledger_rows: u64,
    ledger_distinct: u64,
    /// Ledger rows whose unit is not `sold` by the same reservation.
    mismatched: u64,
}

async fn rush_state(pool: &MySqlPool) -> Result<RushState, String> {
    let (sold, reserved, available, ledger_rows, ledger_distinct, mismatched): (
        i64,
        i64,
        i64,
        i64,
        i64,
        i64,
    ) = sqlx::query_as(
        "SELECT \
           (SELECT COUNT(*) FROM inventory_unit WHERE sku = ? AND status = 'sold'), \
           (SELECT COUNT(*) FROM inventory_unit WHERE sku = ? AND status = 'reserved'), \
           (SELECT COUNT(*) FROM inventory_unit WHERE sku = ? AND status = 'available'), \
           (SELECT COUNT(*) FROM ledger WHERE sku = ?), \
           (SELECT COUNT(DISTINCT unit_no) FROM ledger WHERE sku = ?), \
           (SELECT COUNT(*) FROM ledger l LEFT JOIN inventory_unit u \
              ON u.sku = l.sku AND u.unit_no = l.unit_no \
              AND u.status = 'sold' AND u.reservation_id = l.reservation_id \
            WHERE l.sku = ? AND u.unit_no IS NULL)",
    )
    .bind(RUSH_SKU)
    .bind(RUSH_SKU)
    .bind(RUSH_SKU)
    .bind(RUSH_SKU)
    .bind(RUSH_SKU)
    .bind(RUSH_SKU)
    .fetch_one(pool)
    .await
    .map_err(|e| format!("cannot read the rush's state: {e}"))?;
    let u = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(RushState {
        sold: u(sold),
        reserved: u(reserved),
        available: u(available),
        ledger_rows: u(ledger_rows),
        ledger_distinct: u(ledger_distinct),
        mismatched: u(mismatched),
    })
}

/// Replenish rows in `job_queue`, per SKU.
async fn replenish_rows(pool: &MySqlPool) -> Result<BTreeMap<String, u64>, String> {
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT CAST(payload AS CHAR) FROM job_queue WHERE kind = ?")
            .bind(Replenish::KIND)
            .fetch_all(pool)
            .await
            .map_err(|e| format!("cannot read job_queue: {e}"))?;
    let mut out = BTreeMap::new();
    for (payload,) in rows {
        let sku = serde_json::from_str::<serde_json::Value>(&payload)
            .ok()
            .and_then(|v| v["sku"].as_str().map(str::to_owned))
            .unwrap_or_default();
        *out.entry(sku).or_insert(0) += 1;
    }
    Ok(out)
}

/// Of `units`, those `available` with no reservation.
async fn units_available(
    pool: &MySqlPool,
    units: &[(String, u32)],
) -> Result<Vec<(String, u32)>, String> {
    let rows: Vec<(String, u32)> = sqlx::query_as(
        "SELECT sku, unit_no FROM inventory_unit WHERE status = 'available' AND reservation_id IS NULL",
    )
    .fetch_all(pool)
    .await
    .map_err(|e| format!("cannot read units: {e}"))?;
    let free: std::collections::HashSet<(String, u32)> = rows.into_iter().collect();
    Ok(units.iter().filter(|u| free.contains(u)).cloned().collect())
}

/// Waits until every job of `ids` is `completed` or `failed`.
async fn wait_jobs_done(
    pool: &MySqlPool,
    ids: &[u64],
    timeout: Duration,
) -> Result<Duration, String> {
    let start = Instant::now();
    loop {
        let rows: Vec<(u64, String)> =
            sqlx::query_as("SELECT id, CAST(status AS CHAR) FROM job_queue")
                .fetch_all(pool)
                .await
                .map_err(|e| format!("cannot read job_queue: {e}"))?;
        let status: HashMap<u64, String> = rows.into_iter().collect();
        let open: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| {
                !status
                    .get(id)
                    .is_some_and(|s| s == "completed" || s == "failed")
            })
            .collect();
        if open.is_empty() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "after {timeout:?}, jobs {open:?} are still not finished"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
