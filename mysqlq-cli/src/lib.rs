//! # mysqlq-cli — run workers and operate a mysqlq queue
//!
//! The CLI is a library so that `work` runs **your** jobs: a worker only knows the jobs linked
//! into its binary (collected by `#[job]` through `inventory`). Make it your application's
//! worker binary with one line:
//!
//! ```text
//! // src/bin/worker.rs of your application `my-app`, whose #[job]s are in its library crate
//! use my_app as _; // links the library, and with it every #[job], into this binary
//!
//! fn main() {
//!     mysqlq_cli::main()
//! }
//! ```
//!
//! The `use` line matters: a binary that never names the library does not link it, and then
//! `work` has no jobs. `work` refuses to start in that case and prints the line to add. Jobs
//! defined in the binary itself (in `src/main.rs` or its modules) need no such line.
//!
//! That binary has every command: `work`, `migrate`, `stats`, `failed list|show|retry|discard`,
//! `purge`, `doctor`, `pause`, `resume`, `enqueue`, `kinds`, `jobs search|count|run-now|retry|cancel|delete`,
//! `search-index add|list|drop`, `dashboard` (a web UI, also mountable in
//! your own server: [`dashboard::router`]). Handlers that need application state (a client, a
//! configuration, a pool of their own) get it from [`Cli`]:
//! `mysqlq_cli::Cli::new().state(app).run()`, read in the job with
//! [`JobContext::state`](mysqlq::JobContext::state). Applications with their own tokio runtime
//! call [`run`] (or [`Cli::run_from`]) instead, which returns the exit code.
//!
//! The standalone `mysqlq-cli` binary has every command too, but links no jobs, so its `work`
//! refuses to start.
//!
//! Exit codes: 0 success, 1 error, 2 usage error, 3 `doctor` found a failing check. Errors are
//! one line on stderr, `error: <problem>; <how to fix>`, with passwords redacted.
//!
//! Cargo features, both on by default: `cli` (the command line: [`main`], [`run`], [`Cli`], the
//! `mysqlq-cli` binary; clap, humantime, indicatif, tracing-subscriber) and `dashboard` (the
//! web UI: [`dashboard::router`] and the `dashboard` command; axum, maud, hmac, sha2). An
//! application that only mounts the router depends on
//! `mysqlq-cli = { version = "0.1", default-features = false, features = ["dashboard"] }`
//! (before the crate is published, `git = "https://github.com/mysqlq/mysqlq"` instead of
//! `version = "0.1"`).
//! The benchmark is not here: it is the workspace's own `mysqlq-bench` binary.

// docs.rs (`--cfg docsrs`, nightly) marks each feature-gated item with the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "cli")]
mod app;
#[cfg(feature = "cli")]
mod args;
#[cfg(feature = "cli")]
mod args_history;
#[cfg(feature = "cli")]
mod args_jobs;
#[cfg(feature = "cli")]
mod args_kinds;
#[cfg(feature = "cli")]
mod args_telemetry;
#[cfg(feature = "cli")]
mod cmd_audit;
#[cfg(feature = "cli")]
mod cmd_cancel;
#[cfg(feature = "cli")]
mod cmd_doctor;
#[cfg(feature = "cli")]
mod cmd_failed;
#[cfg(feature = "cli")]
mod cmd_jobs;
#[cfg(feature = "cli")]
mod cmd_kinds;
#[cfg(feature = "cli")]
mod cmd_limits;
#[cfg(feature = "cli")]
mod cmd_misc;
#[cfg(feature = "cli")]
mod cmd_search_index;
#[cfg(feature = "cli")]
mod cmd_stats;
#[cfg(feature = "cli")]
mod cmd_work;
#[cfg(feature = "cli")]
mod cmd_workflow;
#[cfg(feature = "cli")]
mod confirm;
#[cfg(feature = "dashboard")]
pub mod dashboard;
#[cfg(feature = "cli")]
mod db;
// The dashboard's pages use `error::chain`; the rest of `error` is the command line's.
#[cfg(any(feature = "cli", feature = "dashboard"))]
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
mod error;
#[cfg(feature = "cli")]
mod logging;
#[cfg(feature = "cli")]
mod metrics_http;
#[cfg(feature = "otel")]
mod otel;
#[cfg(feature = "cli")]
mod out;
#[cfg(any(feature = "cli", feature = "dashboard"))]
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
mod program;
#[cfg(all(feature = "cli", feature = "redis"))]
mod redis_args;
/// docs/cli.md documents the binary with every feature (the Redis flags included), as
/// `cargo test --workspace` builds it: the reference test runs in that build.
#[cfg(all(test, feature = "cli", feature = "redis"))]
mod reference;
#[cfg(feature = "cli")]
mod signals;

#[cfg(feature = "cli")]
pub use app::Cli;

#[cfg(feature = "cli")]
use {
    crate::args::{Cli as Args, Command},
    crate::db::Target,
    crate::error::{CliError, EXIT_USAGE},
    clap::Parser,
    std::ffi::OsString,
    std::process::ExitCode,
};

/// The whole program: builds a tokio runtime, parses `std::env::args`, runs the command, and
/// exits the process with its code (0 ok, 1 error, 2 usage error, 3 failed `doctor` check).
/// The same as `Cli::new().run()` ([`Cli::run`]).
///
/// Logging goes to stderr through `tracing-subscriber`, filtered by `RUST_LOG` (default: `info`
/// for `work`, `warn` otherwise); `--log-format json` writes one JSON object per line.
#[cfg(feature = "cli")]
#[track_caller]
pub fn main() -> ! {
    Cli::new().run()
}

/// Runs the command line `args` (the program name first, as in `std::env::args_os()`) on the
/// caller's tokio runtime (multi-threaded, with I/O and time enabled) and returns the exit code.
/// Does not install a `tracing` subscriber: the application keeps its own. The same as
/// `Cli::new().run_from(args)` ([`Cli::run_from`]).
///
/// ```no_run
/// # async fn app() -> std::process::ExitCode {
/// mysqlq_cli::run(std::env::args_os()).await
/// # }
/// ```
#[cfg(feature = "cli")]
#[track_caller]
pub fn run<I, T>(args: I) -> impl std::future::Future<Output = ExitCode>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    Cli::new().run_from(args)
}

#[cfg(feature = "cli")]
async fn run_inner<I, T>(app: Cli, args: I, init_tracing: bool) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    program::set_name(args.first().map(OsString::as_os_str));
    let cli = match Args::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => return clap_error(&e),
    };
    if init_tracing {
        let default = match cli.command {
            Command::Work(_) => "info",
            _ => "warn",
        };
        logging::init(cli.log.log_format, default);
    }
    let raw_url = cli.conn.database_url.clone();
    match dispatch(app, cli).await {
        Ok(code) => code,
        Err(e) => {
            let scrub = |s: &str| match Target::new(raw_url.as_deref()) {
                Ok(t) => t.scrub(s),
                Err(_) => s.to_owned(),
            };
            logging::eprint_line(&e.line(&scrub));
            e.code
        }
    }
}

/// Help and version go to stdout with code 0; usage errors become one line with code 2.
#[cfg(feature = "cli")]
fn clap_error(e: &clap::Error) -> u8 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp => {
            let _ = e.print();
            0
        }
        // The binary (often an application's own) and what it was built with.
        ErrorKind::DisplayVersion => {
            println!(
                "{} (mysqlq-cli {}, mysqlq {})",
                program::name(),
                env!("CARGO_PKG_VERSION"),
                mysqlq::VERSION
            );
            0
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            EXIT_USAGE
        }
        _ => {
            let problem = usage_problem(e);
            logging::eprint_line(&format!("error: {problem}; see `--help` for usage"));
            EXIT_USAGE
        }
    }
}

/// The one-line problem of a usage error: clap's text without its usage lines, URLs' passwords
/// redacted; a `--redis-*` flag on a build without the `redis` feature says which feature.
#[cfg(feature = "cli")]
fn usage_problem(e: &clap::Error) -> String {
    #[cfg(not(feature = "redis"))]
    if e.kind() == clap::error::ErrorKind::UnknownArgument
        && let Some(clap::error::ContextValue::String(arg)) =
            e.get(clap::error::ContextKind::InvalidArg)
        && arg.starts_with("--redis")
    {
        let flag = arg.split('=').next().unwrap_or(arg);
        return format!(
            "`{flag}` needs the Redis transport, which this binary was built without: turn on \
             mysqlq-cli's `redis` feature (mysqlq-cli = {{ version = \"…\", features = [\"redis\"] }})"
        );
    }
    {
        {
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
            // Never echo a password given on the command line; keep the rest of the text.
            db::redact_urls_in(&problem)
        }
    }
}

#[cfg(all(test, feature = "cli", not(feature = "redis")))]
mod usage_tests {
    use clap::Parser as _;

    /// Issue 28, item 6: `--redis-url` on a build without the feature said "unexpected argument
    /// … a similar argument exists: '--database-url'".
    #[test]
    fn a_redis_flag_without_the_feature_names_the_feature() {
        let e =
            crate::args::Cli::try_parse_from(["mysqlq-cli", "stats", "--redis-url", "redis://x"])
                .unwrap_err();
        let problem = super::usage_problem(&e);
        assert!(
            problem.starts_with("`--redis-url` needs the Redis transport")
                && problem.contains("`redis` feature"),
            "{problem}"
        );
    }
}

#[cfg(feature = "cli")]
async fn dispatch(app: Cli, cli: Args) -> Result<u8, CliError> {
    let target = Target::new(cli.conn.database_url.as_deref());
    match cli.command {
        Command::Work(a) => cmd_work::work(target, &a, &cli.conn, app).await.map(|()| 0),
        Command::Migrate => cmd_misc::migrate(&target?).await.map(|()| 0),
        Command::Stats(a) => cmd_stats::stats(&target?, &a, &cli.conn).await.map(|()| 0),
        Command::Failed(c) => cmd_failed::failed(&target?, c).await,
        Command::Purge(a) => cmd_misc::purge(&target?, &a).await.map(|()| 0),
        Command::Doctor => cmd_doctor::doctor(&target?, &cli.conn).await,
        Command::Pause(q) => cmd_misc::set_paused(&target?, &q.queue, &q.acting, true)
            .await
            .map(|()| 0),
        Command::Resume(q) => cmd_misc::set_paused(&target?, &q.queue, &q.acting, false)
            .await
            .map(|()| 0),
        Command::Audit(a) => cmd_audit::audit(&target?, &a).await.map(|()| 0),
        Command::Jobs(a) => cmd_jobs::jobs(&target?, a).await,
        Command::SearchIndex(a) => cmd_search_index::search_index(&target?, a).await,
        Command::Limits(a) => cmd_limits::limits(&target?, &a).await.map(|()| 0),
        Command::Enqueue(a) => cmd_misc::enqueue(&target?, a).await.map(|()| 0),
        Command::Kinds(a) => cmd_kinds::kinds(&a, app.caller).map(|()| 0),
        Command::Cancel(a) => cmd_cancel::cancel(&target?, &a).await,
        Command::Delete(a) => cmd_cancel::delete(&target?, &a).await,
        Command::Workflow(c) => cmd_workflow::workflow(&target?, c).await,
        Command::Batch(crate::args::BatchCommand::Show(a)) => {
            cmd_workflow::workflow(&target?, crate::args::WorkflowCommand::Show(a)).await
        }
        #[cfg(feature = "dashboard")]
        Command::Dashboard(a) => dashboard::command(&target?, &a, &cli.conn)
            .await
            .map(|()| 0),
    }
}

/// The jobs linked into this binary; duplicate kind names are an error naming both places.
#[cfg(feature = "cli")]
fn registry() -> Result<mysqlq::Registry, CliError> {
    mysqlq::Registry::from_inventory().map_err(|e| {
        let text = e.to_string();
        match text.split_once("; ") {
            Some((problem, fix)) => CliError::new(problem, fix),
            None => CliError::new(text, "give one of the jobs a different `name`"),
        }
    })
}
