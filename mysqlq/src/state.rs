//! What the database stores about a job's life, as types: its [`JobState`], the [`OpState`]
//! an operator reads it as and how many jobs are in each ([`StateCounts`], [`Capped`]), how an
//! attempt ended ([`AttemptOutcome`]), and [`Timestamp`]s (every time column is UTC).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::Error;

/// A point in time, UTC.
pub type Timestamp = DateTime<Utc>;

/// A job's state (`job_queue.status`). "Ready" and "scheduled" are not states: a
/// [`Pending`](Self::Pending) job is ready once its `available_at` has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum JobState {
    /// A workflow step waiting for its dependencies (`mysqlq::workflow`): becomes
    /// [`Pending`](Self::Pending) when the last of them settles, never claimed before.
    Waiting,
    /// Waiting to run at `available_at`.
    Pending,
    /// Claimed by a worker, which holds it until its lease ends.
    Processing,
    /// The handler returned `Ok` (final).
    Completed,
    /// Attempts exhausted or a permanent error (final, kept for inspection).
    Failed,
    /// Cancelled (final).
    Cancelled,
}

impl JobState {
    /// Every state, in the order of the state machine.
    pub const ALL: [Self; 6] = [
        Self::Waiting,
        Self::Pending,
        Self::Processing,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The value stored in `job_queue.status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Pending => "pending",
            Self::Processing => "processing",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// `true` for the states a job never leaves by itself.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "job state",
                    format!(
                        "`{s}` is not one of waiting, pending, processing, completed, failed, cancelled"
                    ),
                )
            })
    }
}

/// How an attempt ended ([`Attempt::outcome`](crate::admin::Attempt::outcome)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// Failed; the job was retried later.
    Retry,
    /// Snoozed (not counted as a failure).
    Snooze,
    /// Failed for good (attempts exhausted or a permanent error).
    Fail,
    /// The handler cancelled the job.
    Cancel,
    /// The handler said the service rate-limits it: its key was held, its attempt given back.
    RateLimited,
}

impl AttemptOutcome {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Snooze => "snooze",
            Self::Fail => "fail",
            Self::Cancel => "cancel",
            Self::RateLimited => "rate_limited",
        }
    }
}

impl std::fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AttemptOutcome {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        [
            Self::Retry,
            Self::Snooze,
            Self::Fail,
            Self::Cancel,
            Self::RateLimited,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
        .ok_or_else(|| {
            Error::invalid(
                "attempt outcome",
                format!("`{s}` is unknown to this build; upgrade mysqlq"),
            )
        })
    }
}

/// A job's state as an operator reads it: [`JobState`] refined by when the job may run, why
/// it waits and whether a worker really holds it. Derived, never stored: [`OpState::classify`]
/// is the definition, and the SQL counts (`Admin::state_counts`) mirror it line for line.
///
/// | state | condition (the first that matches wins) |
/// |---|---|
/// | `waiting` | a workflow step waiting on its dependencies (`status = 'waiting'`) |
/// | `running` | `processing`, held by a worker (not by a Redis relay) |
/// | `ready` | `processing` but relayed into a Redis stream and not yet taken; or `pending`, due, and not held back by a limit |
/// | `completed`, `failed`, `cancelled` | their `status` |
/// | `rate-limited` | `pending` and held back by a limit: due but its key or queue is at its rate or global limit or held by a 429, or the job itself answered 429 and waits out its hold |
/// | `retrying` | `pending`, due later, after a failed attempt (`attempts > 0`) |
/// | `scheduled` | `pending`, due later, no attempt counted (delayed, snoozed, or due in 7027) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum OpState {
    /// A workflow step waiting on its dependencies.
    Waiting,
    /// Due now; a worker may claim it (or relayed to a Redis stream, not yet taken).
    Ready,
    /// Due, but its key or queue is at a rate or global limit or held by a 429.
    RateLimited,
    /// Due later, no failed attempt counted.
    Scheduled,
    /// Due later, after a failed attempt.
    Retrying,
    /// A worker runs it.
    Running,
    /// Finished: the handler returned `Ok`.
    Completed,
    /// Finished: attempts exhausted or a permanent error.
    Failed,
    /// Finished: cancelled.
    Cancelled,
}

/// What [`OpState::classify`] needs to know of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowFacts {
    /// `status`.
    pub status: JobState,
    /// `available_at`.
    pub available_at: Timestamp,
    /// `attempts`.
    pub attempts: u32,
    /// `locked_by` names a Redis relay (`redis-relay:…`): the row is in a stream, not running.
    pub relayed: bool,
    /// A limit holds it back: a live 429 hold names this job, or its key or queue is at its
    /// rate or global limit or held (a claim would pass it over).
    pub limited: bool,
}

impl OpState {
    /// Every state, in the order lists and counts show them.
    pub const ALL: [Self; 9] = [
        Self::Waiting,
        Self::Ready,
        Self::RateLimited,
        Self::Scheduled,
        Self::Retrying,
        Self::Running,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The state's name in lists, filters (`state:rate-limited`), `stats` and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Ready => "ready",
            Self::RateLimited => "rate-limited",
            Self::Scheduled => "scheduled",
            Self::Retrying => "retrying",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// The stored status of the jobs of this state (a relayed `processing` row reads as
    /// ready, the one exception).
    pub fn status(self) -> JobState {
        match self {
            Self::Waiting => JobState::Waiting,
            Self::Ready | Self::RateLimited | Self::Scheduled | Self::Retrying => JobState::Pending,
            Self::Running => JobState::Processing,
            Self::Completed => JobState::Completed,
            Self::Failed => JobState::Failed,
            Self::Cancelled => JobState::Cancelled,
        }
    }

    /// `true` for completed, failed and cancelled.
    pub fn is_final(self) -> bool {
        self.status().is_final()
    }

    /// A row's state at `now` (the database's clock). The definition of the states: see the
    /// table on [`OpState`].
    pub fn classify(row: &RowFacts, now: Timestamp) -> Self {
        match row.status {
            JobState::Waiting => Self::Waiting,
            JobState::Processing if row.relayed => Self::Ready,
            JobState::Processing => Self::Running,
            JobState::Completed => Self::Completed,
            JobState::Failed => Self::Failed,
            JobState::Cancelled => Self::Cancelled,
            JobState::Pending if row.limited => Self::RateLimited,
            JobState::Pending if row.available_at <= now => Self::Ready,
            JobState::Pending if row.attempts > 0 => Self::Retrying,
            JobState::Pending => Self::Scheduled,
        }
    }

    /// The states a filter name stands for: a state's own name, or the aliases `pending`
    /// (ready, rate-limited, scheduled, retrying) and `processing` (running).
    pub fn named(name: &str) -> Result<Vec<Self>, Error> {
        match name {
            "pending" => Ok(vec![
                Self::Ready,
                Self::RateLimited,
                Self::Scheduled,
                Self::Retrying,
            ]),
            "processing" => Ok(vec![Self::Running]),
            _ => name.parse().map(|s| vec![s]),
        }
    }
}

impl fmt::Display for OpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OpState {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "state",
                    format!(
                        "unknown state `{s}`; states: ready, scheduled, retrying, running, \
                         waiting, rate-limited, completed, failed, cancelled (aliases: pending, \
                         processing)"
                    ),
                )
            })
    }
}

/// A count that stops at a cap: finished jobs can be millions, and counting every one reads
/// as many index entries. `capped` means "more than `n`" (shown as `100k+`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Capped {
    /// The count, or the cap when `capped`.
    pub n: u64,
    /// There are more than `n`: counting stopped at the cap.
    pub capped: bool,
}

impl Capped {
    /// Where the counts of finished states stop: 100,000 jobs.
    pub const CAP: u64 = 100_000;

    /// An exact count.
    pub const fn exact(n: u64) -> Self {
        Self { n, capped: false }
    }

    /// What a count that read at most `cap + 1` entries found: more than `cap` reads as
    /// `cap`, capped.
    pub const fn of(counted: u64, cap: u64) -> Self {
        if counted > cap {
            Self {
                n: cap,
                capped: true,
            }
        } else {
            Self::exact(counted)
        }
    }
}

impl fmt::Display for Capped {
    /// `1234`, or `100k+` past the cap.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.capped, self.n) {
            (false, n) => write!(f, "{n}"),
            (true, n) if n >= 1000 && n % 1000 == 0 => write!(f, "{}k+", n / 1000),
            (true, n) => write!(f, "{n}+"),
        }
    }
}

/// How many jobs of one queue are in each [`OpState`], counted in SQL by predicates that mirror
/// [`OpState::classify`] (`Admin::state_counts`, `QueueStats::states`, `stats`, the gauge
/// `mysqlq_jobs{queue,state}`). The unfinished states are exact; the finished ones are
/// [`Capped`], and `completed` and `cancelled` are `None` where they were not counted (`stats`
/// and the gauges count only `failed`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StateCounts {
    /// Workflow steps waiting on their dependencies.
    pub waiting: u64,
    /// Due and not held back by a limit, including `in_stream`.
    pub ready: u64,
    /// Of `ready`, the jobs relayed into a Redis stream and not yet taken by a consumer.
    pub in_stream: u64,
    /// Held back by a rate or global limit or a 429 hold (due or not).
    pub rate_limited: u64,
    /// Due later, no failed attempt counted.
    pub scheduled: u64,
    /// Due later, after a failed attempt.
    pub retrying: u64,
    /// Held by a worker that runs them.
    pub running: u64,
    /// Completed and not yet pruned (`None`: not counted).
    pub completed: Option<Capped>,
    /// Failed and not yet pruned or retried.
    pub failed: Capped,
    /// Cancelled and not yet pruned (`None`: not counted).
    pub cancelled: Option<Capped>,
}

impl StateCounts {
    /// The count of `state` (`None`: a finished state that was not counted).
    pub fn get(&self, state: OpState) -> Option<Capped> {
        let exact = |n| Some(Capped::exact(n));
        match state {
            OpState::Waiting => exact(self.waiting),
            OpState::Ready => exact(self.ready),
            OpState::RateLimited => exact(self.rate_limited),
            OpState::Scheduled => exact(self.scheduled),
            OpState::Retrying => exact(self.retrying),
            OpState::Running => exact(self.running),
            OpState::Completed => self.completed,
            OpState::Failed => Some(self.failed),
            OpState::Cancelled => self.cancelled,
        }
    }

    /// Jobs in the unfinished states (waiting, ready, rate-limited, scheduled, retrying,
    /// running).
    pub fn unfinished(&self) -> u64 {
        self.waiting
            + self.ready
            + self.rate_limited
            + self.scheduled
            + self.retrying
            + self.running
    }
}

/// One queue's [`StateCounts`] (`Admin::state_counts`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueStates {
    /// `queue_name`.
    pub queue: String,
    /// Its jobs by state.
    pub states: StateCounts,
    /// How long, in microseconds, the oldest due `pending` job (rate-limited ones included)
    /// has been due; `None` when none is.
    pub oldest_ready_age_us: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_their_stored_names() {
        for st in JobState::ALL {
            assert_eq!(st.as_str().parse::<JobState>().unwrap(), st);
        }
        let err = "done".parse::<JobState>().unwrap_err().to_string();
        assert!(err.contains("`done` is not one of"), "{err}");
        assert!(JobState::Failed.is_final() && !JobState::Pending.is_final());
    }

    #[test]
    fn outcomes_round_trip_and_unknown_ones_say_so() {
        for o in [
            AttemptOutcome::Retry,
            AttemptOutcome::Snooze,
            AttemptOutcome::Fail,
            AttemptOutcome::Cancel,
            AttemptOutcome::RateLimited,
        ] {
            assert_eq!(o.as_str().parse::<AttemptOutcome>().unwrap(), o);
        }
        let err = "vanished"
            .parse::<AttemptOutcome>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("upgrade mysqlq"), "{err}");
    }

    #[test]
    fn classify_table() {
        use chrono::TimeZone;
        let now = Utc.with_ymd_and_hms(2026, 12, 5, 10, 0, 0).unwrap();
        let past = now - chrono::Duration::seconds(1);
        let future = now + chrono::Duration::seconds(1);
        let far = Utc.with_ymd_and_hms(7027, 1, 1, 0, 0, 0).unwrap();
        let row = |status, available_at, attempts, relayed, limited| RowFacts {
            status,
            available_at,
            attempts,
            relayed,
            limited,
        };
        use JobState as J;
        use OpState as O;
        let table = [
            (row(J::Waiting, past, 0, false, false), O::Waiting),
            (row(J::Waiting, future, 0, false, true), O::Waiting),
            (row(J::Processing, past, 1, false, false), O::Running),
            (row(J::Processing, past, 1, true, false), O::Ready),
            (row(J::Completed, future, 1, false, true), O::Completed),
            (row(J::Failed, past, 5, false, false), O::Failed),
            (row(J::Cancelled, future, 0, false, false), O::Cancelled),
            (row(J::Pending, past, 0, false, false), O::Ready),
            (row(J::Pending, now, 3, false, false), O::Ready),
            (row(J::Pending, past, 0, false, true), O::RateLimited),
            (row(J::Pending, future, 2, false, true), O::RateLimited),
            (row(J::Pending, future, 1, false, false), O::Retrying),
            (row(J::Pending, future, 0, false, false), O::Scheduled),
            (row(J::Pending, far, 0, false, false), O::Scheduled),
        ];
        for (facts, want) in table {
            assert_eq!(OpState::classify(&facts, now), want, "{facts:?}");
            if !facts.relayed {
                assert_eq!(want.status(), facts.status, "{want} is a {}", facts.status);
            }
        }
    }

    #[test]
    fn capped_counts_say_when_they_stopped() {
        assert_eq!(Capped::of(7, Capped::CAP), Capped::exact(7));
        assert_eq!(Capped::of(Capped::CAP, Capped::CAP).to_string(), "100000");
        let over = Capped::of(Capped::CAP + 1, Capped::CAP);
        assert_eq!((over.n, over.capped), (Capped::CAP, true));
        assert_eq!(over.to_string(), "100k+");
        assert_eq!(Capped::of(12, 10).to_string(), "10+");
        let counts = StateCounts {
            ready: 2,
            in_stream: 1,
            retrying: 3,
            failed: over,
            ..StateCounts::default()
        };
        assert_eq!(counts.get(OpState::Retrying), Some(Capped::exact(3)));
        assert_eq!(counts.get(OpState::Failed), Some(over));
        assert_eq!(counts.get(OpState::Completed), None, "not counted");
        assert_eq!(counts.unfinished(), 5, "in_stream is part of ready");
    }

    #[test]
    fn op_states_round_trip_and_aliases_expand() {
        for st in OpState::ALL {
            assert_eq!(st.as_str().parse::<OpState>().unwrap(), st);
            assert_eq!(serde_json::to_value(st).unwrap(), st.as_str());
        }
        assert_eq!(OpState::named("pending").unwrap().len(), 4);
        assert_eq!(OpState::named("processing").unwrap(), [OpState::Running]);
        let err = OpState::named("done").unwrap_err().to_string();
        assert!(
            err.contains("unknown state `done`") && err.contains("aliases"),
            "{err}"
        );
    }
}
