//! Queue-wide limits (`docs/rate-limits.md`): a queue's rate and its global concurrency limit
//! hold across worker processes, including workers started without the setting, which obey
//! what the database stores.

use std::process::{Command, Stdio};
use std::time::Duration;

use mysqlq::admin::{Admin, QueueLimits};
use mysqlq::{EnqueueOptions, NewJob, Rate};
use mysqlq_tests::jobs::{Limited, Rated};
use mysqlq_tests::{Proc, TestDb};

const BIN: &str = env!("CARGO_BIN_EXE_mysqlq-test-worker");

/// The sorted start times (µs) of every run of the queue's jobs.
async fn starts(db: &TestDb) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', at) FROM test_runs \
         WHERE event = 'start' ORDER BY at",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// Starts `i` and `i + n` less than `period` apart, if any.
fn excess(starts: &[i64], n: usize, period: Duration) -> Option<(usize, i64)> {
    let p = i64::try_from(period.as_micros()).unwrap();
    (0..starts.len().saturating_sub(n))
        .find(|&i| starts[i + n] - starts[i] < p)
        .map(|i| (i, starts[i + n] - starts[i]))
}

/// Waits until the queue's limits are stored (the flagged worker has started).
async fn wait_limits(db: &TestDb, queue: &str) {
    db.wait_for(
        "the queue's limits stored",
        &format!(
            "SELECT COUNT(*) FROM mysqlq_queue WHERE queue_name = '{queue}' \
             AND (rate_limit IS NOT NULL OR global_limit IS NOT NULL)"
        ),
        Duration::from_secs(30),
    )
    .await;
}

/// Starts a worker with `flag` (`["--rate", "q=…"]`), waits until it stored the queue's
/// limits, then two workers without it; returns once `jobs` jobs completed.
async fn three_workers(
    db: &TestDb,
    queue: &str,
    args: &[&str],
    flag: &[&str],
    ids: [&str; 3],
    jobs: usize,
) -> Vec<Proc> {
    let mut procs = vec![Proc::start(BIN, db, ids[0], &[args, flag].concat())];
    wait_limits(db, queue).await;
    for id in &ids[1..] {
        procs.push(Proc::start(BIN, db, id, args));
    }
    db.wait_for(
        "every job completed",
        &format!("SELECT COUNT(*) = {jobs} FROM job_queue WHERE status = 'completed'"),
        Duration::from_secs(120),
    )
    .await;
    procs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_rate_holds_for_workers_started_without_the_flag() {
    let db = TestDb::new().await;
    let jobs: usize = 60;
    mysqlq::enqueue_many(
        &db.pool,
        (0..jobs)
            .map(|_| NewJob::from_job(&Rated { tag: "q".into() }, &EnqueueOptions::new()).unwrap()),
    )
    .await
    .unwrap();
    let mut procs = three_workers(
        &db,
        "rated",
        &["--queues", "rated", "--concurrency", "8"],
        &["--rate", "rated=4/200ms"],
        ["flagged", "plain-a", "plain-b"],
        jobs,
    )
    .await;
    let by_worker: Vec<(String, i64)> = sqlx::query_as(
        "SELECT locked_by, COUNT(*) FROM job_queue GROUP BY locked_by ORDER BY locked_by",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for p in &mut procs {
        p.terminate(Duration::from_secs(10));
    }
    let s = starts(&db).await;
    assert_eq!(s.len(), jobs, "every job started once");
    assert_eq!(
        excess(&s, 4, Duration::from_millis(200)),
        None,
        "5 starts of a 4/200ms queue within 200 ms (jobs per worker: {by_worker:?})"
    );
    assert!(
        by_worker.iter().any(|(w, _)| w.starts_with("plain")),
        "the workers started without --rate took part: {by_worker:?}"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE attempts <> 1")
            .await,
        0,
        "waiting for the queue's rate costs no attempt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_limit_holds_across_three_workers() {
    let db = TestDb::new().await;
    let jobs: usize = 30;
    mysqlq::enqueue_many(
        &db.pool,
        (0..jobs).map(|n| {
            NewJob::from_job(
                &Limited {
                    tag: format!("g{n}"),
                    ms: 150,
                },
                &EnqueueOptions::new(),
            )
            .unwrap()
        }),
    )
    .await
    .unwrap();
    let mut procs = three_workers(
        &db,
        "limited",
        &["--queues", "limited", "--concurrency", "4"],
        &["--global", "limited=3"],
        ["flagged", "plain-a", "plain-b"],
        jobs,
    )
    .await;
    for p in &mut procs {
        p.terminate(Duration::from_secs(10));
    }
    // Handlers running at once, from their recorded start and end.
    let events: Vec<(i64, String)> = sqlx::query_as(
        "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', at), event FROM test_runs \
         ORDER BY at, event = 'start'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let (mut running, mut most) = (0i32, 0i32);
    for (_, e) in &events {
        running += if e == "start" { 1 } else { -1 };
        most = most.max(running);
    }
    assert_eq!(events.len(), 2 * jobs);
    assert!(
        most <= 3,
        "{most} handlers of a queue limited to 3 ran at once"
    );
    assert!(most >= 2, "the limit was used ({most} at most at once)");
    let workers = db
        .scalar("SELECT COUNT(DISTINCT locked_by) FROM job_queue")
        .await;
    assert!(workers >= 2, "more than one worker took part");
}

#[tokio::test]
async fn queue_limits_are_set_cleared_and_kept_across_pause_and_resume() {
    let db = TestDb::new().await;
    let admin = Admin::new(db.pool.clone());
    assert_eq!(
        admin.queue_limits("emails").await.unwrap(),
        QueueLimits::default()
    );
    let limits = QueueLimits {
        rate: Some("100/s".parse::<Rate>().unwrap()),
        global: Some(20),
    };
    admin.set_queue_limits("emails", limits).await.unwrap();
    admin.pause("emails").await.unwrap();
    admin.resume("emails").await.unwrap();
    assert_eq!(
        admin.queue_limits("emails").await.unwrap(),
        limits,
        "resume keeps limits"
    );
    admin
        .set_queue_limits("emails", QueueLimits::default())
        .await
        .unwrap();
    assert!(admin.queue_limits("emails").await.unwrap().is_none());
    let audited = db
        .scalar(
            "SELECT COUNT(*) FROM mysqlq_audit WHERE action = 'limits' AND queue_name = 'emails'",
        )
        .await;
    assert_eq!(audited, 2);
}

#[test]
fn bad_rate_and_global_values_are_refused_naming_the_setting() {
    for (flag, value, says) in [
        ("--rate", "emails=10", "has no period"),
        ("--rate", "emails", "write QUEUE=N/PERIOD"),
        ("--rate", "emails=0/s", "1 to 1000000"),
        ("--global", "emails=0", "whole number of jobs above 0"),
        ("--global", "bad queue=2", "queue"),
    ] {
        let out = Command::new(BIN)
            .args(["work", flag, value])
            .env("DATABASE_URL", "mysql://root@127.0.0.1:1/none")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(
            err.contains(flag) && err.contains(says),
            "{flag} {value}: {err}"
        );
    }
}

/// Three workers at concurrency 256 drain ten limited keys beside unlimited jobs in a queue with
/// a global limit, and none of them meets a deadlock or a lock wait timeout (their own counters,
/// flushed to `mysqlq_stats_minute`, and their logs). Short waits that end in time are not seen
/// here: the limits' statements take every lock `SKIP LOCKED` by construction
/// (`docs/rate-limits.md`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_at_concurrency_256_meet_no_deadlock_or_lock_timeout() {
    let db = TestDb::new().await;
    let mut jobs = Vec::new();
    for n in 0..600 {
        let key = format!("k{}", n % 10);
        let opts = EnqueueOptions::new().rate_limit(key.clone(), "20/100ms".parse().unwrap());
        jobs.push(NewJob::from_job(&Rated { tag: key }, &opts).unwrap());
    }
    for _ in 0..1_000 {
        jobs.push(NewJob::from_job(&Rated { tag: "free".into() }, &EnqueueOptions::new()).unwrap());
    }
    let total = jobs.len();
    mysqlq::enqueue_many(&db.pool, jobs).await.unwrap();
    let mut procs = three_workers(
        &db,
        "rated",
        &["--queues", "rated", "--concurrency", "256"],
        &["--global", "rated=300"],
        ["w0", "w1", "w2"],
        total,
    )
    .await;
    for p in &mut procs {
        assert!(
            p.terminate(Duration::from_secs(20)).success(),
            "{}",
            p.log_text()
        );
    }
    let (deadlocks, lock_waits, workers): (i64, i64, i64) = sqlx::query_as(
        "SELECT CAST(IFNULL(SUM(deadlocks), 0) AS SIGNED), CAST(IFNULL(SUM(lock_waits), 0) AS SIGNED), \
           COUNT(DISTINCT worker_id) FROM mysqlq_stats_minute",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(workers, 3, "every worker flushed its counters");
    assert_eq!((deadlocks, lock_waits), (0, 0));
    for p in &procs {
        let log = p.log_text();
        assert!(
            // The error's number with its SQLSTATE: a bare "1205" also matches a timestamp.
            !log.contains("1205 (HY000)") && !log.contains("Lock wait timeout"),
            "{log}"
        );
    }
}

#[tokio::test]
async fn the_limits_command_shows_sets_and_clears_a_queues_limits() {
    let db = TestDb::new().await;
    let run = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(args)
            .env("DATABASE_URL", db.url())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let shown = |s: &str| (Some(0), format!("queue emails: {s}"), String::new());
    assert_eq!(run(&["limits", "emails"]), shown("rate none, global none"));
    assert_eq!(
        run(&[
            "limits", "emails", "--rate", "600/min", "--global", "5", "--by", "ops"
        ]),
        shown("rate 600/min, global 5")
    );
    assert_eq!(
        run(&["limits", "emails", "--global", "none"]),
        shown("rate 600/min, global none")
    );
    assert_eq!(
        run(&["limits", "emails", "--clear"]),
        shown("rate none, global none")
    );
    let (code, _, err) = run(&["limits", "emails", "--rate", "0/s"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--rate") && err.contains("1 to 1000000"),
        "{err}"
    );
    let by: Vec<String> =
        sqlx::query_scalar("SELECT actor FROM mysqlq_audit WHERE action = 'limits' ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(by.len(), 3, "one audit entry per change: {by:?}");
    assert_eq!(by[0], "ops");
}
