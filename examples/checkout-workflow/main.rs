//! `cargo run --example checkout-workflow [-- --once] [--orders N] [--units N]`
//!
//! Placing an order commits its row and its checkout workflow (charge → reserve & receipt →
//! ship) together; `reserve` is the inventory example's SKIP LOCKED reservation, and a sold-out
//! reservation cancels the shipment. See `examples/checkout-workflow/README.md`.

use std::process::ExitCode;

use clap::Parser;
use mysqlq_examples::checkout_workflow::{self, Options};
use mysqlq_examples::runner::{self, Common, ENV_HELP};

/// A checkout workflow whose reservation step uses SKIP LOCKED
#[derive(Debug, Parser)]
#[command(name = "checkout-workflow", after_help = ENV_HELP)]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Orders of one unit each [default: 20]
    #[arg(long, value_name = "N")]
    orders: Option<u32>,
    /// Units in stock [default: 15]
    #[arg(long, value_name = "N")]
    units: Option<u32>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let defaults = Options::default();
    let options = Options {
        orders: args.orders.unwrap_or(defaults.orders),
        units: args.units.unwrap_or(defaults.units),
        ..defaults
    };
    runner::run(
        "checkout-workflow",
        args.common,
        options,
        checkout_workflow::run_round,
    )
    .await
}
