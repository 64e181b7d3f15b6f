//! `cargo run --example order-email [-- --once] [--orders N]`
//!
//! Orders and their confirmation e-mail jobs committed in one transaction, a flaky mail API,
//! retries, the idempotency key and the `failed` state. See `examples/order-email/README.md`.

use std::process::ExitCode;

use mysqlq_examples::order_email::{self, Options};
use mysqlq_examples::server::Server;

const USAGE: &str = "usage: order-email [--once] [--orders N]

  --once       one round, then check the invariants, print a one-line summary and exit
               (0 if every invariant held); without it the worker keeps running until Ctrl-C
  --orders N   orders to place (default 20; every 5th rolls back, the 7th bounces)

DATABASE_URL names the server (any database in it is left alone: the example drops and recreates
`mysqlq_example_order_email`). Without it, 127.0.0.1:3306 is used if it answers, else a private
throwaway mariadbd/mysqld is started in a temp dir and removed at exit
(MYSQLQ_EXAMPLES_PRIVATE_SERVER=1 forces that). RUST_LOG filters mysqlq's logs (default: warn).";

fn parse_args() -> Result<(bool, Options), String> {
    let mut once = false;
    let mut options = Options::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--once" => once = true,
            "--orders" => {
                let n = args.next().ok_or("--orders needs a number")?;
                options.orders = n
                    .parse()
                    .map_err(|_| format!("--orders: `{n}` is not a number"))?;
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok((once, options))
}

#[tokio::main]
async fn main() -> ExitCode {
    let (once, options) = match parse_args() {
        Ok(parsed) => parsed,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("order-email: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
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
            eprintln!("order-email: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("order-email: using {}", server.describe());

    let round = tokio::select! {
        r = order_email::run_round(server.url(), &options) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
    };
    let round = match round {
        Ok(r) => r,
        Err(e) => {
            eprintln!("order-email: {e}");
            return ExitCode::FAILURE;
        }
    };
    let summary = round.summary.clone();
    if !once {
        println!("{summary}");
        println!(
            "worker still running on queue `{}` (enqueue more SendOrderEmail jobs to watch them); Ctrl-C to stop",
            order_email::QUEUE
        );
        let _ = tokio::signal::ctrl_c().await;
        println!("Ctrl-C: shutting down gracefully");
    }
    if let Err(e) = round.shutdown().await {
        eprintln!("order-email: {e}");
        return ExitCode::FAILURE;
    }
    if once {
        // The summary is the last line.
        println!("{summary}");
    } else {
        println!("stopped");
    }
    if summary.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
