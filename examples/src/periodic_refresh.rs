//! **periodic-refresh**: a periodic producer, consumers of a flaky API, and nothing piling up.
//!
//! The scenario of the article "moving from MySQL SKIP LOCKED to producer/consumer (with Redis
//! Streams)", on mysqlq alone:
//!
//! - A **periodic producer** ([`ProduceRefreshes`], scheduled with
//!   `Periodic::new("* * * * * *", &ProduceRefreshes {})`: every second, UTC, exactly once per tick
//!   however many workers run) reads the active places and enqueues one [`RefreshPlace`] per place
//!   with `enqueue_many` in **one transaction**, each with the dedupe key `refresh:<place_id>`.
//!   While a place's job is pending or running, the next tick's is refused as a duplicate: with
//!   the consumers down the queue holds **at most one job per place** instead of growing by one
//!   per place per tick (the article's unbounded-stream problem, §5-1).
//! - **Consumers** ([`RefreshPlace`]) call a slow, flaky HTTP API ([`FakePlaceApi`]: 20–100 ms,
//!   `503` on about a quarter of the requests, deterministically) and write the result to the
//!   `place` row. A `503` is retried with backoff; one **poisoned** place always gets `500`, is
//!   retried until its attempts run out and lands in `failed` with its `last_error` (§5-2).
//! - A consumer is **stopped with its jobs in flight** (zero grace: the handlers are aborted and
//!   the jobs released to `pending`) and a new one takes over: nothing is lost (§5-3).
//!
//! With `--redis-url` (env `MYSQLQ_REDIS_URL`) every worker serves its queue over **Redis
//! Streams** — the article's own transport — and MySQL stays the source of truth: the producer
//! still enqueues in one MySQL transaction, a relay moves the committed jobs into the stream
//! (never past its cap: the backlog waits in MySQL), consumers read them in the group `mysqlq`,
//! take them in MySQL, run them and acknowledge them once the outcome is written
//! (`docs/redis.md`).
//!
//! [`run_once`] runs it all and checks the invariants.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mysqlq::{
    Classify, EnqueueOptions, Enqueued, ErrorClass, JobContext, JobError, NewJob, Periodic,
    Registry, Worker, WorkerHandle, enqueue_many,
};
use sqlx::MySqlPool;

use crate::fake_http;
use crate::server::error_chain;

mod checks;
mod fake_api;
mod scenario;

pub use fake_api::{ApiStats, FakePlaceApi};
pub use scenario::{Options, Summary, create_places, keep_running, run_once, run_once_with};

/// The queue of [`RefreshPlace`] (the consumers').
pub const QUEUE: &str = "refresh";
/// The queue of [`ProduceRefreshes`] (the producer's).
pub const PRODUCER_QUEUE: &str = "refresh-producer";
/// The producer's schedule: every second (6 fields, seconds first, UTC).
pub const SCHEDULE: &str = "* * * * * *";

/// What the jobs share with the example: handed to every worker with `.state(...)`.
#[derive(Debug, Clone)]
pub struct RefreshState {
    /// Where the place API listens.
    pub api: SocketAddr,
    /// Print what each job does.
    pub verbose: bool,
    /// The producer's counters.
    pub producer: Arc<ProducerStats>,
    /// The Redis transport every worker of the round uses, if any (`--redis-url`).
    pub redis: Option<mysqlq::redis::Redis>,
}

/// What the producer did so far.
#[derive(Debug, Default)]
pub struct ProducerStats {
    /// Ticks run.
    pub ticks: AtomicU64,
    /// Jobs enqueued.
    pub inserted: AtomicU64,
    /// Enqueues refused because the place's job was still pending or running.
    pub duplicates: AtomicU64,
}

/// Why a refresh failed, and (through [`Classify`]) what the worker does next.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// 5xx or 429 from the API: retried with backoff.
    #[error("place API unavailable: HTTP {status} {body}")]
    Unavailable {
        /// The HTTP status.
        status: u16,
        /// The response body.
        body: String,
    },
    /// Any other non-2xx answer: the request is wrong; failed now.
    #[error("place API refused: HTTP {status} {body}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The response body.
        body: String,
    },
    /// The connection failed or timed out: retried.
    #[error("cannot talk to the place API")]
    Transport(#[from] std::io::Error),
    /// Writing the result failed: retried.
    #[error("cannot update the place")]
    Database(#[from] sqlx::Error),
    /// The worker has no [`RefreshState`] or no pool: failed now.
    #[error("the worker has no RefreshState or no pool")]
    NotConfigured,
}

impl Classify for RefreshError {
    fn class(&self) -> ErrorClass {
        match self {
            Self::Unavailable { .. } | Self::Transport(_) | Self::Database(_) => ErrorClass::Retry,
            Self::Refused { .. } | Self::NotConfigured => ErrorClass::Fail,
        }
    }
}

/// A message for [`JobError`]s.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Problem(String);

/// The periodic producer: one [`RefreshPlace`] per active place, deduplicated by
/// `refresh:<place_id>`, all enqueued in one transaction.
#[mysqlq::job(queue = "refresh-producer", retries = 2, backoff = "100ms")]
pub async fn produce_refreshes(ctx: JobContext) -> Result<(), JobError> {
    let state = ctx
        .state::<RefreshState>()
        .ok_or_else(|| JobError::fail(Problem("the worker has no RefreshState".into())))?;
    let pool = ctx
        .pool()
        .ok_or_else(|| JobError::fail(Problem("the worker has no pool".into())))?;
    let mut tx = pool.begin().await?;
    let places: Vec<u64> = sqlx::query_scalar("SELECT id FROM place WHERE active = 1 ORDER BY id")
        .fetch_all(&mut *tx)
        .await?;
    let jobs = places
        .iter()
        .map(|&place_id| {
            NewJob::from_job(
                &RefreshPlace { place_id },
                &EnqueueOptions::new().dedupe_key(format!("refresh:{place_id}")),
            )
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(JobError::fail)?;
    let results = enqueue_many(&mut *tx, jobs)
        .await
        .map_err(JobError::retry)?;
    tx.commit().await?;
    let inserted: Vec<u64> = places
        .iter()
        .zip(&results)
        .filter(|(_, r)| matches!(r, Enqueued::Inserted(_)))
        .map(|(&p, _)| p)
        .collect();
    let duplicates = (results.len() - inserted.len()) as u64;
    let p = &state.producer;
    let tick = p.ticks.fetch_add(1, Ordering::SeqCst) + 1;
    p.inserted
        .fetch_add(inserted.len() as u64, Ordering::SeqCst);
    p.duplicates.fetch_add(duplicates, Ordering::SeqCst);
    if state.verbose {
        println!(
            "producer tick {tick:>2} (job {}): {} active places → {} enqueued {:?}, {duplicates} still queued (dedupe refused)",
            ctx.id(),
            places.len(),
            inserted.len(),
            inserted
        );
    }
    Ok(())
}

/// Refreshes place `place_id` from the place API.
#[mysqlq::job(queue = "refresh", retries = 3, backoff = "100ms, 200ms, 400ms")]
pub async fn refresh_place(ctx: JobContext, place_id: u64) -> Result<(), RefreshError> {
    let state = ctx
        .state::<RefreshState>()
        .ok_or(RefreshError::NotConfigured)?;
    let pool = ctx.pool().ok_or(RefreshError::NotConfigured)?;
    let result = match get_place(state.api, place_id).await {
        Ok((200, body)) => {
            let population: i64 = body.trim().parse().unwrap_or(0);
            sqlx::query(
                "UPDATE place SET population = ?, refresh_count = refresh_count + 1, \
                 refreshed_at = UTC_TIMESTAMP(6) WHERE id = ?",
            )
            .bind(population)
            .bind(place_id)
            .execute(pool)
            .await
            .map(|_| population)
            .map_err(RefreshError::Database)
        }
        Ok((status, body)) if status >= 500 || status == 429 => {
            Err(RefreshError::Unavailable { status, body })
        }
        Ok((status, body)) => Err(RefreshError::Refused { status, body }),
        Err(e) => Err(RefreshError::Transport(e)),
    };
    if state.verbose {
        let who = format!(
            "  refresh job {:>3} place {place_id:>2} attempt {}/{}",
            ctx.id(),
            ctx.attempt(),
            ctx.max_attempts()
        );
        match &result {
            Ok(population) => println!("{who}: population {population} saved"),
            Err(e) => {
                let next = match e.class() {
                    ErrorClass::Retry if ctx.is_last_attempt() => "out of attempts → failed",
                    ErrorClass::Retry => "retry after backoff",
                    _ => "failed now",
                };
                println!("{who}: {e} → {next}");
            }
        }
    }
    result.map(|_| ())
}

/// `GET /places/<id>` on the API; returns the status and body.
async fn get_place(addr: SocketAddr, place_id: u64) -> std::io::Result<(u16, String)> {
    let path = format!("/places/{place_id}");
    fake_http::exchange(addr, "GET", &path, &[], String::new(), "place API").await
}

/// A consumer or producer worker. Every worker carries the producer's schedule: each one's
/// scheduler wakes at the ticks and the ledger lets one of them enqueue each tick, so the ticks
/// go on while any worker runs (the consumer stopped mid-run included).
async fn start_worker(
    pool: &MySqlPool,
    state: &RefreshState,
    producer: bool,
    concurrency: usize,
    grace: Duration,
) -> Result<WorkerHandle, String> {
    let reg = |r: Result<Registry, mysqlq::Error>| {
        r.map_err(|e| format!("cannot register the job: {}", error_chain(&e)))
    };
    let (registry, queue) = if producer {
        (
            reg(Registry::new().register::<ProduceRefreshes>())?,
            PRODUCER_QUEUE,
        )
    } else {
        (reg(Registry::new().register::<RefreshPlace>())?, QUEUE)
    };
    let periodic = Periodic::new(SCHEDULE, &ProduceRefreshes {})
        .map_err(|e| format!("bad schedule: {}", error_chain(&e)))?;
    let mut builder = Worker::builder(pool.clone());
    if let Some(redis) = &state.redis {
        builder = builder.redis(redis.clone());
    }
    builder
        .registry(registry)
        .queues([queue])
        .concurrency(concurrency)
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
        .lease(Duration::from_secs(10))
        .maintenance(Duration::from_millis(200), Duration::from_secs(1))
        .shutdown_timeout(grace)
        .periodic(periodic)
        .state(state.clone())
        .start()
        .await
        .map_err(|e| format!("cannot start a worker: {}", error_chain(&e)))
}
