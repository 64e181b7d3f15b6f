//! The command line, as clap derive types. Doc comments are the `--help` text.

use std::path::PathBuf;

use clap::{Args as ClapArgs, Parser, Subcommand, ValueEnum};

/// Benchmark mysqlq against a raw-SQL baseline (enqueue, drain, idle statements, pickup
/// latency), how late periodic jobs are enqueued, workflows against the same jobs unlinked, and
/// per-key rate limits across worker processes, how long the dashboard's pages take over a
/// million jobs, and how the drain scales with concurrency and worker processes, in a scratch
/// database on the same server, dropped afterwards.
///
/// The worker runs with its default settings (WorkerConfig::default()) except what
/// --concurrency or --batch change. The drain baseline is the best raw loop: the article's
/// claim transaction looped by 1 and by 8 claim loops every round, the better of the two being
/// that round's baseline. For each side the drain prints jobs per claim transaction and per
/// completion flush, per job the server's counters (statements, rows, handler reads and
/// writes, commits, fsyncs; server-wide) and the secondary index entries changed (computed from
/// the schema).
///
/// The server comes from DATABASE_URL or --database-url (mysql://user:password@host:3306/db);
/// the user needs CREATE and DROP. Passwords are never printed.
#[derive(Debug, Parser)]
#[command(
    name = "mysqlq-bench",
    version,
    max_term_width = 100,
    args_conflicts_with_subcommands = true
)]
pub(crate) struct Args {
    /// Database URL, e.g. mysql://app:secret@127.0.0.1:3306/app [env: DATABASE_URL]
    #[arg(long, env = "DATABASE_URL", hide_env = true, value_name = "URL")]
    pub(crate) database_url: Option<String>,
    #[command(flatten)]
    pub(crate) bench: BenchArgs,
    #[command(subcommand)]
    pub(crate) internal: Option<Internal>,
}

/// What to measure.
#[derive(Debug, ClapArgs)]
pub(crate) struct BenchArgs {
    /// Jobs per drain and bulk-enqueue run (single-row enqueue runs use at most 5000)
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub(crate) jobs: u32,
    /// Jobs run at once by the worker (default: the worker's, WorkerConfig::DEFAULT_CONCURRENCY;
    /// 256 for each of the workflow scenario's three workers; for the scaling scenario, that of
    /// each worker process at its process points); the baseline drain always runs 1 and 8 claim
    /// loops
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    pub(crate) concurrency: Option<u16>,
    /// Most jobs per claim, for the worker and the baseline [default: the worker's default,
    /// WorkerConfig::DEFAULT_BATCH_SIZE]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=5_000))]
    pub(crate) batch: Option<u32>,
    /// Which measurements to run
    #[arg(long, value_enum, default_value_t = Scenario::All)]
    pub(crate) scenario: Scenario,
    /// Rounds per throughput scenario, framework and baseline alternating in ABBA order (a drain
    /// round runs the framework and the baseline with 1 and with 8 claim loops) [default: 2; 3
    /// for the workflow scenario]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub(crate) rounds: Option<u32>,
    /// Seconds the periodic scenario runs its workers on a schedule ticking every second
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(3..=3600))]
    pub(crate) periodic_seconds: u32,
    /// Seconds the rate scenario runs its three worker processes on the limited keys beside the
    /// unlimited backlog (its key backlogs follow: 20/s and 50/s for 5/3 of this time)
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(3..=3600))]
    pub(crate) rate_secs: u32,
    /// Seconds of each of the rate scenario's two runs on unlimited jobs only (before and after
    /// the keyed run), for the unlimited rate without keys
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(2..=3600))]
    pub(crate) rate_plain_secs: u32,
    /// Unlimited no-op jobs enqueued beside the rate scenario's limited keys (enough for three
    /// worker processes for 60 s on a 2-core machine)
    #[arg(long, default_value_t = 400_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub(crate) rate_plain_jobs: u32,
    /// Jobs of the full key queued for the rate scenario's head-of-line pickups
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub(crate) rate_hol_jobs: u32,
    /// Jobs in the dashboard scenario's data set: 10/11 completed over 24 h, the rest unfinished
    /// (40% ready, 30% scheduled, 20% retrying, 5% waiting, 0.5% running, 4% failed, 0.5%
    /// cancelled)
    #[arg(long, default_value_t = 1_100_000, value_parser = clap::value_parser!(u32).range(1_100..=50_000_000))]
    pub(crate) rows: u32,
    /// Where the scaling scenario writes its plot (SVG: jobs/s against concurrency, and against
    /// worker processes, framework and raw loop)
    #[arg(long, value_name = "PATH", default_value = "scaling.svg")]
    pub(crate) plot: PathBuf,
    /// Print one JSON object
    #[arg(long)]
    pub(crate) json: bool,
    /// Redis for the Redis scenario (drain and pickup over Redis Streams beside the MySQL
    /// path); `--scenario all` includes it when given [env: MYSQLQ_REDIS_URL]
    #[arg(long, env = "MYSQLQ_REDIS_URL", hide_env = true, value_name = "URL")]
    pub(crate) redis_url: Option<String>,
    /// SQL run on the scratch database right after its migrations, before any scenario: an
    /// experiment on the schema both sides drain, e.g. `ALTER TABLE job_queue DROP KEY
    /// idx_job_workflow` to measure what maintaining an index costs. Statements separated by
    /// `;`. The figures of such a run are not the product's: it is printed in the output
    #[arg(long, value_name = "SQL")]
    pub(crate) after_migrate: Option<String>,
}

/// `--concurrency`'s default: the worker's own ([`mysqlq::WorkerConfig::DEFAULT_CONCURRENCY`]).
fn default_concurrency() -> u16 {
    u16::try_from(mysqlq::WorkerConfig::DEFAULT_CONCURRENCY).unwrap_or(u16::MAX)
}

/// `--rounds`' default, except for the workflow scenario.
const DEFAULT_ROUNDS: u32 = 2;

impl BenchArgs {
    /// `--concurrency`, or the worker's default.
    pub(crate) fn concurrency(&self) -> u16 {
        self.concurrency.unwrap_or_else(default_concurrency)
    }

    /// `--rounds`, or its default.
    pub(crate) fn rounds(&self) -> u32 {
        self.rounds.unwrap_or(DEFAULT_ROUNDS)
    }
}

/// `--scenario`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scenario {
    /// Single-row and bulk enqueue
    Enqueue,
    /// Draining pre-enqueued no-op jobs
    Drain,
    /// Statements per second of an idle consumer (counted by a proxy), then pickup latency of
    /// an idle worker, same process and another process
    Pickup,
    /// Periodic jobs: three workers on one schedule ticking every second; how late each tick's
    /// job is enqueued (p50, p99, max, on the database clock), and that every tick is enqueued
    /// exactly once
    Periodic,
    /// Workflows: a 10,000-wide fan-out with a fan-in, and 1,000 four-step diamonds, each
    /// beside the same jobs unlinked, on three workers (sizes follow --jobs: the fan-out is
    /// --jobs wide, the diamonds are --jobs / 10)
    Workflow,
    /// Per-key rate limits: three worker processes on two limited keys (20/s, 50/s) beside a
    /// backlog of unlimited jobs for --rate-secs: the most starts in any window, the limits'
    /// utilisation, the unlimited jobs' rate against a run without the keys
    /// (--rate-plain-secs), and the pickup of an unlimited job beside a full key's backlog
    Rate,
    /// The framework's drain and pickup over Redis Streams (needs --redis-url)
    Redis,
    /// The dashboard's pages over --rows jobs (1,000,000 completed and 100,000 unfinished by
    /// default), timed in-process from the call until the body is read: p50, p95 and max of
    /// 20 runs per page, and two confirmation counts. Not part of `all` (it builds a million
    /// rows first)
    Dashboard,
    /// The drain rate against worker concurrency 1, 4, 16, 64 and 256 (one worker process) and
    /// against 1, 2 and 4 worker processes at --concurrency, beside the raw loop with as many
    /// claim loops at each point, every run in child processes of this binary; a table and a
    /// plot (--plot). Not part of `all` (it writes the plot)
    Scaling,
    /// All of them but the dashboard and the scaling curve
    All,
}

/// Commands the bench runs itself in child processes.
#[derive(Debug, Subcommand)]
pub(crate) enum Internal {
    /// (internal) The other process of the cross-process pickup measurement.
    #[command(name = "bench-enqueue", hide = true)]
    Enqueue(EnqueueArgs),
    /// (internal) One worker process of the rate scenario.
    #[command(name = "bench-worker", hide = true)]
    Worker(WorkerArgs),
    /// (internal) One drain process of the scaling scenario (a worker, or raw claim loops).
    #[command(name = "bench-drain", hide = true)]
    Drain(DrainChildArgs),
}

/// `bench-drain` (internal).
#[derive(Debug, ClapArgs)]
pub(crate) struct DrainChildArgs {
    /// This process's number (its worker id is `mysqlq-bench-drain-<index>`)
    #[arg(long)]
    pub(crate) index: u16,
    /// Jobs run at once by the worker, or raw claim loops with --raw
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    pub(crate) concurrency: u16,
    /// Most jobs per claim [default: the worker's]
    #[arg(long)]
    pub(crate) batch: Option<u32>,
    /// Raw claim loops (the drain baseline's) instead of a worker
    #[arg(long)]
    pub(crate) raw: bool,
    /// The framework side (a drain variant's label)
    #[arg(long, default_value = "framework")]
    pub(crate) variant: String,
}

/// `bench-worker` (internal).
#[derive(Debug, ClapArgs)]
pub(crate) struct WorkerArgs {
    /// This process's number (its worker id is `mysqlq-bench-rate-<index>`)
    #[arg(long)]
    pub(crate) index: u16,
    /// Jobs run at once
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=10_000))]
    pub(crate) concurrency: u16,
}

/// `bench-enqueue` (internal).
#[derive(Debug, ClapArgs)]
pub(crate) struct EnqueueArgs {
    /// Jobs to enqueue, one at a time
    #[arg(long)]
    pub(crate) count: u32,
    /// Jobs per second
    #[arg(long)]
    pub(crate) rate: u32,
    /// Plain SQL INSERTs (the baseline) instead of the framework's enqueue
    #[arg(long)]
    pub(crate) raw: bool,
}
