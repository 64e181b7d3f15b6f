//! The worker runtime against a real server: retries by error class, panics, timeouts,
//! heartbeats, lost leases, graceful shutdown, and (in real processes) SIGKILL recovery,
//! multi-process draining and leader failover.

#[path = "worker_procs.rs"]
mod worker_procs;

use std::time::Duration;

use mysqlq::store::{self, ClaimParams};
use mysqlq::{Job, JobId};
use mysqlq_tests::TestDb;
use mysqlq_tests::jobs::{AlwaysFails, Forever, Noop, Panicker, Permanent, Sleepy, Snoozer};

async fn row(db: &TestDb, id: JobId) -> (String, u32, Option<String>) {
    sqlx::query_as("SELECT status, attempts, last_error FROM job_queue WHERE id = ?")
        .bind(id.0)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

async fn runs(db: &TestDb, id: JobId, event: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM test_runs WHERE job_id = ? AND event = ?")
        .bind(id.0)
        .bind(event)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn completes_jobs_and_counts_them() {
    let db = TestDb::new().await;
    let ids: Vec<JobId> = {
        let mut v = Vec::new();
        for n in 0..50 {
            v.push(Noop { n }.enqueue(&db.pool).await.unwrap().id());
        }
        v
    };
    let worker = db.worker().concurrency(8).start().await.unwrap();
    db.wait_for(
        "all completed",
        "SELECT COUNT(*) = 50 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    let metrics = worker.metrics();
    let report = worker.shutdown().await.unwrap();
    assert_eq!(report.released, 0);
    for id in ids {
        assert_eq!(runs(&db, id, "done").await, 1, "job {id} ran once");
    }
    let c = metrics.counters.snapshot();
    assert_eq!((c.claims, c.completions, c.lost), (50, 50, 0));
    let text = metrics.render_prometheus();
    assert!(text.contains("mysqlq_completions_total"), "{text}");
    // Finished rows carry finished_at and no lease; the last attempt's worker and token stay
    // (they let a retried write recognise its own commit).
    let bad: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM job_queue WHERE finished_at IS NULL OR lease_expires_at IS NOT NULL \
         OR claim_token IS NULL OR locked_by IS NULL",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(bad, 0);
}

#[tokio::test]
async fn retry_schedule_is_written_to_available_at() {
    let db = TestDb::new().await;
    let id = AlwaysFails {}.enqueue(&db.pool).await.unwrap().id();
    let worker = db.worker().start().await.unwrap();
    db.wait_for(
        "first retry scheduled",
        &format!(
            "SELECT COUNT(*) FROM job_queue WHERE id = {} AND status = 'pending' AND attempts = 1",
            id.0
        ),
        Duration::from_secs(20),
    )
    .await;
    worker.shutdown().await.unwrap();
    let (delay_ms, err): (i64, String) = sqlx::query_as(
        "SELECT TIMESTAMPDIFF(MICROSECOND, updated_at, available_at) DIV 1000, last_error FROM job_queue WHERE id = ?",
    )
    .bind(id.0)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    // First entry of "10s, 20s, 40s", jittered by ±10 %.
    assert!(
        (9_000..=11_000).contains(&delay_ms),
        "retry in {delay_ms} ms"
    );
    assert!(
        err.contains("upstream returned 503") && err.contains("attempt 1 of 4"),
        "{err}"
    );
}

#[tokio::test]
async fn permanent_error_fails_after_one_attempt() {
    let db = TestDb::new().await;
    let id = Permanent {}.enqueue(&db.pool).await.unwrap().id();
    let worker = db.worker().start().await.unwrap();
    db.wait_for(
        "failed",
        "SELECT COUNT(*) FROM job_queue WHERE status = 'failed'",
        Duration::from_secs(20),
    )
    .await;
    let m = worker.metrics();
    worker.shutdown().await.unwrap();
    let (status, attempts, err) = row(&db, id).await;
    assert_eq!((status.as_str(), attempts), ("failed", 1));
    assert!(
        err.unwrap()
            .contains("invalid e-mail address (permanent error)")
    );
    assert_eq!(m.counters.snapshot().failures, 1);
}

#[tokio::test]
async fn snooze_does_not_consume_an_attempt() {
    let db = TestDb::new().await;
    let id = Snoozer {}.enqueue(&db.pool).await.unwrap().id();
    let worker = db.worker().start().await.unwrap();
    db.wait_for(
        "completed",
        "SELECT COUNT(*) FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(20),
    )
    .await;
    worker.shutdown().await.unwrap();
    let (_, attempts, _) = row(&db, id).await;
    // retries = 0 means a single attempt; it ran twice because the snooze gave it back.
    assert_eq!(attempts, 1);
    assert_eq!(runs(&db, id, "start").await, 2);
    assert_eq!(runs(&db, id, "done").await, 1);
}

#[tokio::test]
async fn a_panic_is_recorded_and_retried() {
    let db = TestDb::new().await;
    let id = Panicker {}.enqueue(&db.pool).await.unwrap().id();
    let worker = db.worker().start().await.unwrap();
    db.wait_for(
        "completed",
        "SELECT COUNT(*) FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(20),
    )
    .await;
    let m = worker.metrics();
    worker.shutdown().await.unwrap();
    let (_, attempts, err) = row(&db, id).await;
    assert_eq!(attempts, 2);
    assert!(
        err.unwrap()
            .contains("handler panicked: deliberate panic on attempt 1")
    );
    assert_eq!(m.counters.snapshot().panics, 1);
}

#[tokio::test]
async fn a_job_past_its_timeout_is_stopped_and_retried() {
    let db = TestDb::new().await;
    let id = Forever {}.enqueue(&db.pool).await.unwrap().id();
    let worker = db.worker().start().await.unwrap();
    db.wait_for(
        "failed after two timeouts",
        "SELECT COUNT(*) FROM job_queue WHERE status = 'failed'",
        Duration::from_secs(20),
    )
    .await;
    let m = worker.metrics();
    // The never-returning handler does not block shutdown.
    tokio::time::timeout(Duration::from_secs(10), worker.shutdown())
        .await
        .expect("shutdown not blocked")
        .unwrap();
    let (_, attempts, err) = row(&db, id).await;
    assert_eq!(attempts, 2);
    assert!(err.unwrap().contains("timed out after 1s"));
    assert_eq!(m.counters.snapshot().timeouts, 2);
}

#[tokio::test]
async fn heartbeats_keep_a_job_longer_than_its_lease() {
    let db = TestDb::new().await;
    let id = Sleepy { ms: 3_000 }.enqueue(&db.pool).await.unwrap().id();
    let worker = db
        .worker()
        .lease(Duration::from_secs(1))
        .heartbeat_interval(Duration::from_millis(250))
        .start()
        .await
        .unwrap();
    db.wait_for(
        "completed",
        "SELECT COUNT(*) FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(20),
    )
    .await;
    let m = worker.metrics();
    worker.shutdown().await.unwrap();
    let (_, attempts, _) = row(&db, id).await;
    assert_eq!(attempts, 1, "the reaper never took the job back");
    assert_eq!(runs(&db, id, "start").await, 1);
    assert_eq!(m.counters.snapshot().reaped, 0);
}

#[tokio::test]
async fn a_lost_lease_cancels_the_job_and_its_late_result_is_refused() {
    let db = TestDb::new().await;
    let id = Sleepy { ms: 60_000 }.enqueue(&db.pool).await.unwrap().id();
    let worker = db
        .worker()
        .lease(Duration::from_secs(2))
        .heartbeat_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    db.wait_for(
        "started",
        "SELECT COUNT(*) FROM test_runs WHERE event = 'start'",
        Duration::from_secs(20),
    )
    .await;
    // Another owner takes the job over (as after a lease expiry and a re-claim elsewhere).
    sqlx::query("UPDATE job_queue SET claim_token = 'someone-else-0000-0000-000000000000', locked_by = 'other' WHERE id = ?")
        .bind(id.0)
        .execute(&db.pool)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while worker.metrics().counters.snapshot().lost == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "lease loss not detected"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await.unwrap();
    let (status, _, _): (String, u32, Option<String>) = row(&db, id).await;
    let owner: String = sqlx::query_scalar("SELECT locked_by FROM job_queue WHERE id = ?")
        .bind(id.0)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        (status.as_str(), owner.as_str()),
        ("processing", "other"),
        "the new owner's state is untouched"
    );
    assert_eq!(runs(&db, id, "done").await, 0, "the handler was cancelled");
}

/// (pending rows, rows with no attempt taken, rows under a lease) of the test's `job_queue`.
async fn released_state(db: &TestDb) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT CAST(SUM(status = 'pending') AS SIGNED), CAST(SUM(attempts = 0) AS SIGNED), \
         CAST(SUM(lease_expires_at IS NOT NULL) AS SIGNED) FROM job_queue",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn graceful_shutdown_releases_running_jobs_without_consuming_attempts() {
    let db = TestDb::new().await;
    for _ in 0..6 {
        Sleepy { ms: 60_000 }.enqueue(&db.pool).await.unwrap();
    }
    let worker = db
        .worker()
        .concurrency(3)
        .shutdown_timeout(Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    db.wait_for(
        "three started",
        "SELECT COUNT(*) >= 3 FROM test_runs WHERE event = 'start'",
        Duration::from_secs(20),
    )
    .await;
    let report = worker.shutdown().await.unwrap();
    // The three running jobs, and any the worker had claimed ahead (the prefetch buffer).
    assert!(
        (3..=6).contains(&report.released) && report.finished == 0,
        "{report:?}"
    );
    assert_eq!(
        released_state(&db).await,
        (6, 6, 0),
        "all back to pending at once, attempts given back"
    );
    let stopped: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM mysqlq_worker WHERE stopped_at IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(stopped, 1);
}

/// A claim still in flight when a zero-grace shutdown begins (here: waiting behind `LOCK
/// TABLES`) is let finish, not aborted: what it claimed is released at once, attempts given
/// back, and no session of the worker is left holding row locks after `shutdown` returns. (The
/// shutdown used to abort the claim loop mid-statement: its connection was left in the middle
/// of a reply with the claim's transaction open.) And behind the table lock a claim waits no
/// longer than the worker's lock wait timeout.
#[tokio::test]
async fn a_claim_in_flight_at_a_zero_grace_shutdown_is_let_finish_and_released() {
    let db = TestDb::new().await;
    for _ in 0..4 {
        Sleepy { ms: 60_000 }.enqueue(&db.pool).await.unwrap();
    }
    let mut lock = db.connect().await;
    sqlx::query("LOCK TABLES job_queue WRITE")
        .execute(&mut lock)
        .await
        .unwrap();
    let worker = db
        .worker()
        .concurrency(2)
        .shutdown_timeout(Duration::ZERO)
        .lock_wait_timeout(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    // A statement of the worker waits for a metadata lock no longer than its lock wait
    // timeout (not the server's default of a year): it fails with 1205 and is retried.
    let metrics = worker.metrics();
    let waited = tokio::time::Instant::now() + Duration::from_secs(30);
    while metrics.counters.snapshot().lock_waits == 0 {
        assert!(
            tokio::time::Instant::now() < waited,
            "no lock wait timeout in 30 s behind LOCK TABLES: the worker's sessions wait for metadata locks unbounded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    db.wait_for(
        "a claim waiting for the table lock",
        &format!(
            "SELECT COUNT(*) > 0 FROM information_schema.PROCESSLIST WHERE DB = '{}' \
             AND STATE LIKE 'Waiting for table%' AND INFO LIKE '%mysqlq:%'",
            db.name
        ),
        Duration::from_secs(20),
    )
    .await;
    let stop = tokio::spawn(worker.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    sqlx::query("UNLOCK TABLES")
        .execute(&mut lock)
        .await
        .unwrap();
    let report = stop.await.unwrap().unwrap();
    // The claim came back with jobs; the shutdown handed them back instead of abandoning them.
    assert!(report.released >= 1 && report.finished == 0, "{report:?}");
    assert_eq!(
        released_state(&db).await,
        (4, 4, 0),
        "all pending, attempts given back ({report:?})"
    );
    // No transaction of the worker still holds a row.
    let mut tx = db.pool.begin().await.unwrap();
    let locked: Result<Vec<u64>, _> =
        sqlx::query_scalar("SELECT id FROM job_queue FOR UPDATE NOWAIT")
            .fetch_all(&mut *tx)
            .await;
    assert_eq!(locked.map(|v| v.len()).map_err(|e| e.to_string()), Ok(4));
    tx.rollback().await.unwrap();
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = '{}' \
             AND ID <> CONNECTION_ID() AND INFO LIKE CONCAT('%mysqlq', ':%')",
            db.name
        ))
        .await,
        0,
        "no statement of the worker still running"
    );
}

#[tokio::test]
async fn unknown_kinds_and_bad_payloads_get_a_recorded_error() {
    let db = TestDb::new().await;
    let insert = |kind: &'static str, payload: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query("INSERT INTO job_queue (queue_name, kind, payload) VALUES ('test', ?, ?)")
                .bind(kind)
                .bind(payload)
                .execute(&pool)
                .await
                .unwrap()
                .last_insert_id()
        }
    };
    let unknown = insert("no_such_job", "{}").await;
    let wrong_shape = insert(Noop::KIND, r#"{"n": "not a number"}"#).await;
    // Rows of many kinds this binary does not know (issue 27, item 5).
    for i in 0..20 {
        sqlx::query("INSERT INTO job_queue (queue_name, kind, payload) VALUES ('test', ?, '{}')")
            .bind(format!("stray_kind_{i}"))
            .execute(&db.pool)
            .await
            .unwrap();
    }
    // Plain SQL without a kind: the queue's only job... `test` has several, so it is unknown too.
    let worker = db.worker().start().await.unwrap();
    // Each has failed an attempt (a loaded host spreads the 22 first attempts over long enough
    // for the first of them to be retried already, so `attempts = 1` need not hold for all).
    db.wait_for(
        "all attempted",
        "SELECT COUNT(*) = 22 FROM job_queue WHERE attempts >= 1 AND last_error IS NOT NULL",
        Duration::from_secs(20),
    )
    .await;
    db.wait_for(
        "their statistics flushed",
        "SELECT COALESCE(SUM(runs), 0) >= 21 FROM mysqlq_kind_minute WHERE kind = '(unregistered)'",
        Duration::from_secs(20),
    )
    .await;
    let rendered = worker.metrics().render_prometheus();
    worker.shutdown().await.unwrap();
    // Unknown kinds share one label: they cannot grow the statistics or the metrics' series.
    let stray_rows = db
        .scalar("SELECT COUNT(*) FROM mysqlq_kind_minute WHERE kind LIKE 'stray_kind%' OR kind = 'no_such_job'")
        .await;
    assert_eq!(
        stray_rows, 0,
        "unknown kinds got statistics rows of their own"
    );
    assert!(!rendered.contains("stray_kind"), "{rendered}");
    assert!(rendered.contains("(unregistered)"), "{rendered}");
    let (_, _, err) = row(&db, JobId(unknown)).await;
    assert!(err.unwrap().contains("unknown job kind `no_such_job`"));
    let (_, _, err) = row(&db, JobId(wrong_shape)).await;
    assert!(err.unwrap().contains("payload does not match job `noop`"));
}

/// Holds one connection of the application's pool for `ms`, like a handler doing its own
/// database work through `ctx.pool()`.
#[mysqlq::job(queue = "hog", retries = 0)]
async fn pool_hog(ctx: mysqlq::JobContext, ms: u64) -> Result<(), mysqlq::JobError> {
    let pool = ctx
        .pool()
        .expect("the worker hands its pool to jobs")
        .clone();
    let mut conn = pool.acquire().await.map_err(mysqlq::JobError::retry)?;
    tokio::time::sleep(Duration::from_millis(ms)).await;
    sqlx::query("SELECT 1")
        .execute(&mut *conn)
        .await
        .map_err(mysqlq::JobError::retry)?;
    Ok(())
}

#[tokio::test]
async fn handlers_holding_every_pool_connection_do_not_starve_the_worker() {
    // The application's pool has 2 connections; 4 handlers at once each hold one for longer than
    // the lease. Claims, heartbeats and completions run on the worker's own connections, so no
    // lease is lost and every job completes on its first and only attempt.
    let db = TestDb::new().await;
    let small = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(60))
        .connect_with(db.options.clone())
        .await
        .unwrap();
    for _ in 0..8 {
        PoolHog { ms: 1_200 }.enqueue(&db.pool).await.unwrap();
    }
    let worker = mysqlq::Worker::builder(small)
        .queues(["hog"])
        .concurrency(4)
        .lease(Duration::from_millis(800))
        .heartbeat_interval(Duration::from_millis(100))
        .maintenance(Duration::from_millis(200), Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    db.wait_for(
        "all eight done",
        "SELECT COUNT(*) = 8 FROM job_queue WHERE status IN ('completed', 'failed')",
        Duration::from_secs(60),
    )
    .await;
    let m = worker.metrics();
    worker.shutdown().await.unwrap();
    let failed: Vec<(u64, Option<String>)> =
        sqlx::query_as("SELECT id, last_error FROM job_queue WHERE status <> 'completed'")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert!(failed.is_empty(), "jobs not completed: {failed:?}");
    assert_eq!(m.counters.snapshot().lost, 0, "no lease was lost");
}

#[tokio::test]
async fn without_prefetch_claims_respect_free_slots() {
    let db = TestDb::new().await;
    for _ in 0..10 {
        Sleepy { ms: 60_000 }.enqueue(&db.pool).await.unwrap();
    }
    let worker = db
        .worker()
        .concurrency(4)
        .batch_size(100)
        .prefetch(0, Duration::from_secs(1))
        .shutdown_timeout(Duration::ZERO)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "four started",
        "SELECT COUNT(*) >= 4 FROM test_runs WHERE event = 'start'",
        Duration::from_secs(20),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await; // several poll cycles while saturated
    assert_eq!(
        db.count("processing").await,
        4,
        "never more claimed than free slots"
    );
    worker.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_reaper_runs_on_the_leader_and_recovers_expired_leases() {
    let db = TestDb::new().await;
    let id = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id();
    // A worker that died: claimed with a short lease, never heard from again.
    let mut conn = db.connect().await;
    let claimed = store::job_claim(
        &mut conn,
        &ClaimParams {
            queue: "test",
            limit: 1,
            skip: 0,
            worker_id: "dead",
            token: "dead-0000-0000-0000-000000000000",
            lease: Duration::from_millis(1),
        },
    )
    .await
    .unwrap();
    assert_eq!(claimed.len(), 1);
    let worker = db.worker().start().await.unwrap();
    db.wait_for(
        "re-run and completed",
        "SELECT COUNT(*) FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(20),
    )
    .await;
    let m = worker.metrics();
    worker.shutdown().await.unwrap();
    let (_, attempts, _) = row(&db, id).await;
    assert_eq!(attempts, 2);
    assert_eq!(m.counters.snapshot().reaped, 1);
    let leader: Option<String> =
        sqlx::query_scalar("SELECT leader_id FROM mysqlq_leader WHERE name = 'maintenance'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(leader, None, "a clean shutdown resigns the lease");
}

#[tokio::test]
async fn testing_helpers_see_enqueued_jobs_and_run_them_inline() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    Noop { n: 7 }.enqueue(&mut tx).await.unwrap();
    let found = mysqlq::testing::assert_enqueued::<Noop, _, _>(&mut tx, |j| j.n == 7).await;
    assert_eq!(found.len(), 1);
    tx.rollback().await.unwrap();
    assert!(
        mysqlq::testing::enqueued::<Noop, _>(&db.pool)
            .await
            .unwrap()
            .is_empty()
    );
    let err = mysqlq::testing::run_inline(Permanent {}).await.unwrap_err();
    // Detached contexts have no pool: the job's first statement fails permanently.
    assert_eq!(err.class(), mysqlq::ErrorClass::Fail);
}

#[tokio::test]
async fn an_enqueue_in_this_process_wakes_an_idle_worker() {
    let db = TestDb::new().await;
    // An idle ceiling of 60 s: without the local wake-up the job would wait up to a minute.
    let worker = db
        .worker()
        .poll_interval(Duration::from_millis(5), Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    // Let the idle backoff grow past 1 s: 5 ms doubling, nine empty polls in a row.
    let mut events = worker.events();
    let mut empty_polls = 0;
    while empty_polls < 9 {
        match tokio::time::timeout(Duration::from_secs(30), events.recv()).await {
            Ok(Ok(
                mysqlq::WorkerEvent::Polled { claimed: 0 }
                | mysqlq::WorkerEvent::Probed { ready: 0 },
            )) => empty_polls += 1,
            Ok(_) => {}
            Err(_) => panic!("timed out waiting for the worker's polls"),
        }
    }
    Noop { n: 1 }.enqueue(&db.pool).await.unwrap();
    db.wait_for(
        "picked up long before the next poll",
        "SELECT COUNT(*) FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(10),
    )
    .await;
    worker.shutdown().await.unwrap();
}

/// Issue 26: a row another transaction holds (an application's `SELECT … FOR UPDATE`, or the
/// worker's own write of that job's outcome) must not hold up the heartbeats of every other job.
/// One heartbeat statement renews all leases; it used to wait for the row lock (up to
/// `lock_wait_timeout`, while the lease ran), so one held row stopped every renewal, and the
/// watchdog stopped every job. The heartbeat skips a row it cannot lock and tries it again soon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_held_by_another_transaction_does_not_hold_up_the_other_jobs_heartbeats() {
    let db = TestDb::new().await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(Sleepy { ms: 5_000 }.enqueue(&db.pool).await.unwrap().id());
    }
    let worker = db
        .worker()
        .concurrency(4)
        .lease(Duration::from_secs(2))
        .heartbeat_interval(Duration::from_millis(300))
        .lock_wait_timeout(Duration::from_secs(5))
        .start()
        .await
        .unwrap();
    let mut events = worker.events();
    db.wait_for(
        "four jobs started",
        "SELECT COUNT(*) >= 4 FROM test_runs WHERE event = 'start'",
        Duration::from_secs(30),
    )
    .await;
    // Hold the first job's row for 4 s: twice the lease.
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM job_queue WHERE id = ? FOR UPDATE")
        .bind(ids[0].0)
        .execute(&mut *tx)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    tx.rollback().await.unwrap();
    db.wait_for(
        "the three other jobs completed",
        &format!(
            "SELECT COUNT(*) >= 3 FROM job_queue WHERE status = 'completed' AND id IN ({}, {}, {})",
            ids[1].0, ids[2].0, ids[3].0
        ),
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    let rows: Vec<(u64, u32, Option<String>)> =
        sqlx::query_as("SELECT id, attempts, last_error FROM job_queue WHERE id <> ? ORDER BY id")
            .bind(ids[0].0)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    for (id, attempts, err) in &rows {
        assert_eq!(
            (*attempts, err.as_deref()),
            (1, None),
            "job {id}: its lease was not kept while another job's row was held"
        );
    }
    let mut stopped = Vec::new();
    while let Ok(e) = events.try_recv() {
        if let mysqlq::WorkerEvent::LeaseUnconfirmed { id } | mysqlq::WorkerEvent::LeaseLost { id } =
            e
            && id != ids[0]
        {
            stopped.push(id);
        }
    }
    assert!(
        stopped.is_empty(),
        "stopped for want of a heartbeat: {stopped:?}"
    );
}

/// The database's clock now, for comparing times it wrote.
async fn db_now(db: &TestDb) -> String {
    sqlx::query_scalar("SELECT CAST(UTC_TIMESTAMP(6) AS CHAR)")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// `claimed_at` of job `id` as text (`None` when NULL), and whether it lies between `since`
/// and now.
async fn claimed_at(db: &TestDb, id: u64, since: &str) -> (Option<String>, bool) {
    sqlx::query_as(
        "SELECT CAST(claimed_at AS CHAR), IFNULL(claimed_at BETWEEN ? AND UTC_TIMESTAMP(6), 0) <> 0 \
         FROM job_queue WHERE id = ?",
    )
    .bind(since)
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// `claimed_at` is when the current attempt was claimed: written by the claim's UPDATE, by a
/// Redis consumer's take of a relayed job (the relay's claim wrote it too: the take writes it
/// again, when the attempt starts), and by the handoff of a released workflow step to the
/// worker whose completion released it.
#[tokio::test]
async fn claimed_at_is_set_by_claims_takes_and_handoffs() {
    use mysqlq::store::workflow::{Handoff, wf_complete_steps};
    use mysqlq::store::{Owned, TakeParams};
    use mysqlq::workflow::Workflow;
    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    let lease = Duration::from_secs(60);
    let claim = |token: &str, worker_id: &str| {
        let (token, worker_id) = (token.to_owned(), worker_id.to_owned());
        let options = db.options.clone();
        async move {
            let mut conn = sqlx::ConnectOptions::connect(&options).await.unwrap();
            let p = ClaimParams {
                queue: "test",
                limit: 1,
                skip: 0,
                worker_id: &worker_id,
                token: &token,
                lease,
            };
            let jobs = if worker_id.starts_with(store::RELAY_PREFIX) {
                store::job_relay_claim(&mut conn, &p).await.unwrap()
            } else {
                store::job_claim(&mut conn, &p).await.unwrap()
            };
            jobs.into_iter().map(|j| j.id.0).collect::<Vec<u64>>()
        }
    };

    // The claim.
    let a = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id().0;
    assert_eq!(
        claimed_at(&db, a, "2000-01-01").await.0,
        None,
        "never claimed"
    );
    let since = db_now(&db).await;
    assert_eq!(claim(&mysqlq_tests::token(), "w1").await, [a]);
    let (at, fresh) = claimed_at(&db, a, &since).await;
    assert!(
        fresh,
        "the claim wrote claimed_at: {at:?}, claimed after {since}"
    );

    // A relay's claim, then a consumer's take under the relay's token.
    let b = Noop { n: 2 }.enqueue(&db.pool).await.unwrap().id().0;
    let relay = mysqlq_tests::token();
    assert_eq!(claim(&relay, "redis-relay:w1").await, [b]);
    db.exec(&format!(
        "UPDATE job_queue SET claimed_at = '2000-01-01' WHERE id = {b}"
    ))
    .await;
    let since = db_now(&db).await;
    let consumer = mysqlq_tests::token();
    let taken = store::job_take(
        &mut conn,
        &TakeParams {
            jobs: &[Owned {
                id: JobId(b),
                token: relay,
            }],
            worker_id: "w1",
            token: &consumer,
            lease,
        },
    )
    .await
    .unwrap();
    assert_eq!(taken, [JobId(b)]);
    let (at, fresh) = claimed_at(&db, b, &since).await;
    assert!(
        fresh,
        "the take wrote claimed_at: {at:?}, taken after {since}"
    );

    // A workflow step released by its dependency's completion, and handed to that worker.
    let wf = Workflow::new("handoff")
        .step("first", Noop { n: 3 })
        .unwrap()
        .step_after("then", Noop { n: 4 }, ["first"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let step = |name: &'static str| {
        sqlx::query_scalar::<_, u64>(
            "SELECT job_id FROM mysqlq_wf_step WHERE workflow_id = ? AND name = ?",
        )
        .bind(wf.0)
        .bind(name)
        .fetch_one(&db.pool)
    };
    let (first, then) = (step("first").await.unwrap(), step("then").await.unwrap());
    let token = mysqlq_tests::token();
    assert_eq!(claim(&token, "w1").await, [first]);
    let since = db_now(&db).await;
    let handoff_token = mysqlq_tests::token();
    let settled = wf_complete_steps(
        &mut conn,
        &[Owned {
            id: JobId(first),
            token,
        }],
        &[],
        Some(&Handoff {
            worker_id: "w1",
            token: &handoff_token,
            lease,
            room: vec![("test".to_owned(), 1)],
        }),
    )
    .await
    .unwrap();
    let handed: Vec<u64> = settled.handed_off.iter().map(|h| h.job.id.0).collect();
    assert_eq!(handed, [then], "the released step was handed off");
    let (at, fresh) = claimed_at(&db, then, &since).await;
    assert!(
        fresh,
        "the handoff wrote claimed_at: {at:?}, handed after {since}"
    );
}

/// The worker's row in `mysqlq_worker` holds the settings it started with (`config`): per
/// queue its concurrency (`null`: the worker's shared slots) and the queue-wide rate and global
/// limit it set, and its concurrency, lease, version and transport.
#[tokio::test]
async fn the_worker_row_holds_its_settings_per_queue() {
    let db = TestDb::new().await;
    let worker = db
        .worker()
        .concurrency(7)
        .queue_concurrency("limited", 2)
        .queue_rate("rated", "5/s".parse().unwrap())
        .queue_global_limit("rated", 3)
        .lease(Duration::from_secs(9))
        .start()
        .await
        .unwrap();
    let config: String =
        sqlx::query_scalar("SELECT CAST(config AS CHAR) FROM mysqlq_worker WHERE worker_id = ?")
            .bind(worker.id())
            .fetch_one(&db.pool)
            .await
            .unwrap();
    worker.shutdown().await.unwrap();
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(
        config,
        serde_json::json!({
            "queues": {
                "test": {"concurrency": null},
                "limited": {"concurrency": 2},
                "rated": {"concurrency": null, "rate": "5/s", "global": 3},
            },
            "concurrency": 7,
            "lease_ms": 9000,
            "version": mysqlq::VERSION,
            "redis": false,
        })
    );
}
