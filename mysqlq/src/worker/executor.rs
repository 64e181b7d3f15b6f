//! Runs one claimed job: decode, run the handler in its own task (outside any transaction,
//! holding no connection), enforce the timeout, catch panics, stop it when its lease is lost or
//! cannot be renewed, and record the outcome.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use crate::context::{ContextParts, Heartbeat};
use crate::hooks::JobRun;
use crate::store::{ClaimedJob, Outcome};
use crate::worker::buffer::{Admitted, Hold};
use crate::worker::outcome::{Attempt, Recorded, UNKNOWN_KIND_DELAY, decide, describe, record};
use crate::worker::release::release_one;
use crate::worker::{InFlight, Key, Phase, Shared, WorkerEvent, unit_random};
use crate::{CancelReason, Error, JobContext, JobError, JobId};

/// How long an aborted handler gets to stop. A handler that blocks its thread cannot be stopped
/// by `abort()` until it yields: after this long the worker records the attempt, frees the slot
/// and leaves the task behind (it ends at its next `.await`).
pub(crate) const ABORT_GRACE: Duration = Duration::from_secs(1);

/// Extends one job's lease on demand ([`JobContext::heartbeat`]).
struct LeaseExtender {
    shared: Weak<Shared>,
    key: Key,
}

impl Heartbeat for LeaseExtender {
    fn beat(&self, _id: JobId, _token: &str) -> BoxFuture<'static, Result<bool, Error>> {
        let shared = self.shared.clone();
        let key = self.key.clone();
        Box::pin(async move {
            let Some(s) = shared.upgrade() else {
                return Ok(false);
            };
            // On the services' runtime, where the worker's pool lives.
            let rt = s.services.clone();
            let beat = async move { crate::worker::lease::beat_one(&s, &key).await };
            crate::worker::threads::on(&rt, beat)
                .await
                .unwrap_or(Ok(false))
        })
    }
}

/// How a claimed job gets its running slot.
pub(crate) enum Slot {
    /// It has it already (the Redis transport takes slots before it reads; `mysqlq::testing`
    /// runs one job at a time).
    Running(OwnedSemaphorePermit),
    /// Claimed ahead by the claim loop: it waits in the prefetch buffer ([`crate::worker::buffer`])
    /// for a slot of its queue and of the worker, at most `prefetch_wait` after the claim.
    Buffered(Hold),
    /// Admitted by its rate key's limit: it has its running slots already (`None`: none was
    /// free, so it is handed back), and its handler must first be polled by `deadline`.
    Rated {
        hold: Hold,
        admitted: Option<Admitted>,
        deadline: tokio::time::Instant,
    },
}

/// The error an attempt ends with when its handler would have started later than its rate
/// decision allows: the handler is not run and the job is handed back with its attempt.
const LATE_START: &str = "started too late after its rate-limit admission; handed back";

/// Starts the supervisor task of one claimed job. `lease_from` is when the claim that set the
/// lease was sent.
pub(crate) fn spawn(
    s: &Arc<Shared>,
    job: ClaimedJob,
    queue: &str,
    token: Arc<str>,
    slot: Slot,
    lease_from: tokio::time::Instant,
) {
    let (key, ctx) = hold(s, &job, queue, token, lease_from);
    tokio::spawn(supervise(
        s.clone(),
        job,
        queue.to_owned(),
        key,
        ctx,
        (slot, lease_from),
    ));
}

/// Runs one claimed job to its end in the caller's task, holding `slot` (`mysqlq::testing`,
/// through [`super::inline`]): the supervisor of [`spawn`], awaited instead of spawned. A
/// completion is queued in the completer when this returns; every other outcome is written.
pub(crate) async fn run_here(
    s: &Arc<Shared>,
    job: ClaimedJob,
    queue: &str,
    token: Arc<str>,
    slot: OwnedSemaphorePermit,
    lease_from: tokio::time::Instant,
) {
    let (key, ctx) = hold(s, &job, queue, token, lease_from);
    let slot = (Slot::Running(slot), lease_from);
    supervise(s.clone(), job, queue.to_owned(), key, ctx, slot).await;
}

/// The context of one claimed job, and its entry among the jobs this worker holds.
fn hold(
    s: &Arc<Shared>,
    job: &ClaimedJob,
    queue: &str,
    token: Arc<str>,
    lease_from: tokio::time::Instant,
) -> (Key, JobContext) {
    let key = Key { id: job.id, token };
    let ctx = JobContext::from_parts(ContextParts {
        id: job.id,
        kind: job.kind.clone().unwrap_or_default(),
        queue: queue.to_owned(),
        attempt: job.attempt,
        max_attempts: job.max_attempts,
        claim_token: key.token.to_string(),
        pool: Some(s.pool.clone()),
        extensions: s.extensions.clone(),
        heartbeat: Some(Arc::new(LeaseExtender {
            shared: Arc::downgrade(s),
            key: key.clone(),
        })),
        meta: parse_meta(job.id, job.meta.as_deref()),
        workflow: job.workflow,
    });
    s.in_flight().insert(
        key.clone(),
        InFlight {
            ctx: ctx.clone(),
            abort: None,
            phase: Phase::Claimed,
            lease_from,
            run: None,
        },
    );
    s.emit(WorkerEvent::Claimed {
        id: job.id,
        attempt: job.attempt,
    });
    (key, ctx)
}

/// What a job holds while it runs: its running slot(s) and, for a buffered job, its room in the
/// lanes. Dropped when the handler returns.
struct Running {
    _slot: Option<OwnedSemaphorePermit>,
    _admitted: Option<Admitted>,
    _hold: Option<Hold>,
    /// A rate-admitted job's handler must first be polled by then.
    deadline: Option<tokio::time::Instant>,
}

/// Waits for the job's running slot; `Err(true)` when it waited in the buffer past
/// `prefetch_wait` (to be handed back), `Err(false)` when it was stopped first.
async fn take_slot(
    s: &Arc<Shared>,
    ctx: &JobContext,
    slot: Slot,
    claimed: tokio::time::Instant,
) -> Result<Running, bool> {
    match slot {
        Slot::Running(p) => Ok(Running {
            _slot: Some(p),
            _admitted: None,
            _hold: None,
            deadline: None,
        }),
        Slot::Rated {
            hold,
            admitted: Some(admitted),
            deadline,
        } => {
            hold.count_start(&s.config);
            Ok(Running {
                _slot: None,
                _admitted: Some(admitted),
                _hold: Some(hold),
                deadline: Some(deadline),
            })
        }
        Slot::Rated { admitted: None, .. } => Err(true),
        Slot::Buffered(hold) => {
            let until = claimed + s.config.buffer_wait();
            tokio::select! {
                a = hold.admit(&s.slots, until, &s.config) => match a {
                    Some(a) => Ok(Running { _slot: None, _admitted: Some(a), _hold: Some(hold), deadline: None }),
                    None => Err(true),
                },
                () = ctx.cancelled() => Err(false),
                () = s.stop_fetching.cancelled() => Err(false),
            }
        }
    }
}

/// What became of one attempt.
enum Ran {
    Ok,
    Err(JobError),
    /// The handler was stopped from outside (lease lost or unconfirmed, shutdown).
    Stopped(CancelReason),
}

async fn supervise(
    s: Arc<Shared>,
    job: ClaimedJob,
    queue: String,
    key: Key,
    ctx: JobContext,
    (slot, claimed): (Slot, tokio::time::Instant),
) {
    let permit = match take_slot(&s, &ctx, slot, claimed).await {
        Ok(running) => running,
        Err(expired) => {
            s.slot_freed.notify_waiters();
            if expired {
                // Waited too long in the buffer: hand it back (the attempt is given back too)
                // so that another worker can run it.
                s.emit(WorkerEvent::Unbuffered { id: key.id });
                release_one(&s, &key).await;
            } else if ctx.cancel_reason() == Some(CancelReason::LeaseUnconfirmed) {
                release_one(&s, &key).await;
            }
            return;
        }
    };
    let start = {
        let mut map = s.in_flight();
        match map.get_mut(&key) {
            Some(f) if !s.stopping.load(Ordering::SeqCst) && !ctx.is_cancelled() => {
                f.phase = Phase::Running;
                true
            }
            _ => false,
        }
    };
    if !start {
        // Claimed but not started: shutdown releases it (the entry stays `Claimed`), or its
        // lease could not be confirmed (adopted too late): hand it back now.
        drop(permit);
        s.slot_freed.notify_waiters();
        if ctx.cancel_reason() == Some(CancelReason::LeaseUnconfirmed) {
            release_one(&s, &key).await;
        }
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
    // Metrics and statistics name registered kinds only: rows of any number of kinds this binary
    // does not know (plain-SQL producers, a bad deploy) share one label, so they cannot grow
    // the worker's memory, the Prometheus series or `mysqlq_kind_minute` without bound.
    let metric_kind = registration.map_or(crate::metrics::UNREGISTERED_KIND, |r| r.kind());
    let policy = registration.map(|r| r.retry_policy()).unwrap_or_default();
    let span = tracing::info_span!(
        "job",
        kind = %kind_label,
        id = job.id.0,
        queue = %queue,
        attempt = job.attempt,
        traceparent = tracing::field::Empty
    );
    let meta = ctx.meta();
    if let Some(tp) = crate::hooks::traceparent_of(&meta) {
        span.record("traceparent", tp);
    }
    // Only built when there are hooks to hand it to: the hot path stays as it was.
    let run = (!s.hooks.is_empty()).then(|| Arc::new(JobRun::new(ctx.clone(), span.clone(), meta)));
    if run.is_some()
        && let Some(f) = s.in_flight().get_mut(&key)
    {
        f.run = run.clone();
    }
    let late = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    s.metrics.job_started();
    // Pickup latency: ready → started, including any wait in the prefetch buffer.
    let waited = job.waited + claimed.elapsed();
    s.metrics.job_picked_up(&queue, metric_kind, waited);
    s.emit(WorkerEvent::Started { id: job.id });

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
                let handler = start_guard(
                    Box::pin(fut.instrument(span.clone())),
                    permit.deadline,
                    &late,
                );
                let fut = match &run {
                    None => handler,
                    Some(run) => s.hooks.wrap_run(run.clone(), catch_panic(&s, handler)),
                };
                run_handler(&s, &key, &ctx, fut, timeout).await
            }
        },
    };
    let took = started.elapsed();
    let failed = !matches!(ran, Ran::Ok);
    s.metrics.job_finished(&queue, metric_kind, took, failed);
    s.emit(WorkerEvent::Returned { id: job.id });
    drop(permit);
    s.slot_freed.notify_waiters();
    let late_by = late.load(Ordering::SeqCst);
    if late_by > 0 {
        // Its start would not have been inside its rate decision's window: not run, handed
        // back with its attempt, to be admitted again.
        s.metrics.add(&s.metrics.counters.rate_late_starts, 1);
        let needed = job.rate_slack.unwrap_or_default() + Duration::from_micros(late_by - 1);
        s.rate.late_start(needed);
        s.emit(WorkerEvent::RateLateStart { id: job.id });
        release_one(&s, &key).await;
        return;
    }

    let err = match ran {
        Ran::Stopped(CancelReason::LeaseUnconfirmed) => {
            release_one(&s, &key).await;
            return;
        }
        // An operator cancelled the row (the lease service saw it and removed the entry): the
        // outcome is the operator's, already written; the hooks hear of it here.
        Ran::Stopped(CancelReason::Cancelled) => {
            cancelled_meanwhile(&s, &ctx, run.as_ref()).await;
            return;
        }
        // Lost: the lease service removed the entry; shutdown: its release writes the outcome.
        Ran::Stopped(_) => return,
        Ran::Ok => {
            if mark_finishing(&s, &key) {
                if job.workflow.is_some() {
                    s.completer.complete_step(key);
                } else {
                    s.completer.complete(key);
                }
            } else {
                cancelled_meanwhile(&s, &ctx, run.as_ref()).await;
            }
            return;
        }
        Ran::Err(err) => err,
    };
    if !mark_finishing(&s, &key) {
        cancelled_meanwhile(&s, &ctx, run.as_ref()).await;
        return;
    }
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
    log_outcome(&span, &err, &outcome, (job.attempt, job.max_attempts));
    let attempt = Attempt::new(job.attempt, took, &queue, metric_kind);
    let written = record(&s, &key, &outcome, &message, attempt).await;
    if job.workflow.is_some()
        && matches!(
            written,
            Some(Recorded::Written(Outcome::Fail | Outcome::Cancel) | Recorded::ByOperator)
        )
    {
        // A step ended without completing: its dependents' upstream rules apply now.
        s.workflow_wake.notify_one();
    }
    // Still ours: had the lease service taken it out meanwhile, it would have told the hooks.
    let ours = s.forget(&key);
    match (written, run) {
        (Some(Recorded::Written(Outcome::Fail)), Some(run)) => {
            let hooks = s.hooks.clone();
            s.hook(async move { hooks.dead(&run, &message).await })
                .await;
        }
        (Some(Recorded::Written(Outcome::Cancel)), Some(run)) => {
            let hooks = s.hooks.clone();
            s.hook(async move { hooks.cancelled(&run, &message).await })
                .await;
        }
        (Some(Recorded::ByOperator), Some(run)) if ours.is_some() => {
            s.operator_cancelled(Some(run));
        }
        _ => {}
    }
}

/// The handler of a rate-admitted job, checked at its first poll: later than `deadline`, it
/// is not polled at all and `late` is set to how late it was, in µs plus 1 (see [`LATE_START`]).
fn start_guard(
    handler: BoxFuture<'static, Result<(), JobError>>,
    deadline: Option<tokio::time::Instant>,
    late: &Arc<std::sync::atomic::AtomicU64>,
) -> BoxFuture<'static, Result<(), JobError>> {
    let Some(deadline) = deadline else {
        return handler;
    };
    let late = late.clone();
    Box::pin(async move {
        if tokio::time::Instant::now() > deadline {
            let by = tokio::time::Instant::now().saturating_duration_since(deadline);
            let us = u64::try_from(by.as_micros()).unwrap_or(u64::MAX - 1);
            late.store(us + 1, Ordering::SeqCst);
            return Err(JobError::retry(LATE_START));
        }
        handler.await
    })
}

/// Logs a failed attempt inside the job's span (id, kind, queue, attempt), each fact a field: the
/// handler's error, the outcome, the attempt and the delay before the next one.
fn log_outcome(
    span: &tracing::Span,
    err: &JobError,
    outcome: &Outcome,
    (attempt, max): (u32, u32),
) {
    let _in = span.enter();
    let (name, delay) = match outcome {
        Outcome::Retry { delay } => ("retry", Some(delay)),
        Outcome::Snooze { delay } => ("snooze", Some(delay)),
        Outcome::RateLimited { delay } => ("rate_limited", Some(delay)),
        Outcome::Fail => ("fail", None),
        Outcome::Cancel => ("cancel", None),
    };
    let retry_in_ms = delay.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let permanent = matches!(err.class(), crate::ErrorClass::Fail);
    if let Outcome::Fail = outcome {
        tracing::warn!(error = %err, outcome = name, attempt, max_attempts = max, permanent, "job failed");
    } else {
        tracing::info!(error = %err, outcome = name, attempt, max_attempts = max, retry_in_ms, "job attempt failed");
    }
}

/// The handler returned, but its entry was gone: when an operator's cancel took it out (the
/// context says so), that cancel is this run's outcome, and the hooks hear of it here.
async fn cancelled_meanwhile(s: &Shared, ctx: &JobContext, run: Option<&Arc<JobRun>>) {
    if let Some(run) = run
        && ctx.cancel_reason() == Some(CancelReason::Cancelled)
    {
        let (hooks, run) = (s.hooks.clone(), run.clone());
        s.hook(async move {
            hooks
                .cancelled(&run, &CancelReason::Cancelled.to_string())
                .await;
        })
        .await;
    }
}

/// The claimed row's meta as an object; anything else (a plain-SQL producer's mistake) is
/// logged and read as empty.
fn parse_meta(id: JobId, meta: Option<&str>) -> crate::Meta {
    match meta.map(serde_json::from_str::<serde_json::Value>) {
        None => crate::Meta::new(),
        Some(Ok(serde_json::Value::Object(m))) => m,
        Some(Ok(serde_json::Value::Null)) => crate::Meta::new(),
        Some(other) => {
            tracing::warn!(id = id.0, meta = ?other, "job meta is not a JSON object; ignored");
            crate::Meta::new()
        }
    }
}

/// The handler with its panic turned into an error result, so `around_run` hooks see it.
fn catch_panic(
    s: &Arc<Shared>,
    handler: BoxFuture<'static, Result<(), JobError>>,
) -> BoxFuture<'static, Result<(), JobError>> {
    use futures_util::FutureExt as _;
    let metrics = s.metrics.clone();
    Box::pin(async move {
        match std::panic::AssertUnwindSafe(handler).catch_unwind().await {
            Ok(r) => r,
            Err(payload) => {
                metrics.add(&metrics.counters.panics, 1);
                Err(JobError::retry(format!(
                    "handler panicked: {}",
                    panic_message(payload.as_ref())
                )))
            }
        }
    })
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

/// Moves this claim's entry to `Finishing`; `false` when it is gone (lease lost, released).
fn mark_finishing(s: &Shared, key: &Key) -> bool {
    match s.in_flight().get_mut(key) {
        Some(f) => {
            f.phase = Phase::Finishing;
            true
        }
        None => false,
    }
}

/// Runs the handler in a task of its own on the application's runtime (so a panic is caught, it
/// can be aborted, and a handler that blocks its thread cannot hold up this supervisor), with
/// the timeout, until it returns or its context is cancelled from outside.
async fn run_handler(
    s: &Arc<Shared>,
    key: &Key,
    ctx: &JobContext,
    fut: impl Future<Output = Result<(), JobError>> + Send + 'static,
    timeout: Duration,
) -> Ran {
    let mut handle = s.app.spawn(fut);
    if let Some(f) = s.in_flight().get_mut(key) {
        f.abort = Some(handle.abort_handle());
    } else {
        // Lost or released before it started.
        handle.abort();
        return Ran::Stopped(CancelReason::LeaseLost);
    }
    let joined = tokio::select! {
        r = &mut handle => r,
        () = tokio::time::sleep(timeout) => {
            ctx.cancel(CancelReason::Timeout);
            let stopped = stop(handle).await;
            s.metrics.add(&s.metrics.counters.timeouts, 1);
            let mut msg = format!("timed out after {}", crate::backoff::format_duration(timeout));
            if !stopped {
                msg.push_str(" (the handler blocks its thread and did not stop when aborted)");
            }
            return Ran::Err(JobError::retry(msg));
        }
        () = ctx.cancelled() => {
            let reason = ctx.cancel_reason().unwrap_or(CancelReason::LeaseLost);
            if !stop(handle).await {
                tracing::error!(id = key.id.0, %reason, "handler blocks its thread and did not stop when aborted; left behind");
            }
            return Ran::Stopped(reason);
        }
    };
    match joined {
        Ok(Ok(())) => Ran::Ok,
        Ok(Err(e)) => Ran::Err(e),
        Err(e) if e.is_panic() => {
            s.metrics.add(&s.metrics.counters.panics, 1);
            let msg = panic_message(e.into_panic().as_ref());
            Ran::Err(JobError::retry(format!("handler panicked: {msg}")))
        }
        Err(_) => Ran::Stopped(ctx.cancel_reason().unwrap_or(CancelReason::Shutdown)),
    }
}

/// Aborts a handler and waits up to [`ABORT_GRACE`] for it to end; `false` if it did not.
async fn stop(handle: JoinHandle<Result<(), JobError>>) -> bool {
    handle.abort();
    tokio::time::timeout(ABORT_GRACE, handle).await.is_ok()
}
