//! The order-email example's scenario driver: its options, the round (schema, fake mail server,
//! worker, the orders), the summary and the `--once` verdict. The story is in the parent module.

use std::fmt;
use std::time::Duration;

use mysqlq::{Registry, Worker, WorkerHandle};
use sqlx::MySqlPool;

use super::checks::{check, wait_settled};
use super::fake_mail::{FakeMailServer, Faults, MailStats};
use super::{BOUNCE_ADDRESS, MailEndpoint, Placed, QUEUE, SendOrderEmail, place_order};
use crate::runner::{self, Finished};
use crate::server::{error_chain, fresh_database};

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
    create_schema(&pool).await?;
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

/// Creates the example's `orders` table (its jobs' table comes from `mysqlq::migrate`).
pub async fn create_schema(pool: &MySqlPool) -> Result<(), String> {
    sqlx::query(
        "CREATE TABLE orders (\
           id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, \
           customer_email VARCHAR(255) NOT NULL, \
           total_cents BIGINT NOT NULL, \
           created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)\
         ) ENGINE = InnoDB",
    )
    .execute(pool)
    .await
    .map(drop)
    .map_err(|e| format!("cannot create the orders table: {e}"))
}
