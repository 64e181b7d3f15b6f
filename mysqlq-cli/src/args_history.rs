//! `work`'s flag for what a completed job leaves behind, a flattened group of its own (`args.rs`
//! holds the rest of the command line).

use clap::Args;

/// What the worker keeps of the jobs it completes.
#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// Delete each job's row in the transaction that completes it, instead of keeping it
    /// `completed` until the pruner deletes it (no history: less database work per job).
    /// Workflow steps and jobs holding a dedupe key for a window after completion are kept as
    /// usual; failed and cancelled jobs always are
    #[arg(long)]
    pub(crate) delete_completed: bool,
}
