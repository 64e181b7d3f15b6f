//! A user's binary: a job defined with `#[mysqlq::job]` and enqueued inside a business
//! transaction. Built with `-D warnings` in CI; it needs a database only when run.

use mysqlq::JobContext;

// CI's API-line probe (`.ci/run`): built with `--cfg mysqlq_probe_store`, this must fail with
// E0603, since `mysqlq::store` is private to mysqlq.
#[cfg(mysqlq_probe_store)]
use mysqlq::store as _;

/// Why an order email could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum EmailError {
    /// The mail server refused the message.
    #[error("mail server said no")]
    Refused,
}

/// Sends the confirmation email of an order.
#[mysqlq::job(queue = "order-email", retries = 5, backoff = "exp")]
async fn send_order_email(ctx: JobContext, order_id: u64) -> Result<(), EmailError> {
    // Stable across retries: hand it to the mail provider to send at most once.
    let key = ctx.idempotency_key();
    if order_id == 0 {
        return Err(EmailError::Refused);
    }
    println!("sending the email of order {order_id} (idempotency key {key})");
    Ok(())
}

/// Inserts an order and enqueues its email in the same transaction.
async fn place_order(
    pool: &sqlx::MySqlPool,
    order_id: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO orders (id) VALUES (?)")
        .bind(order_id)
        .execute(&mut *tx)
        .await?;
    // `Enqueued` is `#[must_use]` (it can report a duplicate), so the result is bound.
    let enqueued = SendOrderEmail { order_id }.enqueue(&mut tx).await?;
    tx.commit().await?;
    println!("order {order_id} placed, email job {}", enqueued.id());
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = match std::env::var("DATABASE_URL") {
        Ok(url) => url,
        Err(_) => {
            eprintln!("set DATABASE_URL to place an order");
            return Ok(());
        }
    };
    let pool = sqlx::MySqlPool::connect(&url).await?;
    place_order(&pool, 42).await
}
