//! Worker processes: the test application binary (`mysqlq-test-worker`, whose `main` is
//! `mysqlq_cli::main()`) run as real processes, killed with SIGKILL or stopped with SIGTERM.

use std::time::Duration;

use mysqlq::{EnqueueOptions, NewJob};
use mysqlq_tests::jobs::{Noop, Sleepy};
use mysqlq_tests::{Proc, TestDb};

const BIN: &str = env!("CARGO_BIN_EXE_mysqlq-test-worker");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_workers_job_is_recovered_by_another_worker() {
    let db = TestDb::new().await;
    let id = Sleepy { ms: 1_500 }.enqueue(&db.pool).await.unwrap().id();
    let mut a = Proc::start(BIN, &db, "worker-a", &["--queues", "test"]);
    db.wait_for(
        "started on a",
        "SELECT COUNT(*) FROM test_runs WHERE event = 'start'",
        Duration::from_secs(30),
    )
    .await;
    a.kill();
    let b = Proc::start(BIN, &db, "worker-b", &["--queues", "test"]);
    db.wait_for(
        "completed",
        "SELECT COUNT(*) FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    let (attempts, err): (u32, Option<String>) =
        sqlx::query_as("SELECT attempts, last_error FROM job_queue WHERE id = ?")
            .bind(id.0)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(attempts, 2, "run once by a (killed), once by b");
    assert!(
        err.unwrap_or_default()
            .contains("lease expired while held by worker-a")
    );
    let done_by: Vec<u32> = sqlx::query_scalar("SELECT pid FROM test_runs WHERE event = 'done'")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(done_by, vec![b.child.id()], "finished by b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_worker_processes_drain_ten_thousand_jobs_exactly_once() {
    let db = TestDb::new().await;
    let jobs: Vec<NewJob> = (0..10_000u64)
        .map(|n| NewJob::from_job(&Noop { n }, &EnqueueOptions::new()).unwrap())
        .collect();
    mysqlq::enqueue_many(&db.pool, jobs).await.unwrap();
    let mut procs: Vec<Proc> = (0..4)
        .map(|i| {
            Proc::start(
                BIN,
                &db,
                &format!("drain-{i}"),
                &["--queues", "test", "--concurrency", "16"],
            )
        })
        .collect();
    db.wait_for(
        "all 10,000 completed",
        "SELECT COUNT(*) = 10000 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(240),
    )
    .await;
    for p in &mut procs {
        assert!(
            p.terminate(Duration::from_secs(30)).success(),
            "worker {} exited cleanly",
            p.id
        );
    }
    let (runs, distinct, twice): (i64, i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(DISTINCT job_id), \
         (SELECT COUNT(*) FROM (SELECT job_id FROM test_runs GROUP BY job_id HAVING COUNT(*) > 1) t) FROM test_runs",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (runs, distinct, twice),
        (10_000, 10_000, 0),
        "every job ran exactly once"
    );
    let once: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM job_queue WHERE attempts = 1 AND finished_at IS NOT NULL",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(once, 10_000);
    let by_worker: Vec<(u32, i64)> =
        sqlx::query_as("SELECT pid, COUNT(*) FROM test_runs GROUP BY pid")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        by_worker.len(),
        4,
        "all four processes worked: {by_worker:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_failover_hands_the_reaper_to_another_process() {
    let db = TestDb::new().await;
    let leader = || {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, Option<String>>(
                "SELECT leader_id FROM mysqlq_leader WHERE name = 'maintenance'",
            )
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let mut a = Proc::start(BIN, &db, "leader-a", &["--queues", "test"]);
    db.wait_for(
        "a leads",
        "SELECT COUNT(*) FROM mysqlq_leader WHERE leader_id LIKE 'leader-a#%'",
        Duration::from_secs(30),
    )
    .await;
    let _b = Proc::start(BIN, &db, "leader-b", &["--queues", "test"]);
    db.wait_for(
        "b registered",
        "SELECT COUNT(*) FROM mysqlq_worker WHERE worker_id = 'leader-b'",
        Duration::from_secs(30),
    )
    .await;
    let holder = leader().await.unwrap_or_default();
    assert!(
        holder.starts_with("leader-a#"),
        "one leader at a time, named by its per-process identity: {holder}"
    );
    a.kill();
    db.wait_for(
        "b leads",
        "SELECT COUNT(*) FROM mysqlq_leader WHERE leader_id LIKE 'leader-b#%'",
        Duration::from_secs(30),
    )
    .await;
    // The new leader reaps: a job held by a dead worker with an expired lease comes back and runs.
    let id = Noop { n: 1 }
        .enqueue_with(&db.pool, &EnqueueOptions::new().queue("orphans"))
        .await
        .unwrap()
        .id();
    sqlx::query(
        "UPDATE job_queue SET queue_name = 'test', status = 'processing', attempts = 1, locked_by = 'ghost', \
         claim_token = 'ghost-000-0000-0000-000000000000', lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?",
    )
    .bind(id.0)
    .execute(&db.pool)
    .await
    .unwrap();
    db.wait_for(
        "reaped and run",
        "SELECT COUNT(*) FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_gracefully_and_releases_jobs_at_once() {
    let db = TestDb::new().await;
    for _ in 0..4 {
        Sleepy { ms: 60_000 }.enqueue(&db.pool).await.unwrap();
    }
    let mut p = Proc::start(
        BIN,
        &db,
        "graceful",
        &[
            "--queues",
            "test",
            "--concurrency",
            "2",
            "--shutdown-timeout",
            "500ms",
        ],
    );
    db.wait_for(
        "two started",
        "SELECT COUNT(*) >= 2 FROM test_runs WHERE event = 'start'",
        Duration::from_secs(30),
    )
    .await;
    assert!(p.terminate(Duration::from_secs(20)).success());
    let (pending, fresh): (i64, i64) =
        sqlx::query_as("SELECT CAST(SUM(status = 'pending') AS SIGNED), CAST(SUM(attempts = 0) AS SIGNED) FROM job_queue")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        (pending, fresh),
        (4, 4),
        "nothing waits for a lease after a clean stop"
    );
}

#[tokio::test]
async fn a_second_sigterm_ends_the_grace_period_at_once_and_releases_running_jobs() {
    let db = TestDb::new().await;
    for _ in 0..2 {
        Sleepy { ms: 600_000 }.enqueue(&db.pool).await.unwrap();
    }
    let mut p = Proc::start(
        BIN,
        &db,
        "twice",
        &[
            "--queues",
            "test",
            "--concurrency",
            "2",
            "--shutdown-timeout",
            "10m",
        ],
    );
    db.wait_for(
        "two started",
        "SELECT COUNT(*) >= 2 FROM test_runs WHERE event = 'start'",
        Duration::from_secs(30),
    )
    .await;
    assert!(mysqlq_tests::signal(p.child.id(), "TERM"));
    // The first signal says how long it will wait and how to force.
    let log = std::env::temp_dir().join(format!("{}-twice.log", db.name));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("signal received") {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no shutdown notice in the worker's log:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        text.contains("10m") && text.contains("again to stop now"),
        "{text}"
    );
    // The second ends the ten-minute grace period now.
    assert!(p.terminate(Duration::from_secs(30)).success());
    let (pending, fresh): (i64, i64) = sqlx::query_as(
        "SELECT CAST(SUM(status = 'pending') AS SIGNED), CAST(SUM(attempts = 0) AS SIGNED) FROM job_queue",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (pending, fresh),
        (2, 2),
        "both released, attempts given back"
    );
}

/// Issue 26: a worker whose service thread gets no CPU cannot renew its leases, and nothing
/// else tells (the process exists, the database answers). The worker measures how late that
/// thread wakes and warns — with the lag, the lease and what to do — once the lag reaches half
/// the lease's safety margin. A stopped process is the starkest starvation: every thread of it
/// wakes late by as long as it was stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_service_thread_was_starved_warns_with_the_lag() {
    let db = TestDb::new().await;
    Noop { n: 1 }.enqueue(&db.pool).await.unwrap();
    let w = Proc::start(
        BIN,
        &db,
        "starved",
        &["--queues", "test", "--heartbeat", "200ms"],
    );
    // Started, services and all: a job completed. Registering comes before the services are
    // spawned (a stop between the two, which a loaded host made happen, found no pulse to fall
    // behind); the pulse is spawned right after the completer, so once a completion is written
    // it has been polled, and a few of its ticks later it is measuring.
    db.wait_for(
        "the worker's first job completed",
        "SELECT COUNT(*) FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = w.child.id();
    assert!(mysqlq_tests::signal(pid, "STOP"), "SIGSTOP {pid}");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(mysqlq_tests::signal(pid, "CONT"), "SIGCONT {pid}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let lags = loop {
        let lags = mysqlq_tests::torture::logged_lags(&w.log, "starved");
        if !lags.is_empty() || std::time::Instant::now() > deadline {
            break lags;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let log = w.log_text();
    assert!(
        lags.iter()
            .any(|f| f.end.unwrap_or(0) - f.start >= 1_000_000),
        "no warning of a service lag of at least 1 s after a stop of 1.2 s: {lags:?}\nlog:\n{log}"
    );
    assert!(
        log.contains("raise the lease") && log.contains("lease_ms=2000"),
        "the warning says what to do: {log}"
    );
}
