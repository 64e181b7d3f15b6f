//! Enqueueing: one job inside the caller's transaction, or many with chunked multi-row INSERTs.

use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use sqlx::{Acquire, Connection, MySql};

use crate::store::{self, InsertRow};
use crate::{Enqueued, Error};

/// Largest accepted payload (serialised JSON), 1 MiB. Larger data belongs in your own table,
/// with its id in the job.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;
/// Longest dedupe or ordering key (`VARCHAR(191)`).
pub const MAX_KEY_LEN: usize = 191;

/// When a job becomes runnable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunAt {
    Now,
    /// After a delay, measured by the database clock at insert time.
    Delay(Duration),
    /// At an absolute time (UTC).
    At(SystemTime),
}

/// How long a dedupe key is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DedupeScope {
    /// While the job is `pending` or `processing` (retries included): at most one job per key
    /// waiting or running. The default.
    #[default]
    UntilFinished,
    /// Only until the job is claimed for the first time: at most one job per key *waiting*;
    /// a new one can be enqueued while the first runs.
    UntilStarted,
}

/// Per-call enqueue options. Unset fields take the job's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueOptions {
    queue: Option<String>,
    priority: Option<i16>,
    max_attempts: Option<u32>,
    run_at: RunAt,
    dedupe_key: Option<String>,
    dedupe_scope: DedupeScope,
    ordering_key: Option<String>,
    concurrency: Option<(String, u16)>,
}

impl Default for EnqueueOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl EnqueueOptions {
    /// No overrides.
    pub const fn new() -> Self {
        Self {
            queue: None,
            priority: None,
            max_attempts: None,
            run_at: RunAt::Now,
            dedupe_key: None,
            dedupe_scope: DedupeScope::UntilFinished,
            ordering_key: None,
            concurrency: None,
        }
    }

    /// Sends the job to `queue` instead of its default queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Claim priority (lower runs first).
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Attempts in all, the first included (overrides `retries + 1`).
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// Runnable after `delay`, by the database clock.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.run_at = RunAt::Delay(delay);
        self
    }

    /// Runnable at `at` (UTC).
    pub fn run_at(mut self, at: SystemTime) -> Self {
        self.run_at = RunAt::At(at);
        self
    }

    /// At most one job with this key is pending or processing; a second enqueue returns
    /// [`Enqueued::Duplicate`] with the holder's id. Keys are global: include the kind in them.
    pub fn dedupe_key(mut self, key: impl Into<String>) -> Self {
        self.dedupe_key = Some(key.into());
        self
    }

    /// How long the dedupe key is held (default [`DedupeScope::UntilFinished`]).
    pub fn dedupe_scope(mut self, scope: DedupeScope) -> Self {
        self.dedupe_scope = scope;
        self
    }

    /// Jobs sharing this key run one at a time, in enqueue order.
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// At most `limit` jobs with this key run at once (across all workers); others with the key
    /// wait without holding up jobs of other keys.
    pub fn concurrency_limit(mut self, key: impl Into<String>, limit: u16) -> Self {
        self.concurrency = Some((key.into(), limit));
        self
    }
}

/// A job row to insert, by kind name and JSON payload — the untyped form behind
/// [`Job::enqueue`], for tools and scripts that enqueue jobs of other binaries.
///
/// [`Job::enqueue`]: crate::Job::enqueue
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub(crate) row: InsertRow,
}

impl NewJob {
    /// A job of `kind` on `queue` with a JSON `payload` (checked for size and validity).
    pub fn new(
        kind: &str,
        queue: &str,
        payload: &serde_json::Value,
        options: &EnqueueOptions,
    ) -> Result<Self, Error> {
        let payload = serde_json::to_string(payload).map_err(|source| Error::Serialize {
            kind: kind.to_owned(),
            source,
        })?;
        Self::build(
            kind,
            queue,
            0,
            crate::RetryPolicy::default().max_attempts,
            payload,
            None,
            options,
        )
    }

    /// The same job without an ordering key.
    pub fn without_ordering_key(mut self) -> Self {
        self.row.ordering_key = None;
        self
    }

    pub(crate) fn build(
        kind: &str,
        default_queue: &str,
        default_priority: i16,
        default_max_attempts: u32,
        payload: String,
        default_ordering_key: Option<String>,
        o: &EnqueueOptions,
    ) -> Result<Self, Error> {
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Err(Error::PayloadTooLarge {
                kind: kind.to_owned(),
                size: payload.len(),
                limit: MAX_PAYLOAD_BYTES,
            });
        }
        let queue = o.queue.as_deref().unwrap_or(default_queue);
        crate::queue::validate_queue_name(queue)?;
        let max_attempts = o.max_attempts.unwrap_or(default_max_attempts);
        if max_attempts == 0 {
            return Err(Error::invalid(
                "max_attempts",
                "must be at least 1 (the first attempt counts)",
            ));
        }
        let ordering_key = o.ordering_key.clone().or(default_ordering_key);
        let concurrency_key = o.concurrency.as_ref().map(|(k, _)| k.clone());
        if let Some((_, 0)) = o.concurrency {
            return Err(Error::invalid("concurrency limit", "must be at least 1"));
        }
        for (what, key) in [
            ("dedupe key", &o.dedupe_key),
            ("ordering key", &ordering_key),
            ("concurrency key", &concurrency_key),
        ] {
            if let Some(k) = key
                && (k.is_empty() || k.chars().count() > MAX_KEY_LEN)
            {
                return Err(Error::invalid(
                    what,
                    format!("`{k}` must be 1 to {MAX_KEY_LEN} characters long"),
                ));
            }
        }
        let (delay_us, run_at) = match o.run_at {
            RunAt::Now => (0, None),
            RunAt::Delay(d) => (i64::try_from(d.as_micros()).unwrap_or(i64::MAX), None),
            RunAt::At(t) => (0, Some(store::datetime_utc(t)?)),
        };
        Ok(Self {
            row: InsertRow {
                queue: queue.to_owned(),
                kind: kind.to_owned(),
                payload,
                priority: o.priority.unwrap_or(default_priority),
                max_attempts,
                delay_us,
                run_at,
                dedupe_key: o.dedupe_key.clone(),
                dedupe_until_started: o.dedupe_scope == DedupeScope::UntilStarted,
                ordering_key,
                concurrency_key,
                concurrency_limit: o.concurrency.as_ref().map(|(_, n)| *n),
            },
        })
    }
}

pub(crate) async fn enqueue_one<'c, A>(target: A, job: NewJob) -> Result<Enqueued, Error>
where
    A: Acquire<'c, Database = MySql> + Send + 'c,
{
    let mut conn = target.acquire().await?;
    let out = store::job_insert_one(&mut conn, &job.row).await?;
    crate::wake::wake_local();
    Ok(out)
}

/// Enqueues many jobs through `target` in one transaction: all of them are written or none.
///
/// Rows go in multi-row INSERTs of up to 500 rows and at most half the
/// server's `max_allowed_packet` bytes. Inside the caller's transaction the rows commit or roll
/// back with it (a savepoint undoes this call's rows if it fails); on a pool or a bare
/// connection the call runs its own transaction, retried from the top on a deadlock or lock
/// wait timeout. Returns one result per job, in order. Jobs with a dedupe key are inserted one
/// statement each (to report each duplicate).
pub fn enqueue_many<'c, A, I>(target: A, jobs: I) -> BoxFuture<'c, Result<Vec<Enqueued>, Error>>
where
    A: Acquire<'c, Database = MySql> + Send + 'c,
    I: IntoIterator<Item = NewJob>,
{
    let rows: Vec<InsertRow> = jobs.into_iter().map(|j| j.row).collect();
    Box::pin(async move {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = target.acquire().await?;
        let owned = !conn.is_in_transaction();
        let mut tries = 0;
        let out = loop {
            tries += 1;
            // `begin` on a connection already in a transaction makes a savepoint.
            let mut tx = Connection::begin(&mut *conn).await?;
            match store::job_insert_many(&mut tx, &rows).await {
                Ok(out) => {
                    tx.commit().await?;
                    break out;
                }
                Err(e) if owned && tries < MANY_ATTEMPTS && store::is_lock_error(&e) => {
                    drop(tx);
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(1..20))).await;
                }
                Err(e) => return Err(e),
            }
        };
        crate::wake::wake_local();
        Ok(out)
    })
}

/// Attempts of an [`enqueue_many`] that owns its transaction, when deadlocks or lock wait
/// timeouts roll it back.
const MANY_ATTEMPTS: u32 = 5;
