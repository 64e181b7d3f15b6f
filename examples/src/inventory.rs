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

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mysqlq::{EnqueueOptions, Enqueued, JobContext, JobError};
use sqlx::{Connection, MySqlPool};

use crate::server::error_chain;

mod checks;
mod scenario;

pub use scenario::{Options, Round, Summary, create_schema, run_once, run_once_with, run_round};

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
pub(crate) async fn read_committed(
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
pub(crate) fn placeholders(n: usize) -> String {
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
pub(crate) async fn with_deadlock_retry<T, F, Fut>(mut f: F) -> Result<T, sqlx::Error>
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
