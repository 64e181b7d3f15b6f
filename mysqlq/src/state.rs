//! What the database stores about a job's life, as types: its [`JobState`], how an attempt
//! ended ([`AttemptOutcome`]), and [`Timestamp`]s (every time column is UTC).

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
}
