//! `/metrics` answers "is the queue healthy?": the leader's queue gauges (ready, scheduled,
//! running, failed, oldest ready age, jobs by operator state) against a known mix of rows, only
//! the leader reporting them, the gauge statements' plans on a table of 1,000,000 completed
//! rows, and the per-kind run-time and pickup-latency histograms, and the same latencies by
//! queue and kind in `mysqlq_run_minute`.

use std::sync::Arc;
use std::time::Duration;

use mysqlq::admin::{Admin, LatencyRow, SeriesCounts};
use mysqlq::latency::{MAX_RELATIVE_ERROR, bucket_of};
use mysqlq::{EnqueueOptions, Metrics, WorkerEvent, WorkerHandle};
use mysqlq_tests::TestDb;
use mysqlq_tests::jobs::{Ends, FlakyForever, Nap, Noop, Permanent, Snoozer};

/// The value of `name{queue="<queue>"}` in a Prometheus exposition, if present.
fn queue_value(text: &str, name: &str, queue: &str) -> Option<f64> {
    let prefix = format!("{name}{{queue=\"{queue}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.parse().unwrap_or_else(|e| panic!("`{v}` of {name}: {e}")))
}

/// The value of the series `name{…}` whose labels contain `label`.
fn labelled_value(text: &str, name: &str, label: &str) -> Option<f64> {
    let open = format!("{name}{{");
    text.lines()
        .filter(|l| l.starts_with(&open) && l.contains(label))
        .find_map(|l| l.rsplit(' ').next())
        .map(|v| v.parse().unwrap_or_else(|e| panic!("`{v}` of {name}: {e}")))
}

/// Waits, one maintenance round (or other event) at a time, until `cond` holds of the
/// worker's metrics.
async fn until(worker: &WorkerHandle, what: &str, cond: impl Fn(&Metrics) -> bool) {
    let metrics = worker.metrics();
    let mut events = worker.events();
    for _ in 0..500 {
        if cond(&metrics) {
            return;
        }
        match tokio::time::timeout(Duration::from_secs(30), events.recv()).await {
            Ok(Ok(_)) | Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(e)) => panic!("worker events ended while waiting for {what}: {e}"),
            Err(_) => panic!("no worker event for 30 s while waiting for {what}"),
        }
    }
    panic!("{what}: not after 500 worker events");
}

/// Waits for `n` maintenance rounds of `worker`.
async fn rounds(worker: &WorkerHandle, n: usize) {
    let mut events = worker.events();
    let mut seen = 0;
    while seen < n {
        match tokio::time::timeout(Duration::from_secs(30), events.recv()).await {
            Ok(Ok(WorkerEvent::MaintenanceRound)) => seen += 1,
            Ok(_) => {}
            Err(_) => panic!("no maintenance round for 30 s"),
        }
    }
}

/// Rows of a known mix, written directly: per queue, `ready` jobs ready since the given ages
/// (seconds), `scheduled` jobs an hour ahead, `running` jobs with a lease an hour ahead,
/// `failed` and `completed` jobs.
async fn insert_mix(
    db: &TestDb,
    queue: &str,
    ready_ages: &[u32],
    scheduled: u32,
    running: u32,
    failed: u32,
    completed: u32,
) {
    for age in ready_ages {
        sqlx::query(
            "INSERT INTO job_queue (queue_name, kind, payload, available_at, created_at) \
             VALUES (?, 'noop', '{}', UTC_TIMESTAMP(6) - INTERVAL ? SECOND, \
                     UTC_TIMESTAMP(6) - INTERVAL ? SECOND)",
        )
        .bind(queue)
        .bind(age)
        .bind(age)
        .execute(&db.pool)
        .await
        .unwrap();
    }
    let rows = [
        (
            scheduled,
            "'pending', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, NULL, NULL, NULL",
        ),
        (
            running,
            "'processing', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, UUID(), NULL",
        ),
        (
            failed,
            "'failed', UTC_TIMESTAMP(6), NULL, NULL, UTC_TIMESTAMP(6)",
        ),
        (
            completed,
            "'completed', UTC_TIMESTAMP(6), NULL, NULL, UTC_TIMESTAMP(6)",
        ),
    ];
    for (n, values) in rows {
        for _ in 0..n {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO job_queue (queue_name, kind, payload, status, available_at, \
                 lease_expires_at, claim_token, finished_at) VALUES (?, 'noop', '{{}}', {values})"
            )))
            .bind(queue)
            .execute(&db.pool)
            .await
            .unwrap();
        }
    }
}

/// A worker of queue `test` (none of the mix's queues), reading the gauges every round.
async fn gauge_worker(db: &TestDb) -> WorkerHandle {
    db.worker()
        .gauge_interval(Duration::ZERO)
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_leaders_gauges_count_each_queue_from_the_database() {
    let db = TestDb::new().await;
    insert_mix(&db, "alpha", &[100, 50, 10], 2, 1, 2, 4).await;
    insert_mix(&db, "beta", &[500], 0, 2, 1, 0).await;
    insert_mix(&db, "gamma", &[], 0, 0, 0, 3).await;
    let worker = gauge_worker(&db).await;
    until(&worker, "the queue gauges", |m| m.queue_gauges().is_some()).await;

    let gauges = worker.metrics().queue_gauges().unwrap();
    let names: Vec<&str> = gauges.iter().map(|g| g.queue.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "gamma"], "{gauges:?}");

    let text = worker.metrics().render_prometheus();
    let expect = [
        ("alpha", [3.0, 2.0, 1.0, 2.0]),
        ("beta", [1.0, 0.0, 2.0, 1.0]),
        ("gamma", [0.0, 0.0, 0.0, 0.0]),
    ];
    for (queue, values) in expect {
        let names = [
            "mysqlq_queue_ready",
            "mysqlq_queue_scheduled",
            "mysqlq_queue_running",
            "mysqlq_queue_failed",
        ];
        for (name, want) in names.into_iter().zip(values) {
            assert_eq!(
                queue_value(&text, name, queue),
                Some(want),
                "{name} of {queue} in:\n{text}"
            );
        }
    }
    // Ready since 100 s and 500 s ago (the database's clock; the lower bound is exact, the
    // upper one generous).
    let age = |q| queue_value(&text, "mysqlq_queue_oldest_ready_age_seconds", q).unwrap();
    assert!((100.0..3600.0).contains(&age("alpha")), "{text}");
    assert!((500.0..3600.0).contains(&age("beta")), "{text}");
    assert_eq!(age("gamma"), 0.0, "no ready job: 0\n{text}");
    assert_eq!(
        labelled_value(&text, "mysqlq_leader", "worker="),
        Some(1.0),
        "{text}"
    );
    worker.shutdown().await.unwrap();
}

/// `mysqlq_jobs{queue,state}`: the operator states of each queue, beside the old gauges,
/// which keep their meaning (a retrying job is `scheduled` there, a relayed one `running`).
#[tokio::test]
async fn the_leader_reports_jobs_by_operator_state() {
    let db = TestDb::new().await;
    // alpha: ready ×2, scheduled ×1, running ×1, failed ×2.
    insert_mix(&db, "alpha", &[30, 20], 1, 1, 2, 1).await;
    // alpha: retrying ×3 (a failed attempt, due in an hour), waiting ×1, relayed ×1 (ready).
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, status, attempts, available_at) \
         SELECT 'alpha', 'noop', '{}', 'pending', seq, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR \
         FROM seq_1_to_3; \
         INSERT INTO job_queue (queue_name, kind, payload, status) \
         VALUES ('alpha', 'noop', '{}', 'waiting'); \
         INSERT INTO job_queue (queue_name, kind, payload, status, locked_by, claim_token, \
           lease_expires_at) VALUES ('alpha', 'noop', '{}', 'processing', 'redis-relay:r1', \
           UUID(), UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)",
    )
    .await;
    insert_mix(&db, "beta", &[], 0, 0, 0, 1).await;
    let worker = gauge_worker(&db).await;
    until(&worker, "the queue gauges", |m| m.queue_gauges().is_some()).await;
    let text = worker.metrics().render_prometheus();
    let jobs = |queue: &str, state: &str| {
        labelled_value(
            &text,
            "mysqlq_jobs",
            &format!("queue=\"{queue}\",state=\"{state}\""),
        )
    };
    for (state, n) in [
        ("waiting", 1.0),
        ("ready", 3.0),
        ("rate-limited", 0.0),
        ("scheduled", 1.0),
        ("retrying", 3.0),
        ("running", 1.0),
        ("failed", 2.0),
    ] {
        assert_eq!(
            jobs("alpha", state),
            Some(n),
            "{state} of alpha in:\n{text}"
        );
    }
    assert_eq!(jobs("beta", "retrying"), Some(0.0), "{text}");
    assert_eq!(jobs("alpha", "completed"), None, "not a gauge:\n{text}");
    // The old gauges keep their meaning.
    assert_eq!(
        queue_value(&text, "mysqlq_queue_scheduled", "alpha"),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        queue_value(&text, "mysqlq_queue_running", "alpha"),
        Some(2.0),
        "{text}"
    );
    worker.shutdown().await.unwrap();
}

/// The depth history (`mysqlq_depth_minute`): the leader writes its state counts as the
/// minute's rows, per queue its non-zero states (a queue with none writes `ready = 0`), and
/// writes a minute once: a job enqueued after the first write does not change that minute's
/// rows, however many rounds run; a later minute (if the test crossed into one) has it.
#[tokio::test]
async fn the_leader_writes_its_state_counts_once_a_minute_as_depth_history() {
    let db = TestDb::new().await;
    // alpha: ready ×3, scheduled ×2, running ×1, failed ×2; retrying ×1 and waiting ×1 below.
    insert_mix(&db, "alpha", &[100, 50, 10], 2, 1, 2, 4).await;
    insert_mix(&db, "gamma", &[], 0, 0, 0, 3).await;
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, status, attempts, available_at) \
         VALUES ('alpha', 'noop', '{}', 'pending', 1, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR), \
           ('alpha', 'noop', '{}', 'waiting', 0, UTC_TIMESTAMP(6))",
    )
    .await;
    let worker = gauge_worker(&db).await;
    db.wait_for(
        "the first depth rows",
        "SELECT COUNT(*) FROM mysqlq_depth_minute",
        Duration::from_secs(30),
    )
    .await;
    let first: chrono::NaiveDateTime =
        sqlx::query_scalar("SELECT MIN(minute) FROM mysqlq_depth_minute")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let read = |minute: chrono::NaiveDateTime| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_as::<_, (String, String, u64)>(
                "SELECT CAST(queue_name AS CHAR), CAST(state AS CHAR), n FROM mysqlq_depth_minute \
                 WHERE minute = ? ORDER BY queue_name, state",
            )
            .bind(minute)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    let want: Vec<(String, String, u64)> = [
        ("alpha", "waiting", 1),
        ("alpha", "ready", 3),
        ("alpha", "scheduled", 2),
        ("alpha", "retrying", 1),
        ("alpha", "running", 1),
        ("alpha", "failed", 2),
        ("gamma", "ready", 0),
    ]
    .into_iter()
    .map(|(q, s, n)| (q.to_owned(), s.to_owned(), n))
    .collect();
    assert_eq!(read(first).await, want);
    // The same counts as `Admin::state_counts`.
    let counted = Admin::new(db.pool.clone()).state_counts().await.unwrap();
    let alpha = &counted.iter().find(|q| q.queue == "alpha").unwrap().states;
    assert_eq!(
        (alpha.ready, alpha.scheduled, alpha.retrying, alpha.running),
        (3, 2, 1, 1)
    );

    // One more ready job, then rounds: the first minute keeps its rows.
    db.exec("INSERT INTO job_queue (queue_name, kind, payload) VALUES ('alpha', 'noop', '{}')")
        .await;
    rounds(&worker, 10).await;
    assert_eq!(read(first).await, want, "the minute was written again");
    let later: Vec<(String, u64)> = sqlx::query_as(
        "SELECT CAST(state AS CHAR), n FROM mysqlq_depth_minute \
         WHERE minute > ? AND queue_name = 'alpha' AND state = 'ready'",
    )
    .bind(first)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(later.iter().all(|(_, n)| *n == 4), "{later:?}");
    worker.shutdown().await.unwrap();
}

#[tokio::test]
async fn only_the_leader_reports_gauges_and_a_worker_that_loses_the_lease_stops_at_once() {
    let db = TestDb::new().await;
    insert_mix(&db, "alpha", &[30], 1, 0, 1, 0).await;
    let a = gauge_worker(&db).await;
    until(&a, "a's gauges", |m| m.queue_gauges().is_some()).await;
    let b = gauge_worker(&db).await;
    rounds(&b, 3).await;
    let b_text = b.metrics().render_prometheus();
    assert!(!b.metrics().is_leader(), "a holds the lease");
    assert!(b.metrics().queue_gauges().is_none(), "{b_text}");
    assert!(!b_text.contains("mysqlq_queue_"), "{b_text}");
    assert_eq!(
        labelled_value(&b_text, "mysqlq_leader", "worker="),
        Some(0.0)
    );

    // Someone else takes the lease: a's next round finds it is no longer the leader and drops
    // its reading rather than reporting it on.
    sqlx::query(
        "UPDATE mysqlq_leader SET leader_id = 'elsewhere', elected_at = UTC_TIMESTAMP(6), \
         expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE name = 'maintenance'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    until(&a, "a to lose the lease", |m| !m.is_leader()).await;
    let a_text = a.metrics().render_prometheus();
    assert!(a.metrics().queue_gauges().is_none(), "{a_text}");
    assert!(!a_text.contains("mysqlq_queue_"), "{a_text}");

    // The lease is free again: whichever worker takes it reports, and only that one.
    sqlx::query("UPDATE mysqlq_leader SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND")
        .execute(&db.pool)
        .await
        .unwrap();
    let (am, bm): (Arc<Metrics>, Arc<Metrics>) = (a.metrics(), b.metrics());
    let either = |_: &Metrics| am.queue_gauges().is_some() || bm.queue_gauges().is_some();
    until(&a, "a new leader's gauges", either).await;
    assert!(
        am.queue_gauges().is_some() != bm.queue_gauges().is_some(),
        "exactly one worker reports the gauges"
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    assert!(
        am.queue_gauges().is_none() && bm.queue_gauges().is_none(),
        "a stopped worker reports none"
    );
}

#[tokio::test]
async fn the_gauge_statements_read_an_index_not_a_million_completed_rows() {
    let db = TestDb::new().await;
    // 1,000,000 completed rows in one statement: six cross-joined digit tables.
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                  UNION ALL SELECT 8 UNION ALL SELECT 9)";
    let joined = (0..6)
        .map(|i| format!("{digits} d{i}"))
        .collect::<Vec<_>>()
        .join(" CROSS JOIN ");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO job_queue (queue_name, kind, payload, status, finished_at) \
         SELECT 'bulk', 'noop', '{{}}', 'completed', UTC_TIMESTAMP(6) FROM {joined}"
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    insert_mix(&db, "alpha", &[30, 20], 1, 1, 1, 0).await;
    insert_mix(&db, "bulk", &[10], 0, 0, 1, 0).await;
    sqlx::query("ANALYZE TABLE job_queue")
        .execute(&db.pool)
        .await
        .unwrap();
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(total > 1_000_000, "{total} rows");

    let mut conn = db.connect().await;
    for queue in ["bulk", "alpha"] {
        let plans = mysqlq::store::gauges_explain(&mut conn, queue)
            .await
            .unwrap();
        let tags: Vec<&str> = plans.iter().map(|(tag, _)| *tag).collect();
        assert_eq!(
            tags,
            [
                "state_queues",
                "state_counts",
                "state_relayed",
                "state_held",
                "state_finished_exact",
                "queue_rate_limited"
            ],
            "{plans:?}"
        );
        for (tag, plan) in plans {
            let on_table: Vec<_> = plan
                .iter()
                .filter(|r| matches!(r.table.as_deref(), Some("job_queue" | "j")))
                .collect();
            assert!(!on_table.is_empty(), "{tag} reads job_queue: {plan:?}");
            for row in on_table {
                assert!(row.key.is_some(), "{tag}: {plan:?}");
                assert_ne!(row.access.as_deref(), Some("ALL"), "{tag}: {plan:?}");
                assert_ne!(row.access.as_deref(), Some("index"), "{tag}: {plan:?}");
                assert!(row.rows.is_some(), "{tag}: no row estimate in {plan:?}");
            }
            let examined: u64 = plan.iter().filter_map(|r| r.rows).sum();
            assert!(
                examined < 1_000,
                "{tag} on queue {queue} expects to examine {examined} rows of {total}: {plan:?}"
            );
        }
    }
    // And the readings are right on that table.
    let gauges = mysqlq::store::queue_gauges(&mut conn).await.unwrap();
    let bulk = gauges.iter().find(|g| g.queue == "bulk").unwrap();
    assert_eq!(
        (bulk.ready, bulk.failed, bulk.running),
        (1, 1, 0),
        "{bulk:?}"
    );
}

#[tokio::test]
async fn run_time_and_pickup_histograms_count_every_job_of_a_kind() {
    let db = TestDb::new().await;
    let n = 7u64;
    for i in 0..n {
        Noop { n: i }.enqueue(&db.pool).await.unwrap();
    }
    let worker = db.worker().start().await.unwrap();
    db.wait_for(
        "all jobs completed",
        &format!("SELECT COUNT(*) = {n} FROM job_queue WHERE status = 'completed'"),
        Duration::from_secs(60),
    )
    .await;
    let text = worker.metrics().render_prometheus();
    for name in [
        "mysqlq_job_run_seconds_count",
        "mysqlq_job_pickup_seconds_count",
    ] {
        assert_eq!(
            labelled_value(&text, name, "kind=\"noop\""),
            Some(n as f64),
            "{name} in:\n{text}"
        );
    }
    // Every observation falls in some bucket: the +Inf bucket equals the count.
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("mysqlq_job_run_seconds_bucket{")
                && l.contains("kind=\"noop\"")
                && l.contains("le=\"+Inf\""))
            .find_map(|l| l.rsplit(' ').next())
            .map(|v| v.parse::<f64>().unwrap()),
        Some(n as f64),
        "{text}"
    );
    worker.shutdown().await.unwrap();
}

/// Waits until the worker's row in `mysqlq_worker` was written by `n` more statistics flushes.
async fn flushes(db: &TestDb, worker: &str, n: usize) {
    let seen = || {
        sqlx::query_scalar::<_, String>(
            "SELECT CAST(last_seen_at AS CHAR) FROM mysqlq_worker WHERE worker_id = ?",
        )
        .bind(worker.to_owned())
        .fetch_one(&db.pool)
    };
    let mut last = seen().await.unwrap();
    for _ in 0..n {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = seen().await.unwrap();
            if now != last {
                last = now;
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no flush for 30 s");
        }
    }
}

/// The histograms of `mysqlq_run_minute` count every attempt once, under its queue, kind and
/// how it ended: a worker runs 20 ms naps on `test` and 200 ms naps on `slow`, and jobs that
/// fail, retry, snooze, cancel and are rate-limited (429, counted as snoozed). Read back through
/// `Admin::latency` after the worker has flushed several times with nothing new and then
/// stopped, the counts equal the attempts (a flush that wrote its counts without taking them
/// out of the book would count them again), pickups equal the attempts started, and each
/// queue's run-time p50 lies in the bucket of the nap plus scheduling slack: within 9.1% of it.
#[tokio::test]
async fn run_minute_holds_each_attempt_once_per_queue_and_kind() {
    let db = TestDb::new().await;
    let slow = EnqueueOptions::new().queue("slow");
    for _ in 0..20 {
        Nap { ms: 20 }.enqueue(&db.pool).await.unwrap();
    }
    for _ in 0..10 {
        Nap { ms: 200 }.enqueue_with(&db.pool, &slow).await.unwrap();
    }
    Permanent {}.enqueue(&db.pool).await.unwrap();
    FlakyForever {}.enqueue(&db.pool).await.unwrap();
    Snoozer {}.enqueue(&db.pool).await.unwrap();
    for how in ["cancel", "429"] {
        Ends { how: how.into() }.enqueue(&db.pool).await.unwrap();
    }
    let worker = db
        .worker()
        .queues(["test", "slow", "ends"])
        .concurrency(32)
        .start()
        .await
        .unwrap();
    let id = worker.id().to_owned();
    db.wait_for(
        "every job finished",
        "SELECT COUNT(*) = 35 FROM job_queue WHERE status IN ('completed', 'failed', 'cancelled')",
        Duration::from_secs(60),
    )
    .await;
    // Every attempt in the table, then more flushes with nothing new, then the last at shutdown.
    db.wait_for(
        "every pickup flushed",
        "SELECT IFNULL(SUM(n), 0) >= 39 FROM mysqlq_run_minute WHERE series = 'pickup'",
        Duration::from_secs(30),
    )
    .await;
    flushes(&db, &id, 2).await;
    worker.shutdown().await.unwrap();

    let rows = Admin::new(db.pool.clone())
        .latency(Duration::from_secs(3600))
        .await
        .unwrap();
    let find = |queue: &str, kind: Option<&str>| -> &LatencyRow {
        rows.iter()
            .find(|r| r.queue == queue && r.kind.as_deref() == kind)
            .unwrap_or_else(|| panic!("no row for {queue}/{kind:?} in {rows:#?}"))
    };
    let counts = |completed, retried, failed, cancelled, snoozed| SeriesCounts {
        completed,
        retried,
        failed,
        cancelled,
        snoozed,
        pickup: completed + retried + failed + cancelled + snoozed,
    };
    let expect = [
        ("test", Some("nap"), counts(20, 0, 0, 0, 0)),
        ("test", Some("permanent"), counts(0, 0, 1, 0, 0)),
        ("test", Some("flaky_forever"), counts(0, 2, 1, 0, 0)),
        ("test", Some("snoozer"), counts(1, 0, 0, 0, 1)),
        ("test", None, counts(21, 2, 2, 0, 1)),
        ("slow", Some("nap"), counts(10, 0, 0, 0, 0)),
        ("slow", None, counts(10, 0, 0, 0, 0)),
        ("ends", Some("ends"), counts(1, 0, 0, 1, 1)),
        ("ends", None, counts(1, 0, 0, 1, 1)),
    ];
    for (queue, kind, want) in expect {
        assert_eq!(find(queue, kind).counts, want, "{queue}/{kind:?}");
    }
    assert_eq!(rows.len(), expect.len(), "{rows:#?}");
    let stored = db
        .scalar("SELECT CAST(SUM(n) AS SIGNED) FROM mysqlq_run_minute WHERE series = 'pickup'")
        .await;
    assert_eq!(stored, 39, "one pickup per attempt started, stored once");

    // A nap runs its sleep plus the scheduler's slack: the median run lies in [ms, 1.5 ms] on
    // this shared 2-core machine even under load (15% was seen exceeded once with a load
    // average of 12), so the p50's bucket is that of such a value and the estimate within 9.1%
    // of it. The bucket arithmetic itself is checked exactly by `latency`'s unit tests.
    for (queue, ms) in [("test", 20), ("slow", 200)] {
        let row = find(queue, Some("nap"));
        let nap = Duration::from_millis(ms);
        let p50 = Duration::from_micros(row.run.p50_us.expect("a p50"));
        let (lo, hi) = (bucket_of(nap), bucket_of(nap * 3 / 2));
        assert!(
            (lo..=hi).contains(&bucket_of(p50)),
            "{queue}: p50 {p50:?} is in bucket {}, not in {lo}..={hi} ({:?})",
            bucket_of(p50),
            row.run_buckets
        );
        let ratio = p50.as_secs_f64() / nap.as_secs_f64();
        assert!(
            (1.0 - MAX_RELATIVE_ERROR..=1.5 * (1.0 + MAX_RELATIVE_ERROR)).contains(&ratio),
            "{queue}: p50 {p50:?} for naps of {nap:?}"
        );
        assert!(row.run.p50_us <= row.run.p95_us && row.run.p95_us <= row.run.p99_us);
        assert!(row.pickup.p50_us.is_some() && row.pickup.p99_us.is_some());
        let in_buckets: u64 = row.run_buckets.iter().map(|(_, n)| n).sum();
        assert_eq!(in_buckets, row.counts.completed);
    }
    assert_eq!(find("slow", None).run, find("slow", Some("nap")).run);
}

/// A flush that fails (here the worker's own row is locked by another transaction, so the flush
/// waits out its lock wait timeout and is rolled back) gives its latency counts back to the book:
/// the next flush writes them, once.
#[tokio::test]
async fn a_failed_flush_writes_its_latencies_with_the_next_one() {
    let db = TestDb::new().await;
    let worker = db
        .worker()
        .lock_wait_timeout(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let id = worker.id().to_owned();
    let mut holder = db.connect().await;
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT worker_id FROM mysqlq_worker WHERE worker_id = ? FOR UPDATE")
        .bind(&id)
        .execute(&mut holder)
        .await
        .unwrap();
    for _ in 0..5 {
        Nap { ms: 5 }.enqueue(&db.pool).await.unwrap();
    }
    db.wait_for(
        "the naps completed",
        "SELECT COUNT(*) = 5 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    let metrics = worker.metrics();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while metrics.counters.snapshot().db_errors == 0 {
        assert!(std::time::Instant::now() < deadline, "no flush failed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_run_minute").await,
        0,
        "the failed flush was rolled back"
    );
    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
    db.wait_for(
        "the counts of the failed flush written by a later one",
        "SELECT IFNULL(SUM(n), 0) >= 5 FROM mysqlq_run_minute WHERE series = 'pickup'",
        Duration::from_secs(30),
    )
    .await;
    flushes(&db, &id, 2).await;
    worker.shutdown().await.unwrap();
    let rows = Admin::new(db.pool.clone())
        .latency(Duration::from_secs(3600))
        .await
        .unwrap();
    let nap = rows
        .iter()
        .find(|r| r.queue == "test" && r.kind.as_deref() == Some("nap"))
        .unwrap_or_else(|| panic!("{rows:#?}"));
    assert_eq!((nap.counts.completed, nap.counts.pickup), (5, 5), "{nap:?}");
}

/// `stats_flush` writes a book of more cells than one statement holds ([`RUN_MINUTE_CHUNK`]
/// rows, each statement padded to a power of two with rows that add nothing): every cell once,
/// and a second flush adds to the same minute's rows.
///
/// [`RUN_MINUTE_CHUNK`]: mysqlq::store::RUN_MINUTE_CHUNK
#[tokio::test]
async fn a_flush_of_many_cells_adds_each_once_across_its_statements() {
    use mysqlq::latency::{BUCKETS, LatencyBook, Series, bucket_bounds};
    use mysqlq::store::{RUN_MINUTE_CHUNK, StatsFlush, stats_flush};
    let db = TestDb::new().await;
    let mut book = LatencyBook::default();
    let mut cells = 0u64;
    let mut total = 0u64;
    for queue in ["q1", "q2"] {
        for series in Series::ALL {
            for bucket in 0..u8::try_from(BUCKETS).unwrap() {
                let n = u64::from(bucket % 3) + 1;
                for _ in 0..n {
                    book.record(queue, "kind", series, bucket_bounds(bucket).0);
                }
                cells += 1;
                total += n;
            }
        }
    }
    assert!(
        cells > 2 * RUN_MINUTE_CHUNK as u64,
        "{cells} cells: three statements"
    );
    let mut conn = db.connect().await;
    for _ in 0..2 {
        let latency = book.take();
        let flush = StatsFlush {
            counters: &Default::default(),
            kinds: &[],
            latency: &latency,
            running: 0,
        };
        stats_flush(&mut conn, "w", &flush).await.unwrap();
        // The same counts again for the second flush.
        book.put_back(latency);
    }
    let minutes = db
        .scalar("SELECT COUNT(DISTINCT minute) FROM mysqlq_run_minute")
        .await;
    let rows = db.scalar("SELECT COUNT(*) FROM mysqlq_run_minute").await;
    let sum = db
        .scalar("SELECT CAST(SUM(n) AS SIGNED) FROM mysqlq_run_minute")
        .await;
    assert_eq!(
        sum,
        i64::try_from(2 * total).unwrap(),
        "every cell added once per flush"
    );
    assert_eq!(
        rows,
        i64::try_from(cells).unwrap() * minutes,
        "one row per cell and minute"
    );
}
