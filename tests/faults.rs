//! The fault suite: real worker processes and a **private** database server per scenario
//! (started in a temp dir, killed, paused and restarted by the test), with invariant checks
//! after each scenario. Sizes are small by default so CI stays fast; `MYSQLQ_FAULT_SCALE=10`
//! multiplies the job counts (e.g. 20,000 jobs for the SIGKILL scenario).
//!
//! Invariants (`check_invariants`, in `tests/harness/invariants.rs`):
//! 1. every job is final: `completed`, or `failed` with a `last_error` when that is expected;
//! 2. no job is marked completed twice (a trigger logs every transition to `completed`);
//! 3. every completion was made by the owner of the job at that moment: the claim token the row
//!    held when it was completed belongs to a run whose handler had returned (`done`) by then —
//!    a stale worker can never complete a job another worker owns;
//! 4. every job whose handler started was completed or is re-run (follows from 1 and 3);
//! 5. no business row without its job and no job without its business row.

use std::time::Duration;

use mysqlq::admin::JobState;
use mysqlq::{DedupeScope, EnqueueOptions, Enqueued, JobId, NewJob};
use mysqlq_tests::invariants::{self, place_orders};
use mysqlq_tests::jobs::{Forever, Noop, Panicker, Sleepy};
use mysqlq_tests::{PrivateServer, Proc, TestDb};

const BIN: &str = env!("CARGO_BIN_EXE_mysqlq-test-worker");

fn scale() -> usize {
    mysqlq_tests::scale("MYSQLQ_FAULT_SCALE")
}

/// A migrated database on a fresh private server, with the completion trigger and an
/// `orders` table for the atomicity check.
async fn setup() -> (PrivateServer, TestDb) {
    let server = PrivateServer::start();
    let db = TestDb::on(&server.url()).await;
    invariants::install(&db).await;
    (server, db)
}

/// Waits until no job is `pending` or `processing`.
async fn wait_final(db: &TestDb, limit: Duration) {
    db.wait_for(
        "every job final",
        "SELECT COUNT(*) = 0 FROM job_queue WHERE status IN ('pending', 'processing')",
        limit,
    )
    .await;
}

async fn check_invariants(db: &TestDb, failed_ok: i64) {
    invariants::check(&db.pool, failed_ok).await;
}

fn sleepy_jobs(n: usize, ms: u64) -> Vec<NewJob> {
    (0..n)
        .map(|_| NewJob::from_job(&Sleepy { ms }, &EnqueueOptions::new()).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_random_workers_loses_nothing() {
    let (_server, db) = setup().await;
    let n = 2_000 * scale();
    mysqlq::enqueue_many(&db.pool, sleepy_jobs(n, 10))
        .await
        .unwrap();
    let mut procs: Vec<Proc> = (0..3)
        .map(|i| {
            Proc::start(
                BIN,
                &db,
                &format!("k{i}"),
                &["--queues", "test", "--concurrency", "8"],
            )
        })
        .collect();
    for next in 3..3 + 3 * scale() {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let victim = fastrand::usize(..procs.len());
        procs[victim].kill();
        procs[victim] = Proc::start(
            BIN,
            &db,
            &format!("k{next}"),
            &["--queues", "test", "--concurrency", "8"],
        );
    }
    wait_final(&db, Duration::from_secs(180)).await;
    for p in &mut procs {
        assert!(p.terminate(Duration::from_secs(30)).success());
    }
    check_invariants(&db, 0).await;
    let completed = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'completed'")
        .await;
    assert_eq!(completed, i64::try_from(n).unwrap());
    let reruns = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE attempts > 1")
        .await;
    println!(
        "sigkill: {n} jobs, {} kills, {reruns} jobs re-run after a kill",
        3 * scale()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_killed_and_restarted_mid_run_loses_nothing() {
    let (mut server, db) = setup().await;
    let n = 1_500 * scale();
    mysqlq::enqueue_many(&db.pool, sleepy_jobs(n, 10))
        .await
        .unwrap();
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| {
            Proc::start(
                BIN,
                &db,
                &format!("r{i}"),
                &["--queues", "test", "--concurrency", "8"],
            )
        })
        .collect();
    let orders = tokio::spawn(place_orders(db.pool.clone(), 1, 150));
    tokio::time::sleep(Duration::from_millis(800)).await;
    server.restart(); // SIGKILL, then start again on the same data and port
    orders.await.unwrap();
    wait_final(&db, Duration::from_secs(180)).await;
    for p in &mut procs {
        assert!(
            p.terminate(Duration::from_secs(30)).success(),
            "worker {} survived the restart and stopped cleanly",
            p.id
        );
    }
    check_invariants(&db, 0).await;
    assert_eq!(db.scalar("SELECT COUNT(*) FROM orders").await, 150);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_stall_longer_than_the_lease_loses_nothing() {
    let (server, db) = setup().await;
    let n = 800 * scale();
    mysqlq::enqueue_many(&db.pool, sleepy_jobs(n, 40))
        .await
        .unwrap();
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| {
            Proc::start(
                BIN,
                &db,
                &format!("s{i}"),
                &["--queues", "test", "--concurrency", "16"],
            )
        })
        .collect();
    db.wait_for(
        "work under way",
        "SELECT COUNT(*) >= 50 FROM test_runs WHERE event = 'done'",
        Duration::from_secs(60),
    )
    .await;
    server.pause(); // SIGSTOP: every connection hangs
    tokio::time::sleep(Duration::from_secs(4)).await; // the 2 s leases expire meanwhile
    server.resume();
    wait_final(&db, Duration::from_secs(180)).await;
    for p in &mut procs {
        assert!(p.terminate(Duration::from_secs(30)).success());
    }
    check_invariants(&db, 0).await;
    let reruns = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE attempts > 1")
        .await;
    println!("stall: {n} jobs, {reruns} re-run after their lease expired during the stall");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_and_panicking_handlers_mixed_into_load() {
    let (_server, db) = setup().await;
    let mut jobs: Vec<NewJob> = (0..400u64)
        .map(|n| NewJob::from_job(&Noop { n }, &EnqueueOptions::new()).unwrap())
        .collect();
    for _ in 0..4 {
        jobs.push(NewJob::from_job(&Forever {}, &EnqueueOptions::new()).unwrap());
        jobs.push(NewJob::from_job(&Panicker {}, &EnqueueOptions::new()).unwrap());
    }
    mysqlq::enqueue_many(&db.pool, jobs).await.unwrap();
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| {
            Proc::start(
                BIN,
                &db,
                &format!("h{i}"),
                &["--queues", "test", "--concurrency", "4"],
            )
        })
        .collect();
    wait_final(&db, Duration::from_secs(120)).await;
    // A handler that never returns does not block shutdown.
    for p in &mut procs {
        assert!(p.terminate(Duration::from_secs(30)).success());
    }
    // Forever records `start` but never `done`: its failures are checked by reason, not by owner.
    sqlx::query("DELETE FROM completion_log WHERE job_id IN (SELECT id FROM job_queue WHERE kind = 'forever')").execute(&db.pool).await.unwrap();
    check_invariants(&db, 4).await;
    let timed_out = db.scalar("SELECT COUNT(*) FROM job_queue WHERE kind = 'forever' AND last_error LIKE '%timed out after 1s%'").await;
    assert_eq!(timed_out, 4);
    let panicked_then_ok = db.scalar("SELECT COUNT(*) FROM job_queue WHERE kind = 'panicker' AND status = 'completed' AND attempts = 2").await;
    assert_eq!(panicked_then_ok, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_under_load_leaves_nothing_to_a_lease() {
    let (_server, db) = setup().await;
    mysqlq::enqueue_many(&db.pool, sleepy_jobs(1_000 * scale(), 200))
        .await
        .unwrap();
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| {
            Proc::start(
                BIN,
                &db,
                &format!("g{i}"),
                &[
                    "--queues",
                    "test",
                    "--concurrency",
                    "8",
                    "--shutdown-timeout",
                    "100ms",
                ],
            )
        })
        .collect();
    db.wait_for(
        "busy",
        "SELECT COUNT(*) >= 20 FROM test_runs WHERE event = 'start'",
        Duration::from_secs(60),
    )
    .await;
    for p in &mut procs {
        assert!(p.terminate(Duration::from_secs(30)).success());
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'processing'")
            .await,
        0,
        "no job waits for a lease after a clean stop"
    );
    let mut finisher = Proc::start(
        BIN,
        &db,
        "g-final",
        &["--queues", "test", "--concurrency", "64"],
    );
    wait_final(&db, Duration::from_secs(180)).await;
    assert!(finisher.terminate(Duration::from_secs(30)).success());
    // Cancelled runs recorded `start` without `done` and their jobs were re-run: invariant 3
    // still holds because only owners that finished completed anything.
    check_invariants(&db, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlock_pressure_bulk_dedupe_enqueue_claims_and_purge() {
    let (_server, db) = setup().await;
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| {
            Proc::start(
                BIN,
                &db,
                &format!("d{i}"),
                &["--queues", "test", "--concurrency", "16"],
            )
        })
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The purge loop: deletes completed rows as soon as they exist.
    let purger = {
        let pool = db.pool.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut deleted = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let admin = mysqlq::admin::Admin::new(pool.clone());
                match admin
                    .purge(JobState::Completed, Duration::ZERO, 200, |_| {})
                    .await
                {
                    Ok(n) => deleted += n,
                    Err(e) if mysqlq_tests::is_lock_error(&e) => {}
                    Err(e) => panic!("purge failed: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            deleted
        })
    };
    // Four enqueuers, each committing batches of 100 jobs whose dedupe keys overlap the others'.
    let mut enqueuers = Vec::new();
    for e in 0..4u64 {
        let pool = db.pool.clone();
        enqueuers.push(tokio::spawn(async move {
            let (mut inserted, mut duplicates, mut deadlocks) = (Vec::new(), 0, 0);
            for round in 0..(5 * scale() as u64) {
                let batch: Vec<NewJob> = (0..100u64)
                    .map(|i| {
                        let key = format!("k{}", (i * 7 + round + e) % 150);
                        let opts = EnqueueOptions::new()
                            .dedupe_key(key)
                            .dedupe_scope(DedupeScope::UntilFinished);
                        NewJob::from_job(&Noop { n: e * 1_000 + i }, &opts).unwrap()
                    })
                    .collect();
                // The caller's transaction is the retry unit: a deadlock rolls it back whole.
                loop {
                    let mut tx = pool.begin().await.unwrap();
                    match mysqlq::enqueue_many(&mut tx, batch.clone()).await {
                        Ok(out) => match tx.commit().await {
                            Ok(()) => {
                                for o in out {
                                    match o {
                                        Enqueued::Inserted(id) => inserted.push(id),
                                        Enqueued::Duplicate(_) | Enqueued::Replaced(_) => {
                                            duplicates += 1;
                                        }
                                    }
                                }
                                break;
                            }
                            Err(e) => panic!("commit failed: {e}"),
                        },
                        Err(err) if mysqlq_tests::is_lock_error(&err) => {
                            deadlocks += 1;
                            let _ = tx.rollback().await;
                            tokio::time::sleep(Duration::from_millis(fastrand::u64(5..50))).await;
                        }
                        Err(err) => panic!("enqueue failed: {err}"),
                    }
                }
            }
            (inserted, duplicates, deadlocks)
        }));
    }
    let mut all: Vec<JobId> = Vec::new();
    let (mut dups, mut deadlocks) = (0, 0);
    for t in enqueuers {
        let (ins, d, dl) = t.await.unwrap();
        all.extend(ins);
        dups += d;
        deadlocks += dl;
    }
    wait_final(&db, Duration::from_secs(120)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let purged = purger.await.unwrap();
    for p in &mut procs {
        assert!(p.terminate(Duration::from_secs(30)).success());
    }
    // Every inserted job was completed exactly once, whether or not it was purged since.
    let logged = db
        .scalar("SELECT COUNT(DISTINCT job_id) FROM completion_log")
        .await;
    assert_eq!(
        logged,
        i64::try_from(all.len()).unwrap(),
        "every inserted job completed"
    );
    check_invariants(&db, 0).await;
    println!(
        "deadlock pressure: {} inserted, {dups} duplicates, {deadlocks} enqueue deadlocks retried by the caller, {purged} purged",
        all.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stalled_past_its_lease_cannot_complete_the_jobs_it_lost() {
    let (_server, db) = setup().await;
    mysqlq::enqueue_many(&db.pool, sleepy_jobs(300 * scale(), 300))
        .await
        .unwrap();
    let mut a = Proc::start(
        BIN,
        &db,
        "stalled",
        &["--queues", "test", "--concurrency", "16"],
    );
    db.wait_for(
        "a is busy",
        "SELECT COUNT(*) >= 16 FROM test_runs WHERE event = 'start'",
        Duration::from_secs(60),
    )
    .await;
    let mut b = Proc::start(
        BIN,
        &db,
        "healthy",
        &["--queues", "test", "--concurrency", "16"],
    );
    // The stalled process keeps its connections but sends nothing for longer than its lease;
    // the other worker's reaper takes its jobs back and runs them.
    assert!(mysqlq_tests::signal(a.child.id(), "STOP"));
    db.wait_for(
        "a's jobs re-run by b",
        "SELECT COUNT(*) > 0 FROM job_queue WHERE attempts > 1 AND status = 'completed'",
        Duration::from_secs(60),
    )
    .await;
    assert!(mysqlq_tests::signal(a.child.id(), "CONT"));
    wait_final(&db, Duration::from_secs(180)).await;
    assert!(a.terminate(Duration::from_secs(30)).success());
    assert!(b.terminate(Duration::from_secs(30)).success());
    check_invariants(&db, 0).await;
    let stale_done = db
        .scalar(
            "SELECT COUNT(*) FROM test_runs r JOIN job_queue j ON j.id = r.job_id \
         WHERE r.event = 'done' AND r.attempt < j.attempts",
        )
        .await;
    println!(
        "worker stall: {stale_done} handlers finished after losing their lease; none of them completed a job"
    );
}

// ---------------------------------------------------------------------------------------
// Bad input: each row of the table gets a clear error or a recorded job failure, and the
// worker keeps running.

#[tokio::test]
async fn bad_rows_inserted_by_hand_are_refused_or_recorded_and_the_worker_keeps_running() {
    let db = TestDb::new().await;
    let insert = |sql: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query(sql)
                .execute(&pool)
                .await
                .map(|r| r.last_insert_id())
        }
    };
    // Refused by the server itself: invalid JSON, negative attempts, NULL where NOT NULL.
    for sql in [
        "INSERT INTO job_queue (queue_name, kind, payload) VALUES ('test', 'noop', '{not json')",
        "INSERT INTO job_queue (queue_name, kind, payload, attempts) VALUES ('test', 'noop', '{\"n\": 1}', -1)",
        "INSERT INTO job_queue (queue_name, kind, payload, available_at) VALUES ('test', 'noop', '{\"n\": 1}', NULL)",
        "INSERT INTO job_queue (queue_name, kind, payload, status) VALUES ('test', 'noop', '{\"n\": 1}', 'running')",
    ] {
        assert!(insert(sql).await.is_err(), "the server accepted `{sql}`");
    }
    // Accepted by the server; the worker records what is wrong with each.
    let unknown = insert(
        "INSERT INTO job_queue (queue_name, kind, payload) VALUES ('test', 'no_such_kind', '{}')",
    )
    .await
    .unwrap();
    let shape = insert(
        "INSERT INTO job_queue (queue_name, kind, payload) VALUES ('test', 'noop', '[1, 2, 3]')",
    )
    .await
    .unwrap();
    let no_kind = insert("INSERT INTO job_queue (queue_name, payload) VALUES ('ticks', '{}')")
        .await
        .unwrap();
    let huge_attempts = insert(
        "INSERT INTO job_queue (queue_name, kind, payload, attempts, max_attempts) \
         VALUES ('test', 'noop', '{\"n\": 5}', 4294967295, 4294967295)",
    )
    .await
    .unwrap();
    let zero_max = insert("INSERT INTO job_queue (queue_name, kind, payload, max_attempts) VALUES ('test', 'permanent', '{}', 0)").await.unwrap();
    let good: Vec<JobId> = {
        let mut v = Vec::new();
        for n in 0..20 {
            v.push(Noop { n }.enqueue(&db.pool).await.unwrap().id());
        }
        v
    };
    let worker = db.worker().queues(["test", "ticks"]).start().await.unwrap();
    db.wait_for(
        "the good jobs",
        "SELECT COUNT(*) >= 22 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    db.wait_for(
        "the bad rows recorded",
        &format!("SELECT COUNT(*) = 2 FROM job_queue WHERE id IN ({unknown}, {shape}) AND last_error IS NOT NULL"),
        Duration::from_secs(30),
    )
    .await;
    db.wait_for(
        "zero max_attempts failed",
        &format!("SELECT COUNT(*) FROM job_queue WHERE id = {zero_max} AND status = 'failed'"),
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    let row = |id: u64| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_as::<_, (String, Option<String>)>(
                "SELECT status, last_error FROM job_queue WHERE id = ?",
            )
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert!(
        row(unknown)
            .await
            .1
            .unwrap()
            .contains("unknown job kind `no_such_kind`")
    );
    assert!(
        row(shape)
            .await
            .1
            .unwrap()
            .contains("payload does not match job `noop`")
    );
    assert_eq!(
        row(no_kind).await.0,
        "completed",
        "a row without kind runs the queue's only job"
    );
    assert_eq!(
        row(huge_attempts).await.0,
        "completed",
        "attempts at the column's maximum do not overflow the claim"
    );
    assert!(
        row(zero_max)
            .await
            .1
            .unwrap()
            .contains("invalid e-mail address")
    );
    for id in good {
        assert_eq!(row(id.0).await.0, "completed");
    }
}

#[test]
fn bad_enqueue_input_is_refused_with_a_clear_error() {
    let check = |opts: EnqueueOptions, needle: &str| {
        let err = NewJob::from_job(&Noop { n: 1 }, &opts)
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "`{err}` should mention `{needle}`");
    };
    check(
        EnqueueOptions::new().queue("x'; DROP TABLE job_queue; --"),
        "queue name",
    );
    check(EnqueueOptions::new().queue(""), "queue name");
    check(EnqueueOptions::new().queue("q".repeat(65)), "queue name");
    check(EnqueueOptions::new().dedupe_key(""), "dedupe key");
    check(
        EnqueueOptions::new().ordering_key("k".repeat(192)),
        "ordering key",
    );
    check(
        EnqueueOptions::new().concurrency_limit("tenant", 0),
        "concurrency limit",
    );
    check(EnqueueOptions::new().max_attempts(0), "max_attempts");
    let big = NewJob::new(
        "big",
        "test",
        &serde_json::json!({"blob": "x".repeat(mysqlq::MAX_PAYLOAD_BYTES)}),
        &EnqueueOptions::new(),
    );
    assert!(matches!(big, Err(mysqlq::Error::PayloadTooLarge { .. })));
    let cron = mysqlq::parse_schedule("every five minutes")
        .unwrap_err()
        .to_string();
    assert!(cron.contains("cron expression"), "{cron}");
}

#[test]
fn a_server_without_skip_locked_is_refused_by_version() {
    for version in [
        "5.7.44-log",
        "8.0.0-dmr",
        "10.5.22-MariaDB",
        "5.5.5-10.4.3-MariaDB-1:10.4.3+maria~bionic",
    ] {
        let info = mysqlq::ServerInfo::parse(version).unwrap();
        let err = info.check_supported().unwrap_err().to_string();
        assert!(
            err.contains("SKIP LOCKED") && err.contains("upgrade"),
            "{version}: {err}"
        );
    }
    for version in [
        "8.0.1",
        "8.4.3",
        "10.6.0-MariaDB",
        "10.11.19-MariaDB-0+deb12u1",
        "11.4.2-MariaDB",
    ] {
        mysqlq::ServerInfo::parse(version)
            .unwrap()
            .check_supported()
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_server_stalls_claims_until_it_is_writable_again() {
    let (server, db) = setup().await;
    for sql in [
        "CREATE USER 'app'@'%' IDENTIFIED BY 'app-secret'".to_owned(),
        format!("GRANT ALL ON `{}`.* TO 'app'@'%'", db.name),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&db.pool)
            .await
            .unwrap();
    }
    let app_url = format!(
        "mysql://app:app-secret@127.0.0.1:{}/{}",
        server.port(),
        db.name
    );
    let app_pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(8)
        .connect(&app_url)
        .await
        .unwrap();
    let worker = mysqlq::Worker::builder(app_pool)
        .queues(["test"])
        .poll_interval(Duration::from_millis(5), Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    sqlx::query("SET GLOBAL read_only = 1")
        .execute(&db.pool)
        .await
        .unwrap();
    for n in 0..5 {
        Noop { n }.enqueue(&db.pool).await.unwrap(); // root may still write
    }
    let m = worker.metrics();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while m.counters.snapshot().db_errors == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the read-only error was not seen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'pending'")
            .await,
        5,
        "nothing claimed on a read-only server"
    );
    sqlx::query("SET GLOBAL read_only = 0")
        .execute(&db.pool)
        .await
        .unwrap();
    db.wait_for(
        "completed once writable",
        "SELECT COUNT(*) = 5 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
}
