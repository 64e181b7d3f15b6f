//! The Redis Streams transport against the shared Redis (a key prefix per test, deleted
//! afterwards) and the shared database: jobs enqueued in MySQL transactions run through the
//! streams once each, with the runtime's error classes, dead letters, back-pressure and
//! graceful shutdown. Fault cases (kill, restart empty, flush) are in `redis_faults.rs`.

use std::time::Duration;

use mysqlq::{JobId, WorkerEvent};
use mysqlq_tests::TestDb;
use mysqlq_tests::jobs::{FlakyForever, Noop, Panicker, Permanent, Sleepy, Snoozer};
use mysqlq_tests::redis::{TestRedis, group_pending, runs, status_of};

#[tokio::test]
async fn jobs_enqueued_in_transactions_run_once_each_through_the_stream() {
    let db = TestDb::new().await;
    let r = TestRedis::shared();
    let mut ids: Vec<JobId> = Vec::new();
    for n in 0..40 {
        let mut tx = db.pool.begin().await.unwrap();
        ids.push(Noop { n }.enqueue(&mut tx).await.unwrap().id());
        if n % 10 == 9 {
            // A rolled-back enqueue never reaches the stream.
            let _ = Noop { n: 1000 + n }.enqueue(&mut tx).await.unwrap();
            tx.rollback().await.unwrap();
            ids.pop();
        } else {
            tx.commit().await.unwrap();
        }
    }
    let worker = db
        .worker()
        .concurrency(8)
        .redis(r.connect().await)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "all completed",
        "SELECT COUNT(*) = 36 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    let worker_id = worker.id().to_owned();
    let metrics = worker.metrics();
    worker.shutdown().await.unwrap();
    let done = runs(&db, "done").await;
    assert_eq!(done.len(), 36);
    assert!(
        done.iter().all(|(_, n)| *n == 1),
        "every job ran once: {done:?}"
    );
    assert_eq!(db.count("completed").await, 36);
    // Taken by the consumer: locked_by is the worker, and the attempt was taken once.
    let odd: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM job_queue WHERE locked_by <> ? OR attempts <> 1")
            .bind(&worker_id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(odd, 0);
    // Every entry was acknowledged and deleted after its completion was written.
    assert_eq!(r.len("test").await, 0, "the stream is empty");
    let c = metrics.counters.snapshot();
    assert_eq!((c.claims, c.completions, c.lost), (36, 36, 0));
}

#[tokio::test]
async fn error_classes_retries_and_dead_letters_work_as_over_mysql() {
    let db = TestDb::new().await;
    let r = TestRedis::shared();
    let panics = Panicker {}.enqueue(&db.pool).await.unwrap().id();
    let permanent = Permanent {}.enqueue(&db.pool).await.unwrap().id();
    let snoozes = Snoozer {}.enqueue(&db.pool).await.unwrap().id();
    let dead = FlakyForever {}.enqueue(&db.pool).await.unwrap().id();
    let worker = db.worker().redis(r.connect().await).start().await.unwrap();
    db.wait_for(
        "every job final",
        "SELECT COUNT(*) = 4 FROM job_queue WHERE status IN ('completed', 'failed')",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    assert_eq!(status_of(&db, panics).await.0, "completed");
    assert_eq!(
        status_of(&db, panics).await.1,
        2,
        "retried once after the panic"
    );
    let (st, attempts, err) = status_of(&db, permanent).await;
    assert_eq!((st.as_str(), attempts), ("failed", 1));
    assert!(err.unwrap().contains("invalid e-mail address"));
    let (st, attempts, _) = status_of(&db, snoozes).await;
    assert_eq!(
        (st.as_str(), attempts),
        ("completed", 1),
        "a snooze gives the attempt back"
    );
    // The dead letter: attempts exhausted, in `failed` where `failed list` and the dashboard
    // read it, its history kept.
    let (st, attempts, err) = status_of(&db, dead).await;
    assert_eq!((st.as_str(), attempts), ("failed", 3));
    assert!(err.unwrap().contains("no attempts left"));
    let failed = mysqlq::admin::Admin::new(db.pool.clone())
        .failed(None, 10)
        .await
        .unwrap();
    assert!(failed.iter().any(|f| f.id == dead), "{failed:?}");
    let history: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM mysqlq_job_attempt WHERE job_id = ?")
            .bind(dead.0)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(history, 3);
    assert_eq!(
        r.len("test").await,
        0,
        "every entry was acknowledged and deleted"
    );
}

/// `jobs` hour-long jobs, a worker with `slots` slots (all held by them: its consumer reads
/// nothing more) and a stream capped at `cap`, once the slots are busy; `grace` is its
/// shutdown timeout.
async fn stopped_consumer(
    db: &TestDb,
    cap: u64,
    jobs: u32,
    slots: usize,
    grace: Duration,
) -> (TestRedis, mysqlq::WorkerHandle) {
    let mut r = TestRedis::shared();
    r.config.stream_cap = cap;
    for _ in 0..jobs {
        Sleepy { ms: 60_000 }.enqueue(&db.pool).await.unwrap();
    }
    let worker = db
        .worker()
        .concurrency(slots)
        .shutdown_timeout(grace)
        .redis(r.connect().await)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "every slot busy",
        &format!("SELECT COUNT(*) = {slots} FROM test_runs WHERE event = 'start'"),
        Duration::from_secs(30),
    )
    .await;
    (r, worker)
}

#[tokio::test]
async fn back_pressure_holds_the_stream_at_its_cap_and_shutdown_hands_everything_back() {
    let db = TestDb::new().await;
    let (r, worker) = stopped_consumer(&db, 5, 40, 2, Duration::from_millis(200)).await;
    let mut events = worker.events();
    // Many relay rounds find the stream full; it never holds more than the cap.
    for round in 0..10 {
        let e =
            mysqlq_tests::wait_event(&mut events, "a full stream", Duration::from_secs(10), |e| {
                matches!(e, WorkerEvent::StreamFull { .. })
            })
            .await;
        let WorkerEvent::StreamFull { length, .. } = e else {
            unreachable!()
        };
        assert_eq!(length, 5, "round {round}");
        assert!(r.len("test").await <= 5);
    }
    // The backlog is in MySQL: 2 running, 3 waiting in the stream (held by the relay), the
    // rest pending.
    assert_eq!(db.count("pending").await, 35);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'processing' AND locked_by LIKE 'redis-relay:%'").await,
        3
    );
    // Graceful shutdown, grace too short for the running jobs: they are cancelled and handed
    // back without consuming their attempt, the unread entries deleted and their rows handed
    // back; every entry still in the group was acknowledged after MySQL recorded it.
    let report = worker.shutdown().await.unwrap();
    assert_eq!(report.released, 2);
    assert_eq!(db.count("pending").await, 40);
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM job_queue WHERE attempts <> 0 OR lease_expires_at IS NOT NULL"
        )
        .await,
        0
    );
    assert_eq!(r.len("test").await, 0);
    assert_eq!(group_pending(&r, "test").await, 0);
    // Nothing lost: another worker runs them all, once each.
    sqlx::query("UPDATE job_queue SET payload = JSON_OBJECT('ms', 1)")
        .execute(&db.pool)
        .await
        .unwrap();
    let worker = db
        .worker()
        .concurrency(8)
        .redis(r.connect().await)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "all completed",
        "SELECT COUNT(*) = 40 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    let done = runs(&db, "done").await;
    assert_eq!(done.len(), 40);
    assert!(done.iter().all(|(_, n)| *n == 1));
}

/// A shutdown with no grace at all still waits for the relay to hand back what it holds: the
/// unread entries are deleted and their rows are `pending` again at once, not after the relay
/// lease (CI once saw six jobs held for the 60 s relay lease after a zero-grace stop: the
/// shutdown had aborted the relay before it could hand them back).
#[tokio::test]
async fn a_shutdown_with_zero_grace_hands_back_what_the_relay_holds() {
    let db = TestDb::new().await;
    let (r, worker) = stopped_consumer(&db, 5, 20, 2, Duration::ZERO).await;
    let mut events = worker.events();
    mysqlq_tests::wait_event(&mut events, "a full stream", Duration::from_secs(10), |e| {
        matches!(e, WorkerEvent::StreamFull { .. })
    })
    .await;
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'processing' AND locked_by LIKE 'redis-relay:%'").await,
        3
    );
    let report = worker.shutdown().await.unwrap();
    assert_eq!(report.released, 2, "{report:?}");
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM job_queue WHERE status <> 'pending' OR attempts <> 0 OR lease_expires_at IS NOT NULL"
        )
        .await,
        0,
        "every job is pending again, its attempt not consumed"
    );
    assert_eq!(r.len("test").await, 0);
    assert_eq!(group_pending(&r, "test").await, 0);
}

#[tokio::test]
async fn graceful_shutdown_lets_running_jobs_finish_and_acknowledges_only_what_mysql_recorded() {
    let db = TestDb::new().await;
    let r = TestRedis::shared();
    for _ in 0..4 {
        Sleepy { ms: 400 }.enqueue(&db.pool).await.unwrap();
    }
    for n in 0..20 {
        Noop { n }.enqueue(&db.pool).await.unwrap();
    }
    let worker = db
        .worker()
        .concurrency(4)
        .shutdown_timeout(Duration::from_secs(20))
        .redis(r.connect().await)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the sleepers started",
        "SELECT COUNT(*) >= 1 FROM test_runs WHERE tag = 'sleepy' AND event = 'start'",
        Duration::from_secs(30),
    )
    .await;
    let report = worker.shutdown().await.unwrap();
    // Every started job finished within the grace; nothing waits for a lease; every entry
    // left is acknowledged and deleted.
    let started = db
        .scalar("SELECT COUNT(DISTINCT job_id) FROM test_runs WHERE event = 'start'")
        .await;
    let sleepers_done = db
        .scalar("SELECT COUNT(*) FROM test_runs WHERE tag = 'sleepy' AND event = 'done'")
        .await;
    assert_eq!(started, sleepers_done, "a started sleeper finished");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE status NOT IN ('completed', 'pending') OR lease_expires_at IS NOT NULL").await,
        0
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'pending' AND attempts <> 0")
            .await,
        0,
        "released jobs kept their attempt"
    );
    assert!(report.finished >= 1);
    assert_eq!(r.len("test").await, 0);
    assert_eq!(group_pending(&r, "test").await, 0);
}

#[tokio::test]
async fn the_fast_producer_puts_committed_jobs_straight_into_the_stream() {
    let db = TestDb::new().await;
    let r = TestRedis::shared();
    let redis = r.connect().await;
    let jobs: Vec<mysqlq::NewJob> = (0..30)
        .map(|n| {
            let o = mysqlq::EnqueueOptions::default().dedupe_key(format!("place-{}", n % 20));
            mysqlq::NewJob::from_job(&Noop { n }, &o).unwrap()
        })
        .collect();
    let enqueued = redis.enqueue_many(&db.pool, jobs).await.unwrap();
    let inserted = enqueued
        .iter()
        .filter(|e| matches!(e, mysqlq::Enqueued::Inserted(_)))
        .count();
    assert_eq!(inserted, 20, "the dedupe key holds in the fast path too");
    // Before any worker runs: durable in MySQL (held by a relay), and already in the stream.
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'processing' AND locked_by LIKE 'redis-relay:%' AND attempts = 0").await,
        20
    );
    assert_eq!(r.len("test").await, 20);
    let worker = db.worker().redis(redis).start().await.unwrap();
    db.wait_for(
        "all completed",
        "SELECT COUNT(*) = 20 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    let done = runs(&db, "done").await;
    assert_eq!(done.len(), 20);
    assert!(done.iter().all(|(_, n)| *n == 1));
    assert_eq!(r.len("test").await, 0);
}

#[tokio::test]
async fn the_dashboard_and_doctor_show_the_stream_side() {
    let db = TestDb::new().await;
    let (r, worker) = stopped_consumer(&db, 3, 6, 1, Duration::from_millis(200)).await;
    let mut events = worker.events();
    mysqlq_tests::wait_event(&mut events, "a full stream", Duration::from_secs(20), |e| {
        matches!(e, WorkerEvent::StreamFull { .. })
    })
    .await;
    let redis = r.connect().await;
    let app = mysqlq_cli::dashboard::router(
        db.pool.clone(),
        mysqlq_cli::dashboard::DashboardOptions::new().redis(redis.clone()),
    );
    let req = axum::http::Request::get("/")
        .header("host", "127.0.0.1")
        .body(axum::body::Body::empty())
        .unwrap();
    let page = mysqlq_tests::http::send(&app, req).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Redis streams"), "{}", page.body);
    assert!(page.body.contains(&r.stream("test")), "{}", page.body);
    assert!(
        page.body.contains("3 / 3"),
        "length against the cap: {}",
        page.body
    );
    assert!(
        page.body.contains(&worker_consumer(&redis).await),
        "{}",
        page.body
    );
    let checks = redis
        .doctor(&["test".to_owned()], Duration::from_secs(60))
        .await;
    let names: Vec<&str> = checks.iter().map(|c| c.name).collect();
    assert_eq!(names, ["redis", "redis stream"], "{checks:?}");
    assert_eq!(
        checks[1].level,
        mysqlq::admin::Level::Warn,
        "at its cap: {checks:?}"
    );
    assert!(checks[1].detail.contains("3 entries (cap 3)"), "{checks:?}");
    worker.shutdown().await.unwrap();
}

/// The one consumer of the test stream's group.
async fn worker_consumer(redis: &mysqlq::redis::Redis) -> String {
    let streams = redis.streams(&["test".to_owned()]).await.unwrap();
    assert_eq!(streams[0].consumers.len(), 1, "{streams:?}");
    streams[0].consumers[0].name.clone()
}

/// The CLI's `stats` and `doctor` with `--redis-url`, as an operator runs them.
#[tokio::test]
async fn stats_and_doctor_on_the_command_line_show_the_streams() {
    let db = TestDb::new().await;
    let r = TestRedis::shared();
    let redis = r.connect().await;
    redis.ensure_group("test").await.unwrap();
    let job = mysqlq::NewJob::from_job(&Noop { n: 1 }, &mysqlq::EnqueueOptions::default()).unwrap();
    redis.enqueue_many(&db.pool, [job]).await.unwrap();
    let bin = env!("CARGO_BIN_EXE_mysqlq-test-worker");
    let run = |args: &[&str]| {
        std::process::Command::new(bin)
            .args(args)
            .args(["--redis-url", &r.url, "--redis-prefix", &r.config.prefix])
            .env("DATABASE_URL", db.url())
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("spawn mysqlq-test-worker")
    };
    let out = run(&["stats"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find(|l| l.starts_with(&r.stream("test")))
        .unwrap_or_else(|| panic!("no line for the stream: {text}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        &cells[1..5],
        ["1", "1", "0", "1"],
        "length, unread, pending, relayed: {line}"
    );
    let out = run(&["stats", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let test_stream = json["redis"]["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["queue"] == "test")
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(test_stream["length"], 1, "{json}");
    assert_eq!(
        json["redis"]["relayed"][0],
        serde_json::json!(["test", 1]),
        "{json}"
    );
    let out = run(&["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Redis 7") || text.contains("Redis 6"),
        "{text}"
    );
    assert!(
        text.contains(&format!("{}: 1 entries", r.stream("test"))),
        "{text}"
    );
    // An unreachable Redis is a failed check (exit 3), not a crash.
    let port = mysqlq_testkit::free_port();
    let out = std::process::Command::new(bin)
        .args([
            "doctor",
            "--redis-url",
            &format!("redis://127.0.0.1:{port}"),
        ])
        .env("DATABASE_URL", db.url())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("FAIL") && l.contains("Redis not reachable")),
        "{text}"
    );
}

/// An entry is acknowledged only once MySQL has the outcome: while an application transaction
/// holds the job's row, the handler has returned but the completion cannot be written, and the
/// entry stays pending in the group.
#[tokio::test]
async fn an_entry_is_acknowledged_only_after_mysql_recorded_the_outcome() {
    let db = TestDb::new().await;
    let r = TestRedis::shared();
    // Running long enough for the test to lock its row before it returns.
    let id = Sleepy { ms: 1000 }.enqueue(&db.pool).await.unwrap().id();
    let worker = db
        .worker()
        .lease(Duration::from_secs(30))
        .lock_wait_timeout(Duration::from_secs(1))
        .redis(r.connect().await)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "taken",
        &format!(
            "SELECT COUNT(*) FROM test_runs WHERE job_id = {} AND event = 'start'",
            id.0
        ),
        Duration::from_secs(20),
    )
    .await;
    let mut lock = db.pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM job_queue WHERE id = ? FOR UPDATE")
        .bind(id.0)
        .execute(&mut *lock)
        .await
        .unwrap();
    db.wait_for(
        "the handler returned",
        &format!(
            "SELECT COUNT(*) FROM test_runs WHERE job_id = {} AND event = 'done'",
            id.0
        ),
        Duration::from_secs(20),
    )
    .await;
    // While the row is locked, the outcome is not in MySQL and the entry stays pending.
    for _ in 0..15 {
        assert_eq!(
            group_pending(&r, "test").await,
            1,
            "acknowledged before MySQL had the outcome"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    lock.commit().await.unwrap();
    db.wait_for(
        "completed",
        &format!(
            "SELECT COUNT(*) FROM job_queue WHERE id = {} AND status = 'completed'",
            id.0
        ),
        Duration::from_secs(20),
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while group_pending(&r, "test").await > 0 {
        assert!(std::time::Instant::now() < deadline, "never acknowledged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await.unwrap();
    assert_eq!(r.len("test").await, 0);
}

/// Several relays on one queue are safe: SKIP LOCKED gives each its own rows, and the capped
/// `XADD` script keeps the stream at its cap for all of them together.
#[tokio::test]
async fn two_workers_relaying_one_queue_keep_the_cap_and_run_each_job_once() {
    let db = TestDb::new().await;
    let mut r = TestRedis::shared();
    r.config.stream_cap = 4;
    for _ in 0..20 {
        Sleepy { ms: 60_000 }.enqueue(&db.pool).await.unwrap();
    }
    let start = || async {
        db.worker()
            .concurrency(1)
            .shutdown_timeout(Duration::from_millis(200))
            .redis(r.connect().await)
            .start()
            .await
            .unwrap()
    };
    let (a, b) = (start().await, start().await);
    let (mut ea, mut eb) = (a.events(), b.events());
    db.wait_for(
        "both slots busy",
        "SELECT COUNT(*) = 2 FROM test_runs WHERE event = 'start'",
        Duration::from_secs(30),
    )
    .await;
    for events in [&mut ea, &mut eb] {
        for _ in 0..3 {
            let e =
                mysqlq_tests::wait_event(events, "a full stream", Duration::from_secs(10), |e| {
                    matches!(e, WorkerEvent::StreamFull { .. })
                })
                .await;
            assert!(
                matches!(e, WorkerEvent::StreamFull { length: 4, .. }),
                "{e:?}"
            );
        }
    }
    assert_eq!(r.len("test").await, 4);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'processing' AND locked_by LIKE 'redis-relay:%'")
            .await,
        2
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    assert_eq!(db.count("pending").await, 20);
    sqlx::query("UPDATE job_queue SET payload = JSON_OBJECT('ms', 1)")
        .execute(&db.pool)
        .await
        .unwrap();
    let (a, b) = (start().await, start().await);
    db.wait_for(
        "all completed",
        "SELECT COUNT(*) = 20 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    let done = runs(&db, "done").await;
    assert_eq!(done.len(), 20);
    assert!(done.iter().all(|(_, n)| *n == 1), "{done:?}");
}

#[tokio::test]
async fn a_workflow_runs_through_the_streams_in_dependency_order() {
    use mysqlq::workflow::Workflow;
    let db = TestDb::new().await;
    let r = TestRedis::shared();
    db.exec(
        "CREATE TABLE wf_log (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, job_id BIGINT UNSIGNED NOT NULL, \
         new_status VARCHAR(16) NOT NULL)",
    )
    .await;
    db.exec(
        "CREATE TRIGGER wf_status AFTER UPDATE ON job_queue FOR EACH ROW \
         INSERT INTO wf_log (job_id, new_status) SELECT NEW.id, NEW.status FROM DUAL \
         WHERE OLD.status <> NEW.status",
    )
    .await;
    let wf = Workflow::new("over redis")
        .step("a", Noop { n: 1 })
        .unwrap()
        .fan_out("b", (2..6).map(|n| Noop { n }), ["a"])
        .unwrap()
        .step_after("c", Noop { n: 9 }, ["b"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    // The leader's sweep runs once an hour: each level is released by the completion of the
    // one before, over Redis as over MySQL.
    let worker = db
        .worker()
        .concurrency(8)
        .maintenance(Duration::from_secs(3600), Duration::from_secs(7200))
        .redis(r.connect().await)
        .start()
        .await
        .unwrap();
    let metrics = worker.metrics();
    db.wait_for(
        "every step completed",
        &format!(
            "SELECT COUNT(*) = 6 FROM job_queue WHERE workflow_id = {} AND status = 'completed'",
            wf.0
        ),
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    assert_eq!(
        metrics.counters.snapshot().workflow_released,
        5,
        "the four `b` and `c` released by their dependencies' completions"
    );
    // Each step claimed (taken from the stream) only after its dependencies completed.
    let early = db
        .scalar(
            "SELECT COUNT(*) FROM mysqlq_wf_edge e JOIN wf_log c ON c.job_id = e.dependent_id \
             AND c.new_status = 'processing' WHERE NOT EXISTS (SELECT 1 FROM wf_log d \
             WHERE d.job_id = e.dep_id AND d.new_status = 'completed' AND d.id < c.id)",
        )
        .await;
    assert_eq!(early, 0);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM test_runs WHERE event = 'done'")
            .await,
        6,
        "every step ran once"
    );
}
