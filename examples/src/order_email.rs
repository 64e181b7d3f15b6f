//! **order-email**: an order and its e-mail job, committed together.
//!
//! The scenario of the article "Can MySQL SKIP LOCKED be used as a job queue?":
//!
//! - Each order is placed in **one transaction** that inserts the `orders` row and enqueues its
//!   [`SendOrderEmail`] job with `.enqueue(&mut tx)`. Some orders roll back on purpose: their job
//!   row vanishes with them, so they never produce mail.
//! - The job calls a mail API ([`FakeMailServer`], a local axum endpoint) with
//!   [`JobContext::idempotency_key`]. The endpoint answers `503` to every few requests (a
//!   transient outage → the job is retried with backoff), sometimes delivers the mail but
//!   "loses" the answer (the retry repeats the same key → acknowledged, not delivered twice), and
//!   rejects `bounce@invalid` with `422` (a permanent error → the job lands in `failed` at once).
//! - [`run_once`] places the orders, runs a worker until every committed job is `completed` or
//!   `failed`, checks the invariants and returns a [`Summary`].

use std::net::SocketAddr;

use mysqlq::{Classify, ErrorClass, JobContext};
use sqlx::MySqlPool;

use crate::fake_http;
use crate::server::error_chain;

mod checks;
mod fake_mail;
mod scenario;

pub use fake_mail::{Delivery, FakeMailServer, Faults, MailStats};
pub use scenario::{Options, Round, Summary, create_schema, run_once, run_once_with, run_round};

/// The queue of [`SendOrderEmail`].
pub const QUEUE: &str = "order-email";
/// The address whose mail the fake server rejects permanently (HTTP 422).
pub const BOUNCE_ADDRESS: &str = "bounce@invalid";

/// Where the mail API listens; handed to the worker with `.state(...)` and read by the job with
/// `ctx.state::<MailEndpoint>()`.
#[derive(Debug, Clone)]
pub struct MailEndpoint {
    /// `host:port` of the HTTP endpoint.
    pub addr: SocketAddr,
    /// Print each attempt's outcome.
    pub verbose: bool,
}

/// Why sending an order's e-mail failed, and (through [`Classify`]) what the worker does next.
#[derive(Debug, thiserror::Error)]
pub enum EmailError {
    /// 5xx or 429: the mail server is having a moment. Retried with backoff.
    #[error("mail server unavailable: HTTP {status} {body}")]
    Unavailable {
        /// The HTTP status.
        status: u16,
        /// The response body.
        body: String,
    },
    /// Any other 4xx: the message itself is bad (e.g. the mailbox does not exist). Fails now.
    #[error("mail server rejected the message: HTTP {status} {body}")]
    Rejected {
        /// The HTTP status.
        status: u16,
        /// The response body.
        body: String,
    },
    /// The connection failed or timed out. Retried.
    #[error("cannot talk to the mail server")]
    Transport(#[from] std::io::Error),
    /// Reading the order failed. Retried.
    #[error("cannot read the order")]
    Database(#[from] sqlx::Error),
    /// The order does not exist (it cannot: the job commits with it). Fails now.
    #[error("order {0} does not exist")]
    NoSuchOrder(u64),
    /// The worker was started without `.state(MailEndpoint { .. })` or without a pool. Fails now.
    #[error("the worker has no MailEndpoint state or no pool")]
    NotConfigured,
}

impl Classify for EmailError {
    fn class(&self) -> ErrorClass {
        match self {
            Self::Unavailable { .. } | Self::Transport(_) | Self::Database(_) => ErrorClass::Retry,
            Self::Rejected { .. } | Self::NoSuchOrder(_) | Self::NotConfigured => ErrorClass::Fail,
        }
    }
}

/// Sends the confirmation mail of order `order_id`, at most once per job thanks to the
/// idempotency key, however often the job runs.
#[mysqlq::job(
    queue = "order-email",
    retries = 5,
    backoff = "200ms, 400ms, 800ms, 1s, 2s"
)]
pub async fn send_order_email(ctx: JobContext, order_id: u64) -> Result<(), EmailError> {
    let endpoint = ctx
        .state::<MailEndpoint>()
        .ok_or(EmailError::NotConfigured)?;
    let pool = ctx.pool().ok_or(EmailError::NotConfigured)?;
    // The order committed together with this job, so it is there.
    let (to, total_cents): (String, i64) =
        sqlx::query_as("SELECT customer_email, total_cents FROM orders WHERE id = ?")
            .bind(order_id)
            .fetch_optional(pool)
            .await?
            .ok_or(EmailError::NoSuchOrder(order_id))?;
    let body = serde_json::json!({
        "order_id": order_id,
        "to": to,
        "subject": format!("Your order #{order_id} ({}.{:02} EUR) is confirmed", total_cents / 100, total_cents % 100),
    })
    .to_string();
    let key = ctx.idempotency_key();
    let result = match post_send(endpoint.addr, &key, body).await {
        Ok((status, _)) if (200..300).contains(&status) => Ok(()),
        Ok((status, body)) if status >= 500 || status == 429 => {
            Err(EmailError::Unavailable { status, body })
        }
        Ok((status, body)) => Err(EmailError::Rejected { status, body }),
        Err(e) => Err(EmailError::Transport(e)),
    };
    if endpoint.verbose {
        let who = format!(
            "  job {:>3} order {:>3} attempt {}/{}",
            ctx.id(),
            order_id,
            ctx.attempt(),
            ctx.max_attempts()
        );
        match &result {
            Ok(()) => println!("{who}: sent (key {key})"),
            Err(e) => {
                let next = match e.class() {
                    ErrorClass::Retry if ctx.is_last_attempt() => "out of attempts → failed",
                    ErrorClass::Retry => "transient → retry after backoff",
                    _ => "permanent → failed now, no retry",
                };
                println!("{who}: {e} → {next}");
            }
        }
    }
    result
}

/// POSTs `body` to `http://addr/send` with an `Idempotency-Key` header; returns the status and
/// body of the answer.
async fn post_send(addr: SocketAddr, key: &str, body: String) -> std::io::Result<(u16, String)> {
    let headers = [
        ("content-type", "application/json"),
        ("idempotency-key", key),
    ];
    fake_http::exchange(addr, "POST", "/send", &headers, body, "mail server").await
}

/// An order placed in its own transaction.
#[derive(Debug, Clone)]
struct Placed {
    order_id: u64,
    job_id: u64,
    bounce: bool,
}

/// `BEGIN; INSERT order; enqueue its job; COMMIT or ROLLBACK`.
async fn place_order(
    pool: &MySqlPool,
    email: &str,
    total_cents: i64,
    rollback: bool,
    bounce: bool,
) -> Result<Placed, String> {
    let db = |e: sqlx::Error| format!("placing an order failed: {e}");
    let mut tx = pool.begin().await.map_err(db)?;
    let order_id = sqlx::query("INSERT INTO orders (customer_email, total_cents) VALUES (?, ?)")
        .bind(email)
        .bind(total_cents)
        .execute(&mut *tx)
        .await
        .map_err(db)?
        .last_insert_id();
    let job = SendOrderEmail { order_id }
        .enqueue(&mut tx)
        .await
        .map_err(|e| format!("enqueueing the e-mail job failed: {}", error_chain(&e)))?;
    if rollback {
        tx.rollback().await.map_err(db)?;
    } else {
        tx.commit().await.map_err(db)?;
    }
    Ok(Placed {
        order_id,
        job_id: job.id().0,
        bounce,
    })
}
