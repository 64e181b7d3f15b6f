//! The command line, as clap derive types. Doc comments are the `--help` text.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Run mysqlq workers and operate the job queue (stats, failed jobs, purge, doctor).
///
/// The database URL comes from DATABASE_URL or --database-url
/// (mysql://user:password@host:3306/database). Passwords are never printed.
#[derive(Debug, Parser)]
#[command(
    name = "mysqlq-cli",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
    #[command(flatten)]
    pub(crate) log: crate::logging::LogArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where the database is.
#[derive(Debug, Clone, Args)]
pub(crate) struct ConnArgs {
    /// Database URL, e.g. mysql://app:secret@127.0.0.1:3306/app; several hosts (the first that
    /// takes writes is used): mysql://app:secret@db1:3306,db2:3306/app [env: DATABASE_URL]
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env = true,
        global = true,
        value_name = "URL"
    )]
    pub(crate) database_url: Option<String>,
    #[cfg(feature = "redis")]
    #[command(flatten)]
    pub(crate) redis: crate::redis_args::RedisArgs,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a worker: claim and run the jobs linked into this binary until SIGINT/SIGTERM.
    Work(WorkArgs),
    /// Apply the schema migrations (idempotent) and say which were applied.
    Migrate,
    /// Show queue depth, ages, throughput, errors, workers, processing times and table size.
    Stats(StatsArgs),
    /// Inspect, retry or discard failed jobs.
    #[command(subcommand)]
    Failed(FailedCommand),
    /// Delete old finished jobs in small batches (the job-queue article's cleanup).
    Purge(PurgeArgs),
    /// Check the server and the schema: version, binlog format, read-only, time zone, indexes,
    /// stranded queues and the claim query's plan. Exits non-zero when a check fails.
    Doctor,
    /// Pause a queue: workers stop claiming from it (running jobs finish).
    Pause(QueueArg),
    /// Resume a paused queue.
    Resume(QueueArg),
    /// Show a queue's limits every worker obeys (rate, global), or change them.
    Limits(crate::cmd_limits::LimitsArgs),
    /// Enqueue one job by kind name and JSON payload; prints its id.
    Enqueue(crate::args_kinds::EnqueueArgs),
    /// List the job kinds linked into this binary with their queue, priority, attempts, backoff,
    /// timeout, rate limit and arguments (`--json`: with each payload's JSON Schema).
    Kinds(crate::args_kinds::KindsArgs),
    /// Cancel waiting (ready, scheduled, retrying) and running jobs, by id or by queue and kind.
    /// Running jobs are stopped by their worker at its next heartbeat; their keys are free at
    /// once.
    Cancel(CancelArgs),
    /// Delete jobs that are not running (any other state), with their attempt history.
    Delete(DeleteArgs),
    /// List, show, cancel or retry workflows and batches (`mysqlq::workflow`).
    #[command(subcommand)]
    Workflow(WorkflowCommand),
    /// Show a batch: its members and callbacks by state (as `workflow show`).
    #[command(subcommand)]
    Batch(BatchCommand),
    /// List operator actions (cancel, retry, discard, delete, pause, resume, purge): who, when,
    /// what, why, and how many jobs each changed; newest first.
    Audit(AuditArgs),
    /// Search jobs, count them, run now, retry, cancel or delete every job a search matches.
    Jobs(crate::args_jobs::JobsArgs),
    /// Index a payload or meta field searched often (args.order_id), list or drop such indexes.
    SearchIndex(crate::cmd_search_index::SearchIndexArgs),
    /// Serve the web dashboard: queues, jobs, failed jobs (retry/discard), pause/resume.
    #[cfg(feature = "dashboard")]
    Dashboard(DashboardArgs),
}

/// `work`.
#[derive(Debug, Args)]
pub(crate) struct WorkArgs {
    /// Queues to serve, comma-separated, each optionally with its own concurrency limit
    /// (`emails=10,reports=2`: at most 10 emails and 2 reports at once, so a slow queue cannot
    /// take every slot) [default: the queues of the registered jobs]
    #[arg(long, value_delimiter = ',', value_parser = parse_queue_spec, value_name = "QUEUE[=N]")]
    pub(crate) queues: Vec<(String, Option<usize>)>,
    /// Queue-wide rates across every worker, comma-separated (`emails=100/s,reports=5/min`):
    /// at most that many job starts of the queue per period, whatever the other workers were
    /// started with (stored in the database; the last start wins)
    #[arg(long, value_delimiter = ',', value_parser = crate::cmd_limits::parse_queue_rate, value_name = "QUEUE=N/PERIOD")]
    pub(crate) rate: Vec<(String, mysqlq::Rate)>,
    /// Global concurrency limits across every worker, comma-separated (`emails=20`): at most
    /// that many jobs of the queue running at once, however many workers run (stored like
    /// --rate)
    #[arg(long, value_delimiter = ',', value_parser = crate::cmd_limits::parse_queue_global, value_name = "QUEUE=N")]
    pub(crate) global: Vec<(String, u32)>,
    /// Jobs run at once [default: 16, or the sum of the per-queue limits when every queue
    /// has one]
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) concurrency: Option<u16>,
    /// Most jobs claimed per query
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=5_000))]
    pub(crate) batch: u32,
    /// Most jobs claimed ahead of free slots, so that claims and commits carry whole batches
    /// (0: claim only for free slots)
    #[arg(long, default_value_t = mysqlq::WorkerConfig::DEFAULT_PREFETCH, value_name = "N")]
    pub(crate) prefetch: usize,
    /// Longest a job claimed ahead waits for a free slot before it is handed back (without
    /// losing its attempt) for any worker to take
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DUR")]
    pub(crate) prefetch_wait: Duration,
    /// Claim loops side by side (one polls while idle; the others join when work appears)
    #[arg(long, default_value_t = mysqlq::WorkerConfig::DEFAULT_CLAIMERS as u16, value_parser = clap::value_parser!(u16).range(1..=16), value_name = "N")]
    pub(crate) claimers: u16,
    /// Lease of a claimed job, renewed by heartbeats while it runs (e.g. 60s, 5m)
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DUR")]
    pub(crate) lease: Duration,
    /// Grace period for running jobs on shutdown before they are cancelled and released
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DUR")]
    pub(crate) shutdown_timeout: Duration,
    #[command(flatten)]
    pub(crate) telemetry: crate::args_telemetry::TelemetryArgs,
    /// This worker's id, stored in `locked_by` of the jobs it holds [default: host:pid:random]
    #[arg(long, value_name = "ID")]
    pub(crate) worker_id: Option<String>,
    /// Heartbeat interval [default: a third of the lease]
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub(crate) heartbeat: Option<Duration>,
    /// Shortest idle wait between claims
    #[arg(long, default_value = "5ms", value_parser = parse_duration, value_name = "DUR")]
    pub(crate) poll_floor: Duration,
    /// Longest idle wait between polls: the worst pickup latency for jobs enqueued by other
    /// processes (an idle worker sends one index probe per wait)
    #[arg(long, default_value = "100ms", value_parser = parse_duration, value_name = "DUR")]
    pub(crate) poll_ceiling: Duration,
    /// Per-attempt timeout of jobs that set none
    #[arg(long, default_value = "30m", value_parser = parse_duration, value_name = "DUR")]
    pub(crate) job_timeout: Duration,
    /// How often every worker reaps expired leases; the elected leader also prunes old rows
    /// (periodic jobs do not wait for it: they are enqueued at their tick)
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DUR")]
    pub(crate) maintenance_interval: Duration,
    /// Leader lease: a dead leader is replaced after at most this long
    #[arg(long, default_value = "15s", value_parser = parse_duration, value_name = "DUR")]
    pub(crate) leader_ttl: Duration,
    #[command(flatten)]
    pub(crate) history: crate::args_history::HistoryArgs,
}

/// `stats`.
#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// Print one JSON object (with --watch: one per line)
    #[arg(long)]
    pub(crate) json: bool,
    /// Refresh until interrupted
    #[arg(long)]
    pub(crate) watch: bool,
    /// Refresh interval of --watch
    #[arg(long, default_value = "2s", value_parser = parse_duration, value_name = "DUR", requires = "watch")]
    pub(crate) interval: Duration,
    /// Window of the per-minute rates (claims, completions, …), in whole minutes
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DUR")]
    pub(crate) window: Duration,
}

#[derive(Debug, Subcommand)]
pub(crate) enum FailedCommand {
    /// List failed jobs, newest failure first.
    List(FailedListArgs),
    /// Show one job: payload, attempts, last error and timestamps.
    Show(FailedShowArgs),
    /// Send failed jobs back to pending (attempts reset to 0, runnable now).
    Retry(FailedBulkArgs),
    /// Delete failed jobs.
    Discard(FailedBulkArgs),
}

/// `failed list`.
#[derive(Debug, Args)]
pub(crate) struct FailedListArgs {
    /// Only this queue
    #[arg(long, value_parser = parse_queue)]
    pub(crate) queue: Option<String>,
    /// Most jobs listed
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) limit: u32,
    /// Print JSON
    #[arg(long)]
    pub(crate) json: bool,
}

/// `failed show`.
#[derive(Debug, Args)]
pub(crate) struct FailedShowArgs {
    /// The job id
    pub(crate) id: u64,
    /// Print JSON
    #[arg(long)]
    pub(crate) json: bool,
}

/// `failed retry` / `failed discard`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["id", "all"]))]
pub(crate) struct FailedBulkArgs {
    /// One job id
    pub(crate) id: Option<u64>,
    /// Every failed job (of --queue, if given), in batches
    #[arg(long)]
    pub(crate) all: bool,
    /// With --all: only this queue
    #[arg(long, requires = "all", value_parser = parse_queue)]
    pub(crate) queue: Option<String>,
    #[command(flatten)]
    pub(crate) acting: Acting,
    #[command(flatten)]
    pub(crate) confirm: Confirm,
}

/// `purge`.
#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    /// Delete jobs that finished longer ago than this
    #[arg(long, default_value = "7d", value_parser = parse_duration, value_name = "DUR")]
    pub(crate) older_than: Duration,
    /// Rows per DELETE
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) batch: u32,
    /// Which finished jobs
    #[arg(long, value_enum, default_value_t = PurgeStatus::Completed)]
    pub(crate) status: PurgeStatus,
    #[command(flatten)]
    pub(crate) acting: Acting,
    #[command(flatten)]
    pub(crate) confirm: Confirm,
}

/// Finished states `purge` deletes.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum PurgeStatus {
    /// Completed jobs
    Completed,
    /// Failed jobs
    Failed,
    /// Cancelled jobs
    Cancelled,
}

/// `cancel`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("which").required(true).multiple(true).args(["ids", "queue", "kind", "all"]))]
pub(crate) struct CancelArgs {
    /// Job ids
    #[arg(value_name = "ID")]
    pub(crate) ids: Vec<u64>,
    /// Every waiting and running job of this queue (with --kind: of both), in batches
    #[arg(long, conflicts_with = "ids", value_parser = parse_queue)]
    pub(crate) queue: Option<String>,
    /// Every waiting and running job of this kind (with --queue: of both), in batches
    #[arg(long, conflicts_with = "ids")]
    pub(crate) kind: Option<String>,
    /// Every waiting and running job of every queue, in batches
    #[arg(long, conflicts_with_all = ["ids", "queue", "kind"])]
    pub(crate) all: bool,
    /// Why (stored in `cancel_reason` and the audit trail, shown by `failed show` and the
    /// dashboard)
    #[arg(long)]
    pub(crate) reason: Option<String>,
    /// Who cancels (stored in `cancelled_by` and the audit trail) [default: cli:$USER, or cli]
    #[arg(long, value_name = "NAME")]
    pub(crate) by: Option<String>,
    /// Print the report as JSON
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) confirm: Confirm,
}

/// `delete`.
#[derive(Debug, Args)]
pub(crate) struct DeleteArgs {
    /// Job ids
    #[arg(value_name = "ID", required = true)]
    pub(crate) ids: Vec<u64>,
    /// Print the report as JSON
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) acting: Acting,
    #[command(flatten)]
    pub(crate) confirm: Confirm,
}

#[derive(Debug, Subcommand)]
pub(crate) enum WorkflowCommand {
    /// List workflows and batches, newest first, with their steps by state.
    List(WorkflowListArgs),
    /// Show one workflow or batch: every step with its state, attempts and dependencies.
    Show(WorkflowIdArgs),
    /// Cancel every step not final yet (waiting, pending, running).
    Cancel(WorkflowCancelArgs),
    /// Retry the failed steps; the steps their failure cancelled wait for them again.
    Retry(WorkflowRetryArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum BatchCommand {
    /// Show one batch: members and callbacks with their states, attempts and the callbacks'
    /// dependencies.
    Show(WorkflowIdArgs),
}

/// `workflow list`.
#[derive(Debug, Args)]
pub(crate) struct WorkflowListArgs {
    /// Only in this state
    #[arg(long, value_parser = ["running", "completed", "failed", "cancelled"])]
    pub(crate) state: Option<String>,
    /// Only workflows or only batches
    #[arg(long, value_parser = ["workflow", "batch"])]
    pub(crate) kind: Option<String>,
    /// Only with this name
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Most listed
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) limit: u32,
    /// Print JSON
    #[arg(long)]
    pub(crate) json: bool,
}

/// `workflow show`.
#[derive(Debug, Args)]
pub(crate) struct WorkflowIdArgs {
    /// The workflow's (or batch's) id
    pub(crate) id: u64,
    /// Print JSON
    #[arg(long)]
    pub(crate) json: bool,
}

/// `workflow cancel`.
#[derive(Debug, Args)]
pub(crate) struct WorkflowCancelArgs {
    /// The workflow's (or batch's) id
    pub(crate) id: u64,
    /// Why (stored in each step's `cancel_reason` and the audit trail)
    #[arg(long)]
    pub(crate) reason: Option<String>,
    /// Who cancels [default: cli:$USER, or cli]
    #[arg(long, value_name = "NAME")]
    pub(crate) by: Option<String>,
    #[command(flatten)]
    pub(crate) confirm: Confirm,
}

/// `workflow retry`.
#[derive(Debug, Args)]
pub(crate) struct WorkflowRetryArgs {
    /// The workflow's (or batch's) id
    pub(crate) id: u64,
    #[command(flatten)]
    pub(crate) acting: Acting,
}

/// Who acts and why, recorded in the audit trail (`mysqlq-cli audit`).
#[derive(Debug, Args)]
pub(crate) struct Acting {
    /// Who acts, for the audit trail [default: cli:$USER, or cli]
    #[arg(long, value_name = "NAME")]
    pub(crate) by: Option<String>,
    /// Why, for the audit trail
    #[arg(long)]
    pub(crate) reason: Option<String>,
}

/// The confirmation a bulk destructive command asks for.
#[derive(Debug, Args)]
pub(crate) struct Confirm {
    /// Do it without asking (required when not on a terminal)
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
    /// Print how many jobs it would change, and change nothing
    #[arg(long, conflicts_with = "yes")]
    pub(crate) dry_run: bool,
}

/// `audit`.
#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// Only actions aimed at this queue
    #[arg(long, value_parser = parse_queue, conflicts_with = "job")]
    pub(crate) queue: Option<String>,
    /// Only actions that changed this job
    #[arg(long, value_name = "ID")]
    pub(crate) job: Option<u64>,
    /// Most actions listed, newest first
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) limit: u32,
    /// Print JSON
    #[arg(long)]
    pub(crate) json: bool,
}

/// A queue name argument.
#[derive(Debug, Args)]
pub(crate) struct QueueArg {
    /// The queue name
    #[arg(value_parser = parse_queue)]
    pub(crate) queue: String,
    #[command(flatten)]
    pub(crate) acting: Acting,
}

/// `dashboard`.
#[cfg(feature = "dashboard")]
#[derive(Debug, Args)]
pub(crate) struct DashboardArgs {
    /// Address to listen on; off loopback it needs --token or --read-only
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "HOST:PORT")]
    pub(crate) addr: std::net::SocketAddr,
    /// Also answer requests for this host name (repeatable); IP addresses and localhost are
    /// always answered, other names refused (DNS rebinding protection)
    #[arg(long, value_name = "NAME")]
    pub(crate) allowed_host: Vec<String>,
    /// Show only: hide retry/discard/pause/resume and refuse them (403)
    #[arg(long)]
    pub(crate) read_only: bool,
    /// Require this token: `Authorization: Bearer TOKEN`, or open the page once with ?token=TOKEN
    #[arg(
        long,
        env = "MYSQLQ_DASHBOARD_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub(crate) token: Option<String>,
    /// An operator's own token, NAME=SECRET (repeatable): the trail names NAME for its actions
    #[arg(long, value_name = "NAME=SECRET", value_parser = parse_named_token)]
    pub(crate) operator_token: Vec<(String, String)>,
    /// Who the audit trail (and `cancelled_by`) names for actions taken in this dashboard
    #[arg(
        long,
        env = "MYSQLQ_DASHBOARD_USER",
        default_value = "dashboard",
        value_name = "NAME"
    )]
    pub(crate) user: String,
}

/// `NAME=SECRET` of `dashboard --operator-token`.
#[cfg(feature = "dashboard")]
fn parse_named_token(s: &str) -> Result<(String, String), String> {
    let (name, secret) = s.split_once('=').unwrap_or((s, ""));
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 128 || secret.len() < 16 {
        return Err(format!(
            "`{name}`: write NAME=SECRET, a name of 1 to 128 characters and a \
            secret of at least 16 (e.g. alice=$(openssl rand -hex 16))"
        ));
    }
    Ok((name.to_owned(), secret.to_owned()))
}

/// humantime durations: `30s`, `5m`, `7d`, `1h30m`.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("{e}; write a duration such as 30s, 5m, 7d or 1h30m"))
}

/// `QUEUE` or `QUEUE=N` of `work --queues`.
fn parse_queue_spec(s: &str) -> Result<(String, Option<usize>), String> {
    let (name, limit) = match s.split_once('=') {
        None => (s, None),
        Some((name, n)) => {
            let n: usize = n.trim().parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                format!("`{s}`: the limit after `=` must be a whole number of jobs above 0, e.g. {name}=10")
            })?;
            (name, Some(n))
        }
    };
    Ok((parse_queue(name.trim())?, limit))
}

pub(crate) fn parse_queue(s: &str) -> Result<String, String> {
    mysqlq::validate_queue_name(s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn queues_take_an_optional_limit() {
        use clap::Parser;
        let cli =
            Cli::try_parse_from(["w", "work", "--queues", "emails=10,reports=2,default"]).unwrap();
        let Command::Work(a) = cli.command else {
            panic!("not the work command");
        };
        assert_eq!(
            a.queues,
            vec![
                ("emails".to_owned(), Some(10)),
                ("reports".to_owned(), Some(2)),
                ("default".to_owned(), None)
            ]
        );
        assert_eq!(a.concurrency, None);
        for bad in ["emails=0", "emails=x", "emails=-1", "bad queue=2"] {
            let e = parse_queue_spec(bad).unwrap_err();
            assert!(e.contains('`') || e.contains("queue"), "{bad}: {e}");
        }
        assert!(
            parse_queue_spec("emails=0")
                .unwrap_err()
                .contains("emails=10")
        );
    }

    #[test]
    fn durations_use_humantime() {
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86_400)
        );
        assert!(parse_duration("7x").unwrap_err().contains("such as 30s"));
    }
}
