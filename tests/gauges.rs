//! `/metrics` answers "is the queue healthy?": the leader's queue gauges (ready, scheduled,
//! running, failed, oldest ready age, jobs by operator state) against a known mix of rows, only
//! the leader reporting them, the gauge statements' plans on a table of 1,000,000 completed
//! rows, and the per-kind run-time and pickup-latency histograms.

use std::sync::Arc;
use std::time::Duration;

use mysqlq::{Metrics, WorkerEvent, WorkerHandle};
use mysqlq_tests::TestDb;
use mysqlq_tests::jobs::Noop;

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
