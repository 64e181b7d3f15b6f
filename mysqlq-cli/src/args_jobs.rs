//! The command line of `jobs` (`cmd_jobs.rs`), as clap derive types. Doc comments are the
//! `--help` text.

use clap::{Args, Subcommand};

use crate::args::{Acting, Confirm};

/// `jobs`.
#[derive(Debug, Args)]
pub(crate) struct JobsArgs {
    #[command(subcommand)]
    pub(crate) command: JobsCommand,
}

#[derive(Debug, Subcommand)]
pub(crate) enum JobsCommand {
    /// List the jobs a search matches, a page at a time, in the order of the index it walks:
    /// unfinished states due first, finished states newest first, anything else newest id
    /// first.
    Search(JobsSearchArgs),
    /// Count the jobs a search matches, exactly (and the newest id counted).
    Count(JobsCountArgs),
    /// Make scheduled and retrying jobs due now (limits and keys still apply at the claim).
    RunNow(JobsActArgs),
    /// Send failed jobs back to pending (attempts reset, runnable now).
    Retry(JobsActArgs),
    /// Cancel jobs not finished yet: waiting, ready, rate-limited, scheduled, retrying, running.
    Cancel(JobsActArgs),
    /// Delete jobs that are not running and not workflow steps, with their attempt history.
    Delete(JobsActArgs),
}

/// `jobs search`.
#[derive(Debug, Args)]
pub(crate) struct JobsSearchArgs {
    /// The search, as in the dashboard: terms ANDed, values ORed, e.g. 'state:retrying
    /// kind:send_email args.order_id:42 finished:<2h' (qualifiers: id, state, queue, kind,
    /// worker, priority, attempts, workflow, error, created, due, finished, args.PATH,
    /// meta.PATH) [default: every job]
    #[arg(value_name = "FILTER")]
    pub(crate) filter: Option<String>,
    /// Most jobs on the page
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub(crate) limit: u32,
    /// Continue where a page ended (the cursor it printed)
    #[arg(long, value_name = "CURSOR")]
    pub(crate) cursor: Option<String>,
    /// Print the page as JSON
    #[arg(long)]
    pub(crate) json: bool,
}

/// `jobs count`.
#[derive(Debug, Args)]
pub(crate) struct JobsCountArgs {
    /// The search (as for `jobs search`) [default: every job]
    #[arg(value_name = "FILTER")]
    pub(crate) filter: Option<String>,
    /// Print JSON
    #[arg(long)]
    pub(crate) json: bool,
}

/// `jobs run-now | retry | cancel | delete`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["ids", "filter"]))]
pub(crate) struct JobsActArgs {
    /// Job ids (those the action does not apply to are left and counted)
    #[arg(value_name = "ID", conflicts_with = "filter")]
    pub(crate) ids: Vec<u64>,
    /// Every job this search matches (as for `jobs search`) in the states the action applies
    /// to: counted first (exactly, with the newest id), and never more than that count, nor a
    /// job enqueued after it, changed
    #[arg(long, value_name = "FILTER")]
    pub(crate) filter: Option<String>,
    /// Refuse when more than N jobs match (the count a confirmation showed, e.g. the
    /// dashboard's)
    #[arg(long, value_name = "N")]
    pub(crate) max: Option<u64>,
    #[command(flatten)]
    pub(crate) acting: Acting,
    #[command(flatten)]
    pub(crate) confirm: Confirm,
}
