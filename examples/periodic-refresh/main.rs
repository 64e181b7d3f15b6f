//! `cargo run --example periodic-refresh [-- --once]`
//!
//! A periodic producer enqueues one refresh job per active place (deduplicated, so nothing piles
//! up while the consumers are down); consumers call a slow, flaky API; a consumer is stopped with
//! its jobs in flight and a new one takes over. See `examples/periodic-refresh/README.md`.

use std::process::ExitCode;

use mysqlq_examples::periodic_refresh::{self, Options};
use mysqlq_examples::server::Server;

const USAGE: &str = "usage: periodic-refresh [--once]

  --once   one round, then check the invariants, print a one-line summary and exit (0 if every
           invariant held); without it a producer and a consumer keep running on the round's
           database until Ctrl-C

DATABASE_URL names the server (any database in it is left alone: the example drops and recreates
`mysqlq_example_periodic_refresh`). Without it, 127.0.0.1:3306 is used if it answers, else a
private throwaway mariadbd/mysqld is started in a temp dir and removed at exit
(MYSQLQ_EXAMPLES_PRIVATE_SERVER=1 forces that). RUST_LOG filters mysqlq's logs (default: warn).";

#[tokio::main]
async fn main() -> ExitCode {
    let mut once = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--once" => once = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("periodic-refresh: unknown argument `{other}`\n\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    // The server (and a private one's temp dir) lives until the end of main, Ctrl-C included.
    let server = match Server::locate().await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("periodic-refresh: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("periodic-refresh: using {}", server.describe());
    let options = Options::default();

    let summary = tokio::select! {
        r = periodic_refresh::run_once_with(server.url(), &options) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
    };
    let summary = match summary {
        Ok(s) => s,
        Err(e) => {
            eprintln!("periodic-refresh: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !once {
        println!("{summary}");
        println!("producer and consumer keep running (a tick every second); Ctrl-C to stop");
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
            println!("Ctrl-C: shutting down gracefully");
        };
        if let Err(e) = periodic_refresh::keep_running(server.url(), &options, stop).await {
            eprintln!("periodic-refresh: {e}");
            return ExitCode::FAILURE;
        }
        println!("stopped");
    } else {
        // The summary is the last line.
        println!("{summary}");
    }
    if summary.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
