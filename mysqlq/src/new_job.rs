//! What a job to enqueue is before it is written: [`EnqueueOptions`] and [`NewJob`], the
//! untyped row, checked (payload size, queue name, keys, dedupe options) when it is built.

use std::time::{Duration, SystemTime};

use crate::Error;
use crate::meta::{Meta, meta_json};
use crate::store::{self, InsertRow};

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
    meta: Option<Meta>,
    dedupe_window: Option<Duration>,
    dedupe_replace: bool,
    rate_key: Option<String>,
    rate_limit: Option<crate::Rate>,
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
            meta: None,
            dedupe_window: None,
            dedupe_replace: false,
            rate_key: None,
            rate_limit: None,
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
    /// [`Enqueued::Duplicate`](crate::Enqueued::Duplicate) with the holder's id. Keys are global: include the kind in them.
    pub fn dedupe_key(mut self, key: impl Into<String>) -> Self {
        self.dedupe_key = Some(key.into());
        self
    }

    /// How long the dedupe key is held (default [`DedupeScope::UntilFinished`]).
    pub fn dedupe_scope(mut self, scope: DedupeScope) -> Self {
        self.dedupe_scope = scope;
        self
    }

    /// Keeps the dedupe key taken for `window` after the job completes ("unique for 10
    /// minutes"): an enqueue with the key during that time returns [`Enqueued::Duplicate`](crate::Enqueued::Duplicate) with
    /// the completed job's id. The first enqueue after the window takes the key again. Only
    /// with [`DedupeScope::UntilFinished`]; a job that fails or is cancelled frees the key at
    /// once. The pruner deleting the completed row also frees it: keep `completed_retention`
    /// longer than the window. A worker that deletes the jobs it completes
    /// ([`WorkerBuilder::delete_completed`](crate::WorkerBuilder::delete_completed)) keeps this
    /// one's row, `completed`, for the window.
    pub fn dedupe_window(mut self, window: Duration) -> Self {
        self.dedupe_window = Some(window);
        self
    }

    /// On a taken dedupe key, updates the holder instead of refusing when it is still
    /// `pending` and of the same kind (debounce): its payload, run time and priority become
    /// this job's (its meta too, when this job has one), and the enqueue returns
    /// [`Enqueued::Replaced`](crate::Enqueued::Replaced) with its id. A holder that is running or completed is left alone
    /// ([`Enqueued::Duplicate`](crate::Enqueued::Duplicate)).
    pub fn dedupe_replace(mut self) -> Self {
        self.dedupe_replace = true;
        self
    }

    /// Sets `key` of the job's meta (a small JSON object, at most [`MAX_META_BYTES`](crate::MAX_META_BYTES)) to
    /// `value`: shown by `mysqlq::admin` and the dashboard, read by hooks, updated by the
    /// handler ([`JobContext::set_meta`](crate::JobContext::set_meta)).
    pub fn meta(mut self, key: impl Into<String>, value: serde_json::Value) -> Self {
        self.meta
            .get_or_insert_with(Meta::new)
            .insert(key.into(), value);
        self
    }

    /// Jobs sharing this key run one at a time, in enqueue order.
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// Counts the job against the rate limit of `key`, the job's own limit
    /// ([`Job::RATE_LIMIT`](crate::Job::RATE_LIMIT), e.g. `#[job(rate_limit = "10/s")]`): each
    /// key has its own limit, across every worker. Refused at enqueue for a job that declares
    /// no limit: use [`rate_limit`](Self::rate_limit) for those.
    pub fn rate_key(mut self, key: impl Into<String>) -> Self {
        self.rate_key = Some(key.into());
        self
    }

    /// At most `rate` handler starts per period for the jobs of `key` (in this queue), across
    /// every worker: a job waiting for its key's limit is not claimed, so it keeps its
    /// attempts, and holds back no job of another key. Overrides the job's declared limit.
    pub fn rate_limit(mut self, key: impl Into<String>, rate: crate::Rate) -> Self {
        self.rate_key = Some(key.into());
        self.rate_limit = Some(rate);
        self
    }

    /// At most `limit` jobs with this key run at once (across all workers); others with the key
    /// wait without holding up jobs of other keys.
    pub fn concurrency_limit(mut self, key: impl Into<String>, limit: u16) -> Self {
        self.concurrency = Some((key.into(), limit));
        self
    }
}

/// What a job is unless the enqueue says otherwise: a [`crate::Job`]'s associated items.
pub(crate) struct Defaults<'a> {
    pub(crate) queue: &'a str,
    pub(crate) priority: i16,
    pub(crate) max_attempts: u32,
    pub(crate) ordering_key: Option<String>,
    /// The declared limit and the job's rate key.
    pub(crate) rate: (Option<crate::Rate>, Option<String>),
}

/// A job row to insert, by kind name and JSON payload — the untyped form behind
/// [`Job::enqueue`], for tools and scripts that enqueue jobs of other binaries.
///
/// [`Job::enqueue`]: crate::Job::enqueue
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub(crate) row: InsertRow,
    meta: Meta,
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
        let defaults = Defaults {
            queue,
            priority: 0,
            max_attempts: crate::RetryPolicy::default().max_attempts,
            ordering_key: None,
            rate: (None, None),
        };
        Self::build(kind, payload, defaults, options)
    }

    /// The job's rate key and limit, if it has one.
    pub fn rate(&self) -> Option<(&str, crate::Rate)> {
        let (key, count, period_us) = self.row.rate.as_ref()?;
        Some((key, crate::Rate::__validated(*count, period_us / 1000)))
    }

    /// The same job without an ordering key.
    pub fn without_ordering_key(mut self) -> Self {
        self.row.ordering_key = None;
        self
    }

    /// The job's kind name.
    pub fn kind(&self) -> &str {
        &self.row.kind
    }

    /// The queue the job goes to.
    pub fn queue(&self) -> &str {
        &self.row.queue
    }

    /// The job's JSON payload.
    pub fn payload(&self) -> &str {
        &self.row.payload
    }

    /// The job's meta so far.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// Sets `key` of the job's meta to `value` (checked against [`MAX_META_BYTES`](crate::MAX_META_BYTES)).
    pub fn set_meta(
        &mut self,
        key: impl Into<String>,
        value: serde_json::Value,
    ) -> Result<(), Error> {
        self.meta.insert(key.into(), value);
        self.row.meta = meta_json(&self.row.kind, &self.meta)?;
        Ok(())
    }

    /// Stores a W3C `traceparent` (checked) under the meta key `traceparent`, so the job's span
    /// on the worker can continue the enqueuing trace ([`crate::hooks`]).
    pub fn set_traceparent(&mut self, traceparent: &str) -> Result<(), Error> {
        let tp = crate::Traceparent::parse(traceparent)?;
        self.set_meta(
            crate::traceparent::TRACEPARENT_KEY,
            serde_json::Value::String(tp.as_str().to_owned()),
        )
    }

    pub(crate) fn build(
        kind: &str,
        payload: String,
        d: Defaults<'_>,
        o: &EnqueueOptions,
    ) -> Result<Self, Error> {
        let Defaults {
            queue: default_queue,
            priority: default_priority,
            max_attempts: default_max_attempts,
            ordering_key: default_ordering_key,
            rate: default_rate,
        } = d;
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
        let rate = rate_of(kind, default_rate, o)?;
        let concurrency_key = o.concurrency.as_ref().map(|(k, _)| k.clone());
        if let Some((_, 0)) = o.concurrency {
            return Err(Error::invalid("concurrency limit", "must be at least 1"));
        }
        for (what, key) in [
            ("dedupe key", &o.dedupe_key),
            ("ordering key", &ordering_key),
            ("concurrency key", &concurrency_key),
            ("rate key", &rate.as_ref().map(|(k, _)| k.clone())),
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
        if o.dedupe_window.is_some() && o.dedupe_scope == DedupeScope::UntilStarted {
            return Err(Error::invalid(
                "dedupe window",
                "a window after completion needs DedupeScope::UntilFinished (the key must stay \
                 taken while the job runs); drop `dedupe_window` or `dedupe_scope`",
            ));
        }
        if (o.dedupe_window.is_some() || o.dedupe_replace) && o.dedupe_key.is_none() {
            return Err(Error::invalid(
                "dedupe options",
                "`dedupe_window` and `dedupe_replace` need a `dedupe_key`",
            ));
        }
        let meta_map = o.meta.clone().unwrap_or_default();
        let meta = meta_json(kind, &meta_map)?;
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
                meta,
                dedupe_window_us: o
                    .dedupe_window
                    .map(|w| u64::try_from(w.as_micros()).unwrap_or(u64::MAX)),
                dedupe_replace: o.dedupe_replace,
                rate: rate.map(|(key, r)| {
                    let period_us = u64::try_from(r.period().as_micros()).unwrap_or(u64::MAX);
                    (key, r.count(), period_us)
                }),
            },
            meta: meta_map,
        })
    }
}

/// The rate key and limit of a job: the enqueue's, else the job's (`#[job(rate_limit, rate_key)]`);
/// a limit without a key is the kind's (`kind:<kind>`).
fn rate_of(
    kind: &str,
    (limit, key): (Option<crate::Rate>, Option<String>),
    o: &EnqueueOptions,
) -> Result<Option<(String, crate::Rate)>, Error> {
    let Some(limit) = o.rate_limit.or(limit) else {
        return match &o.rate_key {
            Some(k) => Err(Error::invalid(
                "rate key",
                format!(
                    "`{k}`: job `{kind}` declares no rate limit; add #[job(rate_limit = \"10/s\")] \
                     or use EnqueueOptions::rate_limit(key, rate)"
                ),
            )),
            None => Ok(None),
        };
    };
    let key = o
        .rate_key
        .clone()
        .or(key)
        .unwrap_or_else(|| format!("kind:{kind}"));
    Ok(Some((key, limit)))
}
