//! **order-email**: an order and its e-mail job, committed together.
//!
//! The scenario of the article "Can MySQL SKIP LOCKED be used as a job queue?":
//!
//! - Each order is placed in **one transaction** that inserts the `orders` row and enqueues its
//!   [`SendOrderEmail`] job with `.enqueue(&mut tx)`. Some orders roll back on purpose: their job
//!   row vanishes with them, so they never produce mail.
//! - The job calls a mail API ([`FakeMailServer`], a minimal local HTTP endpoint) with
//!   [`JobContext::idempotency_key`]. The endpoint answers `503` to every few requests (a
//!   transient outage → the job is retried with backoff), sometimes delivers the mail but
//!   "loses" the answer (the retry repeats the same key → acknowledged, not delivered twice), and
//!   rejects `bounce@invalid` with `422` (a permanent error → the job lands in `failed` at once).
//! - [`run_once`] places the orders, runs a worker until every committed job is `completed` or
//!   `failed`, checks the invariants and returns a [`Summary`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mysqlq::{Classify, ErrorClass, Job, JobContext, Registry, Worker, WorkerHandle};
use sqlx::MySqlPool;

use crate::fake_http::{self, FakeServer, Request, lock};
use crate::runner::{self, Finished};
use crate::server::{error_chain, fresh_database};

/// The queue of [`SendOrderEmail`].
pub const QUEUE: &str = "order-email";
/// The address whose mail the fake server rejects permanently (HTTP 422).
pub const BOUNCE_ADDRESS: &str = "bounce@invalid";

/// Where the mail API listens; handed to the worker with `.state(...)` and read by the job with
/// `ctx.state::<MailEndpoint>()`.
#[derive(Debug, Clone)]
pub struct MailEndpoint {
    /// `host:port` of the HTTP endpoint.
    pub addr: SocketAddr,
    /// Print each attempt's outcome.
    pub verbose: bool,
}

/// Why sending an order's e-mail failed, and (through [`Classify`]) what the worker does next.
#[derive(Debug, thiserror::Error)]
pub enum EmailError {
    /// 5xx or 429: the mail server is having a moment. Retried with backoff.
    #[error("mail server unavailable: HTTP {status} {body}")]
    Unavailable {
        /// The HTTP status.
        status: u16,
        /// The response body.
        body: String,
    },
    /// Any other 4xx: the message itself is bad (e.g. the mailbox does not exist). Fails now.
    #[error("mail server rejected the message: HTTP {status} {body}")]
    Rejected {
        /// The HTTP status.
        status: u16,
        /// The response body.
        body: String,
    },
    /// The connection failed or timed out. Retried.
    #[error("cannot talk to the mail server")]
    Transport(#[from] std::io::Error),
    /// Reading the order failed. Retried.
    #[error("cannot read the order")]
    Database(#[from] sqlx::Error),
    /// The order does not exist (it cannot: the job commits with it). Fails now.
    #[error("order {0} does not exist")]
    NoSuchOrder(u64),
    /// The worker was started without `.state(MailEndpoint { .. })` or without a pool. Fails now.
    #[error("the worker has no MailEndpoint state or no pool")]
    NotConfigured,
}

impl Classify for EmailError {
    fn class(&self) -> ErrorClass {
        match self {
            Self::Unavailable { .. } | Self::Transport(_) | Self::Database(_) => ErrorClass::Retry,
            Self::Rejected { .. } | Self::NoSuchOrder(_) | Self::NotConfigured => ErrorClass::Fail,
        }
    }
}

/// Sends the confirmation mail of order `order_id`, at most once per job thanks to the
/// idempotency key, however often the job runs.
#[mysqlq::job(
    queue = "order-email",
    retries = 5,
    backoff = "200ms, 400ms, 800ms, 1s, 2s"
)]
pub async fn send_order_email(ctx: JobContext, order_id: u64) -> Result<(), EmailError> {
    let endpoint = ctx
        .state::<MailEndpoint>()
        .ok_or(EmailError::NotConfigured)?;
    let pool = ctx.pool().ok_or(EmailError::NotConfigured)?;
    // The order committed together with this job, so it is there.
    let (to, total_cents): (String, i64) =
        sqlx::query_as("SELECT customer_email, total_cents FROM orders WHERE id = ?")
            .bind(order_id)
            .fetch_optional(pool)
            .await?
            .ok_or(EmailError::NoSuchOrder(order_id))?;
    let body = serde_json::json!({
        "order_id": order_id,
        "to": to,
        "subject": format!("Your order #{order_id} ({}.{:02} EUR) is confirmed", total_cents / 100, total_cents % 100),
    })
    .to_string();
    let key = ctx.idempotency_key();
    let result = match post_send(endpoint.addr, &key, &body).await {
        Ok((status, _)) if (200..300).contains(&status) => Ok(()),
        Ok((status, body)) if status >= 500 || status == 429 => {
            Err(EmailError::Unavailable { status, body })
        }
        Ok((status, body)) => Err(EmailError::Rejected { status, body }),
        Err(e) => Err(EmailError::Transport(e)),
    };
    if endpoint.verbose {
        let who = format!(
            "  job {:>3} order {:>3} attempt {}/{}",
            ctx.id(),
            order_id,
            ctx.attempt(),
            ctx.max_attempts()
        );
        match &result {
            Ok(()) => println!("{who}: sent (key {key})"),
            Err(e) => {
                let next = match e.class() {
                    ErrorClass::Retry if ctx.is_last_attempt() => "out of attempts → failed",
                    ErrorClass::Retry => "transient → retry after backoff",
                    _ => "permanent → failed now, no retry",
                };
                println!("{who}: {e} → {next}");
            }
        }
    }
    result
}

/// POSTs `body` to `http://addr/send` with an `Idempotency-Key` header; returns the status and
/// body of the answer. Hand-written HTTP/1.1, one request per connection.
async fn post_send(addr: SocketAddr, key: &str, body: &str) -> std::io::Result<(u16, String)> {
    let request = format!(
        "POST /send HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nIdempotency-Key: {key}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    fake_http::exchange(addr, &request, "mail server").await
}

/// Which requests the fake mail server answers badly. Request numbers count from 1 over all
/// requests; 0 disables a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    /// Every n-th request gets `503` and delivers nothing (an outage).
    pub outage_every: u64,
    /// Every n-th request (unless it is an outage) delivers the mail but answers `503`, as if
    /// the answer had been lost: the job retries with the same idempotency key.
    pub lost_ack_every: u64,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            outage_every: 3,
            lost_ack_every: 7,
        }
    }
}

/// One mail the fake server delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The idempotency key it was sent with.
    pub key: String,
    /// The order it confirms.
    pub order_id: u64,
    /// The recipient.
    pub to: String,
}

/// What the fake mail server saw.
#[derive(Debug, Clone, Default)]
pub struct MailStats {
    /// Requests received.
    pub requests: u64,
    /// Mails delivered, by idempotency key (a key is delivered at most once).
    pub deliveries: BTreeMap<String, Delivery>,
    /// Requests answered `503` because of an injected outage.
    pub outages: u64,
    /// Mails delivered whose answer was "lost" (`503`).
    pub lost_acks: u64,
    /// Requests repeating an already delivered key: acknowledged, not delivered again.
    pub duplicates: u64,
    /// Requests rejected with a 4xx.
    pub rejected: u64,
}

/// A minimal mail API on `127.0.0.1:<free port>`: `POST /send` with an `Idempotency-Key` header
/// and a JSON body `{"order_id", "to", "subject"}`. Stops when dropped.
#[derive(Debug)]
pub struct FakeMailServer(FakeServer<MailStats>);

impl FakeMailServer {
    /// Starts the server with the given faults.
    pub async fn start(faults: Faults, verbose: bool) -> std::io::Result<Self> {
        FakeServer::start(move |request, stats| {
            std::future::ready(decide(&request, &stats, faults, verbose))
        })
        .await
        .map(Self)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.0.addr()
    }

    /// A copy of what it saw so far.
    pub fn stats(&self) -> MailStats {
        self.0.stats()
    }
}

/// The mail server's logic: faults, idempotency, bounces, delivery.
fn decide(
    request: &Request,
    stats: &Mutex<MailStats>,
    faults: Faults,
    verbose: bool,
) -> (u16, String) {
    if request.method != "POST" || request.path != "/send" {
        return (404, "only POST /send".to_owned());
    }
    let Some(key) = request
        .header("idempotency-key")
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
    else {
        return (400, "missing Idempotency-Key header".to_owned());
    };
    let mut s = lock(stats);
    s.requests += 1;
    let n = s.requests;
    if faults.outage_every > 0 && n.is_multiple_of(faults.outage_every) {
        s.outages += 1;
        return (503, "injected outage, try again later".to_owned());
    }
    if let Some(done) = s.deliveries.get(&key) {
        let order_id = done.order_id;
        s.duplicates += 1;
        if verbose {
            println!(
                "  mail      order {order_id:>3}: key {key} seen before → acknowledged, NOT delivered again"
            );
        }
        return (200, r#"{"status":"duplicate"}"#.to_owned());
    }
    let message: serde_json::Value = match serde_json::from_slice(&request.body) {
        Ok(v) => v,
        Err(e) => return (400, format!("bad JSON: {e}")),
    };
    let (Some(order_id), Some(to)) = (message["order_id"].as_u64(), message["to"].as_str()) else {
        return (400, "order_id and to are required".to_owned());
    };
    if to.ends_with("@invalid") {
        s.rejected += 1;
        if verbose {
            println!("  mail      order {order_id:>3}: mailbox {to} does not exist → 422");
        }
        return (422, format!("mailbox {to} does not exist"));
    }
    let to = to.to_owned();
    s.deliveries.insert(
        key.clone(),
        Delivery {
            key: key.clone(),
            order_id,
            to: to.clone(),
        },
    );
    if faults.lost_ack_every > 0 && n.is_multiple_of(faults.lost_ack_every) {
        s.lost_acks += 1;
        if verbose {
            println!(
                "  mail      order {order_id:>3}: ✉ delivered to {to}, but the answer is lost (503)"
            );
        }
        return (503, "gateway timeout after delivery".to_owned());
    }
    if verbose {
        println!("  mail      order {order_id:>3}: ✉ delivered to {to}");
    }
    (200, r#"{"status":"sent"}"#.to_owned())
}

/// Settings of one round.
#[derive(Debug, Clone)]
pub struct Options {
    /// Orders to place.
    pub orders: u32,
    /// Every n-th order rolls back (0: none).
    pub rollback_every: u32,
    /// The n-th order (1-based) goes to [`BOUNCE_ADDRESS`] (0: none). Must not be one that rolls
    /// back.
    pub bounce_order: u32,
    /// Faults of the mail server.
    pub faults: Faults,
    /// The database to (re)create for the round.
    pub database: String,
    /// Jobs the worker runs at once.
    pub concurrency: usize,
    /// How long to wait for every job to finish.
    pub timeout: Duration,
    /// Print what happens as it happens.
    pub verbose: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            orders: 20,
            rollback_every: 5,
            bounce_order: 7,
            faults: Faults::default(),
            database: crate::server::unique_database("order_email"),
            concurrency: 4,
            timeout: Duration::from_secs(60),
            verbose: true,
        }
    }
}

/// The outcome of a round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Orders committed (each with its job).
    pub committed: usize,
    /// Orders rolled back (with their job).
    pub rolled_back: usize,
    /// Committed orders whose mail was delivered exactly once.
    pub delivered_once: usize,
    /// Jobs that ended `failed`.
    pub failed: usize,
    /// The id of the bounce order's job, if there was one.
    pub bounce_job: Option<u64>,
    /// Attempts that failed and were retried (worker counter).
    pub retries: u64,
    /// `503` outages injected by the mail server.
    pub outages: u64,
    /// Repeated sends absorbed by the idempotency key (lost answers, then retried).
    pub duplicates_absorbed: u64,
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
            "order-email: {} orders committed, {} rolled back, {} mails delivered once, {} failed{}, \
             {} retries ({} outages, {} repeated send{} absorbed by the idempotency key) — ",
            self.committed,
            self.rolled_back,
            self.delivered_once,
            self.failed,
            if self.bounce_job.is_some() {
                " (bounce)"
            } else {
                ""
            },
            self.retries,
            self.outages,
            self.duplicates_absorbed,
            if self.duplicates_absorbed == 1 {
                ""
            } else {
                "s"
            },
        )?;
        runner::verdict(f, &self.violations)
    }
}

/// A finished round whose worker and mail server are still running.
#[derive(Debug)]
pub struct Round {
    /// What happened, and whether the invariants held.
    pub summary: Summary,
    /// The pool on the round's database.
    pub pool: MySqlPool,
    worker: WorkerHandle,
    mail: FakeMailServer,
}

impl Round {
    /// The mail server's view.
    pub fn mail_stats(&self) -> MailStats {
        self.mail.stats()
    }

    /// Shuts the worker down gracefully and stops the mail server.
    pub async fn shutdown(self) -> Result<(), String> {
        let report = self
            .worker
            .shutdown()
            .await
            .map_err(|e| format!("worker shutdown failed: {}", error_chain(&e)))?;
        drop(self.mail);
        self.pool.close().await;
        if report.released > 0 {
            return Err(format!(
                "{} jobs were still running at shutdown and were released",
                report.released
            ));
        }
        Ok(())
    }
}

impl Finished<Options> for Round {
    fn database(options: &Options) -> &str {
        &options.database
    }

    fn summary(&self) -> String {
        self.summary.to_string()
    }

    fn ok(&self) -> bool {
        self.summary.ok()
    }

    fn still_running(&self, _options: &Options) -> String {
        format!(
            "worker still running on queue `{QUEUE}` (enqueue more SendOrderEmail jobs to watch them); Ctrl-C to stop"
        )
    }

    fn shutdown(self) -> impl Future<Output = Result<(), String>> {
        Round::shutdown(self)
    }
}

/// One complete round with the default [`Options`] against the server at `url` (its database
/// name, if any, is ignored: the round uses a database of its own, `mysqlq_example_order_email_<pid>_<random>`, dropped at the end).
pub async fn run_once(url: &str) -> Result<Summary, String> {
    run_once_with(url, &Options::default()).await
}

/// One complete round with `options`; the worker is shut down before this returns.
pub async fn run_once_with(url: &str, options: &Options) -> Result<Summary, String> {
    let round = run_round(url, options).await?;
    let summary = round.summary.clone();
    round.shutdown().await?;
    Ok(summary)
}

/// Places the orders, runs a worker until every committed job is `completed` or `failed`, and
/// checks the invariants; the worker keeps running in the returned [`Round`].
pub async fn run_round(url: &str, options: &Options) -> Result<Round, String> {
    if options.rollback_every > 0
        && options.bounce_order > 0
        && options.bounce_order.is_multiple_of(options.rollback_every)
    {
        return Err(format!(
            "bounce order {} would roll back (every {}th does); pick another",
            options.bounce_order, options.rollback_every
        ));
    }
    let say = |line: String| {
        if options.verbose {
            println!("{line}");
        }
    };
    let pool = fresh_database(
        url,
        &options.database,
        Worker::recommended_pool_size(options.concurrency) + 2,
    )
    .await?;
    sqlx::query(
        "CREATE TABLE orders (\
           id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, \
           customer_email VARCHAR(255) NOT NULL, \
           total_cents BIGINT NOT NULL, \
           created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)\
         ) ENGINE = InnoDB",
    )
    .execute(&pool)
    .await
    .map_err(|e| format!("cannot create the orders table: {e}"))?;
    say(format!(
        "database `{}` recreated, mysqlq schema v{} applied, table `orders` created",
        options.database,
        mysqlq::SCHEMA_VERSION
    ));

    let mail = FakeMailServer::start(options.faults, options.verbose)
        .await
        .map_err(|e| format!("cannot start the fake mail server: {e}"))?;
    say(format!(
        "fake mail API on http://{}/send: 503 outage every {} requests, lost answer every {}, 422 for {BOUNCE_ADDRESS}",
        mail.addr(),
        options.faults.outage_every,
        options.faults.lost_ack_every
    ));

    let registry = Registry::new()
        .register::<SendOrderEmail>()
        .map_err(|e| format!("cannot register the job: {}", error_chain(&e)))?;
    let worker = Worker::builder(pool.clone())
        .registry(registry)
        .queues([QUEUE])
        .concurrency(options.concurrency)
        .poll_interval(Duration::from_millis(10), Duration::from_millis(200))
        .lease(Duration::from_secs(10))
        .maintenance(Duration::from_secs(1), Duration::from_secs(5))
        .shutdown_timeout(Duration::from_secs(10))
        .state(MailEndpoint {
            addr: mail.addr(),
            verbose: options.verbose,
        })
        .start()
        .await
        .map_err(|e| format!("cannot start the worker: {}", error_chain(&e)))?;
    say(format!(
        "worker {} started on queue `{QUEUE}`, {} jobs at once",
        worker.id(),
        options.concurrency
    ));

    // Place the orders: each in ONE transaction with its job.
    let mut committed: Vec<Placed> = Vec::new();
    let mut rolled_back: Vec<Placed> = Vec::new();
    for n in 1..=options.orders {
        let bounce = n == options.bounce_order;
        let email = if bounce {
            BOUNCE_ADDRESS.to_owned()
        } else {
            format!("customer{n}@example.com")
        };
        let total_cents = 1_000 + i64::from(n) * 250;
        let rollback = options.rollback_every > 0 && n.is_multiple_of(options.rollback_every);
        let placed = place_order(&pool, &email, total_cents, rollback, bounce).await?;
        if rollback {
            say(format!(
                "order {:>3} for {email}: job {} enqueued, then the transaction ROLLED BACK (no order, no job, no mail)",
                placed.order_id, placed.job_id
            ));
            rolled_back.push(placed);
        } else {
            say(format!(
                "order {:>3} for {email}: committed together with job {}",
                placed.order_id, placed.job_id
            ));
            committed.push(placed);
        }
    }

    // Let the worker finish every committed job.
    let waited = wait_settled(&pool, &committed, options.timeout).await?;
    say(format!(
        "all {} committed jobs finished (completed or failed) after {:.1} s",
        committed.len(),
        waited.as_secs_f64()
    ));

    let mut summary = check(&pool, &committed, &rolled_back, &mail.stats()).await?;
    summary.retries = worker.metrics().counters.snapshot().retries;
    if let Some(job) = summary.bounce_job {
        let last_error: Option<String> =
            sqlx::query_scalar("SELECT last_error FROM job_queue WHERE id = ?")
                .bind(job)
                .fetch_one(&pool)
                .await
                .map_err(|e| format!("cannot read the failed job: {e}"))?;
        say(format!(
            "job {job} is `failed`: {}\n  an operator fixes the address, then retries it with:  mysqlq-cli failed retry {job}",
            last_error.unwrap_or_default()
        ));
    }
    Ok(Round {
        summary,
        pool,
        worker,
        mail,
    })
}

/// An order placed in its own transaction.
#[derive(Debug, Clone)]
struct Placed {
    order_id: u64,
    job_id: u64,
    bounce: bool,
}

/// `BEGIN; INSERT order; enqueue its job; COMMIT or ROLLBACK`.
async fn place_order(
    pool: &MySqlPool,
    email: &str,
    total_cents: i64,
    rollback: bool,
    bounce: bool,
) -> Result<Placed, String> {
    let db = |e: sqlx::Error| format!("placing an order failed: {e}");
    let mut tx = pool.begin().await.map_err(db)?;
    let order_id = sqlx::query("INSERT INTO orders (customer_email, total_cents) VALUES (?, ?)")
        .bind(email)
        .bind(total_cents)
        .execute(&mut *tx)
        .await
        .map_err(db)?
        .last_insert_id();
    let job = SendOrderEmail { order_id }
        .enqueue(&mut tx)
        .await
        .map_err(|e| format!("enqueueing the e-mail job failed: {}", error_chain(&e)))?;
    if rollback {
        tx.rollback().await.map_err(db)?;
    } else {
        tx.commit().await.map_err(db)?;
    }
    Ok(Placed {
        order_id,
        job_id: job.id().0,
        bounce,
    })
}

/// Waits until every committed job is `completed` or `failed`; returns how long it took.
async fn wait_settled(
    pool: &MySqlPool,
    committed: &[Placed],
    timeout: Duration,
) -> Result<Duration, String> {
    let start = Instant::now();
    let ids: Vec<u64> = committed.iter().map(|p| p.job_id).collect();
    loop {
        let rows = job_rows(pool).await?;
        let open: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| {
                !rows
                    .get(id)
                    .is_some_and(|r| r.status == "completed" || r.status == "failed")
            })
            .collect();
        if open.is_empty() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "after {timeout:?}, {} jobs are still not finished: {open:?}",
                open.len()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A row of `job_queue` of kind [`SendOrderEmail`].
#[derive(Debug, Clone)]
struct JobRow {
    status: String,
    order_id: Option<u64>,
    last_error: Option<String>,
}

async fn job_rows(pool: &MySqlPool) -> Result<HashMap<u64, JobRow>, String> {
    let rows: Vec<(u64, String, String, Option<String>)> = sqlx::query_as(
        "SELECT id, CAST(status AS CHAR), CAST(payload AS CHAR), last_error FROM job_queue WHERE kind = ?",
    )
    .bind(SendOrderEmail::KIND)
    .fetch_all(pool)
    .await
    .map_err(|e| format!("cannot read job_queue: {e}"))?;
    Ok(rows
        .into_iter()
        .map(|(id, status, payload, last_error)| {
            let order_id = serde_json::from_str::<serde_json::Value>(&payload)
                .ok()
                .and_then(|v| v["order_id"].as_u64());
            (
                id,
                JobRow {
                    status,
                    order_id,
                    last_error,
                },
            )
        })
        .collect())
}

/// Checks the invariants of a round.
async fn check(
    pool: &MySqlPool,
    committed: &[Placed],
    rolled_back: &[Placed],
    mail: &MailStats,
) -> Result<Summary, String> {
    let mut v = Vec::new();
    let jobs = job_rows(pool).await?;
    let orders: Vec<u64> = sqlx::query_scalar("SELECT id FROM orders")
        .fetch_all(pool)
        .await
        .map_err(|e| format!("cannot read orders: {e}"))?;
    let mut jobs_per_order: HashMap<u64, usize> = HashMap::new();
    for row in jobs.values() {
        match row.order_id {
            Some(o) => *jobs_per_order.entry(o).or_default() += 1,
            None => v.push("a job row has no order_id in its payload".to_owned()),
        }
    }
    let mut mails_per_order: HashMap<u64, Vec<&Delivery>> = HashMap::new();
    for d in mail.deliveries.values() {
        mails_per_order.entry(d.order_id).or_default().push(d);
    }

    // Rolled-back orders: no order row, no job row, no mail.
    for p in rolled_back {
        if orders.contains(&p.order_id) {
            v.push(format!("rolled-back order {} exists", p.order_id));
        }
        if jobs.contains_key(&p.job_id) || jobs_per_order.contains_key(&p.order_id) {
            v.push(format!("rolled-back order {} has a job row", p.order_id));
        }
        if mails_per_order.contains_key(&p.order_id) {
            v.push(format!("rolled-back order {} produced mail", p.order_id));
        }
    }
    if orders.len() != committed.len() {
        v.push(format!(
            "{} order rows, {} committed",
            orders.len(),
            committed.len()
        ));
    }

    // Committed orders: exactly one job; mail exactly once (non-bounce), or failed (bounce).
    let mut summary = Summary {
        committed: committed.len(),
        rolled_back: rolled_back.len(),
        outages: mail.outages,
        duplicates_absorbed: mail.duplicates,
        ..Summary::default()
    };
    for p in committed {
        let n = jobs_per_order.get(&p.order_id).copied().unwrap_or(0);
        if n != 1 {
            v.push(format!("committed order {} has {n} jobs", p.order_id));
        }
        let Some(job) = jobs.get(&p.job_id) else {
            v.push(format!(
                "job {} of order {} is missing",
                p.job_id, p.order_id
            ));
            continue;
        };
        let mails = mails_per_order
            .get(&p.order_id)
            .map_or(&[][..], Vec::as_slice);
        if job.status == "failed" {
            summary.failed += 1;
        }
        if p.bounce {
            summary.bounce_job = Some(p.job_id);
            if job.status != "failed" {
                v.push(format!(
                    "bounce job {} is `{}`, not `failed`",
                    p.job_id, job.status
                ));
            }
            if job.last_error.as_deref().is_none_or(str::is_empty) {
                v.push(format!("bounce job {} has no last_error", p.job_id));
            }
            if !mails.is_empty() {
                v.push(format!("bounce order {} was delivered", p.order_id));
            }
            continue;
        }
        if job.status != "completed" {
            v.push(format!(
                "job {} of order {} is `{}` ({})",
                p.job_id,
                p.order_id,
                job.status,
                job.last_error.as_deref().unwrap_or("no error")
            ));
        }
        let expected_key = format!("mysqlq-job-{}", p.job_id);
        match mails {
            [d] if d.key == expected_key => summary.delivered_once += 1,
            [d] => v.push(format!(
                "order {} delivered under key {}, expected {expected_key}",
                p.order_id, d.key
            )),
            _ => v.push(format!(
                "order {} delivered {} times",
                p.order_id,
                mails.len()
            )),
        }
    }
    if jobs.len() != committed.len() {
        v.push(format!(
            "{} job rows for {} committed orders",
            jobs.len(),
            committed.len()
        ));
    }
    summary.violations = v;
    Ok(summary)
}
