//! `cargo run --example order-email [-- --once] [--orders N]`
//!
//! Orders and their confirmation e-mail jobs committed in one transaction, a flaky mail API,
//! retries, the idempotency key and the `failed` state. See `examples/order-email/README.md`.

use std::process::ExitCode;

use mysqlq_examples::order_email::{self, Options};
use mysqlq_examples::runner;

const USAGE: &str = "usage: order-email [--once] [--orders N]

  --once       one round, then check the invariants, print a one-line summary and exit
               (0 if every invariant held); without it the worker keeps running until Ctrl-C
  --orders N   orders to place (default 20; every 5th rolls back, the 7th bounces)

DATABASE_URL names the server (any database in it is left alone: each run uses a database of its
own, `mysqlq_example_order_email_<pid>_<random>`, dropped when it ends). Without it, 127.0.0.1:3306 is used if it answers, else a private
throwaway mariadbd/mysqld is started in a temp dir and removed at exit
(MYSQLQ_EXAMPLES_PRIVATE_SERVER=1 forces that). RUST_LOG filters mysqlq's logs (default: warn).";

#[tokio::main]
async fn main() -> ExitCode {
    let flag = |arg: &str, rest: &mut dyn Iterator<Item = String>, options: &mut Options| {
        match arg {
            "--orders" => options.orders = runner::number(arg, rest.next())?,
            _ => return Ok(false),
        }
        Ok(true)
    };
    runner::run("order-email", USAGE, flag, order_email::run_round).await
}
