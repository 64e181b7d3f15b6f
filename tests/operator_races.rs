//! Operator actions while workers run, and settings that would break a worker (issue 27): each
//! test here has workers **running** during the operator action, since the walks over a static
//! table cannot show these races.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mysqlq::admin::{Admin, JobSelection, Selection};
use mysqlq::hooks::{BoxFuture, Hook, Hooks, JobRun};
use mysqlq::{EnqueueOptions, JobContext, JobError, JobId, NewJob};
use mysqlq_tests::TestDb;

/// Snoozes a millisecond, every time: always between `pending` and `processing`.
#[mysqlq::job(queue = "spin", retries = 3)]
async fn spin(_ctx: JobContext, n: u32) -> Result<(), JobError> {
    let _ = n;
    Err(JobError::snooze(Duration::from_millis(1)))
}

/// Fails for good at once.
#[mysqlq::job(queue = "doomed", retries = 0)]
async fn doomed(_ctx: JobContext, n: u32) -> Result<(), JobError> {
    Err(JobError::fail(format!("doomed {n}")))
}

/// Cancels itself as an operator would, learns of it through a heartbeat, then returns at once
/// (`Ok` for even `n`, an error for odd): its return races the worker's own news of the cancel.
#[mysqlq::job(queue = "selfcancel", retries = 3)]
async fn self_cancel(ctx: JobContext, n: u32) -> Result<(), JobError> {
    let pool = ctx.pool().expect("a pool").clone();
    Admin::new(pool)
        .cancel(JobSelection::Ids(&[ctx.id()]), "ops", Some("race"), |_| {})
        .await
        .map_err(JobError::retry)?;
    let _ = ctx.heartbeat().await;
    if n.is_multiple_of(2) {
        Ok(())
    } else {
        Err(JobError::retry("returned after the cancel"))
    }
}

async fn enqueue_all(db: &TestDb, jobs: Vec<NewJob>) {
    for chunk in jobs.chunks(1000) {
        mysqlq::enqueue_many(&db.pool, chunk.to_vec())
            .await
            .unwrap();
    }
}

/// Item 1: a queue-wide cancel walked `pending`, then `processing`; a job that was `processing`
/// while the first walk passed it and `pending` again before the second reached it was in
/// neither, and ran on after the command reported success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_wide_cancel_leaves_none_of_its_jobs_waiting_or_running_while_they_snooze() {
    let db = TestDb::new().await;
    let n = 3000;
    let jobs = (0..n)
        .map(|n| NewJob::from_job(&Spin { n }, &EnqueueOptions::new()).unwrap())
        .collect();
    enqueue_all(&db, jobs).await;
    let worker = db
        .worker()
        .queues(["spin"])
        .concurrency(64)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the jobs snoozing",
        "SELECT COUNT(*) >= 3000 FROM mysqlq_job_attempt",
        Duration::from_secs(60),
    )
    .await;
    let report = Admin::new(db.pool.clone())
        .cancel(
            JobSelection::Filter {
                queue: Some("spin"),
                kind: None,
            },
            "ops",
            None,
            |_| {},
        )
        .await
        .unwrap();
    let open = db
        .scalar(
            "SELECT COUNT(*) FROM job_queue WHERE queue_name = 'spin' \
             AND status IN ('pending', 'processing')",
        )
        .await;
    worker.shutdown().await.unwrap();
    assert_eq!(
        open, 0,
        "jobs of the queue still waiting or running after the cancel returned"
    );
    assert_eq!(
        report.cancelled,
        u64::from(n),
        "the report counts each job once"
    );
    assert_eq!(db.count("cancelled").await, i64::from(n));
    // The audit trail names each job the cancel changed, once, and counts them exactly.
    assert_eq!(
        db.scalar("SELECT CAST(SUM(jobs) AS SIGNED) FROM mysqlq_audit WHERE action = 'cancel'")
            .await,
        i64::from(n)
    );
    assert_eq!(
        db.scalar("SELECT COUNT(DISTINCT job_id) FROM mysqlq_audit_job")
            .await,
        i64::from(n)
    );
}

/// Item 2: `failed retry --all` walked failed jobs by (finished_at, id); a job it retried that
/// failed again lay ahead of the cursor and was retried again, and with workers failing jobs as
/// fast as it retried them the command never ended. It acts at most once per job now, on the
/// jobs that were failed when it began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_all_failed_jobs_while_workers_fail_them_again_retries_each_once() {
    let db = TestDb::new().await;
    let n = 2000;
    let jobs = (0..n)
        .map(|n| NewJob::from_job(&Doomed { n }, &EnqueueOptions::new()).unwrap())
        .collect();
    enqueue_all(&db, jobs).await;
    let worker = db
        .worker()
        .queues(["doomed"])
        .concurrency(32)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "every job failed",
        "SELECT COUNT(*) = 2000 FROM job_queue WHERE status = 'failed'",
        Duration::from_secs(60),
    )
    .await;
    let admin = Admin::new(db.pool.clone());
    let report = tokio::time::timeout(
        Duration::from_secs(120),
        admin.retry_failed(
            Selection::All {
                queue: Some("doomed"),
            },
            |_| {},
        ),
    )
    .await
    .expect("the retry of all failed jobs ends")
    .unwrap();
    assert_eq!(
        report.retried,
        u64::from(n),
        "each job that was failed when the command began is retried exactly once"
    );
    // Each job ran once more, and only once (its attempt history: two failures).
    db.wait_for(
        "every job failed again",
        "SELECT COUNT(*) = 2000 FROM job_queue WHERE status = 'failed'",
        Duration::from_secs(60),
    )
    .await;
    let runs = db.scalar("SELECT COUNT(*) FROM mysqlq_job_attempt").await;
    // Discarding all failed jobs while they are retried and failed again deletes only what was
    // failed when it began: retry them, then discard at once.
    let again = admin
        .retry_failed(Selection::All { queue: None }, |_| {})
        .await
        .unwrap();
    let discarded = admin
        .discard_failed(Selection::All { queue: None }, |_| {})
        .await
        .unwrap();
    worker.shutdown().await.unwrap();
    assert_eq!(runs, 2 * i64::from(n), "every job ran twice, not more");
    // On the trail: each retry linked each job it changed once (the primary key would hide a
    // second change of one job by one action, so the counts are compared with the jobs'
    // own history: every job was retried twice, by two actions).
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM (SELECT job_id FROM mysqlq_audit_job j \
             JOIN mysqlq_audit a ON a.id = j.audit_id AND a.action = 'retry' \
             GROUP BY job_id HAVING COUNT(*) = 2) t"
        )
        .await,
        i64::from(n)
    );
    assert_eq!(
        db.scalar("SELECT CAST(SUM(jobs) AS SIGNED) FROM mysqlq_audit WHERE action = 'retry'")
            .await,
        2 * i64::from(n)
    );
    assert_eq!(again.retried, u64::from(n));
    assert!(discarded.discarded <= u64::from(n), "{discarded:?}");
}

/// A worker hook counting `on_cancelled` per job.
#[derive(Default)]
struct CountCancels(Mutex<Vec<JobId>>);

impl Hook for CountCancels {
    fn on_cancelled<'a>(&'a self, job: &'a JobRun, _reason: &'a str) -> BoxFuture<'a, ()> {
        self.0.lock().unwrap().push(job.id());
        Box::pin(async {})
    }
}

/// Item 4: an operator's cancel racing the handler's own return. The worker learnt of the cancel
/// (and took the job's entry out) just as the handler returned; when the finished handler won
/// the race, the hook branch was never reached. The hook fires exactly once for each job whose
/// outcome is `cancelled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_cancelled_fires_once_when_a_cancel_races_the_handlers_return() {
    let db = TestDb::new().await;
    let n = 24;
    let jobs = (0..n)
        .map(|n| NewJob::from_job(&SelfCancel { n }, &EnqueueOptions::new()).unwrap())
        .collect();
    enqueue_all(&db, jobs).await;
    let hook = Arc::new(CountCancels::default());
    let worker = db
        .worker()
        .queues(["selfcancel"])
        .concurrency(8)
        .hooks(Hooks::new().with_arc(hook.clone()))
        .start()
        .await
        .unwrap();
    db.wait_for(
        "every job cancelled",
        "SELECT COUNT(*) = 24 FROM job_queue WHERE status = 'cancelled'",
        Duration::from_secs(60),
    )
    .await;
    // The hooks run on their own tasks: give the last ones a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while hook.0.lock().unwrap().len() < n as usize && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    worker.shutdown().await.unwrap();
    let mut heard = hook.0.lock().unwrap().clone();
    heard.sort_unstable();
    let before = heard.len();
    heard.dedup();
    assert_eq!(before, heard.len(), "a job's on_cancelled fired twice");
    assert_eq!(
        heard.len(),
        n as usize,
        "on_cancelled fired for {} of {n} jobs cancelled while they ran",
        heard.len()
    );
}

/// Item 3: every duration, count and id the worker takes is checked at start against its
/// documented range, with one error naming the setting.
#[tokio::test]
async fn settings_that_would_break_a_worker_are_refused_by_name() {
    let db = TestDb::new().await;
    type Change = fn(mysqlq::WorkerBuilder) -> mysqlq::WorkerBuilder;
    let cases: &[(&str, Change, &str)] = &[
        (
            "job timeout 0",
            |b| b.job_timeout(Duration::ZERO),
            "job timeout",
        ),
        (
            "job timeout of a year",
            |b| b.job_timeout(Duration::from_secs(365 * 24 * 3600)),
            "job timeout",
        ),
        (
            "maintenance interval 0",
            |b| b.maintenance(Duration::ZERO, Duration::from_secs(15)),
            "maintenance interval",
        ),
        (
            "statistics every millisecond",
            |b| b.stats_interval(Duration::from_millis(1)),
            "statistics interval",
        ),
        (
            "poll ceiling of a day",
            |b| b.poll_interval(Duration::from_millis(5), Duration::from_secs(24 * 3600)),
            "poll ceiling",
        ),
        (
            "shutdown timeout of a week",
            |b| b.shutdown_timeout(Duration::from_secs(7 * 24 * 3600)),
            "shutdown timeout",
        ),
        ("lease 0", |b| b.lease(Duration::ZERO), "lease"),
        ("concurrency 0", |b| b.concurrency(0), "concurrency"),
        (
            "a relay's worker id",
            |b| b.worker_id("redis-relay:mine"),
            "must not start with `redis-relay:`",
        ),
        ("an empty worker id", |b| b.worker_id("  "), "worker id"),
        (
            "a worker id past 128 characters",
            |b| b.worker_id("w".repeat(129)),
            "worker id",
        ),
        (
            "a worker id with a newline",
            |b| b.worker_id("a\nb"),
            "control characters",
        ),
    ];
    for (what, change, names) in cases {
        let err = change(db.worker())
            .start()
            .await
            .err()
            .unwrap_or_else(|| panic!("{what}: the worker started"));
        let text = err.to_string();
        assert!(
            text.contains(names),
            "{what}: `{text}` does not name `{names}`"
        );
        assert!(!text.contains('\n'), "{what}: one line: {text}");
    }
}

/// Item 5: tables that gained a row per key ever used (`mysqlq_concurrency`, `mysqlq_ordering`:
/// one per customer, say) or per tick (`mysqlq_cron`) were never pruned. The leader's pruner now
/// deletes key rows no waiting or running job names, and ticks older than a day but each
/// schedule's latest.
#[tokio::test]
async fn the_pruner_deletes_unused_key_rows_and_old_ticks_but_a_schedules_latest() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO mysqlq_concurrency (concurrency_key) \
         SELECT CONCAT('gone-', seq) FROM seq_1_to_1500",
    )
    .await;
    db.exec(
        "INSERT INTO mysqlq_ordering (ordering_key) SELECT CONCAT('gone-', seq) FROM seq_1_to_30",
    )
    .await;
    // Keys a waiting job still names stay.
    mysqlq::enqueue_many(
        &db.pool,
        vec![
            NewJob::from_job(
                &Spin { n: 1 },
                &EnqueueOptions::new()
                    .queue("parked")
                    .concurrency_limit("live", 1)
                    .ordering_key("live"),
            )
            .unwrap(),
        ],
    )
    .await
    .unwrap();
    db.exec("INSERT INTO mysqlq_concurrency (concurrency_key) VALUES ('live')")
        .await;
    db.exec("INSERT INTO mysqlq_ordering (ordering_key) VALUES ('live')")
        .await;
    db.exec(
        "INSERT INTO mysqlq_cron (name, tick, job_id, created_at) \
         SELECT 'nightly', '2020-01-01' + INTERVAL seq DAY, NULL, UTC_TIMESTAMP(6) - INTERVAL 2 DAY \
         FROM seq_1_to_10",
    )
    .await;
    db.exec(
        "INSERT INTO mysqlq_cron (name, tick, job_id) VALUES ('hourly', '2030-01-01 00:00:00', NULL), \
         ('hourly', '2030-01-01 01:00:00', NULL)",
    )
    .await;
    let worker = db
        .worker()
        .maintenance(Duration::from_millis(100), Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the unused key rows pruned (over several rounds: 1,500 is more than a batch)",
        "SELECT (SELECT COUNT(*) FROM mysqlq_concurrency) + (SELECT COUNT(*) FROM mysqlq_ordering) = 2",
        Duration::from_secs(60),
    )
    .await;
    db.wait_for(
        "the old ticks pruned",
        "SELECT COUNT(*) = 3 FROM mysqlq_cron",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    let live = db
        .scalar(
            "SELECT (SELECT COUNT(*) FROM mysqlq_concurrency WHERE concurrency_key = 'live') \
             + (SELECT COUNT(*) FROM mysqlq_ordering WHERE ordering_key = 'live')",
        )
        .await;
    assert_eq!(live, 2, "the keys of a waiting job stay");
    let kept = db
        .scalar("SELECT COUNT(*) FROM mysqlq_cron WHERE name = 'nightly' AND tick = '2020-01-11'")
        .await;
    assert_eq!(kept, 1, "a schedule's latest tick stays, however old");
    let recent = db
        .scalar("SELECT COUNT(*) FROM mysqlq_cron WHERE name = 'hourly'")
        .await;
    assert_eq!(recent, 2, "ticks younger than a day stay");
}

/// A purge of old failed jobs meeting a retry of one of them. The purge's history delete read
/// `job_queue` through `idx_job_finished` with shared locks (index entry, then row) while the
/// retry held the row and went on to change the index entry: a deadlock, and one of the two
/// failed with error 1213 (the retention pruner is the same statement: the race above failed
/// a CI run and 2 of 22 runs here beside the torture test this way). The retry locks the row as
/// `retry_failed` does, waits until the purge either waits for it or is done, then changes the
/// row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_and_a_retry_of_the_same_failed_job_do_not_deadlock() {
    let db = TestDb::new().await;
    let id = Doomed { n: 1 }.enqueue(&db.pool).await.unwrap().id();
    db.exec(&format!(
        "UPDATE job_queue SET status = 'failed', attempts = 1, \
         finished_at = UTC_TIMESTAMP(6) - INTERVAL 1 DAY WHERE id = {id}"
    ))
    .await;
    let mut retry = db.pool.begin().await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut *retry)
        .await
        .ok();
    sqlx::query("SELECT id FROM job_queue WHERE id = ? AND status = 'failed' FOR UPDATE")
        .bind(id.0)
        .fetch_all(&mut *retry)
        .await
        .unwrap();
    let admin = Admin::new(db.pool.clone());
    let purge = tokio::spawn(async move {
        admin
            .purge(
                mysqlq::admin::JobState::Failed,
                Duration::from_secs(60),
                100,
                |_| {},
            )
            .await
    });
    // The purge waits for the row (before the fix) or passes it over (after): either way it has
    // read the index entry a moment after its statement shows in the process list.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !purge.is_finished()
        && db
            .scalar(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE DB = DATABASE() AND INFO LIKE '%mysqlq:job_%prune%'",
            )
            .await
            == 0
    {
        assert!(std::time::Instant::now() < deadline, "the purge never ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let retried = sqlx::query(
        "UPDATE job_queue SET status = 'pending', attempts = 0, finished_at = NULL WHERE id = ?",
    )
    .bind(id.0)
    .execute(&mut *retry)
    .await;
    let committed = match retried {
        Ok(_) => retry.commit().await,
        Err(e) => Err(e),
    };
    let purged = purge.await.unwrap();
    assert!(committed.is_ok(), "the retry failed: {committed:?}");
    assert!(purged.is_ok(), "the purge failed: {purged:?}");
    assert_eq!(db.status(id.0).await.as_deref(), Some("pending"));
}

/// The leader's prune of silent workers never deadlocks with a worker registering or reporting
/// in. Found in the bench: `stats_prune`'s `DELETE … WHERE last_seen_at < ?` scanned
/// `idx_worker_seen`, locking each entry and then its row — also the first live row past the
/// range, to check it — while `worker_register` (and `worker_seen`) lock the row first and then
/// its `idx_worker_seen` entry: the register was rolled back (1213) and the worker failed to
/// start. Here a transaction stands in for the register (the row, then its entry) and the
/// prune runs between the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_silent_workers_never_deadlocks_with_workers_reporting_in() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO mysqlq_worker (worker_id, host, pid, queues, concurrency, running, started_at, last_seen_at) VALUES \
         ('stale', 'h', 1, 'q', 1, 0, UTC_TIMESTAMP(6) - INTERVAL 3 DAY, UTC_TIMESTAMP(6) - INTERVAL 2 DAY), \
         ('w1', 'h', 1, 'q', 1, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) - INTERVAL 1 SECOND)",
    )
    .await;
    let mut worker = db.connect().await;
    sqlx::query("BEGIN").execute(&mut worker).await.unwrap();
    sqlx::query("SELECT worker_id FROM mysqlq_worker WHERE worker_id = 'w1' FOR UPDATE")
        .execute(&mut worker)
        .await
        .unwrap();
    let mut leader = db.connect().await;
    sqlx::query("SET SESSION innodb_lock_wait_timeout = 5")
        .execute(&mut leader)
        .await
        .unwrap();
    let prune = tokio::spawn(async move {
        let r = mysqlq::store::stats_prune(&mut leader, Duration::from_secs(24 * 3600)).await;
        (r, leader)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = sqlx::query(
        "UPDATE mysqlq_worker SET last_seen_at = UTC_TIMESTAMP(6) WHERE worker_id = 'w1'",
    )
    .execute(&mut worker)
    .await;
    sqlx::query("COMMIT").execute(&mut worker).await.unwrap();
    let (pruned, _leader) = prune.await.unwrap();
    seen.expect("a worker reporting in is not rolled back by the prune");
    pruned.expect("the prune is not rolled back by a worker reporting in");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_worker WHERE worker_id = 'stale'")
            .await,
        0,
        "the silent worker was pruned"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_worker WHERE worker_id = 'w1'")
            .await,
        1,
        "the live worker was not"
    );
}
