//! [`TestContext`]: the [`JobContext`] of a unit test, built without a database or a worker,
//! and the [`CancelHandle`] that stops it as a worker would.

use std::sync::Arc;

use sqlx::MySqlPool;

use crate::context::{ContextParts, Extensions};
use crate::{CancelReason, Job, JobContext, JobId, Meta};

/// Builds the [`JobContext`] a handler gets, for a unit test: the job's kind and queue, the
/// application state a worker would hand it ([`WorkerBuilder::state`], `Cli::new().state(…)`),
/// the attempt it is on, its meta, and optionally a pool. Run the handler with it through
/// [`run_inline_with`](super::run_inline_with).
///
/// Defaults: job id 0 (no real job has it), attempt 1 of the job's own
/// [`max_attempts`](crate::RetryPolicy::max_attempts), no state, empty meta, no pool. Without a
/// worker behind it, [`JobContext::heartbeat`] answers `Ok(true)` and
/// [`JobContext::set_meta`] changes only the in-memory meta (even with a pool: the context owns
/// no row).
///
/// ```
/// use mysqlq::testing::{TestContext, run_inline_with};
/// use mysqlq::{JobContext, JobError};
///
/// /// The application's mail client, given to the worker with `.state(…)`.
/// struct Mailer {
///     sent: std::sync::Mutex<Vec<String>>,
/// }
///
/// #[mysqlq::job(queue = "emails", retries = 2)]
/// async fn send_welcome(ctx: JobContext, to: String) -> Result<(), JobError> {
///     let mailer = ctx.state::<Mailer>().ok_or_else(|| JobError::fail("no Mailer"))?;
///     let note = if ctx.is_last_attempt() { " (last try)" } else { "" };
///     mailer.sent.lock().unwrap().push(format!("{to}{note}"));
///     Ok(())
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let ctx = TestContext::new::<SendWelcome>()
///     .state(Mailer { sent: Default::default() })
///     .attempt(3) // of 3: `retries = 2`
///     .build();
/// run_inline_with(SendWelcome { to: "ada@example.com".into() }, ctx.clone())
///     .await
///     .unwrap();
/// let mailer = ctx.state::<Mailer>().unwrap();
/// assert_eq!(*mailer.sent.lock().unwrap(), ["ada@example.com (last try)"]);
/// # }
/// ```
///
/// It is built for a job type, whose kind, queue and attempts it takes: a type that is not a
/// [`Job`] does not compile.
///
/// ```compile_fail
/// struct NotAJob;
/// let _ = mysqlq::testing::TestContext::new::<NotAJob>(); // error: `Job` is not implemented
/// ```
///
/// [`WorkerBuilder::state`]: crate::WorkerBuilder::state
#[derive(Debug, Clone)]
#[must_use = "a TestContext does nothing until `build`"]
pub struct TestContext {
    id: JobId,
    kind: String,
    queue: String,
    attempt: u32,
    max_attempts: u32,
    pool: Option<MySqlPool>,
    extensions: Extensions,
    meta: Meta,
}

impl TestContext {
    /// A context for job `J`: its kind and default queue, attempt 1 of its
    /// `retry_policy().max_attempts`.
    pub fn new<J: Job>() -> Self {
        Self {
            id: JobId(0),
            kind: J::KIND.to_owned(),
            queue: J::QUEUE.to_owned(),
            attempt: 1,
            max_attempts: J::retry_policy().max_attempts,
            pool: None,
            extensions: Extensions::default(),
            meta: Meta::new(),
        }
    }

    /// A value the handler reads with [`JobContext::state`], as a worker's `state(…)` gives it.
    /// Call it once per type; a second value of the same type replaces the first.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// This attempt's number (default 1). `attempt(n).max_attempts(n)` is the last attempt.
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// Attempts allowed in all (default: the job's own).
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// The job's meta at the start of the attempt, as set at enqueue time (or by an earlier
    /// attempt's [`JobContext::set_meta`]).
    ///
    /// # Panics
    /// When `meta` is not a JSON object (meta always is one).
    pub fn meta(mut self, meta: serde_json::Value) -> Self {
        match meta {
            serde_json::Value::Object(m) => self.meta = m,
            other => panic!("TestContext::meta takes a JSON object, got `{other}`"),
        }
        self
    }

    /// The pool [`JobContext::pool`] returns, for handlers that query the database.
    pub fn pool(mut self, pool: MySqlPool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The job id (default 0), which [`JobContext::idempotency_key`] derives from.
    pub fn id(mut self, id: JobId) -> Self {
        self.id = id;
        self
    }

    /// The queue (default: the job's `QUEUE`).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// The context.
    pub fn build(self) -> JobContext {
        JobContext::from_parts(ContextParts {
            id: self.id,
            kind: self.kind,
            queue: self.queue,
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            claim_token: String::new(),
            pool: self.pool,
            extensions: Arc::new(self.extensions),
            heartbeat: None,
            meta: self.meta,
            workflow: None,
        })
    }

    /// The context, and a handle that cancels it the way a worker does (a timeout, a shutdown,
    /// an operator's cancel): see [`CancelHandle`].
    pub fn build_with_cancel(self) -> (JobContext, CancelHandle) {
        let ctx = self.build();
        (ctx.clone(), CancelHandle { ctx })
    }
}

/// Cancels the context it came with ([`TestContext::build_with_cancel`]), as a worker does when
/// the job times out ([`CancelReason::Timeout`]), when the worker shuts down past its grace
/// period ([`CancelReason::Shutdown`]), when an operator cancels the job
/// ([`CancelReason::Cancelled`]) or when its lease is lost: [`JobContext::cancelled`]
/// completes, [`JobContext::is_cancelled`] turns `true` and [`JobContext::cancel_reason`] says
/// why. The first reason given is kept.
///
/// A worker also aborts the handler at its next `.await` after cancelling it, and writes its
/// own outcome (a timeout is retried as "timed out after …"; a shutdown hands the job back; an
/// operator's cancel stands); what a handler returns after a cancel is not written. So test
/// with this handle what the handler does when it notices (it stops between two steps, it
/// keeps a checkpoint), and what the worker records with
/// [`work_one`](super::work_one) and a short [`job_timeout`](super::WorkOptions::job_timeout).
///
/// ```
/// use std::time::Duration;
/// use mysqlq::testing::{TestContext, run_inline_with};
/// use mysqlq::{CancelReason, JobContext, JobError};
///
/// #[mysqlq::job]
/// async fn export(ctx: JobContext, chunks: u32) -> Result<(), JobError> {
///     for _ in 0..chunks {
///         tokio::select! {
///             () = ctx.cancelled() => return Err(JobError::retry("stopped between chunks")),
///             () = tokio::time::sleep(Duration::from_millis(10)) => {}
///         }
///     }
///     Ok(())
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let (ctx, cancel) = TestContext::new::<Export>().build_with_cancel();
/// cancel.cancel(CancelReason::Shutdown);
/// let err = run_inline_with(Export { chunks: 1_000 }, ctx.clone()).await.unwrap_err();
/// assert_eq!(err.to_string(), "stopped between chunks");
/// assert_eq!(ctx.cancel_reason(), Some(CancelReason::Shutdown));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct CancelHandle {
    ctx: JobContext,
}

impl CancelHandle {
    /// Cancels the context for `reason`.
    pub fn cancel(&self, reason: CancelReason) {
        self.ctx.cancel(reason);
    }
}
