//! `cargo run --example periodic-refresh [-- --once]`
//!
//! A periodic producer enqueues one refresh job per active place (deduplicated, so nothing piles
//! up while the consumers are down); consumers call a slow, flaky API; a consumer is stopped with
//! its jobs in flight and a new one takes over. See `examples/periodic-refresh/README.md`.

use std::process::ExitCode;

use mysqlq_examples::periodic_refresh::{self, Options};
use mysqlq_examples::runner;

const USAGE: &str = "usage: periodic-refresh [--once]

  --once   one round, then check the invariants, print a one-line summary and exit (0 if every
           invariant held); without it a producer and a consumer keep running on the round's
           database until Ctrl-C

DATABASE_URL names the server (any database in it is left alone: each run uses a database of its
own, `mysqlq_example_periodic_refresh_<pid>_<random>`, dropped when it ends). Without it, 127.0.0.1:3306 is used if it answers, else a
private throwaway mariadbd/mysqld is started in a temp dir and removed at exit
(MYSQLQ_EXAMPLES_PRIVATE_SERVER=1 forces that). RUST_LOG filters mysqlq's logs (default: warn).";

#[tokio::main]
async fn main() -> ExitCode {
    // No flags of its own besides `--once`.
    let flag = |_: &str, _: &mut dyn Iterator<Item = String>, _: &mut Options| Ok(false);
    runner::run(
        "periodic-refresh",
        USAGE,
        flag,
        periodic_refresh::run_once_with,
    )
    .await
}
