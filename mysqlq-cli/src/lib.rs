//! # mysqlq-cli — run workers and operate a mysqlq queue
//!
//! The CLI is a library so that `work` runs **your** jobs: a worker only knows the jobs linked
//! into its binary (collected by `#[job]` through `inventory`). Make it your application's
//! worker binary with one line:
//!
//! ```text
//! // src/bin/worker.rs of your application (which defines its #[job]s in its library crate)
//! fn main() {
//!     mysqlq_cli::main()
//! }
//! ```
//!
//! That binary has every command: `work`, `migrate`, `stats`, `failed list|show|retry|discard`,
//! `purge`, `doctor`, `pause`, `resume`, `enqueue`, `dashboard` (a web UI, also mountable in
//! your own server: [`dashboard::router`]). Applications with their own tokio runtime
//! call [`run`] instead, which returns the exit code.
//!
//! The standalone `mysqlq-cli` binary has every command too, but links no jobs, so its `work`
//! refuses to start.
//!
//! Exit codes: 0 success, 1 error, 2 usage error, 3 `doctor` found a failing check. Errors are
//! one line on stderr, `error: <problem>; <how to fix>`, with passwords redacted.

mod args;
mod cmd_bench;
mod cmd_doctor;
mod cmd_failed;
mod cmd_misc;
mod cmd_stats;
mod cmd_work;
pub mod dashboard;
mod db;
mod error;
mod metrics_http;
mod out;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::db::Target;
use crate::error::{CliError, EXIT_ERROR, EXIT_USAGE};

/// The whole program: builds a tokio runtime, parses `std::env::args`, runs the command, and
/// exits the process with its code (0 ok, 1 error, 2 usage error, 3 failed `doctor` check).
///
/// Logging goes to stderr through `tracing-subscriber`, filtered by `RUST_LOG` (default: `info`
/// for `work`, `warn` otherwise).
pub fn main() -> ! {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!(
                "error: cannot start the tokio runtime: {e}; check the process limits (threads, memory)"
            );
            std::process::exit(i32::from(EXIT_ERROR));
        }
    };
    let code = runtime.block_on(run_inner(std::env::args_os(), true));
    // Background tasks (pool reapers, metrics server) must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    std::process::exit(i32::from(code));
}

/// Runs the command line `args` (the program name first, as in `std::env::args_os()`) on the
/// caller's tokio runtime (multi-threaded, with I/O and time enabled) and returns the exit code.
/// Does not install a `tracing` subscriber: the application keeps its own.
///
/// ```no_run
/// # async fn app() -> std::process::ExitCode {
/// mysqlq_cli::run(std::env::args_os()).await
/// # }
/// ```
pub async fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    ExitCode::from(run_inner(args, false).await)
}

async fn run_inner<I, T>(args: I, init_tracing: bool) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => return clap_error(&e),
    };
    if init_tracing {
        let default = match cli.command {
            Command::Work(_) => "info",
            // A benchmark saturates the server on purpose: sqlx's slow-statement and
            // slow-acquire warnings would only bury the results.
            Command::Bench(_) | Command::BenchEnqueue(_) => {
                "warn,sqlx::query=error,sqlx::pool=error"
            }
            _ => "warn",
        };
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    }
    let raw_url = cli.conn.database_url.clone();
    match dispatch(cli).await {
        Ok(code) => code,
        Err(e) => {
            let scrub = |s: &str| match Target::new(raw_url.as_deref()) {
                Ok(t) => t.scrub(s),
                Err(_) => s.to_owned(),
            };
            eprintln!("{}", e.line(&scrub));
            e.code
        }
    }
}

/// Help and version go to stdout with code 0; usage errors become one line with code 2.
fn clap_error(e: &clap::Error) -> u8 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            0
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            EXIT_USAGE
        }
        _ => {
            let text = e.render().to_string();
            let mut parts = Vec::new();
            for line in text.lines() {
                let line = line.trim();
                if line.starts_with("Usage:") || line.starts_with("For more information") {
                    break;
                }
                if !line.is_empty() {
                    parts.push(line.strip_prefix("error: ").unwrap_or(line).to_owned());
                }
            }
            let problem = parts.join(" ").replace(": ;", ":");
            // Never echo a password given on the command line.
            let problem = db::redact_url(&problem);
            eprintln!("error: {problem}; see `--help` for usage");
            EXIT_USAGE
        }
    }
}

async fn dispatch(cli: Cli) -> Result<u8, CliError> {
    let target = Target::new(cli.conn.database_url.as_deref());
    match cli.command {
        Command::Work(a) => cmd_work::work(&target?, &a).await.map(|()| 0),
        Command::Migrate => cmd_misc::migrate(&target?).await.map(|()| 0),
        Command::Stats(a) => cmd_stats::stats(&target?, &a).await.map(|()| 0),
        Command::Failed(c) => cmd_failed::failed(&target?, c).await,
        Command::Purge(a) => cmd_misc::purge(&target?, &a).await.map(|()| 0),
        Command::Doctor => cmd_doctor::doctor(&target?).await,
        Command::Pause(q) => cmd_misc::set_paused(&target?, &q.queue, true)
            .await
            .map(|()| 0),
        Command::Resume(q) => cmd_misc::set_paused(&target?, &q.queue, false)
            .await
            .map(|()| 0),
        Command::Enqueue(a) => cmd_misc::enqueue(&target?, a).await.map(|()| 0),
        Command::Dashboard(a) => dashboard::command(&target?, &a).await.map(|()| 0),
        Command::Bench(a) => {
            let url = cli.conn.database_url.as_deref().unwrap_or_default();
            cmd_bench::bench(&target?, url, &a).await
        }
        Command::BenchEnqueue(a) => cmd_bench::child_enqueue(&target?, &a).await.map(|()| 0),
    }
}

/// The jobs linked into this binary; duplicate kind names are an error naming both places.
fn registry() -> Result<mysqlq::Registry, CliError> {
    // `bench`'s own job is linked into every binary but is not one of the application's jobs.
    mysqlq::Registry::from_inventory()
        .map(cmd_bench::without_bench_job)
        .map_err(|e| {
            let text = e.to_string();
            match text.split_once("; ") {
                Some((problem, fix)) => CliError::new(problem, fix),
                None => CliError::new(text, "give one of the jobs a different `name`"),
            }
        })
}
