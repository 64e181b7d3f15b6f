//! `cargo run --example order-email [-- --once] [--orders N]`
//!
//! Orders and their confirmation e-mail jobs committed in one transaction, a flaky mail API,
//! retries, the idempotency key and the `failed` state. See `examples/order-email/README.md`.

use std::process::ExitCode;

use clap::Parser;
use mysqlq_examples::order_email::{self, Options};
use mysqlq_examples::runner::{self, Common, ENV_HELP};

/// Orders and their e-mail jobs, committed together
#[derive(Debug, Parser)]
#[command(name = "order-email", after_help = ENV_HELP)]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Orders to place (every 5th rolls back, the 7th bounces) [default: 20]
    #[arg(long, value_name = "N")]
    orders: Option<u32>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let defaults = Options::default();
    let options = Options {
        orders: args.orders.unwrap_or(defaults.orders),
        ..defaults
    };
    runner::run("order-email", args.common, options, order_email::run_round).await
}
