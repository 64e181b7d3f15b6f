//! **checkout-workflow**: the inventory article's reservation as one step of a checkout
//! workflow (charge → reserve & receipt → ship).
//!
//! - **Placing an order** ([`place_order`]) is one transaction: the `orders` row and the four
//!   steps of its `checkout` workflow ([`checkout_workflow`]) commit together, or — rolled
//!   back — leave no order, no job and no workflow.
//! - **charge** ([`ChargeCard`]) records a (fake) payment keyed by [`JobContext::idempotency_key`]
//!   (`INSERT IGNORE` into a unique column). The fake provider "loses the answer" of the first
//!   attempt of every few orders after recording the payment: the retry repeats the key, and the
//!   order is still charged once.
//! - **reserve** ([`ReserveStock`]) and **receipt** ([`SendReceipt`]) wait for `charge`, then run
//!   in parallel. `reserve` is the inventory example's reservation: one row per sellable unit,
//!   `SELECT … ORDER BY unit_no LIMIT ? FOR UPDATE SKIP LOCKED` in a READ COMMITTED transaction,
//!   the units marked `reserved` for the order (and logged). It is idempotent per order. When the
//!   pool is short it fails **permanently** ([`JobError::fail`]) — unless the units it skipped
//!   are only locked by transactions still in flight (a consistent read still sees them
//!   `available`), which is a retry, not a sold-out.
//! - **ship** ([`Ship`]) waits for both; it checks the reservation and the receipt exist and
//!   marks the order `shipped`. When `reserve` failed, the workflow's sweep cancels `ship` with
//!   the reason "upstream \`reserve\` failed": a sold-out order is charged and receipted but
//!   never shipped (a refund step would hang off `reserve` with `.ignore_failed()`).
//!
//! [`run_once`] places the orders (more than there are units), runs a worker until no workflow is
//! `running`, checks the invariants and returns a [`Summary`].

use std::time::Duration;

use mysqlq::workflow::{Workflow, WorkflowId};
use mysqlq::{JobContext, JobError};
use sqlx::{Connection, MySqlPool};

use crate::inventory::{placeholders, read_committed, with_deadlock_retry};

mod checks;
mod scenario;

pub use checks::Outcomes;
pub use scenario::{Options, Round, Summary, create_schema, run_once, run_once_with, run_round};

/// The queue of `charge`, `reserve` and `ship`.
pub const QUEUE: &str = "checkout";
/// The queue of `receipt` (a step may run on any queue).
pub const RECEIPT_QUEUE: &str = "receipts";
/// The SKU every order of the round buys.
pub const SKU: &str = "LAMP-BRASS";
/// The reason `ship` is cancelled with when its reservation failed.
pub const UPSTREAM_RESERVE_FAILED: &str = "upstream `reserve` failed";

/// What the jobs need from the example: handed to the worker with `.state(...)`.
#[derive(Debug, Clone)]
pub struct CheckoutState {
    /// Print what each step does.
    pub verbose: bool,
    /// The fake payment provider loses the answer to the first attempt of every order whose id
    /// is a multiple of this (0: never).
    pub lose_charge_answer_every: u64,
}

impl CheckoutState {
    fn say(&self, line: impl FnOnce() -> String) {
        if self.verbose {
            println!("{}", line());
        }
    }
}

fn state(ctx: &JobContext) -> Result<(&MySqlPool, CheckoutState), JobError> {
    let pool = ctx
        .pool()
        .ok_or_else(|| JobError::fail("the worker has no pool"))?;
    let state = ctx
        .state::<CheckoutState>()
        .cloned()
        .unwrap_or(CheckoutState {
            verbose: false,
            lose_charge_answer_every: 0,
        });
    Ok((pool, state))
}

/// The order's SKU and quantity; a permanent error if it does not exist (it commits with its
/// workflow, so it cannot).
async fn order_line(pool: &MySqlPool, order_id: u64) -> Result<(String, u32, i64), JobError> {
    sqlx::query_as("SELECT sku, quantity, total_cents FROM orders WHERE id = ?")
        .bind(order_id)
        .fetch_optional(pool)
        .await?
        .ok_or_else(|| JobError::fail(format!("order {order_id} does not exist")))
}

/// Step `charge`: records the order's payment once, whatever the number of attempts.
#[mysqlq::job(queue = "checkout", retries = 3, backoff = "50ms, 100ms, 200ms")]
pub async fn charge_card(ctx: JobContext, order_id: u64) -> Result<(), JobError> {
    let (pool, st) = state(&ctx)?;
    let (_, _, total_cents) = order_line(pool, order_id).await?;
    let key = ctx.idempotency_key();
    // The payment provider's side: a charge is recorded once per idempotency key.
    let recorded = sqlx::query(
        "INSERT IGNORE INTO payment (idempotency_key, order_id, amount_cents) VALUES (?, ?, ?)",
    )
    .bind(&key)
    .bind(order_id)
    .bind(total_cents)
    .execute(pool)
    .await?
    .rows_affected();
    if ctx.attempt() == 1
        && st.lose_charge_answer_every > 0
        && order_id.is_multiple_of(st.lose_charge_answer_every)
    {
        st.say(|| {
            format!("  charge  order {order_id:>3}: charged, but the answer was lost → retry")
        });
        return Err(JobError::retry("the payment provider's answer was lost"));
    }
    st.say(|| {
        format!(
            "  charge  order {order_id:>3}: {} (key {key}, attempt {})",
            if recorded == 1 {
                "charged"
            } else {
                "already charged"
            },
            ctx.attempt()
        )
    });
    Ok(())
}

/// Why `reserve` could not reserve.
#[derive(Debug, thiserror::Error)]
pub enum ReserveError {
    /// Fewer units than ordered are left: permanent.
    #[error("out of stock: order {order_id} wants {wanted} × {sku}, {free} left")]
    OutOfStock {
        /// The order.
        order_id: u64,
        /// The SKU.
        sku: String,
        /// Units ordered.
        wanted: u32,
        /// Units free.
        free: u32,
    },
    /// Units are locked by reservations still in flight: retried.
    #[error("{sku}: units locked by reservations in flight; trying again")]
    InFlight {
        /// The SKU.
        sku: String,
    },
}

/// What [`reserve_units`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The order holds these units (reserved now, or by an earlier attempt).
    Held(Vec<u32>),
    /// Not enough units: nothing was reserved.
    Short(ReserveOutcome),
}

/// Why a reservation came up short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReserveOutcome {
    /// Sold out: fewer committed `available` units than ordered.
    SoldOut {
        /// Units free.
        free: u32,
    },
    /// Enough units look `available`, but some are locked by other reservations in flight.
    InFlight,
}

/// The inventory article's reservation, for one order: in one READ COMMITTED transaction, lock
/// `quantity` free units of `sku` in `unit_no` order, skipping units other transactions hold,
/// mark them `reserved` for the order and log them. Idempotent: an order that already holds its
/// units gets them back.
pub async fn reserve_units(
    pool: &MySqlPool,
    order_id: u64,
    sku: &str,
    quantity: u32,
) -> Result<Reservation, sqlx::Error> {
    let mut conn = read_committed(pool).await?;
    let mut tx = conn.begin().await?;
    let held: Vec<u32> =
        sqlx::query_scalar("SELECT unit_no FROM stock_unit WHERE order_id = ? ORDER BY unit_no")
            .bind(order_id)
            .fetch_all(&mut *tx)
            .await?;
    if !held.is_empty() {
        tx.commit().await?;
        return Ok(Reservation::Held(held));
    }
    let units: Vec<u32> = sqlx::query_scalar(
        "SELECT unit_no FROM stock_unit \
         WHERE sku = ? AND status = 'available' \
         ORDER BY unit_no LIMIT ? FOR UPDATE SKIP LOCKED",
    )
    .bind(sku)
    .bind(quantity)
    .fetch_all(&mut *tx)
    .await?;
    let free = u32::try_from(units.len()).unwrap_or(u32::MAX);
    if free < quantity {
        // SKIP LOCKED skipped units other reservations hold. A consistent (non-locking) read sees
        // them as they were last committed: if enough are still `available`, some reservation is
        // in flight and may yet roll back; otherwise the SKU is sold out.
        let committed: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM stock_unit WHERE sku = ? AND status = 'available'",
        )
        .bind(sku)
        .fetch_one(&mut *tx)
        .await?;
        tx.rollback().await?;
        return Ok(Reservation::Short(if committed >= i64::from(quantity) {
            ReserveOutcome::InFlight
        } else {
            ReserveOutcome::SoldOut { free }
        }));
    }
    let sql = format!(
        "UPDATE stock_unit SET status = 'reserved', order_id = ? \
         WHERE sku = ? AND unit_no IN ({}) AND status = 'available'",
        placeholders(units.len())
    );
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(order_id)
        .bind(sku);
    for u in &units {
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
    let sql = format!(
        "INSERT INTO reservation_log (order_id, sku, unit_no) VALUES {}",
        vec!["(?, ?, ?)"; units.len()].join(", ")
    );
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for u in &units {
        q = q.bind(order_id).bind(sku).bind(u);
    }
    q.execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(Reservation::Held(units))
}

/// Step `reserve`: reserves the order's units; sold out is a permanent failure, which cancels
/// `ship`.
#[mysqlq::job(
    queue = "checkout",
    retries = 5,
    backoff = "20ms, 50ms, 100ms, 200ms, 500ms"
)]
pub async fn reserve_stock(ctx: JobContext, order_id: u64) -> Result<(), JobError> {
    let (pool, st) = state(&ctx)?;
    let (sku, quantity, _) = order_line(pool, order_id).await?;
    match with_deadlock_retry(|| reserve_units(pool, order_id, &sku, quantity)).await? {
        Reservation::Held(units) => {
            st.say(|| format!("  reserve order {order_id:>3}: {sku} units {units:?}"));
            Ok(())
        }
        Reservation::Short(ReserveOutcome::InFlight) => {
            Err(JobError::retry(ReserveError::InFlight { sku }))
        }
        Reservation::Short(ReserveOutcome::SoldOut { free }) => {
            st.say(|| {
                format!("  reserve order {order_id:>3}: {sku} sold out → failed (ship will be cancelled)")
            });
            Err(JobError::fail(ReserveError::OutOfStock {
                order_id,
                sku,
                wanted: quantity,
                free,
            }))
        }
    }
}

/// Step `receipt`: writes the order's receipt once.
#[mysqlq::job(queue = "receipts", retries = 3, backoff = "50ms")]
pub async fn send_receipt(ctx: JobContext, order_id: u64) -> Result<(), JobError> {
    let (pool, st) = state(&ctx)?;
    let written = sqlx::query(
        "INSERT IGNORE INTO receipt (order_id, amount_cents, payment_key) \
         SELECT o.id, o.total_cents, p.idempotency_key FROM orders o \
         JOIN payment p ON p.order_id = o.id WHERE o.id = ?",
    )
    .bind(order_id)
    .execute(pool)
    .await?
    .rows_affected();
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM receipt WHERE order_id = ?)")
            .bind(order_id)
            .fetch_one(pool)
            .await?;
    if !exists {
        // `charge` completed before this step was released: its payment must be there.
        return Err(JobError::fail(format!(
            "order {order_id} has no payment: receipt ran before charge"
        )));
    }
    st.say(|| {
        format!(
            "  receipt order {order_id:>3}: {}",
            if written == 1 {
                "written"
            } else {
                "already written"
            }
        )
    });
    Ok(())
}

/// Step `ship`: checks the reservation and the receipt, then marks the order `shipped`.
#[mysqlq::job(queue = "checkout", retries = 3, backoff = "50ms")]
pub async fn ship(ctx: JobContext, order_id: u64) -> Result<(), JobError> {
    let (pool, st) = state(&ctx)?;
    let (_, quantity, _) = order_line(pool, order_id).await?;
    let (units, receipts): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM stock_unit WHERE order_id = ? AND status = 'reserved'), \
                (SELECT COUNT(*) FROM receipt WHERE order_id = ?)",
    )
    .bind(order_id)
    .bind(order_id)
    .fetch_one(pool)
    .await?;
    if units != i64::from(quantity) || receipts != 1 {
        // Both dependencies completed before this step was released: this cannot happen.
        return Err(JobError::fail(format!(
            "order {order_id}: {units} of {quantity} units reserved, {receipts} receipts — shipped too early"
        )));
    }
    sqlx::query(
        "UPDATE orders SET status = 'shipped', shipped_at = UTC_TIMESTAMP(6) \
         WHERE id = ? AND status = 'placed'",
    )
    .bind(order_id)
    .execute(pool)
    .await?;
    st.say(|| format!("  ship    order {order_id:>3}: shipped"));
    Ok(())
}

/// The checkout workflow of one order: `charge`, then `reserve` and `receipt` in parallel, then
/// `ship`.
pub fn checkout_workflow(order_id: u64) -> Result<Workflow, mysqlq::Error> {
    Workflow::new("checkout")
        .step("charge", ChargeCard { order_id })?
        .step_after("reserve", ReserveStock { order_id }, ["charge"])?
        .step_after("receipt", SendReceipt { order_id }, ["charge"])?
        .step_after("ship", Ship { order_id }, ["reserve", "receipt"])
}

/// A placed order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// `orders.id`.
    pub order_id: u64,
    /// Its checkout workflow.
    pub workflow: WorkflowId,
}

/// Places an order of `quantity` × `sku`: inserts the `orders` row and enqueues its checkout
/// workflow in **one transaction**, committed when `commit` is `true` and rolled back otherwise
/// (a customer who walks away before the commit: nothing of the order remains).
pub async fn place_order(
    pool: &MySqlPool,
    sku: &str,
    quantity: u32,
    commit: bool,
) -> Result<Placed, String> {
    let db = |e: sqlx::Error| format!("cannot place an order: {e}");
    let mut tx = pool.begin().await.map_err(db)?;
    let order_id = sqlx::query(
        "INSERT INTO orders (sku, quantity, total_cents, status) VALUES (?, ?, ?, 'placed')",
    )
    .bind(sku)
    .bind(quantity)
    .bind(i64::from(quantity) * 4_900)
    .execute(&mut *tx)
    .await
    .map_err(db)?
    .last_insert_id();
    let workflow = checkout_workflow(order_id)
        .map_err(|e| crate::server::error_chain(&e))?
        .enqueue(&mut tx)
        .await
        .map_err(|e| {
            format!(
                "cannot enqueue the checkout workflow: {}",
                crate::server::error_chain(&e)
            )
        })?;
    if commit {
        tx.commit().await.map_err(db)?;
    } else {
        tx.rollback().await.map_err(db)?;
    }
    Ok(Placed { order_id, workflow })
}

/// How long to wait between two looks at the workflows.
pub(crate) const POLL: Duration = Duration::from_millis(50);
