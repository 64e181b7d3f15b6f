//! What a worker does, as events: River's "test signals". Tests wait for the event they need
//! instead of sleeping for a time that is too short on a loaded machine and too long on an idle
//! one. Sending costs nothing when nobody listens.

use crate::JobId;

/// Events buffered per subscriber before the oldest are dropped.
pub(crate) const CAPACITY: usize = 4096;

/// One thing a worker did. See [`crate::WorkerHandle::events`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkerEvent {
    /// Jobs were claimed (one event per job).
    Claimed {
        /// The job.
        id: JobId,
        /// The attempt this claim started.
        attempt: u32,
    },
    /// A claim statement ran (whether or not it found jobs).
    Polled {
        /// Jobs it claimed.
        claimed: usize,
    },
    /// An idle claim loop asked which queues have a job ready (one index probe, no claim
    /// transaction).
    Probed {
        /// Queues with a job ready: the next claims go to them.
        ready: usize,
    },
    /// A claim whose COMMIT reply was lost turned out to have committed: its jobs are run.
    ClaimAdopted {
        /// How many jobs the claim held.
        jobs: usize,
    },
    /// A handler started.
    Started {
        /// The job.
        id: JobId,
    },
    /// A handler returned (any result); its outcome is written next.
    Returned {
        /// The job.
        id: JobId,
    },
    /// A job's completion was written.
    Completed {
        /// The job.
        id: JobId,
    },
    /// A failed attempt's outcome (retry, snooze, fail, cancel) was written.
    Recorded {
        /// The job.
        id: JobId,
        /// `retry`, `snooze`, `fail` or `cancel`.
        outcome: &'static str,
    },
    /// The database said another claim owns the job now: it was cancelled here.
    LeaseLost {
        /// The job.
        id: JobId,
    },
    /// An operator cancelled the job while it ran: the heartbeat found it `cancelled`, and the
    /// handler was stopped ([`crate::CancelReason::Cancelled`]); its result is not written.
    CancelledByOperator {
        /// The job.
        id: JobId,
    },
    /// No heartbeat could renew the job's lease in time: it was stopped here before the lease
    /// could expire.
    LeaseUnconfirmed {
        /// The job.
        id: JobId,
    },
    /// The job waited in the prefetch buffer longer than `prefetch_wait` without a free slot:
    /// it is handed back to `pending` (a [`Released`](Self::Released) event follows).
    Unbuffered {
        /// The job.
        id: JobId,
    },
    /// A job admitted by its rate key's limit could not start within the decision's slack: its
    /// handler was not run, and it is handed back with its attempt (a
    /// [`Released`](Self::Released) event follows).
    RateLateStart {
        /// The job.
        id: JobId,
    },
    /// The job was handed back to `pending` without consuming its attempt.
    Released {
        /// The job.
        id: JobId,
    },
    /// A heartbeat round renewed every lease it carried.
    Heartbeat {
        /// Jobs renewed.
        jobs: usize,
    },
    /// The reaper returned jobs with expired leases.
    Reaped {
        /// Jobs reaped.
        jobs: u64,
    },
    /// This worker became, or stopped being, the leader.
    Leadership {
        /// `true` when it is the leader now.
        leader: bool,
    },
    /// A maintenance round ended.
    MaintenanceRound,
    /// The workflow sweep settled dependencies that ended without this worker's completion
    /// (failed, cancelled, or completed elsewhere).
    WorkflowSwept {
        /// Dependencies settled.
        deps: u64,
        /// Dependents released.
        released: u64,
        /// Dependents cancelled by their upstream rule.
        cancelled: u64,
    },
    /// The worker's service thread (heartbeats, watchdog, completions, claims) woke later than
    /// it asked to: for `lag`, none of its services could act. A lag near the lease's safety
    /// margin means leases are at risk on a worker that is alive (logged as a warning too).
    ServiceLag {
        /// How late.
        lag: std::time::Duration,
        /// When the late wake came (the lag is the time just before it).
        at: std::time::SystemTime,
    },
    /// The Redis relay added jobs to a stream (feature `redis`).
    #[cfg(feature = "redis")]
    Relayed {
        /// The queue.
        queue: String,
        /// Entries added.
        jobs: usize,
    },
    /// The Redis relay found a stream at its cap and relayed nothing: the backlog waits in
    /// MySQL (feature `redis`).
    #[cfg(feature = "redis")]
    StreamFull {
        /// The queue.
        queue: String,
        /// Entries in the stream.
        length: u64,
    },
    /// Redis no longer had unread entries the relay had added (restarted empty, flushed, the
    /// stream deleted): their jobs were handed back to `pending` (feature `redis`).
    #[cfg(feature = "redis")]
    EntriesLost {
        /// The queue.
        queue: String,
        /// Jobs handed back.
        jobs: usize,
    },
    /// Stream entries were acknowledged and deleted (`XACK` + `XDEL`) after MySQL recorded
    /// their outcome, or because their job had moved on (feature `redis`).
    #[cfg(feature = "redis")]
    Acked {
        /// Entries.
        entries: usize,
    },
    /// The sweeper took over entries whose consumer stopped for a lease (`XAUTOCLAIM`)
    /// (feature `redis`).
    #[cfg(feature = "redis")]
    Swept {
        /// Jobs run here: read by a consumer that stopped before it could take them.
        run: usize,
        /// Jobs whose consumer died holding them, sent back to `pending` (attempts left).
        retried: usize,
        /// Jobs moved to `failed`: the dead consumer held the last attempt, or the entry was
        /// delivered more times than the job has attempts without ever being taken.
        failed: usize,
        /// Entries whose job had moved on: acknowledged and deleted.
        stale: usize,
    },
}
