//! `cargo run --example inventory [-- --once] [--checkouts N] [--units N]`
//!
//! One row per sellable unit, reserved with `SKIP LOCKED` in READ COMMITTED, claimed at checkout;
//! abandoned reservations released by a delayed job; single-flight replenishment. See
//! `examples/inventory/README.md`.

use std::process::ExitCode;

use mysqlq_examples::inventory::{self, Options};
use mysqlq_examples::runner;

const USAGE: &str = "usage: inventory [--once] [--checkouts N] [--units N]

  --once          one round, then check the invariants, print a one-line summary and exit
                  (0 if every invariant held); without it the workers keep running until Ctrl-C
  --checkouts N   concurrent checkouts of one unit each (default 200)
  --units N       units of the contended SKU (default 50)

DATABASE_URL names the server (any database in it is left alone: each run uses a database of its
own, `mysqlq_example_inventory_<pid>_<random>`, dropped when it ends). Without it, 127.0.0.1:3306 is used if it answers, else a private
throwaway mariadbd/mysqld is started in a temp dir and removed at exit
(MYSQLQ_EXAMPLES_PRIVATE_SERVER=1 forces that). RUST_LOG filters mysqlq's logs (default: warn).";

#[tokio::main]
async fn main() -> ExitCode {
    let flag = |arg: &str, rest: &mut dyn Iterator<Item = String>, options: &mut Options| {
        match arg {
            "--checkouts" => options.checkouts = runner::number(arg, rest.next())?,
            "--units" => options.rush_units = runner::number(arg, rest.next())?,
            _ => return Ok(false),
        }
        Ok(true)
    };
    runner::run("inventory", USAGE, flag, inventory::run_round).await
}
