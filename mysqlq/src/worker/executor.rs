//! Runs one claimed job: decode, run the handler in its own task (outside any transaction,
//! holding no connection), enforce the timeout, catch panics, and record the outcome.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use sqlx::MySqlPool;
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument as _;

use crate::context::{ContextParts, Heartbeat};
use crate::store::{self, ClaimedJob, Outcome, Owned};
use crate::worker::{InFlight, Shared, unit_random};
use crate::{CancelReason, Error, ErrorClass, JobContext, JobError, JobId, RetryPolicy};

/// Delay before retrying a job whose kind this worker does not know (rolling deploys).
const UNKNOWN_KIND_DELAY: Duration = Duration::from_secs(60);

/// Extends one job's lease on demand ([`JobContext::heartbeat`]).
struct LeaseExtender {
    pool: MySqlPool,
    lease: Duration,
}

impl Heartbeat for LeaseExtender {
    fn beat(&self, id: JobId, token: &str) -> BoxFuture<'static, Result<bool, Error>> {
        let pool = self.pool.clone();
        let lease = self.lease;
        let owned = [Owned {
            id,
            token: token.to_owned(),
        }];
        Box::pin(async move {
            let mut conn = pool.acquire().await?;
            let report = store::job_heartbeat(&mut conn, lease, &owned).await?;
            Ok(report.lost.is_empty())
        })
    }
}

/// Starts the supervisor task of one claimed job; the permit is its slot.
pub(crate) fn spawn(
    s: Arc<Shared>,
    job: ClaimedJob,
    queue: &str,
    token: Arc<str>,
    permit: OwnedSemaphorePermit,
) {
    let ctx = JobContext::from_parts(ContextParts {
        id: job.id,
        kind: job.kind.clone().unwrap_or_default(),
        queue: queue.to_owned(),
        attempt: job.attempt,
        max_attempts: job.max_attempts,
        claim_token: token.to_string(),
        pool: Some(s.pool.clone()),
        extensions: s.extensions.clone(),
        heartbeat: Some(Arc::new(LeaseExtender {
            pool: s.pool.clone(),
            lease: s.config.lease,
        })),
    });
    s.in_flight().insert(
        job.id,
        InFlight {
            token: token.clone(),
            ctx: ctx.clone(),
            abort: None,
            finished: false,
        },
    );
    tokio::spawn(supervise(s, job, queue.to_owned(), token, ctx, permit));
}

/// What became of one attempt.
enum Ran {
    Ok,
    Err(JobError),
    /// The handler was stopped from outside (lease lost, shutdown): someone else records it.
    Stopped,
}

async fn supervise(
    s: Arc<Shared>,
    job: ClaimedJob,
    queue: String,
    token: Arc<str>,
    ctx: JobContext,
    permit: OwnedSemaphorePermit,
) {
    let owned = Owned {
        id: job.id,
        token: token.to_string(),
    };
    if s.stopping.load(Ordering::SeqCst) {
        // Claimed but not started when shutdown began: shutdown's release hands it back.
        drop(permit);
        s.slot_freed.notify_waiters();
        return;
    }
    let registration = match job.kind.as_deref() {
        Some(kind) => s.registry.get(kind),
        None => s.registry.sole_job_of_queue(&queue),
    }
    .copied();
    let kind_label = registration.map_or_else(
        || job.kind.clone().unwrap_or_default(),
        |r| r.kind().to_owned(),
    );
    let policy = registration.map(|r| r.retry_policy()).unwrap_or_default();
    let started = Instant::now();
    s.metrics.job_started();

    let ran = match registration {
        None => Ran::Err(JobError::retry(format!(
            "unknown job kind `{}` on queue `{queue}`: no such job is registered in worker {} \
             (a rolling deploy? it is retried in {}s)",
            job.kind.as_deref().unwrap_or("<NULL>"),
            s.worker_id,
            UNKNOWN_KIND_DELAY.as_secs()
        ))),
        Some(r) => match (r.runner())(ctx.clone(), &job.payload) {
            // Valid JSON of another shape may suit a newer build of the job (a rolling deploy):
            // retry. Text that is not JSON at all never will: fail now.
            Err(e) if serde_json::from_str::<serde::de::IgnoredAny>(&job.payload).is_ok() => {
                Ran::Err(JobError::retry(format!(
                    "payload does not match job `{}`: {e} (retried: a newer worker may know this shape)",
                    r.kind()
                )))
            }
            Err(e) => Ran::Err(JobError::fail(format!(
                "payload of job `{}` is not valid JSON: {e}",
                r.kind()
            ))),
            Ok(fut) => {
                let timeout = r.timeout().unwrap_or(s.config.job_timeout);
                let span = tracing::info_span!("job", kind = r.kind(), id = job.id.0, queue = %queue, attempt = job.attempt);
                run_handler(&s, job.id, &ctx, fut.instrument(span), timeout).await
            }
        },
    };
    let took = started.elapsed();
    let error = !matches!(ran, Ran::Ok);
    s.metrics.job_finished(&kind_label, took, error);
    drop(permit);
    s.slot_freed.notify_waiters();

    match ran {
        Ran::Stopped => {}
        Ran::Ok => {
            mark_finished(&s, job.id);
            s.completer.complete(owned);
        }
        Ran::Err(err) => {
            mark_finished(&s, job.id);
            let unknown = registration.is_none();
            let outcome = decide(
                err.class(),
                job.attempt,
                job.max_attempts,
                &policy,
                unknown,
                unit_random(),
            );
            let message = describe(&err, &outcome, job.attempt, job.max_attempts);
            if let Outcome::Fail = outcome {
                tracing::warn!(id = job.id.0, kind = %kind_label, error = %message, "job failed");
            } else {
                tracing::info!(id = job.id.0, kind = %kind_label, error = %message, "job attempt failed");
            }
            record(&s, &owned, &outcome, &message).await;
            s.in_flight().remove(&job.id);
            s.slot_freed.notify_waiters();
        }
    }
}

fn mark_finished(s: &Shared, id: JobId) {
    if let Some(f) = s.in_flight().get_mut(&id) {
        f.finished = true;
    }
}

/// Runs the handler in a task of its own (so a panic is caught and it can be aborted), with
/// the timeout.
async fn run_handler(
    s: &Arc<Shared>,
    id: JobId,
    ctx: &JobContext,
    fut: impl Future<Output = Result<(), JobError>> + Send + 'static,
    timeout: Duration,
) -> Ran {
    let mut handle = tokio::spawn(fut);
    if let Some(f) = s.in_flight().get_mut(&id) {
        f.abort = Some(handle.abort_handle());
    } else {
        // Lost or released before it started.
        handle.abort();
        return Ran::Stopped;
    }
    let joined = tokio::select! {
        r = &mut handle => r,
        () = tokio::time::sleep(timeout) => {
            ctx.cancel(CancelReason::Timeout);
            handle.abort();
            let _ = handle.await;
            s.metrics.add(&s.metrics.counters.timeouts, 1);
            return Ran::Err(JobError::retry(format!(
                "timed out after {}",
                crate::backoff::format_duration(timeout)
            )));
        }
    };
    match joined {
        Ok(Ok(())) => Ran::Ok,
        Ok(Err(e)) => Ran::Err(e),
        Err(e) if e.is_panic() => {
            s.metrics.add(&s.metrics.counters.panics, 1);
            let payload = e.into_panic();
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_owned());
            Ran::Err(JobError::retry(format!("handler panicked: {msg}")))
        }
        Err(_) => Ran::Stopped,
    }
}

/// The outcome of a failed attempt: a pure function of the error class and the attempts.
pub(crate) fn decide(
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

fn describe(err: &JobError, outcome: &Outcome, attempt: u32, max_attempts: u32) -> String {
    match outcome {
        Outcome::Fail if matches!(err.class(), ErrorClass::Fail) => {
            format!("{err} (permanent error)")
        }
        Outcome::Fail => format!("{err} (attempt {attempt} of {max_attempts}; no attempts left)"),
        Outcome::Retry { delay } => format!(
            "{err} (attempt {attempt} of {max_attempts}; retry in {})",
            crate::backoff::format_duration(*delay)
        ),
        Outcome::Snooze { .. } | Outcome::Cancel => err.to_string(),
    }
}

/// Writes a non-completion outcome, retrying on deadlocks and connection errors.
async fn record(s: &Arc<Shared>, owned: &Owned, outcome: &Outcome, message: &str) {
    let m = &s.metrics;
    let written = retry_write(s, "record outcome", || {
        let pool = s.pool.clone();
        async move {
            let mut conn = pool.acquire().await?;
            store::job_finish_attempt(&mut conn, owned, outcome, message).await
        }
    })
    .await;
    match written {
        Some(true) => match outcome {
            Outcome::Retry { .. } => m.add(&m.counters.retries, 1),
            Outcome::Snooze { .. } => m.add(&m.counters.snoozes, 1),
            Outcome::Fail => m.add(&m.counters.failures, 1),
            Outcome::Cancel => m.add(&m.counters.cancels, 1),
        },
        Some(false) => {
            m.add(&m.counters.lost, 1);
            tracing::warn!(
                id = owned.id.0,
                "lost ownership before the outcome was written: another worker owns the job now"
            );
        }
        None => {}
    }
}

/// Runs a write until it succeeds; deadlocks and connection errors are retried with jittered
/// backoff. Gives up (returns `None`) only when the worker's services are stopping.
pub(crate) async fn retry_write<T, F, Fut>(s: &Shared, what: &str, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let m = &s.metrics;
    let mut pause = Duration::from_millis(5);
    loop {
        match f().await {
            Ok(v) => return Some(v),
            Err(e) => {
                match store::db_error_number(&e) {
                    Some(1213) => m.add(&m.counters.deadlocks, 1),
                    Some(1205) => m.add(&m.counters.lock_waits, 1),
                    _ => m.add(&m.counters.db_errors, 1),
                }
                if !store::is_transient(&e) {
                    tracing::error!(error = %error_chain(&e), "{what} failed; retrying");
                } else {
                    tracing::warn!(error = %error_chain(&e), "{what} failed; retrying");
                }
                if s.stop_services.is_cancelled() {
                    tracing::error!("{what} abandoned at shutdown; the lease will return the job");
                    return None;
                }
                let wait = pause.mul_f64(0.5 + unit_random());
                if !crate::worker::sleep_or_cancel(wait, &s.stop_services).await {
                    // One last try after the stop signal.
                    return f().await.ok();
                }
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// An error and its sources, joined by `: `.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}

/// Cancels every job still running (with `reason`) and hands it back to `pending` without
/// consuming the attempt. Jobs whose handler already returned are left to their outcome write.
pub(crate) async fn release_all(s: &Arc<Shared>, reason: CancelReason) -> usize {
    let taken: Vec<(JobId, InFlight)> = {
        let mut map = s.in_flight();
        let ids: Vec<JobId> = map
            .iter()
            .filter(|(_, f)| !f.finished)
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| map.remove(&id).map(|f| (id, f)))
            .collect()
    };
    if taken.is_empty() {
        return 0;
    }
    let owned: Vec<Owned> = taken
        .iter()
        .map(|(id, f)| {
            f.ctx.cancel(reason);
            if let Some(a) = &f.abort {
                a.abort();
            }
            Owned {
                id: *id,
                token: f.token.to_string(),
            }
        })
        .collect();
    let report = retry_write(s, "release jobs", || {
        let pool = s.pool.clone();
        let owned = &owned;
        async move {
            let mut conn = pool.acquire().await?;
            store::job_release(&mut conn, owned).await
        }
    })
    .await
    .unwrap_or_default();
    let m = &s.metrics;
    m.add(&m.counters.released, report.done);
    m.add(&m.counters.lost, report.lost.len() as u64);
    s.slot_freed.notify_waiters();
    usize::try_from(report.done).unwrap_or(usize::MAX)
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
            decide(ErrorClass::Retry, 1, 3, &p, true, 0.5),
            Outcome::Retry {
                delay: UNKNOWN_KIND_DELAY
            }
        );
    }
}
