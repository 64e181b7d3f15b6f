//! Operator statements: stats, failed jobs, purge, doctor.
//!
//! Read by `mysqlq-cli` (and any dashboard). Every statement reaches `job_queue` through an
//! index, never by a full scan:
//!
//! | statement | index |
//! |---|---|
//! | [`stats_queues`] | `idx_job_claim`: a loose scan for the queue names, then `(queue_name, status)` refs for `pending`, `processing`, `failed`; and the state counts (`store/states.rs`: one range of `idx_job_recover`) |
//! | [`stats_leases`] | `idx_job_recover` (`status = 'processing'`) |
//! | [`stats_table`] | `idx_job_finished` (`MIN(finished_at)` per status: no rows read) |
//! | [`job_failed_list`], [`job_failed_page`], [`job_failed_count`] | `idx_job_finished` (`status = 'failed'`, keyset on `(finished_at, id)`) |
//! | [`job_active_page`] | a window of ids: `idx_job_finished` (`status IN ('pending', 'processing') AND finished_at IS NULL`) or the primary key, whichever the optimizer prefers; never sorted |
//! | [`job_cancel_many`], [`job_delete_many`] | primary key |
//! | [`audit_list`] | `mysqlq_audit`'s primary key (newest first), `idx_audit_queue`, or `mysqlq_audit_job`'s primary key for one job |
//!
//! [`stats_explain`] EXPLAINs the stats statements with the same text they run with, so a test
//! (and `doctor`) can check the plans. The per-minute tables (`mysqlq_stats_minute`,
//! `mysqlq_kind_minute`, `mysqlq_worker`) are written by workers; these functions only read them.

mod audit;
mod cancel;
mod failed;
mod job;
mod settings;
mod stats;

pub(crate) use audit::audit_jobs;
pub use audit::{
    AuditEntry, AuditQuery, AuditRecord, audit_count, audit_insert, audit_list, audit_prune,
};
#[cfg(feature = "__internal-store")]
pub use cancel::DeleteReport;
pub use cancel::{
    ActiveCursor, ActivePageParams, CancelParams, CancelReport, job_active_count, job_active_page,
    job_cancel_many, job_delete_many,
};
pub(crate) use cancel::{cancel_locked, delete_locked};
pub use failed::{
    DedupeConflict, FailedCursor, FailedJob, FailedListParams, FailedPageParams,
    job_discard_failed, job_failed_count, job_failed_list, job_failed_page, job_retry_failed,
};
#[cfg(feature = "__internal-store")]
pub(crate) use job::JOB_GET_SQL;
pub(crate) use job::job_from_row;
pub use job::{Job, job_get};
pub use settings::{server_settings, table_indexes};
#[cfg(feature = "__internal-store")]
pub use stats::stats_explain;
pub use stats::{
    ActivityStats, KindStats, LeaseStats, QueueStats, TableStats, WorkerStats, stats_activity,
    stats_kinds, stats_leases, stats_queues, stats_table, stats_workers,
};

#[cfg(feature = "__internal-store")]
pub use super::explain::PlanRow;

pub use super::queues::queue_has_jobs;

/// Most ids one bulk retry/discard statement touches.
pub const BULK_CHUNK: usize = 500;

pub(crate) fn non_negative(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}
