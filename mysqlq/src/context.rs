//! What a running job knows about itself.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use sqlx::MySqlPool;
use tokio_util::sync::CancellationToken;

use crate::JobId;

/// Why a running job was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelReason {
    /// The lease was lost: another worker may already be running this job.
    LeaseLost,
    /// The worker is shutting down and the grace period is over.
    Shutdown,
    /// The job ran past its timeout.
    Timeout,
    /// No heartbeat could renew the lease in time (the database is unreachable or stalled):
    /// the worker stops the job before the lease can expire and another worker take it.
    LeaseUnconfirmed,
    /// An operator cancelled the job ([`crate::admin::Admin::cancel`], `mysqlq-cli cancel`,
    /// the dashboard): the worker saw it at its next heartbeat. Whatever the handler returns
    /// now is not written; the job stays `cancelled`.
    Cancelled,
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::LeaseLost => "lease lost",
            Self::Shutdown => "worker shutting down",
            Self::Timeout => "timed out",
            Self::LeaseUnconfirmed => "lease could not be renewed in time",
            Self::Cancelled => "cancelled by an operator",
        })
    }
}

/// Shared values a worker hands to every job (`Worker::state`), looked up by type.
#[derive(Default, Clone)]
pub struct Extensions {
    map: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl Extensions {
    /// Stores `value`, replacing an earlier value of the same type.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.map.insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`, if one was stored.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.map.get(&TypeId::of::<T>())?.downcast_ref()
    }

    /// Stores every value of `other`, replacing values of the same types.
    pub(crate) fn extend(&mut self, other: Extensions) {
        self.map.extend(other.map);
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.map.len())
            .finish()
    }
}

/// Something that can extend the lease of one job now (the worker's lease service).
pub(crate) trait Heartbeat: Send + Sync {
    fn beat(
        &self,
        id: JobId,
        token: &str,
    ) -> futures_util::future::BoxFuture<'static, Result<bool, crate::Error>>;
}

/// The context argument of a job: who it is, and how to cooperate with the worker.
#[derive(Clone)]
pub struct JobContext {
    inner: Arc<Inner>,
}

struct Inner {
    id: JobId,
    kind: String,
    queue: String,
    attempt: u32,
    max_attempts: u32,
    claim_token: String,
    cancel: CancellationToken,
    reason: OnceLock<CancelReason>,
    pool: Option<MySqlPool>,
    extensions: Arc<Extensions>,
    heartbeat: Option<Arc<dyn Heartbeat>>,
    meta: MetaState,
    workflow: Option<u64>,
}

/// The job's meta as this attempt knows it, and the gate that keeps its writes in order.
#[derive(Default)]
struct MetaState {
    current: std::sync::Mutex<crate::Meta>,
    write: tokio::sync::Mutex<()>,
}

/// Parts of a context, filled in by the worker.
pub(crate) struct ContextParts {
    pub(crate) id: JobId,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    pub(crate) claim_token: String,
    pub(crate) pool: Option<MySqlPool>,
    pub(crate) extensions: Arc<Extensions>,
    pub(crate) heartbeat: Option<Arc<dyn Heartbeat>>,
    pub(crate) meta: crate::Meta,
    /// The job's workflow (`job_queue.workflow_id`): its step API is in `crate::workflow`.
    pub(crate) workflow: Option<u64>,
}

impl JobContext {
    pub(crate) fn from_parts(p: ContextParts) -> Self {
        Self {
            inner: Arc::new(Inner {
                id: p.id,
                kind: p.kind,
                queue: p.queue,
                attempt: p.attempt,
                max_attempts: p.max_attempts,
                claim_token: p.claim_token,
                cancel: CancellationToken::new(),
                reason: OnceLock::new(),
                pool: p.pool,
                extensions: p.extensions,
                heartbeat: p.heartbeat,
                meta: MetaState {
                    current: std::sync::Mutex::new(p.meta),
                    write: tokio::sync::Mutex::new(()),
                },
                workflow: p.workflow,
            }),
        }
    }

    /// A context for running a job by hand (tests, [`crate::testing`]): attempt 1 of 1, no
    /// worker behind it, so [`heartbeat`](Self::heartbeat) does nothing.
    pub fn detached(id: JobId, kind: &str, queue: &str) -> Self {
        Self::from_parts(ContextParts {
            id,
            kind: kind.to_owned(),
            queue: queue.to_owned(),
            attempt: 1,
            max_attempts: 1,
            claim_token: String::new(),
            pool: None,
            extensions: Arc::default(),
            heartbeat: None,
            meta: crate::Meta::new(),
            workflow: None,
        })
    }

    /// The workflow this job is a step of (`job_queue.workflow_id`).
    pub(crate) fn workflow_raw(&self) -> Option<u64> {
        self.inner.workflow
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.inner.id
    }

    /// The job's kind name.
    pub fn kind(&self) -> &str {
        &self.inner.kind
    }

    /// The queue the job was claimed from.
    pub fn queue(&self) -> &str {
        &self.inner.queue
    }

    /// This attempt's number, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.inner.attempt
    }

    /// Attempts allowed in all.
    pub fn max_attempts(&self) -> u32 {
        self.inner.max_attempts
    }

    /// `true` on the last allowed attempt.
    pub fn is_last_attempt(&self) -> bool {
        self.inner.attempt >= self.inner.max_attempts
    }

    /// A key that is the same for every attempt of this job and different for every job
    /// (`mysqlq-job-<id>`): pass it to payment providers, mail APIs or a unique column so that a
    /// re-run (delivery is at-least-once) has its side effect only once.
    pub fn idempotency_key(&self) -> String {
        format!("mysqlq-job-{}", self.inner.id)
    }

    /// The claim token of this attempt (changes on every claim).
    pub fn claim_token(&self) -> &str {
        &self.inner.claim_token
    }

    /// The worker's pool, for jobs that need the database; borrow a connection only while you
    /// use it.
    pub fn pool(&self) -> Option<&MySqlPool> {
        self.inner.pool.as_ref()
    }

    /// A value given to the worker with `state(...)`, looked up by type.
    pub fn state<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.inner.extensions.get::<T>()
    }

    /// Completes when the job should stop: lease lost, cancelled by an operator, shutdown
    /// deadline, or timeout ([`cancel_reason`](Self::cancel_reason) says which).
    pub async fn cancelled(&self) {
        self.inner.cancel.cancelled().await;
    }

    /// `true` once the job has been asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Why the job was asked to stop, once it was.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.inner.reason.get().copied()
    }

    /// Extends this job's lease now (the worker also does so periodically). Returns `false` if
    /// the lease was already lost or an operator cancelled the job: the job should stop
    /// ([`cancel_reason`](Self::cancel_reason) says which).
    pub async fn heartbeat(&self) -> Result<bool, crate::Error> {
        match &self.inner.heartbeat {
            Some(h) => {
                let alive = h.beat(self.inner.id, &self.inner.claim_token).await?;
                if !alive {
                    // The lease service has already set the reason (lost or cancelled); this
                    // only covers a beat that found the job gone without telling why.
                    self.cancel(CancelReason::LeaseLost);
                }
                Ok(alive)
            }
            None => Ok(true),
        }
    }

    /// The job's meta: what the enqueue set, with this attempt's own updates.
    pub fn meta(&self) -> crate::Meta {
        self.inner
            .meta
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Sets `key` of the job's meta to `value` and writes it to the job's row now, guarded by
    /// this attempt's claim token: shown on the dashboard and by `mysqlq::admin` while the job
    /// runs, and kept for later attempts (a checkpoint). Refused when the meta would exceed
    /// [`MAX_META_BYTES`](crate::MAX_META_BYTES). When the claim was lost (another worker may
    /// own the job) nothing is written, the context is cancelled and an error says so. Without
    /// a worker ([`JobContext::detached`], [`crate::testing::TestContext`]) only the in-memory meta
    /// changes.
    pub async fn set_meta(
        &self,
        key: &str,
        value: impl serde::Serialize,
    ) -> Result<(), crate::Error> {
        let value = serde_json::to_value(value).map_err(|source| crate::Error::Serialize {
            kind: self.inner.kind.clone(),
            source,
        })?;
        let _gate = self.inner.meta.write.lock().await;
        let mut next = self.meta();
        next.insert(key.to_owned(), value);
        let text = crate::meta::meta_json(&self.inner.kind, &next)?;
        // A context without a claim (detached, `mysqlq::testing::TestContext`) owns no row, even
        // when it was given a pool for the handler's own queries.
        if let Some(pool) = &self.inner.pool
            && !self.inner.claim_token.is_empty()
        {
            let owned = crate::store::Owned {
                id: self.inner.id,
                token: self.inner.claim_token.clone(),
            };
            let mut conn = pool.acquire().await?;
            if !crate::store::job_set_meta(&mut conn, &owned, text.as_deref()).await? {
                drop(conn);
                self.cancel(CancelReason::LeaseLost);
                return Err(crate::Error::invalid(
                    "job meta write",
                    format!(
                        "job {} is no longer owned by this attempt (lease lost, or the job ended);                          nothing was written: stop the handler",
                        self.inner.id
                    ),
                ));
            }
        }
        *self
            .inner
            .meta
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = next;
        Ok(())
    }

    /// Records progress under the meta key `progress` (a percentage, clamped to 0–100), as
    /// [`set_meta`](Self::set_meta) does.
    pub async fn progress(&self, percent: f64) -> Result<(), crate::Error> {
        let p = if percent.is_nan() {
            0.0
        } else {
            percent.clamp(0.0, 100.0)
        };
        self.set_meta("progress", p).await
    }

    pub(crate) fn cancel(&self, reason: CancelReason) {
        let _ = self.inner.reason.set(reason);
        self.inner.cancel.cancel();
    }
}

impl fmt::Debug for JobContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("id", &self.inner.id)
            .field("kind", &self.inner.kind)
            .field("queue", &self.inner.queue)
            .field("attempt", &self.inner.attempt)
            .field("max_attempts", &self.inner.max_attempts)
            .finish_non_exhaustive()
    }
}
