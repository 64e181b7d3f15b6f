//! What becomes of an attempt that did not complete: the outcome (retry with backoff, snooze,
//! fail, cancel) as a pure function of the error class and the attempts, its message, and
//! writing it with the attempt's row in the job's history.

use std::sync::Arc;
use std::time::Duration;

use crate::latency::Series;
use crate::store::{self, Outcome, Written};
use crate::worker::write::{WriteFailed, error_chain, write_retrying};
use crate::worker::{Key, Shared, WorkerEvent};
use crate::{ErrorClass, JobError, RetryPolicy};

/// Delay before retrying a job whose kind this worker does not know (rolling deploys).
pub(super) const UNKNOWN_KIND_DELAY: Duration = Duration::from_secs(60);

/// The outcome of a failed attempt: a pure function of the error class and the attempts.
pub(super) fn decide(
    class: ErrorClass,
    attempt: u32,
    max_attempts: u32,
    policy: &RetryPolicy,
    unknown_kind: bool,
    unit: f64,
) -> Outcome {
    match class {
        ErrorClass::Snooze(delay) => Outcome::Snooze { delay },
        ErrorClass::Cancel => Outcome::Cancel,
        ErrorClass::RateLimited(delay) => Outcome::RateLimited { delay },
        ErrorClass::Fail => Outcome::Fail,
        _ if attempt >= max_attempts => Outcome::Fail,
        _ if unknown_kind => Outcome::Retry {
            delay: UNKNOWN_KIND_DELAY,
        },
        _ => Outcome::Retry {
            delay: policy.backoff.delay_with_jitter(attempt, unit),
        },
    }
}

pub(super) fn describe(
    err: &JobError,
    outcome: &Outcome,
    attempt: u32,
    max_attempts: u32,
) -> String {
    match outcome {
        Outcome::Fail if matches!(err.class(), ErrorClass::Fail) => {
            format!("{err} (permanent error)")
        }
        Outcome::Fail => format!("{err} (attempt {attempt} of {max_attempts}; no attempts left)"),
        Outcome::Retry { delay } => format!(
            "{err} (attempt {attempt} of {max_attempts}; retry in {})",
            crate::backoff::format_duration(*delay)
        ),
        Outcome::Snooze { .. } | Outcome::Cancel | Outcome::RateLimited { .. } => err.to_string(),
    }
}

fn outcome_name(o: &Outcome) -> &'static str {
    match o {
        Outcome::Retry { .. } => "retry",
        Outcome::Snooze { .. } => "snooze",
        Outcome::Fail => "fail",
        Outcome::Cancel => "cancel",
        Outcome::RateLimited { .. } => "rate_limited",
    }
}

/// The series of `mysqlq_run_minute` that counts an attempt ending with `o` (a 429 is a
/// snooze: the attempt is given back).
fn series(o: &Outcome) -> Series {
    match o {
        Outcome::Retry { .. } => Series::Retried,
        Outcome::Snooze { .. } | Outcome::RateLimited { .. } => Series::Snoozed,
        Outcome::Fail => Series::Failed,
        Outcome::Cancel => Series::Cancelled,
    }
}

/// The attempt whose outcome [`record`] writes, for the job's attempt history and the run-time
/// histogram of its queue and kind (the metrics' kind label).
#[derive(Clone, Copy)]
pub(super) struct Attempt<'a> {
    pub(super) number: u32,
    pub(super) ran_for: Duration,
    pub(super) queue: &'a str,
    pub(super) kind: &'a str,
}

impl<'a> Attempt<'a> {
    pub(super) fn new(number: u32, ran_for: Duration, queue: &'a str, kind: &'a str) -> Self {
        Self {
            number,
            ran_for,
            queue,
            kind,
        }
    }
}

/// What [`record`] found written in the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Recorded {
    /// This outcome (or the fallback failure).
    Written(Outcome),
    /// Nothing: an operator had cancelled the job before the outcome was written.
    ByOperator,
}

/// Writes a non-completion outcome, retrying on deadlocks and connection errors, with the
/// attempt's row in the job's history (same transaction; unless `attempt_history` is 0). A
/// write the server refuses for good records the attempt as failed (with both errors) instead
/// of retrying forever while heartbeats keep the job alive. An outcome written is counted once,
/// with the attempt's run time under its series ([`Series`]). Returns what the job's row ended
/// with, when that is known.
pub(super) async fn record(
    s: &Arc<Shared>,
    key: &Key,
    outcome: &Outcome,
    message: &str,
    attempt: Attempt<'_>,
) -> Option<Recorded> {
    let m = &s.metrics;
    let (number, ran_for) = (attempt.number, attempt.ran_for);
    let owned = key.owned();
    let keep = s.config.attempt_history;
    // `keep` 0: no history (also for the fallback below, so that a history the server refuses
    // cannot keep the outcome itself from being written).
    let write = |outcome: Outcome, message: String, keep: u32| {
        let owned = owned.clone();
        write_retrying(s, "record outcome", false, move || {
            let (owned, outcome, message) = (owned.clone(), outcome.clone(), message.clone());
            let db = s.db.clone();
            let worker = s.worker_id.clone();
            async move {
                let mut conn = db.acquire().await?;
                let log = store::AttemptRecord {
                    attempt: number,
                    outcome: outcome_name(&outcome),
                    worker: &worker,
                    ran_for,
                    keep,
                };
                let log = (keep > 0).then_some(&log);
                store::job_finish_attempt_logged(&mut conn, &owned, &outcome, &message, log).await
            }
        })
    };
    let mut written = write(outcome.clone(), message.to_owned(), keep).await;
    let mut outcome = outcome.clone();
    if let Err(WriteFailed::Refused(e)) = &written {
        let fallback = format!(
            "could not record this attempt's outcome ({}): {}; the attempt ended with: {message}",
            outcome_name(&outcome),
            error_chain(e)
        );
        tracing::error!(id = key.id.0, error = %fallback, "recording the job as failed instead");
        outcome = Outcome::Fail;
        written = write(Outcome::Fail, fallback, 0).await;
    }
    if written.is_ok() {
        s.settled(key);
    }
    match written {
        Ok(Written::Now | Written::Already) => {
            match outcome {
                Outcome::Retry { .. } => m.add(&m.counters.retries, 1),
                Outcome::Snooze { .. } => m.add(&m.counters.snoozes, 1),
                Outcome::Fail => m.add(&m.counters.failures, 1),
                Outcome::Cancel => m.add(&m.counters.cancels, 1),
                Outcome::RateLimited { .. } => m.add(&m.counters.rate_limited, 1),
            }
            m.attempt_latency(attempt.queue, attempt.kind, series(&outcome), ran_for);
            s.emit(WorkerEvent::Recorded {
                id: key.id,
                outcome: outcome_name(&outcome),
            });
            Some(Recorded::Written(outcome))
        }
        Ok(Written::Cancelled) => {
            tracing::info!(
                id = key.id.0,
                "cancelled by an operator before the outcome was written: nothing written"
            );
            Some(Recorded::ByOperator)
        }
        Ok(Written::Lost) => {
            m.add(&m.counters.lost, 1);
            tracing::warn!(
                id = key.id.0,
                "lost ownership before the outcome was written: another worker owns the job now"
            );
            None
        }
        Err(e) => {
            tracing::error!(id = key.id.0, error = %e, "outcome not written; the lease will bring the job back");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Backoff;

    #[test]
    fn decisions_follow_the_error_class() {
        let p = RetryPolicy::new(2, Backoff::Fixed(Duration::from_secs(10)));
        assert_eq!(
            decide(ErrorClass::Retry, 1, 3, &p, false, 0.5),
            Outcome::Retry {
                delay: Duration::from_secs(10)
            }
        );
        assert_eq!(
            decide(ErrorClass::Retry, 3, 3, &p, false, 0.5),
            Outcome::Fail
        );
        assert_eq!(
            decide(ErrorClass::Fail, 1, 3, &p, false, 0.5),
            Outcome::Fail
        );
        let d = Duration::from_secs(7);
        assert_eq!(
            decide(ErrorClass::Snooze(d), 3, 3, &p, false, 0.5),
            Outcome::Snooze { delay: d }
        );
        assert_eq!(
            decide(ErrorClass::Cancel, 1, 3, &p, false, 0.5),
            Outcome::Cancel
        );
        assert_eq!(
            decide(ErrorClass::RateLimited(d), 3, 3, &p, false, 0.5),
            Outcome::RateLimited { delay: d },
            "a rate-limited last attempt is not a failure"
        );
        assert_eq!(
            decide(ErrorClass::Retry, 1, 3, &p, true, 0.5),
            Outcome::Retry {
                delay: UNKNOWN_KIND_DELAY
            }
        );
    }
}
