//! `worker`, the application binary the docs show: the README's `send_order_email` job (and the
//! `nightly_export` and `send_payment_reminder` of docs/cli.md) defined in the binary itself,
//! the CLI as its `main`. The samples of command output in README.md and docs/ are checked by
//! running it (tests/docs.rs).

use mysqlq::{JobContext, JobError};

/// The README's job: an order's confirmation e-mail.
#[mysqlq::job(queue = "order-email", retries = 5)]
async fn send_order_email(ctx: JobContext, order_id: u64) -> Result<(), JobError> {
    let _ = (ctx, order_id);
    Ok(())
}

/// The job `cancel --queue reports --kind nightly_export` names in docs/cli.md.
#[mysqlq::job(queue = "reports", retries = 0)]
async fn nightly_export(ctx: JobContext) -> Result<(), JobError> {
    let _ = ctx;
    Ok(())
}

/// Reminds a customer of an unpaid order.
// docs/cli.md's `kinds` sample: a job with the options a catalogue shows.
#[mysqlq::job(
    queue = "order-email",
    priority = 5,
    retries = 2,
    backoff = "1m, 10m",
    timeout = "30s",
    rate_limit = "100/min",
    ordering_key = customer_id
)]
async fn send_payment_reminder(
    ctx: JobContext,
    order_id: u64,
    customer_id: u64,
    note: Option<String>,
) -> Result<(), JobError> {
    let _ = (ctx, order_id, customer_id, note);
    Ok(())
}

fn main() {
    mysqlq_cli::main()
}
