//! Hooks: code of yours that runs around enqueueing and around each job's execution — Sidekiq's
//! middleware, River's hooks and middleware, Oban's telemetry events.
//!
//! One object-safe trait, [`Hook`], whose methods all have do-nothing defaults:
//!
//! | method | when | typical use |
//! |---|---|---|
//! | [`on_enqueue`](Hook::on_enqueue) | before the row is written, inside the caller's transaction | stamp a request id or the `traceparent` into the job's meta; refuse a job |
//! | [`around_run`](Hook::around_run) | around each attempt's handler | a tracing context, timing, error reporting (Sentry) |
//! | [`on_dead`](Hook::on_dead) | after a job was recorded `failed` for good | alerting |
//! | [`on_cancelled`](Hook::on_cancelled) | after a job was recorded `cancelled` by its handler, or an operator's cancel stopped it here | clean-up, alerting |
//!
//! Enqueue hooks are process-wide ([`set_global_hooks`]): enqueueing goes through no client
//! object. A worker runs the global hooks first, then its own ([`WorkerBuilder::hooks`]). Hooks
//! run in registration order; the first `around_run` is the outermost.
//!
//! ```
//! use mysqlq::hooks::{BoxFuture, Hook, Hooks, JobRun, Next, set_global_hooks};
//!
//! struct RequestIdAndTiming;
//!
//! impl Hook for RequestIdAndTiming {
//!     fn on_enqueue<'a>(
//!         &'a self,
//!         job: &'a mut mysqlq::NewJob,
//!     ) -> BoxFuture<'a, Result<(), mysqlq::Error>> {
//!         Box::pin(async move { job.set_meta("request_id", serde_json::json!("req-42")) })
//!     }
//!
//!     fn around_run<'a>(&'a self, job: &'a JobRun, next: Next<'a>) -> Next<'a> {
//!         Box::pin(async move {
//!             let started = std::time::Instant::now();
//!             let result = next.await;
//!             let secs = started.elapsed().as_secs_f64();
//!             tracing::info!(kind = job.kind(), secs, ok = result.is_ok(), "attempt");
//!             result
//!         })
//!     }
//! }
//!
//! set_global_hooks(Hooks::new().with(RequestIdAndTiming));
//! ```
//!
//! # Propagating a trace from the request to the job
//! An enqueue hook stores the enqueuing span's W3C `traceparent` in the job's meta
//! ([`NewJob::set_traceparent`]); on the worker, [`JobRun::traceparent`] returns it and the job's
//! span records it as its `traceparent` field. The cargo feature `otel` has a ready-made hook,
//! `mysqlq::otel::TraceHook`, with OpenTelemetry spans for both sides (`docs/hooks.md`). With a
//! tracing setup of your own, the glue is a propagator on each side:
//!
//! ```ignore
//! use opentelemetry::propagation::TextMapPropagator;
//! use opentelemetry_sdk::propagation::TraceContextPropagator;
//! use tracing_opentelemetry::OpenTelemetrySpanExt;
//!
//! struct Otel;
//! impl mysqlq::hooks::Hook for Otel {
//!     fn on_enqueue<'a>(&'a self, job: &'a mut mysqlq::NewJob) -> BoxFuture<'a, Result<(), mysqlq::Error>> {
//!         let mut carrier = std::collections::HashMap::new();
//!         TraceContextPropagator::new().inject_context(&tracing::Span::current().context(), &mut carrier);
//!         let stamped = carrier.get("traceparent").map(|tp| job.set_traceparent(tp)).transpose();
//!         Box::pin(async move { stamped.map(drop) })
//!     }
//!     fn around_run<'a>(&'a self, job: &'a mysqlq::hooks::JobRun, next: Next<'a>) -> Next<'a> {
//!         if let Some(tp) = job.traceparent() {
//!             let carrier = std::collections::HashMap::from([("traceparent".to_owned(), tp.to_owned())]);
//!             job.span().set_parent(TraceContextPropagator::new().extract(&carrier));
//!         }
//!         next
//!     }
//! }
//! ```
//!
//! [`WorkerBuilder::hooks`]: crate::WorkerBuilder::hooks

use std::fmt;
use std::sync::{Arc, RwLock};

pub use futures_util::future::BoxFuture;

use crate::{Error, JobContext, JobError, JobId, NewJob, Traceparent};

/// What an [`around_run`](Hook::around_run) hook wraps: the rest of the chain, ending with the
/// handler. Await it to run the job; return its result (or another).
pub type Next<'a> = BoxFuture<'a, Result<(), JobError>>;

/// Code that runs around enqueueing and executing jobs. Every method has a default that does
/// nothing, so a hook implements only what it needs. Hooks must not panic: a panicking
/// `around_run` is recorded as a panic of the attempt; other methods' panics are not caught.
pub trait Hook: Send + Sync + 'static {
    /// Before `job` is written (inside the caller's transaction, when there is one): read its
    /// kind and queue, change its meta ([`NewJob::set_meta`], [`NewJob::set_traceparent`]). An
    /// error refuses the enqueue and is returned to the caller. Not run for periodic jobs'
    /// ticks, which the scheduler writes itself.
    fn on_enqueue<'a>(&'a self, job: &'a mut NewJob) -> BoxFuture<'a, Result<(), Error>> {
        let _ = job;
        Box::pin(async { Ok(()) })
    }

    /// Around each attempt: return `next` (or a future awaiting it) to run the job. Runs in the
    /// handler's task, before the job's span is entered, so it can still set the span's parent
    /// ([`JobRun::span`]); instrument your future with that span to log inside it. A handler's
    /// panic arrives here as an `Err` (`handler panicked: …`). Timeouts, lease loss and
    /// shutdown drop the future instead: they are the worker's decision, not the handler's
    /// result.
    fn around_run<'a>(&'a self, job: &'a JobRun, next: Next<'a>) -> Next<'a> {
        let _ = job;
        next
    }

    /// After the job was recorded `failed` for good (no attempts left, or a permanent error),
    /// with the recorded error text.
    fn on_dead<'a>(&'a self, job: &'a JobRun, error: &'a str) -> BoxFuture<'a, ()> {
        let _ = (job, error);
        Box::pin(async {})
    }

    /// After the job's attempt ended `cancelled`, once per attempt: its handler returned a cancel
    /// error (`reason` is that error's text), or an operator cancelled the job while it ran
    /// (`reason` is [`crate::CancelReason::Cancelled`]'s text) — also when the cancel raced
    /// the handler's own return, whichever the worker learnt first.
    fn on_cancelled<'a>(&'a self, job: &'a JobRun, reason: &'a str) -> BoxFuture<'a, ()> {
        let _ = (job, reason);
        Box::pin(async {})
    }
}

/// An ordered list of hooks: cheap to clone.
#[derive(Clone, Default)]
pub struct Hooks {
    list: Arc<Vec<Arc<dyn Hook>>>,
}

impl Hooks {
    /// No hooks.
    pub fn new() -> Self {
        Self::default()
    }

    /// These hooks, then `hook`.
    #[must_use]
    pub fn with(self, hook: impl Hook) -> Self {
        self.with_arc(Arc::new(hook))
    }

    /// These hooks, then `hook` (shared with other lists).
    #[must_use]
    pub fn with_arc(self, hook: Arc<dyn Hook>) -> Self {
        let mut list = Vec::clone(&self.list);
        list.push(hook);
        Self {
            list: Arc::new(list),
        }
    }

    /// These hooks, then `other`'s.
    #[must_use]
    pub fn then(self, other: &Self) -> Self {
        if other.is_empty() {
            return self;
        }
        let mut list = Vec::clone(&self.list);
        list.extend(other.list.iter().cloned());
        Self {
            list: Arc::new(list),
        }
    }

    /// `true` when there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Runs every `on_enqueue`, in order, stopping at the first error.
    pub(crate) async fn enqueue(&self, job: &mut NewJob) -> Result<(), Error> {
        for h in self.list.iter() {
            h.on_enqueue(job).await?;
        }
        Ok(())
    }

    /// The handler wrapped in every `around_run`, the first hook outermost. Unchanged when
    /// there are no hooks.
    pub(crate) fn wrap_run(
        &self,
        run: Arc<JobRun>,
        handler: BoxFuture<'static, Result<(), JobError>>,
    ) -> BoxFuture<'static, Result<(), JobError>> {
        if self.is_empty() {
            return handler;
        }
        let list = self.list.clone();
        Box::pin(async move {
            let mut next: Next<'_> = handler;
            for h in list.iter().rev() {
                next = h.around_run(&run, next);
            }
            next.await
        })
    }

    /// Runs every `on_dead`.
    pub(crate) async fn dead(&self, run: &JobRun, error: &str) {
        for h in self.list.iter() {
            h.on_dead(run, error).await;
        }
    }

    /// Runs every `on_cancelled`.
    pub(crate) async fn cancelled(&self, run: &JobRun, reason: &str) {
        for h in self.list.iter() {
            h.on_cancelled(run, reason).await;
        }
    }
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("len", &self.list.len())
            .finish()
    }
}

static GLOBAL: RwLock<Option<Hooks>> = RwLock::new(None);

/// Installs the process-wide hooks: every enqueue of this process runs their `on_enqueue`, and
/// every worker started afterwards runs them before its own. Replaces earlier global hooks.
pub fn set_global_hooks(hooks: Hooks) {
    *GLOBAL
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(hooks);
}

/// The process-wide hooks (empty unless [`set_global_hooks`] was called).
pub fn global_hooks() -> Hooks {
    GLOBAL
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
        .unwrap_or_default()
}

/// One attempt of a job, as hooks on the worker see it.
pub struct JobRun {
    ctx: JobContext,
    span: tracing::Span,
    meta: serde_json::Map<String, serde_json::Value>,
}

impl JobRun {
    pub(crate) fn new(
        ctx: JobContext,
        span: tracing::Span,
        meta: serde_json::Map<String, serde_json::Value>,
    ) -> Self {
        Self { ctx, span, meta }
    }

    /// The job's context (the handler's own): id, kind, queue, attempt, cancellation.
    pub fn ctx(&self) -> &JobContext {
        &self.ctx
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.ctx.id()
    }

    /// The job's kind name.
    pub fn kind(&self) -> &str {
        self.ctx.kind()
    }

    /// The job's queue.
    pub fn queue(&self) -> &str {
        self.ctx.queue()
    }

    /// This attempt's number, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.ctx.attempt()
    }

    /// The span the handler runs in (`job`, with `kind`, `id`, `queue`, `attempt` and
    /// `traceparent` fields). Not entered while `around_run` hooks run.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The job's meta as it was when this attempt was claimed.
    pub fn meta(&self) -> &serde_json::Map<String, serde_json::Value> {
        &self.meta
    }

    /// The W3C `traceparent` stored at enqueue, when there is a valid one.
    pub fn traceparent(&self) -> Option<&str> {
        traceparent_of(&self.meta)
    }
}

/// The valid W3C `traceparent` of a job's meta, if it has one.
pub(crate) fn traceparent_of(meta: &crate::Meta) -> Option<&str> {
    let tp = meta.get(crate::traceparent::TRACEPARENT_KEY)?.as_str()?;
    Traceparent::parse(tp).is_ok().then_some(tp)
}

impl fmt::Debug for JobRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobRun")
            .field("id", &self.id())
            .field("kind", &self.kind())
            .field("attempt", &self.attempt())
            .finish_non_exhaustive()
    }
}
