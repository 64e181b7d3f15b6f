//! Runtime correctness: the defects a healthy worker must never have (issue "a healthy worker
//! must never lose, strand or double-run a job"), each with the test that failed before its
//! fix. Tests wait for the worker's events (`WorkerHandle::events`), not for fixed times.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mysqlq::store::{self, ClaimedJob, Owned};
use mysqlq::{JobContext, JobError, JobId, WorkerEvent};
use mysqlq_tests::jobs::Noop;
use mysqlq_tests::{PrivateServer, TestDb, wait_event};
use sqlx::Connection;

/// A job held by a dead worker ("ghost"): `processing`, lease expired a second ago.
async fn orphan(db: &TestDb, n: u8) -> JobId {
    let id = Noop { n: u64::from(n) }
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    sqlx::query(
        "UPDATE job_queue SET status = 'processing', attempts = 1, locked_by = 'ghost', \
         claim_token = ?, lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?",
    )
    .bind(uuid_like(n))
    .bind(id.0)
    .execute(&db.pool)
    .await
    .unwrap();
    id
}

/// A schedule of the test's `Tick` job under its own ledger name.
fn tick_every(expr: &str, name: &str) -> mysqlq::Periodic {
    mysqlq::Periodic::new(expr, &mysqlq_tests::jobs::Tick {})
        .unwrap()
        .named(name)
}

fn uuid_like(n: u8) -> String {
    format!("{n:08x}-0000-4000-8000-000000000000")
}

#[tokio::test]
async fn an_in_doubt_claim_is_resolved_by_its_token_after_the_transaction_ends() {
    let db = TestDb::new().await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(Noop { n }.enqueue(&db.pool).await.unwrap().id());
    }
    let jobs: Vec<ClaimedJob> = ids
        .iter()
        .map(|&id| ClaimedJob {
            id,
            kind: Some("noop".into()),
            payload: "{}".into(),
            attempt: 1,
            max_attempts: 3,
            meta: None,
            waited: Duration::ZERO,
            lease_sent: None,
            workflow: None,
            rate_slack: None,
        })
        .collect();
    // A claim's transaction, still open (its COMMIT "on the wire"), over the first two jobs.
    let token = uuid_like(1);
    let mut claimer = db.connect().await;
    let mut tx = claimer.begin().await.unwrap();
    sqlx::query(
        "UPDATE job_queue SET status = 'processing', claim_token = ?, attempts = 1, \
         lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL 60 SECOND WHERE id IN (?, ?)",
    )
    .bind(&token)
    .bind(ids[0].0)
    .bind(ids[1].0)
    .execute(&mut *tx)
    .await
    .unwrap();
    // Resolving waits for that transaction instead of reading the rows from before it.
    let resolver = {
        let (mut conn, token, jobs) = (db.connect().await, token.clone(), jobs.clone());
        tokio::spawn(async move { store::job_claim_resolve(&mut conn, &token, &jobs).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !resolver.is_finished(),
        "the resolution must wait for the in-doubt transaction"
    );
    tx.commit().await.unwrap();
    let owned = resolver.await.unwrap().unwrap();
    assert_eq!(
        owned.iter().map(|j| j.id).collect::<Vec<_>>(),
        ids[..2].to_vec(),
        "the claim committed: exactly its two jobs are adopted"
    );
    // A claim that was rolled back owns nothing.
    let mut tx = claimer.begin().await.unwrap();
    sqlx::query("UPDATE job_queue SET status = 'processing', claim_token = ? WHERE id = ?")
        .bind(uuid_like(2))
        .bind(ids[2].0)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let mut conn = db.connect().await;
    let owned = store::job_claim_resolve(&mut conn, &uuid_like(2), &jobs[2..])
        .await
        .unwrap();
    assert!(owned.is_empty(), "a rolled-back claim owns nothing");
}

#[tokio::test]
async fn absurd_delays_are_clamped_to_what_datetime_holds() {
    // Before: `UTC_TIMESTAMP(6) + INTERVAL <i64::MAX> MICROSECOND` failed with 1441 and the
    // worker retried the write forever while heartbeats kept the job alive.
    let db = TestDb::new().await;
    let id = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id();
    let mut conn = db.connect().await;
    let jobs = store::job_claim(
        &mut conn,
        &store::ClaimParams {
            queue: "test",
            limit: 1,
            skip: 0,
            worker_id: "w",
            token: &uuid_like(3),
            lease: Duration::from_secs(60),
        },
    )
    .await
    .unwrap();
    assert_eq!(jobs.len(), 1);
    let owned = Owned {
        id,
        token: uuid_like(3),
    };
    let written = store::job_finish_attempt(
        &mut conn,
        &owned,
        &store::Outcome::Snooze {
            delay: Duration::MAX,
        },
        "see you at the end of time",
    )
    .await
    .unwrap();
    assert_eq!(written, store::Written::Now);
    let year = db
        .scalar(&format!(
            "SELECT YEAR(available_at) FROM job_queue WHERE id = {}",
            id.0
        ))
        .await;
    assert_eq!(year, 9999);
}

/// Blocks its thread (no `.await`) for 6 s, far past its 300 ms timeout.
static BLOCKER_DONE: AtomicBool = AtomicBool::new(false);

#[mysqlq::job(queue = "blocking", retries = 3, backoff = "1h", timeout = "300ms")]
async fn thread_blocker(_ctx: JobContext) -> Result<(), JobError> {
    std::thread::sleep(Duration::from_secs(6));
    BLOCKER_DONE.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handler_blocking_its_thread_is_left_behind_after_its_timeout() {
    // Before: after the timeout the worker aborted the task and then waited for it, which a
    // thread-blocking handler never lets happen until it yields: the slot and the job stayed
    // held for as long as the thread was blocked.
    let db = TestDb::new().await;
    let id = ThreadBlocker {}.enqueue(&db.pool).await.unwrap().id();
    let worker = db.worker().queues(["blocking"]).start().await.unwrap();
    let mut events = worker.events();
    wait_event(
        &mut events,
        "the timed-out attempt recorded",
        Duration::from_secs(30),
        |e| matches!(e, WorkerEvent::Recorded { id: j, outcome: "retry" } if *j == id),
    )
    .await;
    assert!(
        !BLOCKER_DONE.load(Ordering::SeqCst),
        "the retry was recorded while the handler still blocked its thread"
    );
    let err: String = sqlx::query_scalar("SELECT last_error FROM job_queue WHERE id = ?")
        .bind(id.0)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        err.contains("timed out after 300ms") && err.contains("blocks its thread"),
        "{err}"
    );
    worker.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_releases_jobs_of_a_claim_that_lands_after_it_began_at_once() {
    // Before: jobs claimed by a claim still in flight when shutdown began were never started
    // and never released until the whole grace period had passed.
    let db = TestDb::new().await;
    let id = Noop { n: 7 }
        .enqueue_with(
            &db.pool,
            &mysqlq::EnqueueOptions::new().concurrency_limit("k", 1),
        )
        .await
        .unwrap()
        .id();
    // Hold the key's row: the worker's claim selects the job, then waits for this lock.
    let mut blocker = db.connect().await;
    let mut tx = blocker.begin().await.unwrap();
    sqlx::query("INSERT INTO mysqlq_concurrency (concurrency_key) VALUES ('k')")
        .execute(&mut *tx)
        .await
        .unwrap();
    let grace = Duration::from_secs(120);
    let worker = db.worker().shutdown_timeout(grace).start().await.unwrap();
    db.wait_for(
        "the worker's claim waits for the key",
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%mysqlq:job_claim_concurrency%'",
        Duration::from_secs(30),
    )
    .await;
    let began = std::time::Instant::now();
    let shutdown = tokio::spawn(worker.shutdown());
    tokio::time::sleep(Duration::from_millis(200)).await;
    tx.commit().await.unwrap(); // the claim commits after shutdown began
    let report = shutdown.await.unwrap().unwrap();
    assert_eq!(report.released, 1, "{report:?}");
    assert!(
        began.elapsed() < grace / 4,
        "shutdown waited {:?} of its {grace:?} grace period for a job that never started",
        began.elapsed()
    );
    let (status, attempts): (String, u32) =
        sqlx::query_as("SELECT status, attempts FROM job_queue WHERE id = ?")
            .bind(id.0)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((status.as_str(), attempts), ("pending", 0));
}

#[tokio::test]
async fn orphans_come_back_while_the_leader_is_dead_and_one_of_two_same_id_workers_leads() {
    let db = TestDb::new().await;
    let a = db.worker().worker_id("replica").start().await.unwrap();
    let b = db.worker().worker_id("replica").start().await.unwrap();
    let (mut ea, mut eb) = (a.events(), b.events());
    for e in [&mut ea, &mut eb] {
        for _ in 0..3 {
            wait_event(e, "maintenance rounds", Duration::from_secs(30), |e| {
                matches!(e, WorkerEvent::MaintenanceRound)
            })
            .await;
        }
    }
    let leaders = db.scalar("SELECT COUNT(*) FROM mysqlq_leader WHERE leader_id LIKE 'replica#%' AND expires_at > UTC_TIMESTAMP(6)",
    )
    .await;
    assert_eq!(leaders, 1);
    // Before: both replicas matched the lease row's `leader_id = 'replica'` and both led.
    let distinct: i64 = db
        .scalar("SELECT COUNT(DISTINCT leader_id) FROM mysqlq_leader")
        .await;
    assert_eq!(distinct, 1);

    // A dead leader: its lease row says someone else leads for an hour.
    db.exec("UPDATE mysqlq_leader SET leader_id = 'dead#0', expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR",
    )
    .await;
    // And a dead worker's job, its lease expired.
    let id = orphan(&db, 4).await;
    // Before: only the leader reaped, so the orphan waited for the dead leader's lease.
    let completed = |id: JobId| move |e: &WorkerEvent| matches!(e, WorkerEvent::Completed { id: j } if *j == id);
    tokio::select! {
        _ = wait_event(&mut ea, "the orphan completed", Duration::from_secs(30), completed(id)) => {}
        _ = wait_event(&mut eb, "the orphan completed", Duration::from_secs(30), completed(id)) => {}
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_failed_statistics_flush_counts_nothing_twice() {
    // Before: the flush was two statements; when the second failed, the first had been applied
    // and was applied again by the retry, so `stats` over-counted.
    let db = TestDb::new().await;
    for sql in [
        "CREATE TABLE fail_kind_stats (on_off INT NOT NULL)",
        "INSERT INTO fail_kind_stats VALUES (1)",
        "CREATE TRIGGER kind_stats_fail BEFORE INSERT ON mysqlq_kind_minute FOR EACH ROW \
         BEGIN IF (SELECT on_off FROM fail_kind_stats) = 1 THEN \
         SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'injected deadlock'; END IF; END",
    ] {
        db.exec(sql).await;
    }
    let worker = db.worker().start().await.unwrap();
    for n in 0..20 {
        Noop { n }.enqueue(&db.pool).await.unwrap();
    }
    db.wait_for(
        "all completed",
        "SELECT COUNT(*) = 20 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    // Let several flushes fail (the statistics interval is 200 ms), then let them through.
    let failing_since = std::time::Instant::now();
    while failing_since.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    db.exec("UPDATE fail_kind_stats SET on_off = 0").await;
    db.wait_for(
        "the statistics flushed",
        "SELECT COUNT(*) FROM mysqlq_kind_minute",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    let claims = db
        .scalar("SELECT CAST(SUM(claims) AS SIGNED) FROM mysqlq_stats_minute")
        .await;
    let completions = db
        .scalar("SELECT CAST(SUM(completions) AS SIGNED) FROM mysqlq_stats_minute")
        .await;
    assert_eq!((claims, completions), (20, 20));
}

#[mysqlq::job(queue = "slowish", retries = 0)]
async fn slowish(_ctx: JobContext, n: u32) -> Result<(), JobError> {
    let _ = n;
    tokio::time::sleep(Duration::from_millis(400)).await;
    Ok(())
}

#[tokio::test]
async fn one_row_locked_by_an_application_does_not_stall_other_completions() {
    // An application transaction holds a shared lock on one running job's row (what a dedupe
    // enqueue's holder lookup used to leave behind). Before: completions went out in one
    // statement per flush, so that lock stalled every completion of the worker.
    let db = TestDb::new().await;
    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(Slowish { n }.enqueue(&db.pool).await.unwrap().id());
    }
    let worker = db
        .worker()
        .queues(["slowish"])
        .concurrency(6)
        .lock_wait_timeout(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    db.wait_for(
        "all running",
        "SELECT COUNT(*) = 6 FROM job_queue WHERE status = 'processing'",
        Duration::from_secs(30),
    )
    .await;
    let mut app = db.connect().await;
    let mut tx = app.begin().await.unwrap();
    sqlx::query("SELECT id FROM job_queue WHERE id = ? LOCK IN SHARE MODE")
        .bind(ids[0].0)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    db.wait_for(
        "the five others completed while the lock is held",
        "SELECT COUNT(*) = 5 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    tx.commit().await.unwrap();
    db.wait_for(
        "the locked one completed once the lock went",
        "SELECT COUNT(*) = 6 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    let m = worker.metrics();
    worker.shutdown().await.unwrap();
    assert_eq!(m.counters.snapshot().lost, 0);
}

/// Waits until cancelled and records why.
#[mysqlq::job(queue = "cutoff", retries = 5, backoff = "100ms")]
async fn until_cancelled(ctx: JobContext) -> Result<(), JobError> {
    ctx.cancelled().await;
    Err(JobError::retry(format!(
        "cancelled: {}",
        ctx.cancel_reason()
            .map(|r| r.to_string())
            .unwrap_or_default()
    )))
}

#[tokio::test]
async fn a_worker_cut_off_from_the_database_stops_its_job_before_the_lease_ends() {
    // Before: a worker that could not reach the database kept running its handlers for up to
    // the job timeout while, once the lease ended, another worker could run the same job.
    let server = PrivateServer::start();
    let db = TestDb::on(&server.url()).await;
    let id = UntilCancelled {}.enqueue(&db.pool).await.unwrap().id();
    let worker = db
        .worker()
        .queues(["cutoff"])
        .lease(Duration::from_secs(2))
        .heartbeat_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let mut events = worker.events();
    wait_event(
        &mut events,
        "the job started",
        Duration::from_secs(30),
        |e| matches!(e, WorkerEvent::Started { id: j } if *j == id),
    )
    .await;
    // The server stops answering (SIGSTOP): no heartbeat can renew the lease. The guard
    // resumes it even when an assertion below fails, so the test cannot hang in clean-up.
    struct Resume<'a>(&'a PrivateServer);
    impl Drop for Resume<'_> {
        fn drop(&mut self) {
            self.0.resume();
        }
    }
    server.pause();
    let resume = Resume(&server);
    let paused_at = std::time::Instant::now();
    wait_event(
        &mut events,
        "the job stopped here",
        Duration::from_secs(30),
        |e| matches!(e, WorkerEvent::LeaseUnconfirmed { id: j } if *j == id),
    )
    .await;
    let stopped_after = paused_at.elapsed();
    wait_event(
        &mut events,
        "the handler returned",
        Duration::from_secs(30),
        |e| matches!(e, WorkerEvent::Returned { id: j } if *j == id),
    )
    .await;
    let returned_after = paused_at.elapsed();
    drop(resume);
    // The server ran the last heartbeat before the pause, so the lease ends at most 2 s after
    // it: the handler must be gone by then (the watchdog stops it at lease − margin after the
    // last heartbeat was sent).
    assert!(
        returned_after < Duration::from_secs(2),
        "the handler ran {returned_after:?} into a 2 s lease without a heartbeat (stopped after {stopped_after:?})"
    );
    // Once the database answers, the job is handed back (or reaped) and runs again.
    wait_event(
        &mut events,
        "the job claimed again",
        Duration::from_secs(60),
        |e| matches!(e, WorkerEvent::Started { id: j } if *j == id),
    )
    .await;
    worker.shutdown().await.unwrap();
}

#[tokio::test]
async fn lost_lock_races_in_claims_do_not_make_a_worker_back_off_as_if_idle() {
    // Before: after five claim deadlocks in a row the worker multiplied its idle wait by four
    // up to 5 s, and starved while others (here: nobody, once the conflicts stop) worked.
    let db = TestDb::new().await;
    for sql in [
        "CREATE TABLE conflict_on (on_off INT NOT NULL)",
        "INSERT INTO conflict_on VALUES (1)",
        "CREATE TRIGGER claim_conflict BEFORE UPDATE ON job_queue FOR EACH ROW \
         BEGIN IF NEW.status = 'processing' AND OLD.status = 'pending' \
         AND (SELECT on_off FROM conflict_on) = 1 THEN \
         SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'injected deadlock'; END IF; END",
    ] {
        db.exec(sql).await;
    }
    let id = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id();
    let worker = db.worker().start().await.unwrap();
    let m = worker.metrics();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while m.counters.snapshot().deadlocks < 40 {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker stopped trying: {} deadlocks",
            m.counters.snapshot().deadlocks
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut events = worker.events();
    db.exec("UPDATE conflict_on SET on_off = 0").await;
    let freed = std::time::Instant::now();
    wait_event(
        &mut events,
        "the job claimed",
        Duration::from_secs(30),
        |e| matches!(e, WorkerEvent::Claimed { id: j, .. } if *j == id),
    )
    .await;
    // The idle ceiling is 100 ms; the escalated wait was 5 s.
    assert!(
        freed.elapsed() < Duration::from_secs(3),
        "claimed {:?} after the conflicts ended",
        freed.elapsed()
    );
    worker.shutdown().await.unwrap();
}

#[tokio::test]
async fn schedule_names_are_checked_at_start() {
    let db = TestDb::new().await;
    let long = tick_every("* * * * * *", &"x".repeat(129));
    let err = db.worker().periodic(long).start().await.unwrap_err();
    assert!(err.to_string().contains("1 to 128 bytes"), "{err}");
    let err = db
        .worker()
        .periodic(tick_every("* * * * * *", "same"))
        .periodic(tick_every("0 * * * * *", "same"))
        .start()
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("two periodic jobs are named `same`"),
        "{err}"
    );
}

#[tokio::test]
async fn a_failing_schedule_skips_neither_the_reaper_nor_the_other_schedules() {
    // Before: the scheduler ran first and any error ended the maintenance round, so one broken
    // schedule stopped the reaper and every other schedule.
    let db = TestDb::new().await;
    db.exec(
        "CREATE TRIGGER cron_broken BEFORE INSERT ON mysqlq_cron FOR EACH ROW \
         BEGIN IF NEW.name = 'broken' THEN \
         SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected schedule failure'; END IF; END",
    )
    .await;
    let orphan = orphan(&db, 5).await;
    let worker = db
        .worker()
        .queues(["test", "ticks"])
        .periodic(tick_every("* * * * * *", "broken"))
        .periodic(tick_every("* * * * * *", "fine"))
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the orphan reaped and completed",
        &format!(
            "SELECT COUNT(*) FROM job_queue WHERE id = {} AND status = 'completed'",
            orphan.0
        ),
        Duration::from_secs(30),
    )
    .await;
    db.wait_for(
        "the healthy schedule enqueued a tick",
        "SELECT COUNT(*) FROM mysqlq_cron WHERE name = 'fine' AND job_id IS NOT NULL",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_enqueue_delay_of_any_size_is_written() {
    let db = TestDb::new().await;
    let id = Noop { n: 5 }
        .enqueue_with(
            &db.pool,
            &mysqlq::EnqueueOptions::new().delay(Duration::from_secs(u64::MAX)),
        )
        .await
        .unwrap()
        .id();
    let year = db
        .scalar(&format!(
            "SELECT YEAR(available_at) FROM job_queue WHERE id = {}",
            id.0
        ))
        .await;
    assert_eq!(year, 9999);
}

/// A worker frozen inside a transaction (SIGSTOP, a paused VM, a long GC) keeps that
/// transaction's row locks for as long as the freeze lasts: here, the row of the job whose
/// lease expired first. A reaper round skips the locked row and returns the other orphans at
/// once; the locked job comes back in a later round, once the lock is gone. (The reaper's
/// statements once scanned the expired leases with plain locking reads: the first locked row
/// stopped the whole round until it failed with a lock wait timeout, round after round — the
/// healthy worker of `faults::a_worker_stalled_past_its_lease_…` could not take the frozen
/// worker's jobs back.)
#[tokio::test]
async fn the_reaper_skips_rows_that_a_frozen_transaction_holds() {
    let db = TestDb::new().await;
    let held = orphan(&db, 1).await;
    let free = orphan(&db, 2).await;
    let relayed = orphan(&db, 3).await;
    db.exec(&format!(
        "UPDATE job_queue SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 10 SECOND \
         WHERE id = {}",
        held.0
    ))
    .await;
    db.exec(&format!(
        "UPDATE job_queue SET locked_by = 'redis-relay:gone', attempts = 0 WHERE id = {}",
        relayed.0
    ))
    .await;
    let mut frozen = db.pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM job_queue WHERE id = ? FOR UPDATE")
        .bind(held.0)
        .fetch_all(&mut *frozen)
        .await
        .unwrap();

    let mut conn = db.connect().await;
    sqlx::query("SET SESSION innodb_lock_wait_timeout = 2")
        .execute(&mut conn)
        .await
        .unwrap();
    let r = store::job_reap_expired(&mut conn, 100)
        .await
        .expect("a reaper round past the locked row");
    assert_eq!((r.retried, r.relayed, r.failed), (1, 1, 0), "{r:?}");
    assert_eq!(db.status(free.0).await.as_deref(), Some("pending"));
    assert_eq!(db.status(relayed.0).await.as_deref(), Some("pending"));
    assert_eq!(db.status(held.0).await.as_deref(), Some("processing"));

    frozen.rollback().await.unwrap();
    let r = store::job_reap_expired(&mut conn, 100).await.unwrap();
    assert_eq!((r.retried, r.relayed, r.failed), (1, 0, 0), "{r:?}");
    assert_eq!(db.status(held.0).await.as_deref(), Some("pending"));
    let history = db
        .scalar(&format!(
            "SELECT COUNT(*) FROM mysqlq_job_attempt WHERE job_id IN ({}, {})",
            held.0, free.0
        ))
        .await;
    assert_eq!(history, 2, "each reaped attempt recorded once");
}

/// Blocks its thread (no `.await`) for `ms`.
#[mysqlq::job(queue = "starving", retries = 1, timeout = "30s")]
async fn runtime_blocker(_ctx: JobContext, ms: u64) -> Result<(), JobError> {
    std::thread::sleep(Duration::from_millis(ms));
    Ok(())
}

/// Awaits `ms`, as a well-behaved handler does.
#[mysqlq::job(queue = "starving", retries = 1, timeout = "30s")]
async fn runtime_sleeper(_ctx: JobContext, ms: u64) -> Result<(), JobError> {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(())
}

/// Samples, from an OS thread and a runtime of its own, how many `processing` rows have an
/// expired lease, every 50 ms for `span`; returns the most seen at once.
fn watch_expired_leases(url: String, span: Duration) -> std::thread::JoinHandle<i64> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
            let until = std::time::Instant::now() + span;
            let mut most = 0;
            while std::time::Instant::now() < until {
                let expired: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM job_queue WHERE status = 'processing' \
                     AND lease_expires_at < UTC_TIMESTAMP(6)",
                )
                .fetch_one(&mut conn)
                .await
                .unwrap();
                most = most.max(expired);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            most
        })
    })
}

/// `#[tokio::test]` runs on one thread: the handler that blocks it blocks every task of that
/// runtime. The worker's own services (heartbeats, the watchdog, completions, claims) must not
/// be among them. Before: they shared the application's runtime, so a handler blocking every
/// thread of it (here one; in the torture test two of two, or a symbolized panic backtrace
/// under `RUST_BACKTRACE=1`) stopped the heartbeats, and the leases of jobs on a healthy
/// worker expired while they ran — the reaper of any other worker would have run them twice.
#[tokio::test]
async fn handlers_blocking_every_thread_of_the_runtime_do_not_stop_the_heartbeats() {
    let db = TestDb::new().await;
    let worker = db
        .worker()
        .queues(["starving"])
        .concurrency(2)
        .lease(Duration::from_secs(1))
        .heartbeat_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    // Listening before the job exists: its `Started` cannot come before the subscription.
    let mut events = worker.events();
    let sleeper = RuntimeSleeper { ms: 3500 }
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    wait_event(
        &mut events,
        "the sleeper started",
        Duration::from_secs(30),
        |e| matches!(e, WorkerEvent::Started { id } if *id == sleeper),
    )
    .await;
    let watcher = watch_expired_leases(db.url(), Duration::from_millis(4000));
    RuntimeBlocker { ms: 3000 }.enqueue(&db.pool).await.unwrap();
    db.wait_for(
        "both jobs completed",
        "SELECT COUNT(*) = 2 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    let most = tokio::task::spawn_blocking(move || watcher.join().unwrap())
        .await
        .unwrap();
    assert_eq!(
        most, 0,
        "leases of jobs running on a healthy worker expired while one handler blocked the runtime"
    );
    let first_time: i64 = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'completed' AND attempts = 1")
        .await;
    assert_eq!(first_time, 2, "both completed on their first attempt");
    worker.shutdown().await.unwrap();
}

/// A worker stopped inside the transaction that records an attempt (its outcome and the attempt's
/// history row, whose older rows it trims) holds no lock on another job's history: the other
/// workers' outcome writes go on. Found by the torture test with workflows: one stopped worker
/// process held a gap lock of the trim for 3 s, the healthy workers' outcome writes queued
/// behind it and took every connection of their pools, and their heartbeats could not renew.
#[tokio::test]
async fn an_open_attempt_record_holds_no_lock_on_another_jobs_history() {
    use mysqlq::store::{AttemptRecord, job_attempt_record};
    let db = TestDb::new().await;
    let a = Noop { n: 1 }.enqueue(&db.pool).await.unwrap().id();
    let b = Noop { n: 2 }.enqueue(&db.pool).await.unwrap().id();
    let record = |attempt: u32| AttemptRecord {
        attempt,
        outcome: "retry",
        worker: "w",
        ran_for: Duration::from_millis(5),
        keep: 2,
    };
    // Job b has a history already; job a's is written (and trimmed) in a transaction left open,
    // at the isolation level a worker's session has by default.
    for n in 1..=3 {
        let mut c = db.connect().await;
        job_attempt_record(&mut c, b, &record(n), "boom")
            .await
            .unwrap();
    }
    let mut stopped = db.connect().await;
    sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut stopped)
        .await
        .unwrap();
    sqlx::query("BEGIN").execute(&mut stopped).await.unwrap();
    for n in 1..=3 {
        job_attempt_record(&mut stopped, a, &record(n), "boom")
            .await
            .unwrap();
    }
    let mut other = db.connect().await;
    sqlx::query("SET SESSION innodb_lock_wait_timeout = 2")
        .execute(&mut other)
        .await
        .unwrap();
    job_attempt_record(&mut other, b, &record(4), "boom")
        .await
        .expect("another job's attempt is recorded while the first transaction is open");
    sqlx::query("ROLLBACK").execute(&mut stopped).await.unwrap();
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM mysqlq_job_attempt WHERE job_id = {}",
            b.0
        ))
        .await,
        2,
        "b's history trimmed to its newest 2"
    );
}
