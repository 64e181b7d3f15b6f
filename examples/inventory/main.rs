//! `cargo run --example inventory [-- --once] [--checkouts N] [--units N]`
//!
//! One row per sellable unit, reserved with `SKIP LOCKED` in READ COMMITTED, claimed at checkout;
//! abandoned reservations released by a delayed job; single-flight replenishment. See
//! `examples/inventory/README.md`.

use std::process::ExitCode;

use mysqlq_examples::inventory::{self, Options};
use mysqlq_examples::server::Server;

const USAGE: &str = "usage: inventory [--once] [--checkouts N] [--units N]

  --once          one round, then check the invariants, print a one-line summary and exit
                  (0 if every invariant held); without it the workers keep running until Ctrl-C
  --checkouts N   concurrent checkouts of one unit each (default 200)
  --units N       units of the contended SKU (default 50)

DATABASE_URL names the server (any database in it is left alone: the example drops and recreates
`mysqlq_example_inventory`). Without it, 127.0.0.1:3306 is used if it answers, else a private
throwaway mariadbd/mysqld is started in a temp dir and removed at exit
(MYSQLQ_EXAMPLES_PRIVATE_SERVER=1 forces that). RUST_LOG filters mysqlq's logs (default: warn).";

fn parse_args() -> Result<(bool, Options), String> {
    let mut once = false;
    let mut options = Options::default();
    let mut args = std::env::args().skip(1);
    let number = |flag: &str, value: Option<String>| -> Result<u32, String> {
        let n = value.ok_or(format!("{flag} needs a number"))?;
        n.parse()
            .map_err(|_| format!("{flag}: `{n}` is not a number"))
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--once" => once = true,
            "--checkouts" => options.checkouts = number("--checkouts", args.next())?,
            "--units" => options.rush_units = number("--units", args.next())?,
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
            eprintln!("inventory: {e}\n\n{USAGE}");
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
            eprintln!("inventory: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("inventory: using {}", server.describe());

    let round = tokio::select! {
        r = inventory::run_round(server.url(), &options) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
    };
    let round = match round {
        Ok(r) => r,
        Err(e) => {
            eprintln!("inventory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let summary = round.summary.clone();
    if !once {
        println!("{summary}");
        println!(
            "workers still running on queues `{}` and `{}` (the rush's reservations expire in {:?}); Ctrl-C to stop",
            inventory::QUEUE,
            inventory::REPLENISH_QUEUE,
            options.checkout_ttl
        );
        let _ = tokio::signal::ctrl_c().await;
        println!("Ctrl-C: shutting down gracefully");
    }
    if let Err(e) = round.shutdown().await {
        eprintln!("inventory: {e}");
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
