//! Every SQL statement mysqlq runs, in one place.
//!
//! Statements are named noun + verb (`job_claim`, `job_complete_many`, …), take one params
//! value, bind every value, and carry a `/* mysqlq:<purpose> */` tag so a DBA can attribute load
//! per caller (`performance_schema`, the slow log, `SHOW PROCESSLIST`). Every write after the
//! claim is guarded by `status = 'processing' AND claim_token = ?` and reports the jobs whose
//! guard no longer held ("lost ownership") instead of overwriting a newer owner's state.
//! Times come from the database clock in UTC (`UTC_TIMESTAMP(6)`), never from the worker host.
//!
//! Lists of ids are padded to the next power of two (repeating the last entry, which changes
//! nothing in an `IN` list) so that the server and sqlx's statement cache see a handful of
//! statement shapes instead of one per batch size.

/// The `SELECT` of every column of [`admin::Job`] from `job_queue j`, as a literal (for
/// `concat!`): the statements that read whole jobs ([`admin::job_get`], [`job_list_pending`])
/// read them alike, decoded by `admin::job_from_row`. A macro by textual scope, so it is
/// defined before the modules that use it.
macro_rules! job_select {
    () => {
        "SELECT j.id, \
            CAST(j.queue_name AS CHAR) AS queue_name, CAST(j.kind AS CHAR) AS kind, \
            CAST(j.status AS CHAR) AS status, CAST(j.payload AS CHAR) AS payload, j.priority, j.attempts, \
            j.max_attempts, CAST(j.last_error AS CHAR) AS last_error, \
            CAST(j.dedupe_key AS CHAR) AS dedupe_key, CAST(j.ordering_key AS CHAR) AS ordering_key, \
            CAST(j.concurrency_key AS CHAR) AS concurrency_key, CAST(j.locked_by AS CHAR) AS locked_by, \
            j.created_at, j.first_claimed_at, j.available_at, j.lease_expires_at, j.finished_at, \
            j.updated_at, j.cancelled_at, \
            CAST(j.cancelled_by AS CHAR) AS cancelled_by, CAST(j.cancel_reason AS CHAR) AS cancel_reason, \
            UTC_TIMESTAMP(6) AS now, CAST(j.meta AS CHAR) AS meta, \
            CAST(j.rate_key AS CHAR) AS rate_key, j.rate_limit, j.rate_period_us \
            FROM job_queue j"
    };
}

pub mod admin;
mod admission;
mod attempts;
mod claim;
mod cron;
pub mod dashboard;
mod deleting;
mod errors;
mod explain;
mod gauges;
mod guarded;
mod insert;
mod insight;
mod lanes;
mod latency;
mod limits;
mod maintenance;
mod meta;
pub mod migrations;
mod queues;
mod rate;
mod relay;
pub mod search;
pub mod search_fields;
pub mod server;
mod sql;
mod states;
mod testing;
mod workers;
mod workers_page;
pub mod workflow;

pub use attempts::{Attempt, AttemptRecord, job_attempt_delete, job_attempts};
#[cfg(feature = "__internal-store")]
pub use attempts::{
    MAX_ATTEMPT_ERROR_BYTES, TRUNCATED_MARK, job_attempt_record, truncate_attempt_error,
};
#[cfg(feature = "__internal-store")]
pub use claim::job_claim;
pub use claim::{
    ClaimFailed, ClaimParams, ClaimedJob, job_claim_completing, job_claim_rated, job_claim_resolve,
    job_ready_queues,
};
pub use cron::{cron_baseline, cron_enqueue_tick, cron_latest, db_now};
pub use deleting::{Completing, Deleting, job_complete, receipt_delete, receipt_prune};
pub use errors::is_lock_error;
pub(crate) use errors::{is_duplicate_key, sqlx_error_number};
pub use explain::job_claim_explain;
#[cfg(feature = "__internal-store")]
pub use gauges::gauges_explain;
pub use gauges::{queue_gauges, workflow_gauges};
#[cfg(feature = "__internal-store")]
pub use guarded::job_complete_many;
#[cfg(feature = "__internal-store")]
pub use guarded::job_finish_attempt;
#[cfg(any(feature = "redis", feature = "__internal-store"))]
pub use guarded::job_relay_release;
pub use guarded::{
    GuardedReport, Outcome, Owned, Written, job_finish_attempt_logged, job_heartbeat, job_release,
};
#[cfg(feature = "__internal-store")]
pub use insert::INSERT_CHUNK_ROWS;
pub(crate) use insert::job_dedupe_holder;
pub use insert::{InsertRow, job_insert_many, job_insert_one};
#[cfg(feature = "__internal-store")]
pub use insight::insight_explain;
pub use insight::{
    DEPTH_STATES, DepthRow, QueueSettings, ThroughputRow, depth_minute_read, depth_minute_write,
    queue_settings_all, run_minute_queue,
};
pub use lanes::{RatePlan, RateReport};
#[cfg(feature = "__internal-store")]
pub use latency::RUN_MINUTE_CHUNK;
pub use latency::{RunMinuteRow, run_minute_read};
pub use limits::{QueueLimits, queue_limits, queue_limits_set};
pub use maintenance::{
    PruneStatus, cron_prune, job_prunable_count, job_prune, job_reap_expired, keys_prune,
    leader_elect, leader_resign,
};
pub use meta::job_set_meta;
pub use queues::{queue_live, queue_set_paused};
pub use rate::{rate_bucket_backstop, rate_prune};
#[cfg(not(any(feature = "redis", feature = "__internal-store")))]
pub(crate) use relay::RELAY_PREFIX;
#[cfg(feature = "__internal-store")]
pub use relay::{EntryRow, RelayedJob};
#[cfg(any(feature = "redis", feature = "__internal-store"))]
pub use relay::{
    RELAY_PREFIX, Reaped, TakeParams, job_reap_taken, job_relay_claim, job_relay_claim_ids,
    job_relay_counts, job_relay_inspect, job_take,
};
pub use sql::{datetime_utc, micros};
#[cfg(feature = "__internal-store")]
pub use states::states_explain;
pub use states::{
    MAX_PAGE_ROWS, PageRow, finished_count, rows_limited, state_counts, state_counts_open,
};
pub use testing::{ClaimNext, Next, job_claim_next, job_list_pending, job_max_id};
pub use workers::{
    StatsFlush, WorkerRow, stats_flush, stats_prune, worker_register, worker_session_setup,
    worker_stopped,
};
#[cfg(feature = "__internal-store")]
pub use workers_page::workers_page_explain;
pub use workers_page::{
    RUNNING_READ, RunningRow, WorkerLiveRow, workers_leader, workers_live, workers_running,
};
