//! The options of [`drain`](super::drain), [`work_one`](super::work_one) and
//! [`work_job`](super::work_job): the worker they describe, and what a drain runs.

use std::time::Duration;

use sqlx::MySqlPool;

use crate::context::Extensions;
use crate::hooks::Hooks;
use crate::{EnqueueOptions, Registry, Worker, WorkerBuilder};

/// What a worker does with the jobs [`drain`](super::drain), [`work_one`](super::work_one) and
/// [`work_job`](super::work_job) run: the jobs it
/// knows, the application state and hooks it hands them, its timeouts, and whether a failing
/// job fails the test.
///
/// Defaults: every `#[job]` linked into the test binary ([`Registry::from_inventory`]), no
/// state, the global hooks only, a worker's default job timeout, lease and attempt history,
/// worker id `mysqlq-testing:<pid>`, safety on.
#[derive(Debug, Clone)]
#[must_use]
pub struct WorkOptions {
    pub(super) registry: Option<Registry>,
    pub(super) extensions: Extensions,
    pub(super) hooks: Hooks,
    pub(super) job_timeout: Option<Duration>,
    pub(super) attempt_history: Option<u32>,
    pub(super) worker_id: Option<String>,
    pub(super) safety: bool,
    pub(super) enqueue: EnqueueOptions,
}

impl Default for WorkOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self {
            registry: None,
            extensions: Extensions::default(),
            hooks: Hooks::new(),
            job_timeout: None,
            attempt_history: None,
            worker_id: None,
            safety: true,
            enqueue: EnqueueOptions::new(),
        }
    }

    /// A value every job reads with [`JobContext::state`](crate::JobContext::state), as
    /// [`WorkerBuilder::state`] gives it. Once per type.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// The jobs the worker knows (default: every `#[job]` of the binary). A job of another
    /// kind is recorded as unknown, as a worker records it.
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Hooks around the jobs, after the global hooks ([`WorkerBuilder::hooks`]).
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// The timeout of jobs that set none ([`WorkerBuilder::job_timeout`]).
    pub fn job_timeout(mut self, timeout: Duration) -> Self {
        self.job_timeout = Some(timeout);
        self
    }

    /// Attempts kept per job in its history ([`WorkerBuilder::attempt_history`]).
    pub fn attempt_history(mut self, n: u32) -> Self {
        self.attempt_history = Some(n);
        self
    }

    /// The worker's id, written to `locked_by` and the attempt history
    /// ([`WorkerBuilder::worker_id`]).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }

    /// With `false`, an attempt that returns an error (or times out) ends the call with
    /// [`Error::JobFailed`](crate::Error::JobFailed), and one that panics panics in the test with the handler's message,
    /// once the worker has recorded the attempt. Default `true`: failures are recorded and
    /// reported ([`DrainReport::failures`](super::DrainReport::failures), [`WorkedJob::outcome`](super::WorkedJob::outcome)), as a worker does. A snooze
    /// or a cancel decided by the handler is not a failure.
    pub fn with_safety(mut self, safety: bool) -> Self {
        self.safety = safety;
        self
    }

    /// The options of the enqueue [`work_one`](super::work_one) makes (queue, attempts, meta, keys, …).
    pub fn enqueue_options(mut self, options: EnqueueOptions) -> Self {
        self.enqueue = options;
        self
    }

    /// The worker these options describe, running one job at a time.
    pub(super) fn builder(&self, pool: &MySqlPool, queues: &[String]) -> WorkerBuilder {
        let mut b = Worker::builder(pool.clone())
            .concurrency(1)
            .extensions(self.extensions.clone())
            .hooks(self.hooks.clone())
            .worker_id(
                self.worker_id
                    .clone()
                    .unwrap_or_else(|| format!("mysqlq-testing:{}", std::process::id())),
            );
        if !queues.is_empty() {
            b = b.queues(queues.iter().cloned());
        }
        if let Some(r) = &self.registry {
            b = b.registry(r.clone());
        }
        if let Some(t) = self.job_timeout {
            b = b.job_timeout(t);
        }
        if let Some(n) = self.attempt_history {
            b = b.attempt_history(n);
        }
        b
    }
}

/// What [`drain`](super::drain) runs, and how.
///
/// Defaults: the queues of every registered job, the jobs ready when the drain starts (not those
/// they enqueue, not those scheduled for later), at most
/// [`DEFAULT_LIMIT`](Self::DEFAULT_LIMIT) attempts, and [`WorkOptions`]' defaults.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct DrainOptions {
    pub(super) queues: Vec<String>,
    pub(super) recursion: bool,
    pub(super) scheduled: bool,
    pub(super) limit: Option<usize>,
    pub(super) work: WorkOptions,
}

impl DrainOptions {
    /// Most attempts a drain runs unless told otherwise: a job that snoozes itself or enqueues
    /// itself forever ends the drain with an error instead of hanging the test.
    pub const DEFAULT_LIMIT: usize = 1000;

    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Drains these queues only (default: the queues of every registered job).
    pub fn queues<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.queues = queues.into_iter().map(Into::into).collect();
        self
    }

    /// Also runs the jobs the drained jobs enqueue, and theirs, until none is left (default
    /// `false`: only the jobs there when the drain started run; assert on the others with
    /// [`assert_enqueued`](super::assert_enqueued)).
    pub fn with_recursion(mut self, recursion: bool) -> Self {
        self.recursion = recursion;
        self
    }

    /// Also runs jobs whose time has not come, now: those enqueued with a delay, and those
    /// waiting for a retry or after a snooze, which then run again until they complete or fail
    /// for good (default `false`).
    pub fn with_scheduled(mut self, scheduled: bool) -> Self {
        self.scheduled = scheduled;
        self
    }

    /// Most attempts to run (default [`DEFAULT_LIMIT`](Self::DEFAULT_LIMIT)); past it the drain
    /// ends with an error.
    pub fn limit(mut self, attempts: usize) -> Self {
        self.limit = Some(attempts);
        self
    }

    /// The worker's options (replacing those set so far through this value).
    pub fn work(mut self, work: WorkOptions) -> Self {
        self.work = work;
        self
    }

    /// [`WorkOptions::state`].
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.work = self.work.state(value);
        self
    }

    /// [`WorkOptions::registry`].
    pub fn registry(mut self, registry: Registry) -> Self {
        self.work = self.work.registry(registry);
        self
    }

    /// [`WorkOptions::hooks`].
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.work = self.work.hooks(hooks);
        self
    }

    /// [`WorkOptions::job_timeout`].
    pub fn job_timeout(mut self, timeout: Duration) -> Self {
        self.work = self.work.job_timeout(timeout);
        self
    }

    /// [`WorkOptions::with_safety`].
    pub fn with_safety(mut self, safety: bool) -> Self {
        self.work = self.work.with_safety(safety);
        self
    }

    /// [`WorkOptions::worker_id`].
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.work = self.work.worker_id(id);
        self
    }
}
