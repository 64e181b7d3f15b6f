//! `cargo run --example periodic-refresh [-- --once]`
//!
//! A periodic producer enqueues one refresh job per active place (deduplicated, so nothing piles
//! up while the consumers are down); consumers call a slow, flaky API; a consumer is stopped with
//! its jobs in flight and a new one takes over. See `examples/periodic-refresh/README.md`.

use std::process::ExitCode;

use clap::Parser;
use mysqlq_examples::periodic_refresh::{self, Options};
use mysqlq_examples::runner::{self, Common, ENV_HELP};

/// A periodic producer, consumers of a flaky API, and nothing piling up
///
/// Without --once, a producer and a consumer keep running on the round's database until Ctrl-C.
#[derive(Debug, Parser)]
#[command(name = "periodic-refresh", after_help = ENV_HELP)]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Serve the queues over Redis Streams at this URL (docs/redis.md), e.g.
    /// redis://127.0.0.1:6379
    #[arg(long, env = "MYSQLQ_REDIS_URL", value_name = "URL")]
    redis_url: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    runner::run(
        "periodic-refresh",
        args.common,
        Options {
            redis_url: args.redis_url,
            ..Options::default()
        },
        periodic_refresh::run_once_with,
    )
    .await
}
