//! The Redis transport when Redis is not to be trusted: a private, throwaway `redis-server`
//! (no persistence) restarted empty, flushed, or down for a while in the middle of a run, and a
//! consumer process SIGKILLed mid-run. After each: every job completed, none completed twice
//! (a trigger logs every transition to `completed`), and a job ran more than once only if its
//! consumer was killed while running it. Each prints how long Redis's loss kept jobs waiting:
//! the at-least-once window `docs/redis.md` states.
//!
//! `MYSQLQ_REDIS_DOWN_SECS` (default 2) sets how long Redis stays down in
//! `redis_down_for_a_while_loses_nothing` (60 for the "down a minute" measurement).

use std::time::{Duration, Instant};

use mysqlq::WorkerEvent;
use mysqlq_tests::jobs::Sleepy;
use mysqlq_tests::redis::{PrivateRedis, TestRedis, test_config};
use mysqlq_tests::{Proc, TestDb, wait_event};

const JOBS: i64 = 200;

async fn setup(jobs: i64, ms: u64) -> TestDb {
    let db = TestDb::new().await;
    db.log_completions().await;
    let rows: Vec<mysqlq::NewJob> = (0..jobs)
        .map(|_| {
            mysqlq::NewJob::from_job(&Sleepy { ms }, &mysqlq::EnqueueOptions::default()).unwrap()
        })
        .collect();
    mysqlq::enqueue_many(&db.pool, rows).await.unwrap();
    db
}

/// Every job completed exactly once in MySQL; returns how many ran more than once.
async fn check(db: &TestDb, jobs: i64) -> i64 {
    db.wait_for(
        "every job completed",
        &format!("SELECT COUNT(*) = {jobs} FROM job_queue WHERE status = 'completed'"),
        Duration::from_secs(60),
    )
    .await;
    let twice = db.scalar("SELECT COUNT(*) FROM (SELECT job_id FROM completion_log GROUP BY job_id HAVING COUNT(*) > 1) t",
    )
    .await;
    assert_eq!(twice, 0, "no job completed twice");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM completion_log").await, jobs);
    db.scalar("SELECT COUNT(*) FROM (SELECT job_id FROM test_runs WHERE event = 'done' GROUP BY job_id HAVING COUNT(*) > 1) t",
    )
    .await
}

/// What to do to Redis in the middle of the run.
#[derive(Clone, Copy, Debug)]
enum Fault {
    RestartEmpty,
    FlushAll,
    DownFor(Duration),
}

async fn survive(fault: Fault) {
    let mut server = PrivateRedis::start();
    let db = setup(JOBS, 20).await;
    let r = TestRedis::on(&server.url(), test_config());
    let worker = db
        .worker()
        .concurrency(8)
        .redis(r.connect().await)
        .start()
        .await
        .unwrap();
    let mut events = worker.events();
    db.wait_for(
        "a quarter done",
        &format!(
            "SELECT COUNT(*) >= {} FROM job_queue WHERE status = 'completed'",
            JOBS / 4
        ),
        Duration::from_secs(60),
    )
    .await;
    let in_stream = db.scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'processing' AND locked_by LIKE 'redis-relay:%'",
    )
    .await;
    let t0 = Instant::now();
    match fault {
        Fault::RestartEmpty => server.restart_empty(),
        Fault::FlushAll => server.flushall(),
        Fault::DownFor(d) => {
            server.kill();
            tokio::time::sleep(d).await;
            server.start_again();
        }
    }
    let back = Instant::now();
    if in_stream > 0 {
        wait_event(
            &mut events,
            "the relay finds its entries lost",
            Duration::from_secs(60),
            |e| matches!(e, WorkerEvent::EntriesLost { .. }),
        )
        .await;
    }
    let noticed = back.elapsed();
    let twice = check(&db, JOBS).await;
    let drained = t0.elapsed();
    worker.shutdown().await.unwrap();
    assert_eq!(twice, 0, "no job ran twice: no consumer died");
    eprintln!(
        "redis fault {fault:?}: {in_stream} jobs were in the stream; lost entries noticed {:.0} ms after Redis was back; all {JOBS} jobs completed {:.0} ms after the fault",
        noticed.as_secs_f64() * 1e3,
        drained.as_secs_f64() * 1e3
    );
    assert_eq!(r.len("test").await, 0, "the stream ends empty");
}

#[tokio::test]
async fn redis_restarted_empty_mid_run_loses_nothing() {
    survive(Fault::RestartEmpty).await;
}

#[tokio::test]
async fn flushall_mid_run_loses_nothing() {
    survive(Fault::FlushAll).await;
}

#[tokio::test]
async fn redis_down_for_a_while_loses_nothing() {
    let secs = std::env::var("MYSQLQ_REDIS_DOWN_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    survive(Fault::DownFor(Duration::from_secs(secs))).await;
}

#[tokio::test]
async fn a_stream_deleted_mid_run_loses_nothing() {
    let db = setup(JOBS, 20).await;
    let r = TestRedis::shared();
    let worker = db
        .worker()
        .concurrency(8)
        .redis(r.connect().await)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "a quarter done",
        &format!(
            "SELECT COUNT(*) >= {} FROM job_queue WHERE status = 'completed'",
            JOBS / 4
        ),
        Duration::from_secs(60),
    )
    .await;
    let _: i64 = redis::cmd("DEL")
        .arg(r.stream("test"))
        .query_async(&mut r.raw().await)
        .await
        .unwrap();
    assert_eq!(check(&db, JOBS).await, 0);
    worker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_sigkilled_consumer_process_loses_nothing() {
    let db = setup(60, 150).await;
    let r = TestRedis::shared();
    let bin = env!("CARGO_BIN_EXE_mysqlq-test-worker");
    let mut victim = Proc::start(
        bin,
        &db,
        "victim",
        &[
            "--queues",
            "test",
            "--concurrency",
            "4",
            "--redis-url",
            &r.url,
            "--redis-prefix",
            &r.config.prefix,
            "--redis-relay-lease",
            "3s",
        ],
    );
    db.wait_for(
        "the victim runs jobs",
        "SELECT COUNT(*) >= 4 FROM test_runs WHERE event = 'start'",
        Duration::from_secs(60),
    )
    .await;
    victim.kill();
    let killed_running = db
        .scalar(
            "SELECT COUNT(*) FROM job_queue WHERE status = 'processing' AND locked_by = 'victim'",
        )
        .await;
    // A survivor with a short lease: the reaper and its sweeper take the victim's jobs over.
    let worker = db
        .worker()
        .concurrency(8)
        .lease(Duration::from_secs(2))
        .redis(r.connect().await)
        .start()
        .await
        .unwrap();
    let twice = check(&db, 60).await;
    // The dead consumer's entries are dropped by the survivor's sweeper once they have been idle
    // for a lease (the reaper may have brought their jobs back first).
    let deadline = Instant::now() + Duration::from_secs(30);
    while r.len("test").await > 0 {
        assert!(
            Instant::now() < deadline,
            "the dead consumer's entries were never cleaned up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    worker.shutdown().await.unwrap();
    assert!(
        twice <= killed_running,
        "only jobs running in the killed consumer ran twice ({twice} > {killed_running})"
    );
}
