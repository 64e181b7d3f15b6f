//! `mysqlq-bench`: the framework beside a raw-SQL baseline, on the same server, in one run.
//!
//! Everything happens in a scratch database (`mysqlq_bench_<random>`) created on the server of
//! `DATABASE_URL`, migrated, and dropped afterwards — also after an error or Ctrl-C. Each
//! throughput scenario runs framework and baseline alternately in ABBA order (framework,
//! baseline, baseline, framework, …) so that drift (buffer pool warm-up, background flushing)
//! falls on both sides; `job_queue` is emptied before every run. One file per scenario:
//!
//! - [`scenario::enqueue_single`]: one row per autocommit call from `min(concurrency, 64)` tasks
//!   (framework: `BenchNoop { seq }.enqueue(&pool)`; baseline: a plain `INSERT`).
//! - [`scenario::enqueue_bulk`]: all jobs in one call (framework: [`mysqlq::enqueue_many`],
//!   chunked by the framework; baseline: hand-written multi-row INSERTs of the same chunk size).
//! - [`scenario::drain`]: pre-enqueued no-op jobs (the handler bumps a per-job atomic counter);
//!   the framework is a real [`mysqlq::Worker`] with its default settings
//!   ([`mysqlq::WorkerConfig::default`]: concurrency, batch, claim loops, …) except what
//!   `--concurrency` or `--batch` change; further framework sides with other worker settings
//!   are one entry each in [`scenario::drain::FRAMEWORK_VARIANTS`], drained in the same rounds.
//!   The baseline is the best raw loop a user could write: the article's claim transaction and
//!   one token-guarded completion per batch ([`baseline`], SQL in [`sql`]) looped by 1 and by 8
//!   claim loops, both run every round (order: framework, 1 loop, 8 loops, then mirrored); the
//!   round's baseline is the better of the two, and the ratio is the median over rounds of
//!   framework / that best. For every side it prints jobs per claim transaction (worker:
//!   `polls`), jobs per completion flush (worker: `completion_flushes`, with the `piggybacked`
//!   completions written inside a claim's transaction; baseline: one flush per batch), and per
//!   job the deltas of the server-wide counters of [`sql::BENCH_STATUS`] read around each run
//!   (statements, InnoDB rows, handler reads and writes, commits, fsyncs, row lock waits; other
//!   sessions count too; a counter the server lacks is shown as missing), and the secondary
//!   index entries each side changes per job, computed from `job_queue`'s indexes ([`indexes`]).
//! - [`scenario::idle`] (part of the pickup scenario): a framework worker, then the baseline's
//!   poller, on an empty queue with its pool behind an in-process TCP [`proxy`] that counts the
//!   commands the client sends (packets with sequence id 0); after 1 s to settle, the commands
//!   of the next 5 s give the idle statements per second. Nothing server-wide is used: the
//!   server may be shared.
//! - [`scenario::pickup`]: an idle consumer, jobs enqueued one at a time at 20/s, latency from
//!   the enqueue's commit (the enqueue call returned) to the handler's start, both read from the
//!   host's wall clock. Same process (the framework wakes local workers on enqueue) and another
//!   process (a child of this binary, `bench-enqueue`, so no in-process wake-up can help); the
//!   worker runs with its default settings. The baseline is a raw polling loop with the worker's
//!   default idle backoff (5 ms doubling to the 1 s ceiling).
//! - [`scenario::memory`]: the worker's peak resident set during the first framework drain.
//! - [`scenario::periodic`]: three workers with their default settings on one schedule ticking
//!   every second for `--periodic-seconds`; the lateness of each tick's enqueue (its job row's
//!   `created_at` minus the tick, both on the database clock) as p50, p99 and max, and a check
//!   that every tick of the run was enqueued exactly once. No baseline: a raw loop has no
//!   schedule to keep.
//! - [`scenario::workflow`]: three workers (`--concurrency`, default 256 here; `--rounds`,
//!   default 3 here) drain a fan-out (`root` → `--jobs` leaves → `fanin`) and `--jobs / 10`
//!   diamonds (a → b, c → d), each beside the same jobs unlinked, in ABBA order; the ratios, how
//!   long after its last dependency finished a dependent was first claimed (database clock), the
//!   workers' lock waits and deferred settlements and the server's row lock counters, and the
//!   check that every dependent was claimed after all its dependencies finished.
//! - [`scenario::rate`]: per-key rate limits. Three worker processes (this binary's hidden
//!   `bench-worker`, concurrency 32 by default) on keys `a` (20/s) and `b` (50/s) beside
//!   `--rate-plain-jobs` unlimited no-ops for `--rate-secs`; per key the most handler starts in
//!   any window of the period and the utilisation of the limit, the workers' late starts, the
//!   unlimited rate against the same processes without the keys (`--rate-plain-secs`, run before
//!   and after), an unlimited job's pickup beside `--rate-hol-jobs` jobs of a full key, lock
//!   waits.
//! - [`scenario::scaling`] (only with `--scenario scaling`): the drain rate at worker
//!   concurrency 1, 4, 16, 64, 256 in one worker process and at 1, 2, 4 worker processes at
//!   `--concurrency`, beside the raw loop with as many claim loops per process, every run in
//!   child processes of this binary (`bench-drain`, [`scenario::drain_child`]) in ABBA order;
//!   a table, and an SVG plot written to `--plot` ([`plot`]).
//! - [`scenario::dashboard`] (only with `--scenario dashboard`): the dashboard's pages over
//!   `--rows` jobs (1,000,000 completed and 100,000 unfinished by default;
//!   [`scenario::dashboard_data`]), each called in-process through the router 3 + 20 times from
//!   the call until its body is read (p50, p95, max), and two uncapped confirmation counts.
//!
//! Every run checks that each job ran exactly once and that its row is `completed` (or, for
//! enqueue runs, that every row was written). Exit codes: 0 success, 1 error or a failed
//! verification, 2 usage error.

mod args;
mod baseline;
mod bench;
mod db;
mod error;
mod indexes;
mod job;
mod plot;
mod probe;
mod proxy;
mod report;
mod scenario;
mod scratch;
mod sql;
mod table;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Args, Internal};
use crate::error::{BenchError, EXIT_USAGE};

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => return ExitCode::from(clap_error(&e)),
    };
    // A benchmark saturates the server on purpose: sqlx's slow-statement and slow-acquire
    // warnings would only bury the results.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "warn,sqlx::query=error,sqlx::pool=error".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}; check the process limits");
            return ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(dispatch(args)) {
        Ok(code) => code,
        Err(e) => {
            let line = format!("error: {e}").replace(['\n', '\r'], " ");
            eprintln!("{line}");
            e.code()
        }
    };
    ExitCode::from(code)
}

async fn dispatch(args: Args) -> Result<u8, BenchError> {
    let Some(url) = args
        .database_url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
    else {
        return Err(BenchError::usage(
            "no database URL",
            "set DATABASE_URL or pass --database-url mysql://user:password@host:3306/database",
        ));
    };
    match args.internal {
        Some(Internal::Enqueue(a)) => scenario::pickup::child_enqueue(url, &a).await.map(|()| 0),
        Some(Internal::Worker(a)) => scenario::rate_worker::child_worker(url, &a)
            .await
            .map(|()| 0),
        Some(Internal::Drain(a)) => scenario::drain_child::child_drain(url, &a)
            .await
            .map(|()| 0),
        None => bench::bench(url, &args.bench).await,
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
        _ => {
            let text = e.render().to_string();
            let problem: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .filter(|l| !l.is_empty())
                .map(|l| l.strip_prefix("error: ").unwrap_or(l))
                .collect();
            eprintln!(
                "error: {}; see `--help` for usage",
                problem.join(" ").replace(": ;", ":")
            );
            EXIT_USAGE
        }
    }
}
