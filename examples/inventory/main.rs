//! `cargo run --example inventory [-- --once] [--checkouts N] [--units N]`
//!
//! One row per sellable unit, reserved with `SKIP LOCKED` in READ COMMITTED, claimed at checkout;
//! abandoned reservations released by a delayed job; single-flight replenishment. See
//! `examples/inventory/README.md`.

use std::process::ExitCode;

use clap::Parser;
use mysqlq_examples::inventory::{self, Options};
use mysqlq_examples::runner::{self, Common, ENV_HELP};

/// Reserving sellable units with SKIP LOCKED, without ever overselling
#[derive(Debug, Parser)]
#[command(name = "inventory", after_help = ENV_HELP)]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Concurrent checkouts of one unit each [default: 200]
    #[arg(long, value_name = "N")]
    checkouts: Option<u32>,
    /// Units of the contended SKU [default: 50]
    #[arg(long, value_name = "N")]
    units: Option<u32>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let defaults = Options::default();
    let options = Options {
        checkouts: args.checkouts.unwrap_or(defaults.checkouts),
        rush_units: args.units.unwrap_or(defaults.rush_units),
        ..defaults
    };
    runner::run("inventory", args.common, options, inventory::run_round).await
}
