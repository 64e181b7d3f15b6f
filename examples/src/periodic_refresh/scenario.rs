//! The periodic-refresh example's scenario driver: its options, the round (producer, consumers,
//! a consumer stopped mid-run), the summary, the `--once` verdict and the keep-running mode. The
//! story is in the parent module.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mysqlq::{Job, Worker};

use super::checks::{JobRow, job_rows, open_jobs_per_place, wait_ticks};
use super::fake_api::FakePlaceApi;
use super::{
    PRODUCER_QUEUE, ProducerStats, QUEUE, RefreshPlace, RefreshState, SCHEDULE, start_worker,
};
use crate::runner::{self, Finished};
use crate::server::{error_chain, fresh_database};

/// The scenario's knobs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Database to drop, recreate and use.
    pub database: String,
    /// Places (ids 1..=n).
    pub places: u64,
    /// Of those, the last `inactive` are not active (never refreshed).
    pub inactive: u64,
    /// The place whose API calls always fail with `500`.
    pub poisoned: u64,
    /// Producer ticks with consumers running, before they stop.
    pub ticks_running: u64,
    /// Producer ticks with no consumer.
    pub ticks_stopped: u64,
    /// Consumer concurrency.
    pub concurrency: usize,
    /// How long to wait for each phase.
    pub timeout: Duration,
    /// Print what happens.
    pub verbose: bool,
    /// Serve both queues over Redis Streams at this URL (`--redis-url`, env
    /// `MYSQLQ_REDIS_URL`): the relay moves the producer's committed jobs into
    /// `<prefix>:refresh`, the consumers read them in the group `mysqlq`.
    pub redis_url: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            database: crate::server::unique_database("periodic_refresh"),
            places: 12,
            inactive: 2,
            poisoned: 7,
            ticks_running: 3,
            ticks_stopped: 4,
            concurrency: 4,
            timeout: Duration::from_secs(20),
            verbose: true,
            redis_url: None,
        }
    }
}

/// What a round did, and the invariants that broke.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Producer ticks run.
    pub ticks: u64,
    /// Ticks run while no consumer was running.
    pub ticks_stopped: u64,
    /// Active places.
    pub active: u64,
    /// Most jobs pending or running at once while the consumers were down (sampled).
    pub peak_queue: u64,
    /// Most jobs pending or running for one place at once while the consumers were down.
    pub peak_per_place: u64,
    /// Enqueues refused by the dedupe key, over the round.
    pub duplicates: u64,
    /// Jobs the stopped consumer held when it was stopped (read from `job_queue` just before).
    pub in_flight: usize,
    /// Jobs the stopped consumer released to `pending`: those in flight, and those of a claim
    /// in flight at the stop.
    pub released: usize,
    /// Jobs in flight at the stop that then completed (or, for the poisoned place, failed).
    pub released_finished: usize,
    /// Active, non-poisoned places refreshed at least once.
    pub refreshed: u64,
    /// Successful refreshes in all.
    pub refreshes: u64,
    /// `503` answers, each retried.
    pub outages: u64,
    /// Failed jobs of the poisoned place.
    pub poisoned_failed: u64,
    /// Broken invariants; empty when everything held.
    pub violations: Vec<String>,
}

impl Summary {
    /// `true` when every invariant held.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "periodic-refresh: {} producer ticks, {} with consumers down → queue peaked at {} jobs for {} active places \
             (max {} per place, {} duplicates refused); consumer stopped with {} jobs in flight ({} released) → {} finished by its successor; \
             {}/{} places refreshed ({} refreshes, {} × 503 retried), poisoned place failed {} time{} — ",
            self.ticks,
            self.ticks_stopped,
            self.peak_queue,
            self.active,
            self.peak_per_place,
            self.duplicates,
            self.in_flight,
            self.released,
            self.released_finished,
            self.refreshed,
            self.active.saturating_sub(1),
            self.refreshes,
            self.outages,
            self.poisoned_failed,
            if self.poisoned_failed == 1 { "" } else { "s" },
        )?;
        runner::verdict(f, &self.violations)
    }
}

/// The round leaves nothing running: without `--once`, [`keep_running`] starts a producer and a
/// consumer on its database until Ctrl-C.
impl Finished<Options> for Summary {
    fn database(options: &Options) -> &str {
        &options.database
    }

    fn summary(&self) -> String {
        self.to_string()
    }

    fn ok(&self) -> bool {
        Summary::ok(self)
    }

    fn still_running(&self, _options: &Options) -> String {
        "producer and consumer keep running (a tick every second); Ctrl-C to stop".to_owned()
    }

    async fn shutdown(self) -> Result<(), String> {
        Ok(())
    }

    async fn finish(
        self,
        url: &str,
        options: &Options,
        stop: Option<impl Future<Output = ()>>,
    ) -> Result<(), String> {
        match stop {
            Some(stop) => keep_running(url, options, stop).await,
            None => Ok(()),
        }
    }
}

/// One complete round with the default [`Options`] against the server at `url` (the round uses
/// a database of its own, `mysqlq_example_periodic_refresh_<pid>_<random>`, dropped at the end).
pub async fn run_once(url: &str) -> Result<Summary, String> {
    run_once_with(url, &Options::default()).await
}

/// Runs the scenario, checks the invariants, stops every worker.
pub async fn run_once_with(url: &str, options: &Options) -> Result<Summary, String> {
    let verbose = options.verbose;
    let say = |line: String| {
        if verbose {
            println!("{line}");
        }
    };
    if options.poisoned == 0 || options.poisoned > options.places - options.inactive {
        return Err(format!(
            "the poisoned place {} must be one of the active places 1..={}",
            options.poisoned,
            options.places - options.inactive
        ));
    }
    let pool = fresh_database(
        url,
        &options.database,
        3 * Worker::recommended_pool_size(options.concurrency),
    )
    .await?;
    let active_count = options.places - options.inactive;
    create_places(&pool, options.places, active_count).await?;
    say(format!(
        "database `{}` recreated, mysqlq schema v{} applied; {} places, {active_count} active, place {} poisoned",
        options.database,
        mysqlq::SCHEMA_VERSION,
        options.places,
        options.poisoned
    ));
    let api = FakePlaceApi::start(options.poisoned)
        .await
        .map_err(|e| format!("cannot start the fake place API: {e}"))?;
    say(format!(
        "fake place API on http://{}/places/<id>: 20–100 ms, 503 on a quarter of the requests, 500 always for place {}",
        api.addr(),
        options.poisoned
    ));
    let state = RefreshState {
        api: api.addr(),
        verbose,
        producer: Arc::new(ProducerStats::default()),
        redis: connect_redis(options).await?,
    };
    if let Some(r) = &state.redis {
        say(format!(
            "serving both queues over Redis Streams: `{}` and `{}`, consumer group `mysqlq`, cap {} entries",
            r.stream_key(QUEUE),
            r.stream_key(PRODUCER_QUEUE),
            r.config().stream_cap
        ));
    }
    let ticks = || state.producer.ticks.load(Ordering::SeqCst);
    let mut v = Vec::new();

    // (a) Producer and consumers.
    let producer = start_worker(&pool, &state, true, 1, Duration::from_secs(5)).await?;
    let consumer = start_worker(
        &pool,
        &state,
        false,
        options.concurrency,
        Duration::from_secs(5),
    )
    .await?;
    say(format!(
        "— (a) producer worker {} (schedule `{SCHEDULE}` on queue `{PRODUCER_QUEUE}`) and consumer worker {} (queue `{QUEUE}`) started —",
        producer.id(),
        consumer.id()
    ));
    wait_ticks(&state, options.ticks_running, options.timeout).await?;

    // (b) Consumers down, producer still ticking.
    let report = consumer
        .shutdown()
        .await
        .map_err(|e| format!("consumer shutdown failed: {}", error_chain(&e)))?;
    say(format!(
        "— (b) consumer stopped gracefully ({} jobs finished in flight); the producer keeps ticking with nobody consuming —",
        report.finished
    ));
    let ticks_before = ticks();
    let mut peak_queue = 0;
    let mut peak_per_place = 0;
    let deadline = Instant::now() + options.timeout;
    while ticks() < ticks_before + options.ticks_stopped {
        if Instant::now() > deadline {
            return Err(format!(
                "only {} producer ticks in {:?}",
                ticks() - ticks_before,
                options.timeout
            ));
        }
        let open = open_jobs_per_place(&pool).await?;
        peak_queue = peak_queue.max(open.values().sum::<u64>());
        peak_per_place = peak_per_place.max(open.values().copied().max().unwrap_or(0));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let open = open_jobs_per_place(&pool).await?;
    peak_queue = peak_queue.max(open.values().sum::<u64>());
    peak_per_place = peak_per_place.max(open.values().copied().max().unwrap_or(0));
    let ticks_stopped = ticks() - ticks_before;
    say(format!(
        "after {ticks_stopped} ticks without consumers: {} jobs waiting for {active_count} active places, at most {peak_per_place} per place (peak {peak_queue} in all)",
        open.values().sum::<u64>()
    ));
    if peak_per_place > 1 {
        v.push(format!(
            "with the consumers down, a place had {peak_per_place} jobs queued at once"
        ));
    }
    if peak_queue > active_count {
        v.push(format!(
            "with the consumers down, {peak_queue} jobs were queued for {active_count} active places"
        ));
    }

    // (c) A consumer stopped with its jobs in flight, and its successor.
    let doomed = start_worker(&pool, &state, false, options.concurrency, Duration::ZERO).await?;
    say(format!(
        "— (c) consumer {} started; it will be stopped with zero grace while its jobs are in flight —",
        doomed.id()
    ));
    let metrics = doomed.metrics();
    let deadline = Instant::now() + options.timeout;
    while metrics.running() == 0 {
        if Instant::now() > deadline {
            return Err("the new consumer never ran a job".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    let in_flight: Vec<u64> = sqlx::query_scalar(
        "SELECT id FROM job_queue WHERE kind = ? AND status = 'processing' AND locked_by = ?",
    )
    .bind(RefreshPlace::KIND)
    .bind(doomed.id())
    .fetch_all(&pool)
    .await
    .map_err(|e| format!("cannot read job_queue: {e}"))?;
    let report = doomed
        .shutdown()
        .await
        .map_err(|e| format!("consumer shutdown failed: {}", error_chain(&e)))?;
    say(format!(
        "consumer stopped with jobs {in_flight:?} in flight: {} released to pending (attempt not consumed), {} finished",
        report.released, report.finished
    ));
    let successor = start_worker(
        &pool,
        &state,
        false,
        options.concurrency,
        Duration::from_secs(5),
    )
    .await?;
    say(format!("successor consumer {} started", successor.id()));
    // Let the successor work through a couple of ticks, then stop the producer and drain.
    wait_ticks(&state, ticks() + 2, options.timeout).await?;
    producer
        .shutdown()
        .await
        .map_err(|e| format!("producer shutdown failed: {}", error_chain(&e)))?;
    say("producer stopped; draining the refresh queue".to_owned());
    let deadline = Instant::now() + options.timeout;
    loop {
        let open = open_jobs_per_place(&pool).await?;
        if open.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            v.push(format!("jobs still open at the end: {open:?}"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    successor
        .shutdown()
        .await
        .map_err(|e| format!("consumer shutdown failed: {}", error_chain(&e)))?;

    // The end state.
    let jobs = job_rows(&pool).await?;
    let released_finished = in_flight
        .iter()
        .filter(|id| {
            jobs.get(id).is_some_and(|j| {
                j.status == "completed"
                    || (j.place_id() == options.poisoned && j.status == "failed")
            })
        })
        .count();
    if released_finished != in_flight.len() {
        v.push(format!(
            "jobs in flight at the stop were lost: {:?}",
            in_flight
                .iter()
                .filter(|id| jobs.get(id).is_none_or(|j| j.status != "completed"))
                .collect::<Vec<_>>()
        ));
    }
    if in_flight.is_empty() {
        v.push("no job was in flight when the consumer was stopped".to_owned());
    }
    // Not every job in flight at the SELECT is released: one may finish between it and the
    // shutdown (its completion is then written), and over Redis rows the relay had put in the
    // stream, unread, are handed back by the relay, not counted as released by the worker.
    // More may be: a claim in flight when the shutdown began is let finish and its jobs are
    // released too. Every job of the SELECT must end completed (checked above); none may be
    // released twice, nor both released and finished.
    let c = metrics.counters.snapshot();
    let settled = c.completions + c.retries + c.failures + c.snoozes + c.cancels;
    if report.released as u64 + settled > c.claims {
        v.push(format!(
            "the stopped consumer claimed {} jobs, finished {settled} and released {}: some job was released twice or released and finished",
            c.claims, report.released
        ));
    }
    let places: Vec<(u64, bool, u32, Option<String>)> = sqlx::query_as(
        "SELECT id, active = 1, refresh_count, CAST(refreshed_at AS CHAR) FROM place ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .map_err(|e| format!("cannot read places: {e}"))?;
    let mut refreshed = 0;
    let mut refreshes = 0;
    let mut poisoned_failed = 0;
    for (id, active, count, at) in &places {
        refreshes += u64::from(*count);
        let place_jobs: Vec<&JobRow> = jobs.values().filter(|j| j.place_id() == *id).collect();
        if !active {
            if *count > 0 || !place_jobs.is_empty() {
                v.push(format!(
                    "inactive place {id} was refreshed {count} times / has {} jobs",
                    place_jobs.len()
                ));
            }
        } else if *id == options.poisoned {
            poisoned_failed = place_jobs.iter().filter(|j| j.status == "failed").count() as u64;
            if *count > 0 {
                v.push(format!("poisoned place {id} was refreshed"));
            }
            if poisoned_failed == 0 {
                v.push(format!("poisoned place {id} has no failed job"));
            }
            for j in &place_jobs {
                if j.status != "failed" || j.last_error.as_deref().is_none_or(str::is_empty) {
                    v.push(format!(
                        "poisoned place {id}: job {} is `{}` with last_error {:?}",
                        j.id, j.status, j.last_error
                    ));
                }
            }
        } else {
            if *count == 0 || at.is_none() {
                v.push(format!("active place {id} was never refreshed"));
            } else {
                refreshed += 1;
            }
            for j in &place_jobs {
                if j.status != "completed" {
                    v.push(format!(
                        "place {id}: job {} is `{}` ({})",
                        j.id,
                        j.status,
                        j.last_error.as_deref().unwrap_or("no error")
                    ));
                }
            }
        }
    }
    let api_stats = api.stats();
    if poisoned_failed > 0 {
        let last = jobs
            .values()
            .filter(|j| j.place_id() == options.poisoned && j.status == "failed")
            .max_by_key(|j| j.id)
            .and_then(|j| j.last_error.clone())
            .unwrap_or_default();
        say(format!(
            "poisoned place {}: {poisoned_failed} jobs `failed` after their retries; last_error: {last}",
            options.poisoned
        ));
    }
    drop(api);
    pool.close().await;
    if let (Some(r), Some(url)) = (&state.redis, &options.redis_url) {
        check_streams_empty(r, &mut v).await;
        delete_streams(url, r).await;
    }
    let p = &state.producer;
    Ok(Summary {
        ticks: p.ticks.load(Ordering::SeqCst),
        ticks_stopped,
        active: active_count,
        peak_queue,
        peak_per_place,
        duplicates: p.duplicates.load(Ordering::SeqCst),
        in_flight: in_flight.len(),
        released: report.released,
        released_finished,
        refreshed,
        refreshes,
        outages: api_stats.outages,
        poisoned_failed,
        violations: v,
    })
}

/// After a round: runs a producer and a consumer on the round's database (not recreated) until
/// `stop` completes, printing every tick and refresh; then shuts them down gracefully.
pub async fn keep_running(
    url: &str,
    options: &Options,
    stop: impl Future<Output = ()>,
) -> Result<(), String> {
    let pool = crate::server::server_url(url)?
        .with_database(&options.database)
        .connect(
            sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(2 * Worker::recommended_pool_size(options.concurrency)),
        )
        .await
        .map_err(|e| format!("cannot connect to `{}`: {e}", options.database))?;
    let api = FakePlaceApi::start(options.poisoned)
        .await
        .map_err(|e| format!("cannot start the fake place API: {e}"))?;
    let state = RefreshState {
        api: api.addr(),
        verbose: options.verbose,
        producer: Arc::new(ProducerStats::default()),
        redis: connect_redis(options).await?,
    };
    let producer = start_worker(&pool, &state, true, 1, Duration::from_secs(5)).await?;
    let consumer = start_worker(
        &pool,
        &state,
        false,
        options.concurrency,
        Duration::from_secs(5),
    )
    .await?;
    stop.await;
    for w in [consumer, producer] {
        w.shutdown()
            .await
            .map_err(|e| format!("worker shutdown failed: {}", error_chain(&e)))?;
    }
    drop(api);
    pool.close().await;
    Ok(())
}

/// The Redis transport of the round, when `--redis-url` was given: streams under a prefix of
/// the round's own (`mysqlq-example-<pid>-<random>`), deleted at the end of the round.
async fn connect_redis(options: &Options) -> Result<Option<mysqlq::redis::Redis>, String> {
    let Some(url) = &options.redis_url else {
        return Ok(None);
    };
    let config = mysqlq::redis::RedisConfig {
        prefix: format!(
            "mysqlq-example-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ),
        ..mysqlq::redis::RedisConfig::default()
    };
    mysqlq::redis::Redis::connect_with(url, config)
        .await
        .map(Some)
        .map_err(|e| format!("cannot use Redis at --redis-url: {}", error_chain(&e)))
}

/// Over Redis, every entry was acknowledged and deleted once its outcome was in MySQL: the
/// streams end empty, with nothing pending.
async fn check_streams_empty(redis: &mysqlq::redis::Redis, v: &mut Vec<String>) {
    let queues = [QUEUE.to_owned(), PRODUCER_QUEUE.to_owned()];
    match redis.streams(&queues).await {
        Ok(streams) => {
            for s in streams {
                if s.length > 0 || s.pending > 0 {
                    v.push(format!(
                        "stream {} ends with {} entries, {} pending",
                        s.stream, s.length, s.pending
                    ));
                }
            }
        }
        Err(e) => v.push(format!("cannot read the streams: {}", error_chain(&e))),
    }
}

/// Deletes the round's streams.
async fn delete_streams(url: &str, redis: &mysqlq::redis::Redis) {
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    if let Ok(mut c) = client.get_multiplexed_async_connection().await {
        let keys = [redis.stream_key(QUEUE), redis.stream_key(PRODUCER_QUEUE)];
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&keys).query_async(&mut c).await;
    }
}

/// Creates the example's `place` table with places `1..=places`, the first `active` of them
/// active.
pub async fn create_places(pool: &sqlx::MySqlPool, places: u64, active: u64) -> Result<(), String> {
    sqlx::query(
        "CREATE TABLE place (\
           id BIGINT UNSIGNED NOT NULL PRIMARY KEY, \
           name VARCHAR(100) NOT NULL, \
           active TINYINT(1) NOT NULL, \
           population BIGINT NULL, \
           refresh_count INT UNSIGNED NOT NULL DEFAULT 0, \
           refreshed_at DATETIME(6) NULL\
         ) ENGINE = InnoDB",
    )
    .execute(pool)
    .await
    .map_err(|e| format!("cannot create the place table: {e}"))?;
    for id in 1..=places {
        sqlx::query("INSERT INTO place (id, name, active) VALUES (?, ?, ?)")
            .bind(id)
            .bind(format!("place {id}"))
            .bind(id <= active)
            .execute(pool)
            .await
            .map_err(|e| format!("cannot insert a place: {e}"))?;
    }
    Ok(())
}
