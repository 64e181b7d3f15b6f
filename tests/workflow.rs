//! Workflows and batches against a real server: the enqueue is all or nothing in the caller's
//! transaction, steps keep their job options, a dependent starts only after its dependencies
//! completed and is released exactly once (also when its last two dependencies complete at the
//! same instant on two workers, and past a gate block of 64), upstream rules cancel or run
//! dependents, an operator retry revives them, and batch callbacks fire once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mysqlq::workflow::{Batch, Workflow, WorkflowError};
use mysqlq::{EnqueueOptions, JobContext, JobError};
use mysqlq_tests::TestDb;
use mysqlq_tests::jobs::record;

/// Rendezvous points of [`wf_step`]'s `meet:<name>` act: two handlers return together (each
/// waits at most 2 s for the other).
fn barrier(name: &str) -> Arc<tokio::sync::Barrier> {
    static BARRIERS: Mutex<Option<HashMap<String, Arc<tokio::sync::Barrier>>>> = Mutex::new(None);
    let mut map = BARRIERS.lock().unwrap();
    map.get_or_insert_with(HashMap::new)
        .entry(name.to_owned())
        .or_insert_with(|| Arc::new(tokio::sync::Barrier::new(2)))
        .clone()
}

/// A step: records `start`, then does `act` (`ok`, `fail`, `cancel`, `sleep:<ms>`,
/// `meet:<name>`), then
/// records `done` when it succeeds.
#[mysqlq::job(queue = "wf", retries = 0)]
async fn wf_step(ctx: JobContext, tag: String, act: String) -> Result<(), JobError> {
    record(&ctx, &tag, "start").await?;
    match act.as_str() {
        "fail" => return Err(JobError::fail("told to fail")),
        "cancel" => return Err(JobError::cancel("told to cancel")),
        a if a.starts_with("sleep:") => {
            let ms: u64 = a["sleep:".len()..].parse().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        // A worker may hand a prefetched partner back (prefetch_wait) while its slots wait
        // here: give up after a while, so the pair cannot wait for each other forever.
        a if a.starts_with("meet:") => {
            let met = tokio::time::timeout(Duration::from_secs(2), barrier(a).wait()).await;
            if met.is_ok() {
                record(&ctx, &tag, "met").await?;
            }
        }
        _ => {}
    }
    record(&ctx, &tag, "done").await
}

fn step(tag: &str, act: &str) -> WfStep {
    WfStep {
        tag: tag.to_owned(),
        act: act.to_owned(),
    }
}

/// Logs every status change of a job (`wf_log`, in the order the writes happened).
async fn log_transitions(db: &TestDb) {
    db.exec(
        "CREATE TABLE wf_log (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, job_id BIGINT UNSIGNED NOT NULL, \
         old_status VARCHAR(16) NOT NULL, new_status VARCHAR(16) NOT NULL, KEY (job_id))",
    )
    .await;
    db.exec(
        "CREATE TRIGGER wf_status AFTER UPDATE ON job_queue FOR EACH ROW \
         INSERT INTO wf_log (job_id, old_status, new_status) SELECT NEW.id, OLD.status, NEW.status \
         FROM DUAL WHERE OLD.status <> NEW.status",
    )
    .await;
}

/// Checks the graph's guarantees over everything that ran: no dependent claimed before each of
/// its dependencies completed (by the order of the logged writes), and no dependent released
/// more than once.
async fn check_order_and_single_release(db: &TestDb) {
    let early = db
        .scalar(
            "SELECT COUNT(*) FROM mysqlq_wf_edge e \
             JOIN wf_log c ON c.job_id = e.dependent_id AND c.new_status = 'processing' \
             WHERE NOT EXISTS (SELECT 1 FROM wf_log d WHERE d.job_id = e.dep_id \
               AND d.new_status = 'completed' AND d.id < c.id) \
             AND NOT EXISTS (SELECT 1 FROM wf_log d JOIN mysqlq_wf_step s ON s.job_id = e.dependent_id \
               WHERE d.job_id = e.dep_id AND d.id < c.id \
               AND ((d.new_status = 'failed' AND s.ignore_failed) \
                 OR (d.new_status = 'cancelled' AND s.ignore_cancelled)))",
        )
        .await;
    assert_eq!(early, 0, "claims of a step before a dependency allowed it");
    let twice = db
        .scalar(
            "SELECT COUNT(*) FROM (SELECT job_id FROM wf_log WHERE old_status = 'waiting' \
             AND new_status IN ('pending', 'processing') GROUP BY job_id HAVING COUNT(*) > 1) t",
        )
        .await;
    assert_eq!(twice, 0, "steps released more than once");
}

/// Waits until `sql` counts non-zero; on time-out, panics with every job's state, its events
/// and the worker-side history of status changes, to show where the workflow stopped.
async fn wait_or_dump(db: &TestDb, what: &str, sql: &str, limit: Duration) {
    let deadline = std::time::Instant::now() + limit;
    while db.scalar(sql).await == 0 {
        if std::time::Instant::now() > deadline {
            type Row = (u64, String, Option<String>, String, u32, Option<String>);
            let rows: Vec<Row> = sqlx::query_as(
                "SELECT j.id, CAST(j.status AS CHAR), CAST(s.name AS CHAR), CAST(j.queue_name AS CHAR), \
                 j.attempts, CAST(j.last_error AS CHAR) FROM job_queue j \
                 LEFT JOIN mysqlq_wf_step s ON s.job_id = j.id \
                 WHERE j.status <> 'completed' ORDER BY j.id",
            )
            .fetch_all(&db.pool)
            .await
            .unwrap();
            let gates: Vec<(u64, u32, u32, u32)> = sqlx::query_as(
                "SELECT step_id, block, remaining, open_blocks FROM mysqlq_wf_gate \
                 WHERE remaining <> 0 OR open_blocks <> 0",
            )
            .fetch_all(&db.pool)
            .await
            .unwrap();
            type Trx = (String, String, i64, Option<String>, Option<String>);
            let trx: Vec<Trx> = sqlx::query_as(
                "SELECT CAST(t.trx_state AS CHAR), CAST(t.trx_started AS CHAR), \
                 CAST(t.trx_rows_locked AS SIGNED), CAST(t.trx_query AS CHAR), CAST(p.state AS CHAR) \
                 FROM information_schema.innodb_trx t \
                 LEFT JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id \
                 WHERE p.db = DATABASE()",
            )
            .fetch_all(&db.pool)
            .await
            .unwrap_or_default();
            panic!(
                "timed out waiting for {what}; unfinished jobs: {rows:?}; open gates: {gates:?}; \
                 open transactions: {trx:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn job_of(db: &TestDb, wf: u64, name: &str) -> u64 {
    sqlx::query_scalar("SELECT job_id FROM mysqlq_wf_step WHERE workflow_id = ? AND name = ? ORDER BY ordinal LIMIT 1")
        .bind(wf)
        .bind(name)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Enqueues workflow `name`: `root` → `width` leaves (`leaf`), and a `fanin` after every leaf
/// when `fanin`.
async fn fan_out(
    db: &TestDb,
    name: &str,
    width: usize,
    fanin: bool,
) -> mysqlq::workflow::WorkflowId {
    let wf = Workflow::new(name)
        .step("root", step("root", "ok"))
        .unwrap()
        .fan_out(
            "leaf",
            (0..width).map(|i| step(&format!("leaf{i}"), "ok")),
            ["root"],
        )
        .unwrap();
    let wf = if fanin {
        wf.step_after("fanin", step("fanin", "ok"), ["leaf"])
            .unwrap()
    } else {
        wf
    };
    wf.enqueue(&db.pool).await.unwrap()
}

#[tokio::test]
async fn a_workflow_enqueued_in_a_rolled_back_transaction_leaves_nothing() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    let wf = Workflow::new("checkout")
        .step("charge", step("charge", "ok"))
        .unwrap()
        .step_after("ship", step("ship", "ok"), ["charge"])
        .unwrap();
    let id = wf.enqueue(&mut *tx).await.unwrap();
    assert!(id.0 > 0);
    tx.rollback().await.unwrap();
    for table in [
        "job_queue",
        "mysqlq_workflow",
        "mysqlq_wf_step",
        "mysqlq_wf_edge",
        "mysqlq_wf_gate",
    ] {
        assert_eq!(
            db.scalar(&format!("SELECT COUNT(*) FROM {table}")).await,
            0,
            "{table} after the rollback"
        );
    }
    // Committed, with a business row in the same transaction: everything is there.
    db.exec("CREATE TABLE orders (id INT PRIMARY KEY)").await;
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO orders VALUES (1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    Workflow::new("checkout")
        .step("charge", step("charge", "ok"))
        .unwrap()
        .step_after("ship", step("ship", "ok"), ["charge"])
        .unwrap()
        .enqueue(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'pending'")
            .await,
        1
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'waiting'")
            .await,
        1
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM mysqlq_wf_edge").await, 1);
}

#[tokio::test]
async fn steps_keep_every_job_option_and_a_held_dedupe_key_refuses_the_whole_workflow() {
    let db = TestDb::new().await;
    let o = EnqueueOptions::new()
        .queue("elsewhere")
        .priority(-3)
        .max_attempts(9)
        .ordering_key("acct-1")
        .concurrency_limit("acct", 2)
        .meta("tenant", serde_json::json!("acme"))
        .delay(Duration::from_secs(3600));
    let wf = Workflow::new("opts")
        .step_with("a", step("a", "ok"), &o.clone().dedupe_key("only-one"))
        .unwrap()
        .step_after_with("b", step("b", "ok"), ["a"], &o)
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    type Row = (String, i16, u32, String, String, u16, String, i64, String);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT queue_name, priority, max_attempts, ordering_key, concurrency_key, concurrency_limit, \
         CAST(JSON_EXTRACT(meta, '$.tenant') AS CHAR), \
         TIMESTAMPDIFF(SECOND, created_at, available_at), CAST(status AS CHAR) \
         FROM job_queue j JOIN mysqlq_wf_step s ON s.job_id = j.id WHERE j.workflow_id = ? ORDER BY s.name",
    )
    .bind(wf.0)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 2);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(
            (
                r.0.as_str(),
                r.1,
                r.2,
                r.3.as_str(),
                r.4.as_str(),
                r.5,
                r.6.as_str()
            ),
            ("elsewhere", -3, 9, "acct-1", "acct", 2, "\"acme\""),
            "step {i}"
        );
        assert!((3595..=3600).contains(&r.7), "delay of step {i}: {}", r.7);
    }
    assert_eq!(
        (rows[0].8.as_str(), rows[1].8.as_str()),
        ("pending", "waiting")
    );

    // The key is held by step `a`: a second workflow using it is refused whole.
    let err = Workflow::new("opts")
        .step("x", step("x", "ok"))
        .unwrap()
        .step_with(
            "a",
            step("a", "ok"),
            &EnqueueOptions::new().dedupe_key("only-one"),
        )
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, mysqlq::Error::Workflow(WorkflowError::Duplicate { step, .. }) if step == "a"),
        "{err}"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM job_queue").await, 2);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM mysqlq_workflow").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_starts_only_after_all_its_deps_completed_and_is_released_once() {
    let db = TestDb::new().await;
    log_transitions(&db).await;
    // 30 diamonds and one fan-in of 150 (three gate blocks), on two workers.
    let mut ids = Vec::new();
    for n in 0..30 {
        let t = |s: &str| step(&format!("d{n}-{s}"), "ok");
        let wf = Workflow::new("diamond")
            .step("charge", t("charge"))
            .unwrap()
            .step_after("reserve", t("reserve"), ["charge"])
            .unwrap()
            .step_after("receipt", t("receipt"), ["charge"])
            .unwrap()
            .step_after("ship", t("ship"), ["reserve", "receipt"])
            .unwrap();
        ids.push(wf.enqueue(&db.pool).await.unwrap());
    }
    let fan = fan_out(&db, "fan", 150, true).await;
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_wf_gate WHERE step_id IN (SELECT job_id FROM mysqlq_wf_step WHERE name = 'fanin')")
            .await,
        3,
        "150 deps in blocks of 64"
    );
    let w1 = db
        .worker()
        .queues(["wf"])
        .concurrency(8)
        .start()
        .await
        .unwrap();
    let w2 = db
        .worker()
        .queues(["wf"])
        .concurrency(8)
        .start()
        .await
        .unwrap();
    wait_or_dump(
        &db,
        "every step completed",
        "SELECT COUNT(*) = 30 * 4 + 152 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(60),
    )
    .await;
    let m = [w1.metrics(), w2.metrics()];
    w1.shutdown().await.unwrap();
    w2.shutdown().await.unwrap();
    check_order_and_single_release(&db).await;
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM test_runs WHERE event = 'start'")
            .await,
        30 * 4 + 152,
        "every step ran once"
    );
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM wf_log WHERE old_status = 'waiting' AND new_status IN ('pending', 'processing')"
        )
        .await,
        30 * 3 + 151
    );
    // Released by the completions' own transactions, not by the sweep.
    let released: u64 = m
        .iter()
        .map(|m| m.counters.snapshot().workflow_released)
        .sum();
    assert_eq!(released, 30 * 3 + 151);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_wf_gate WHERE remaining <> 0 OR open_blocks <> 0")
            .await,
        0
    );
    let fanin = job_of(&db, fan.0, "fanin").await;
    let last_leaf_before: i64 = db
        .scalar(&format!(
            "SELECT (SELECT MIN(id) FROM wf_log WHERE job_id = {fanin} AND new_status = 'processing') > \
             (SELECT MAX(l.id) FROM wf_log l JOIN mysqlq_wf_step s ON s.job_id = l.job_id \
              WHERE s.name = 'leaf' AND l.new_status = 'completed')"
        ))
        .await;
    assert_eq!(last_leaf_before, 1, "the fan-in ran after the last leaf");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_deps_finishing_together_on_two_workers_release_once() {
    const ROUNDS: i64 = 40;
    let db = TestDb::new().await;
    log_transitions(&db).await;
    for n in 0..ROUNDS {
        let meet = format!("meet:{}:{n}", db.name);
        Workflow::new("pair")
            .step_with(
                "a",
                step(&format!("a{n}"), &meet),
                &EnqueueOptions::new().queue("wf-a"),
            )
            .unwrap()
            .step_with(
                "b",
                step(&format!("b{n}"), &meet),
                &EnqueueOptions::new().queue("wf-b"),
            )
            .unwrap()
            .step_after("c", step(&format!("c{n}"), "ok"), ["a", "b"])
            .unwrap()
            .enqueue(&db.pool)
            .await
            .unwrap();
    }
    // `a` only runs on one worker, `b` only on the other: each pair's two completions are
    // written by two workers' settlements at the same moment.
    let wa = db
        .worker()
        .queues(["wf-a", "wf"])
        .concurrency(4)
        .start()
        .await
        .unwrap();
    let wb = db
        .worker()
        .queues(["wf-b"])
        .concurrency(4)
        .start()
        .await
        .unwrap();
    wait_or_dump(
        &db,
        "every pair's dependent completed",
        &format!(
            "SELECT COUNT(*) = {} FROM job_queue WHERE status = 'completed'",
            ROUNDS * 3
        ),
        Duration::from_secs(60),
    )
    .await;
    wa.shutdown().await.unwrap();
    wb.shutdown().await.unwrap();
    check_order_and_single_release(&db).await;
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM wf_log WHERE old_status = 'waiting' AND new_status IN ('pending', 'processing')"
        )
        .await,
        ROUNDS
    );
    // The race this is about happened: most pairs returned together.
    let met = db
        .scalar("SELECT COUNT(*) FROM test_runs WHERE event = 'met'")
        .await;
    assert!(
        met >= ROUNDS,
        "{met} of {} handlers met their partner",
        2 * ROUNDS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_dep_cancels_its_dependents_and_a_retry_brings_them_back() {
    let db = TestDb::new().await;
    log_transitions(&db).await;
    // charge → reserve (fails) → ship → notify; audit ignores the failure; tidy runs after
    // ship even when ship is cancelled.
    let wf = Workflow::new("checkout")
        .step("charge", step("charge", "ok"))
        .unwrap()
        .step_after("reserve", step("reserve", "fail"), ["charge"])
        .unwrap()
        .step_after("ship", step("ship", "ok"), ["reserve"])
        .unwrap()
        .step_after("notify", step("notify", "ok"), ["ship"])
        .unwrap()
        .step_after("audit", step("audit", "ok"), ["reserve"])
        .unwrap()
        .ignore_failed()
        .step_after("tidy", step("tidy", "ok"), ["ship"])
        .unwrap()
        .ignore_cancelled()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let worker = db.worker().queues(["wf"]).start().await.unwrap();
    db.wait_for(
        "the workflow settled",
        "SELECT COUNT(*) FROM mysqlq_workflow WHERE state = 'failed'",
        Duration::from_secs(30),
    )
    .await;
    let state = |name: &'static str| {
        let db = &db;
        async move {
            let id = job_of(db, wf.0, name).await;
            sqlx::query_as::<_, (String, Option<String>, Option<String>)>(
                "SELECT CAST(status AS CHAR), cancelled_by, cancel_reason FROM job_queue WHERE id = ?",
            )
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(state("charge").await.0, "completed");
    assert_eq!(state("reserve").await.0, "failed");
    let ship = state("ship").await;
    assert_eq!(ship.0, "cancelled");
    assert_eq!(ship.1.as_deref(), Some("mysqlq:upstream"));
    assert_eq!(ship.2.as_deref(), Some("upstream `reserve` failed"));
    let notify = state("notify").await;
    assert_eq!(
        (notify.0.as_str(), notify.2.as_deref()),
        ("cancelled", Some("upstream `ship` cancelled"))
    );
    assert_eq!(
        state("audit").await.0,
        "completed",
        "ignore_failed ran anyway"
    );
    assert_eq!(
        state("tidy").await.0,
        "completed",
        "ignore_cancelled ran anyway"
    );
    for never in ["ship", "notify"] {
        assert_eq!(
            db.scalar(&format!(
                "SELECT COUNT(*) FROM test_runs WHERE tag = '{never}'"
            ))
            .await,
            0,
            "{never} never ran"
        );
    }

    // The operator retries the failed step (which now succeeds): ship and notify come back
    // and run; tidy and audit, already run, stay.
    let reserve = job_of(&db, wf.0, "reserve").await;
    sqlx::query("UPDATE job_queue SET payload = JSON_SET(payload, '$.act', 'ok') WHERE id = ?")
        .bind(reserve)
        .execute(&db.pool)
        .await
        .unwrap();
    let admin = mysqlq::admin::Admin::new(db.pool.clone());
    let r = admin
        .retry_failed(
            mysqlq::admin::Selection::Ids(&[mysqlq::JobId(reserve)]),
            |_| {},
        )
        .await
        .unwrap();
    assert_eq!((r.retried, r.revived), (1, 2));
    db.wait_for(
        "the workflow completed after the retry",
        "SELECT COUNT(*) FROM mysqlq_workflow WHERE state = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    for name in ["reserve", "ship", "notify", "audit", "tidy"] {
        assert_eq!(state(name).await.0, "completed", "{name}");
    }
    for (tag, runs) in [
        ("ship", 1),
        ("notify", 1),
        ("tidy", 1),
        ("audit", 1),
        ("reserve", 2),
    ] {
        assert_eq!(
            db.scalar(&format!(
                "SELECT COUNT(*) FROM test_runs WHERE tag = '{tag}' AND event = 'start'"
            ))
            .await,
            runs,
            "{tag}"
        );
    }
    check_order_and_single_release(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_callbacks_fire_once_and_on_success_waits_for_every_member() {
    let db = TestDb::new().await;
    log_transitions(&db).await;
    let ok = Batch::new("import-ok")
        .jobs((0..100).map(|i| step(&format!("ok{i}"), "ok")))
        .unwrap()
        .on_success(step("ok-success", "ok"))
        .unwrap()
        .on_complete(step("ok-complete", "ok"))
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let bad = Batch::new("import-bad")
        .jobs((0..20).map(|i| step(&format!("bad{i}"), if i == 7 { "fail" } else { "ok" })))
        .unwrap()
        .on_success(step("bad-success", "ok"))
        .unwrap()
        .on_complete(step("bad-complete", "ok"))
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let worker = db
        .worker()
        .queues(["wf"])
        .concurrency(8)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "both batches finished",
        "SELECT COUNT(*) = 2 FROM mysqlq_workflow WHERE state <> 'running'",
        Duration::from_secs(60),
    )
    .await;
    worker.shutdown().await.unwrap();
    let runs = |tag: &'static str| {
        let db = &db;
        async move {
            db.scalar(&format!(
                "SELECT COUNT(*) FROM test_runs WHERE tag = '{tag}' AND event = 'start'"
            ))
            .await
        }
    };
    assert_eq!(runs("ok-success").await, 1);
    assert_eq!(runs("ok-complete").await, 1);
    assert_eq!(
        runs("bad-success").await,
        0,
        "on_success never runs after a failure"
    );
    assert_eq!(runs("bad-complete").await, 1);
    let states: Vec<(u64, String)> =
        sqlx::query_as("SELECT id, CAST(state AS CHAR) FROM mysqlq_workflow ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        states,
        vec![(ok.0, "completed".to_owned()), (bad.0, "failed".to_owned())]
    );
    let reason: String = sqlx::query_scalar(
        "SELECT cancel_reason FROM job_queue j JOIN mysqlq_wf_step s ON s.job_id = j.id \
         WHERE s.workflow_id = ? AND s.name = 'on_success'",
    )
    .bind(bad.0)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(reason, "upstream `jobs#7` failed");
    check_order_and_single_release(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_workflows_are_pruned_whole_and_no_step_is_pruned_while_its_workflow_runs() {
    let db = TestDb::new().await;
    // `fast` completes at once; `slow` runs 4 s after it, well past the 1 s retention.
    let running = Workflow::new("slow")
        .step("fast", step("fast", "ok"))
        .unwrap()
        .step_after("slow", step("slow", "sleep:4000"), ["fast"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let failed = Workflow::new("failing")
        .step("bad", step("bad", "fail"))
        .unwrap()
        .step_after("after", step("after", "ok"), ["bad"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let plain = mysqlq::Job::enqueue(&step("plain", "ok"), &db.pool)
        .await
        .unwrap()
        .id();
    let worker = db
        .worker()
        .queues(["wf"])
        .retention(Duration::from_secs(1), Duration::from_secs(3600))
        .start()
        .await
        .unwrap();
    let fast = job_of(&db, running.0, "fast").await;
    wait_or_dump(
        &db,
        "the plain job pruned",
        &format!("SELECT COUNT(*) = 0 FROM job_queue WHERE id = {}", plain.0),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        db.status(fast).await.as_deref(),
        Some("completed"),
        "a completed step of a running workflow is kept past the retention"
    );
    wait_or_dump(
        &db,
        "the finished workflow pruned whole",
        &format!(
            "SELECT COUNT(*) = 0 FROM mysqlq_workflow WHERE id = {}",
            running.0
        ),
        Duration::from_secs(60),
    )
    .await;
    worker.shutdown().await.unwrap();
    for (table, column) in [
        ("job_queue", "workflow_id"),
        ("mysqlq_wf_step", "workflow_id"),
    ] {
        assert_eq!(
            db.scalar(&format!(
                "SELECT COUNT(*) FROM {table} WHERE {column} = {}",
                running.0
            ))
            .await,
            0,
            "{table}"
        );
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_wf_edge").await,
        1,
        "only the failed workflow's edge is left"
    );
    // The failed workflow is kept for the failed jobs' retention, every row of it.
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM job_queue WHERE workflow_id = {}",
            failed.0
        ))
        .await,
        2
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM mysqlq_workflow WHERE id = {} AND state = 'failed'",
            failed.0
        ))
        .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_cancel_of_a_waiting_step_applies_its_dependents_rules_and_delete_leaves_steps_alone()
 {
    let db = TestDb::new().await;
    log_transitions(&db).await;
    let wf = Workflow::new("ops")
        .step("a", step("a", "sleep:1500"))
        .unwrap()
        .step_after("b", step("b", "ok"), ["a"])
        .unwrap()
        .step_after("c", step("c", "ok"), ["b"])
        .unwrap()
        .ignore_cancelled()
        .step_after("d", step("d", "ok"), ["b"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let (a, b) = (job_of(&db, wf.0, "a").await, job_of(&db, wf.0, "b").await);
    let admin = mysqlq::admin::Admin::new(db.pool.clone());
    // A step is deleted with its workflow, never alone (its dependents would wait forever).
    let r = admin.delete(&[mysqlq::JobId(a)]).await.unwrap();
    assert_eq!((r.deleted, r.in_workflow), (0, vec![mysqlq::JobId(a)]));
    // `b` is waiting: an operator can cancel it.
    let r = admin
        .cancel(
            mysqlq::admin::JobSelection::Ids(&[mysqlq::JobId(b)]),
            "ops",
            Some("not needed"),
            |_| {},
        )
        .await
        .unwrap();
    assert_eq!(r.cancelled, 1);
    let worker = db.worker().queues(["wf"]).start().await.unwrap();
    wait_or_dump(
        &db,
        "the workflow finished",
        &format!(
            "SELECT COUNT(*) FROM mysqlq_workflow WHERE id = {} AND state <> 'running'",
            wf.0
        ),
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    let end = |name: &'static str| {
        let db = &db;
        async move {
            let id = job_of(db, wf.0, name).await;
            sqlx::query_as::<_, (String, Option<String>)>(
                "SELECT CAST(status AS CHAR), cancel_reason FROM job_queue WHERE id = ?",
            )
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(end("a").await.0, "completed");
    assert_eq!(
        end("b").await,
        ("cancelled".to_owned(), Some("not needed".to_owned()))
    );
    assert_eq!(end("c").await.0, "completed", "ignore_cancelled ran anyway");
    assert_eq!(
        end("d").await,
        (
            "cancelled".to_owned(),
            Some("upstream `b` cancelled".to_owned())
        )
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM mysqlq_workflow WHERE id = {} AND state = 'cancelled'",
            wf.0
        ))
        .await,
        1
    );
    check_order_and_single_release(&db).await;
}

/// A connection inside a transaction that holds the rows `sql` locked (`ROLLBACK` lets go).
async fn hold_rows(db: &TestDb, sql: &str) -> sqlx::MySqlConnection {
    let mut holder = db.connect().await;
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_all(&mut holder)
        .await
        .unwrap();
    holder
}

/// A worker on `wf` whose leader sweeps once an hour: what settles a step while the test runs
/// is the worker's own completion path, not the sweep.
async fn worker_without_sweep(db: &TestDb) -> mysqlq::WorkerHandle {
    db.worker()
        .queues(["wf"])
        .maintenance(Duration::from_secs(3600), Duration::from_secs(7200))
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_dependents_gate_is_held_completes_at_once_and_is_settled_before_the_worker_stops()
 {
    let db = TestDb::new().await;
    log_transitions(&db).await;
    let wf = Workflow::new("held")
        .step("a", step("a", "ok"))
        .unwrap()
        .step("x", step("x", "ok"))
        .unwrap()
        .step_after("b", step("b", "ok"), ["a", "x"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let (a, b) = (job_of(&db, wf.0, "a").await, job_of(&db, wf.0, "b").await);
    // Another transaction holds b's gate: a's (and x's) settlement cannot lock it now.
    let mut holder = hold_rows(
        &db,
        &format!("SELECT * FROM mysqlq_wf_gate WHERE step_id = {b} FOR UPDATE"),
    )
    .await;
    let worker = worker_without_sweep(&db).await;
    let metrics = worker.metrics();
    // a's completion is written without waiting for the gate: its row is `completed` (not left
    // `processing`, with a lease to keep alive) while the gate is still held, and b waits.
    db.wait_for(
        "a completed while b's gate is held",
        &format!("SELECT COUNT(*) FROM job_queue WHERE id = {a} AND status = 'completed'"),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(db.status(b).await.as_deref(), Some("waiting"));
    assert!(
        metrics.counters.snapshot().workflow_settle_deferred > 0,
        "a's settlement was counted as deferred"
    );
    // Shutdown begins while a's settlement is deferred; the gate is let go a moment later.
    let stop = tokio::spawn(worker.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    stop.await.unwrap().unwrap();
    assert_eq!(
        db.status(b).await.as_deref(),
        Some("pending"),
        "b released by a's settlement before the worker stopped"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM test_runs WHERE tag = 'a' AND event = 'start'")
            .await,
        1
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM mysqlq_wf_edge WHERE dependent_id = {b} AND state = 'open'"
        ))
        .await,
        0,
        "a's and x's edges settled"
    );
    check_order_and_single_release(&db).await;
}

/// A step with one dependency has no gate: its dependency's settlement needs only its row. With
/// that row held by another transaction, the dependency completes at once and its settlement
/// follows when the row is let go; the step is released once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_with_one_dependency_has_no_gate_and_a_held_row_only_defers_its_release() {
    let db = TestDb::new().await;
    log_transitions(&db).await;
    let wf = Workflow::new("sole")
        .step("a", step("a", "ok"))
        .unwrap()
        .step_after("b", step("b", "ok"), ["a"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let (a, b) = (job_of(&db, wf.0, "a").await, job_of(&db, wf.0, "b").await);
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM mysqlq_wf_gate WHERE step_id = {b}"
        ))
        .await,
        0,
        "no gate for a step with one dependency"
    );
    let mut holder = hold_rows(
        &db,
        &format!("SELECT id FROM job_queue WHERE id = {b} FOR UPDATE"),
    )
    .await;
    let worker = worker_without_sweep(&db).await;
    db.wait_for(
        "a completed while b's row is held",
        &format!("SELECT COUNT(*) FROM job_queue WHERE id = {a} AND status = 'completed'"),
        Duration::from_secs(10),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    db.wait_for(
        "b ran after the row was let go",
        "SELECT COUNT(*) FROM test_runs WHERE tag = 'b' AND event = 'done'",
        Duration::from_secs(10),
    )
    .await;
    worker.shutdown().await.unwrap();
    assert_eq!(db.status(b).await.as_deref(), Some("completed"));
    check_order_and_single_release(&db).await;
}

#[tokio::test]
async fn testing_drain_runs_a_workflow_to_its_end_with_its_upstream_rules() {
    use mysqlq::testing::{DrainOptions, drain};
    let db = TestDb::new().await;
    let wf = Workflow::new("checkout")
        .step("charge", step("charge", "ok"))
        .unwrap()
        .step_after("reserve", step("reserve", "fail"), ["charge"])
        .unwrap()
        .step_after("ship", step("ship", "ok"), ["reserve"])
        .unwrap()
        .step_after("audit", step("audit", "ok"), ["reserve"])
        .unwrap()
        .ignore_failed()
        .enqueue(&db.pool)
        .await
        .unwrap();
    // Released steps are pending rows with ids below the drain's bound: one drain runs them.
    drain(&db.pool, DrainOptions::new().queues(["wf"]))
        .await
        .unwrap();
    let state = |name: &'static str| {
        let db = &db;
        async move { db.status(job_of(db, wf.0, name).await).await.unwrap() }
    };
    assert_eq!(state("charge").await, "completed");
    assert_eq!(state("reserve").await, "failed");
    assert_eq!(
        state("ship").await,
        "cancelled",
        "upstream rule applied by the drain"
    );
    assert_eq!(
        state("audit").await,
        "completed",
        "ignore_failed ran in the drain"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_the_sweep_cannot_settle_holds_up_no_other_workflow() {
    let db = TestDb::new().await;
    let wf = |name: &str| {
        Workflow::new(name)
            .step("bad", step(&format!("{name}-bad"), "fail"))
            .unwrap()
            .step("good", step(&format!("{name}-good"), "ok"))
            .unwrap()
            .step_after(
                "after",
                step(&format!("{name}-after"), "ok"),
                ["bad", "good"],
            )
            .unwrap()
            .ignore_failed()
    };
    let broken = wf("broken").enqueue(&db.pool).await.unwrap();
    let fine = wf("fine").enqueue(&db.pool).await.unwrap();
    // Someone deleted the first workflow's gate by hand: its failed step cannot be settled.
    let dependent = job_of(&db, broken.0, "after").await;
    db.exec(&format!(
        "DELETE FROM mysqlq_wf_gate WHERE step_id = {dependent}"
    ))
    .await;
    let worker = db.worker().queues(["wf"]).start().await.unwrap();
    wait_or_dump(
        &db,
        "the other workflow ran to its end",
        &format!(
            "SELECT COUNT(*) FROM mysqlq_workflow WHERE id = {} AND state = 'failed'",
            fine.0
        ),
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    assert_eq!(db.status(dependent).await.as_deref(), Some("waiting"));
    assert_eq!(
        db.status(job_of(&db, fine.0, "after").await)
            .await
            .as_deref(),
        Some("completed")
    );
}

/// `produce`: records `n`; `big`: records 20 KiB (refused); `sum`: reads `seed` and every
/// `part`, records their sum as its tag; `counts`: records the batch's counts as its tag.
#[mysqlq::job(queue = "wf", retries = 0)]
async fn wf_result(ctx: JobContext, role: String, n: u64) -> Result<(), JobError> {
    match role.as_str() {
        "produce" => ctx.record(&n).await.map_err(JobError::fail)?,
        "big" => {
            let err = ctx.record(&"x".repeat(20 * 1024)).await.unwrap_err();
            let said = err.to_string().contains("over the limit of 16384");
            record(&ctx, &format!("says the limit: {said}"), "refused").await?;
        }
        "sum" => {
            let seed: Option<u64> = ctx.upstream("seed").await.map_err(JobError::fail)?;
            let parts: Vec<u64> = ctx.upstream_all("part").await.map_err(JobError::fail)?;
            let fan_out = ctx.upstream::<u64>("part").await.unwrap_err();
            let unknown = ctx.upstream::<u64>("nope").await.unwrap_err();
            record(&ctx, &format!("seed={seed:?} parts={parts:?}"), "sum").await?;
            let fan_out = fan_out
                .to_string()
                .contains("`part` is a fan-out of several steps");
            let unknown = unknown.to_string().contains("has no step `nope`");
            record(
                &ctx,
                &format!("fan-out: {fan_out}, unknown: {unknown}"),
                "error",
            )
            .await?;
        }
        "counts" => {
            let c = ctx.batch_counts().await.map_err(JobError::fail)?;
            record(&ctx, &serde_json::to_string(&c).unwrap(), "counts").await?;
        }
        _ => {}
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_reads_what_its_dependencies_recorded_and_a_callback_reads_its_batchs_counts() {
    let db = TestDb::new().await;
    let r = |role: &str, n: u64| WfResult {
        role: role.to_owned(),
        n,
    };
    Workflow::new("results")
        .step("seed", r("produce", 7))
        .unwrap()
        .fan_out("part", (1..=5).map(|n| r("produce", n * 10)), ["seed"])
        .unwrap()
        .step_after("big", r("big", 0), ["seed"])
        .unwrap()
        .step_after("sum", r("sum", 0), ["part", "big"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    Batch::new("counted")
        .jobs((0..6).map(|i| step(&format!("m{i}"), if i < 2 { "fail" } else { "ok" })))
        .unwrap()
        .on_complete(r("counts", 0))
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let worker = db.worker().queues(["wf"]).start().await.unwrap();
    wait_or_dump(
        &db,
        "both finished",
        "SELECT COUNT(*) = 2 FROM mysqlq_workflow WHERE state <> 'running'",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    let tags = |event: &'static str| {
        let db = &db;
        async move {
            sqlx::query_scalar::<_, String>("SELECT tag FROM test_runs WHERE event = ? ORDER BY id")
                .bind(event)
                .fetch_all(&db.pool)
                .await
                .unwrap()
        }
    };
    let ended: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT CAST(status AS CHAR), last_error FROM job_queue WHERE status <> 'completed'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        tags("sum").await,
        ["seed=Some(7) parts=[10, 20, 30, 40, 50]"],
        "{ended:?}"
    );
    assert_eq!(tags("error").await, ["fan-out: true, unknown: true"]);
    assert_eq!(tags("refused").await, ["says the limit: true"]);
    assert_eq!(
        tags("counts").await,
        [r#"{"total":6,"completed":4,"failed":2,"cancelled":0,"open":0}"#]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_counts_workflows_by_state_and_waiting_steps_per_queue() {
    let db = TestDb::new().await;
    // Nothing serves queue `wf`: the workflow stays running, its dependent waiting.
    Workflow::new("parked")
        .step("a", step("a", "ok"))
        .unwrap()
        .step_after("b", step("b", "ok"), ["a"])
        .unwrap()
        .step_after("c", step("c", "ok"), ["a"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let worker = db.worker().queues(["test"]).start().await.unwrap();
    let m = worker.metrics();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while m.workflow_gauges().is_none() {
        assert!(std::time::Instant::now() < deadline, "no gauge reading");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = m.render_prometheus();
    worker.shutdown().await.unwrap();
    for line in [
        "mysqlq_workflows{kind=\"workflow\",state=\"running\"} 1",
        "mysqlq_queue_waiting{queue=\"wf\"} 2",
        "mysqlq_queue_ready{queue=\"wf\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
}

/// A worker's step completions lock their own rows only: a row of another job that another
/// transaction holds (a worker stopped inside its claim or settlement) does not hold them up.
/// Before: the locking read of the completing rows (`status = 'processing'` and the ids) was
/// planned on `idx_job_recover` when few jobs were running, and waited for every running row.
#[tokio::test]
async fn completing_steps_never_waits_for_another_jobs_row() {
    let db = TestDb::new().await;
    let wf = Workflow::new("wide")
        .fan_out(
            "leaf",
            (0..64).map(|i| step(&format!("l{i}"), "ok")),
            [""; 0],
        )
        .unwrap()
        .step_after("fanin", step("fanin", "ok"), ["leaf"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let other = mysqlq::Job::enqueue(&step("other", "ok"), &db.pool)
        .await
        .unwrap()
        .id();
    // Four leaves running under our claims, the other 60 completed by an earlier write (as
    // when a write is retried); one unrelated job running, its row held by another session.
    db.exec(&format!(
        "UPDATE job_queue SET status = 'processing', claim_token = CONCAT('t', id), \
         lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, attempts = 1 \
         WHERE id = {} OR (workflow_id = {} AND status = 'pending')",
        other.0, wf.0
    ))
    .await;
    let leaves: Vec<u64> =
        sqlx::query_scalar("SELECT job_id FROM mysqlq_wf_step WHERE name = 'leaf' ORDER BY job_id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    db.exec(&format!(
        "UPDATE job_queue SET status = 'completed', finished_at = UTC_TIMESTAMP(6) WHERE id IN ({})",
        leaves[4..].iter().map(u64::to_string).collect::<Vec<_>>().join(",")
    ))
    .await;
    db.exec("ANALYZE TABLE job_queue").await;
    let mut holder = db.connect().await;
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT id FROM job_queue WHERE id = ? FOR UPDATE")
        .bind(other.0)
        .fetch_all(&mut holder)
        .await
        .unwrap();
    let mut conn = db.connect().await;
    sqlx::query("SET SESSION innodb_lock_wait_timeout = 2")
        .execute(&mut conn)
        .await
        .unwrap();
    let owned: Vec<mysqlq::store::Owned> = leaves
        .iter()
        .map(|&id| mysqlq::store::Owned {
            id: mysqlq::JobId(id),
            token: format!("t{id}"),
        })
        .collect();
    let settled = mysqlq::store::workflow::wf_complete_steps(&mut conn, &owned, &[], None)
        .await
        .expect("completing our own steps does not wait for another job's row");
    assert_eq!(settled.report.done, 4);
    assert!(settled.unsettled.is_empty());
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
}

/// Index entries and rows this session's statements have read so far.
async fn handler_reads(conn: &mut sqlx::MySqlConnection) -> i64 {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SHOW SESSION STATUS WHERE Variable_name IN \
         ('Handler_read_next', 'Handler_read_rnd_next', 'Handler_read_key')",
    )
    .fetch_all(conn)
    .await
    .unwrap();
    rows.iter().map(|(_, v)| v.parse::<i64>().unwrap()).sum()
}

/// A settlement reads and locks only its own gates, however many other workflows wait. Before:
/// a gate decrement with one key was `WHERE (step_id, block) IN ((?, ?))`, which MariaDB plans
/// as a scan of every gate row (10,157 rows per statement in the bench, one statement per block).
#[tokio::test]
async fn a_settlement_reads_only_its_own_gates() {
    let db = TestDb::new().await;
    // 400 other workflows waiting (400 gate rows), then ours.
    for i in 0..400 {
        Workflow::new("other")
            .step("a", step(&format!("oa{i}"), "ok"))
            .unwrap()
            .step_after("b", step(&format!("ob{i}"), "ok"), ["a"])
            .unwrap()
            .enqueue(&db.pool)
            .await
            .unwrap();
    }
    let wf = Workflow::new("ours")
        .step("a", step("a", "ok"))
        .unwrap()
        .step_after("b", step("b", "ok"), ["a"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let (a, b) = (job_of(&db, wf.0, "a").await, job_of(&db, wf.0, "b").await);
    db.exec(&format!(
        "UPDATE job_queue SET status = 'processing', claim_token = 'ta', attempts = 1, \
         lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id = {a}"
    ))
    .await;
    db.exec("ANALYZE TABLE mysqlq_wf_gate").await;
    let mut conn = db.connect().await;
    let before = handler_reads(&mut conn).await;
    let owned = [mysqlq::store::Owned {
        id: mysqlq::JobId(a),
        token: "ta".to_owned(),
    }];
    let settled = mysqlq::store::workflow::wf_complete_steps(&mut conn, &owned, &[], None)
        .await
        .unwrap();
    let read = handler_reads(&mut conn).await - before;
    assert_eq!(settled.released, vec![mysqlq::JobId(b)]);
    assert!(
        read < 100,
        "completing one step read {read} index entries and rows (400 other workflows' gates)"
    );
}

/// `fetch`: grafts `resize` ×3 (the last grafts 2 `thumb`s) and fails its first attempt after
/// grafting (the retry grafts the same again); `add`: adds 2 members to its batch; grafted steps
/// are `slow` (400 ms), so a consumer that did not wait for them would run before they end.
#[mysqlq::job(queue = "wf", retries = 1, backoff = "10ms")]
async fn wf_grower(ctx: JobContext, role: String, tag: String) -> Result<(), JobError> {
    record(&ctx, &tag, "start").await?;
    let g = |role: &str, tag: String| WfGrower {
        role: role.to_owned(),
        tag,
    };
    match role.as_str() {
        "fetch" => {
            let ids = ctx
                .graft()
                .fan_out(
                    "resize",
                    vec![
                        g("slow", "resize0".into()),
                        g("slow", "resize1".into()),
                        g("nested", "resize2".into()),
                    ],
                    [""; 0],
                )
                .map_err(JobError::fail)?
                .enqueue()
                .await
                .map_err(JobError::fail)?;
            record(&ctx, &format!("grafted {}", ids.len()), "grafted").await?;
            if ctx.attempt() == 1 {
                return Err(JobError::retry("fails once after grafting"));
            }
        }
        "nested" => {
            let me = tag.clone();
            ctx.graft()
                .fan_out(
                    "thumb",
                    (0..2).map(|i| g("slow", format!("thumb{i}"))),
                    [me.as_str()].into_iter().filter(|_| false),
                )
                .map_err(JobError::fail)?
                .enqueue()
                .await
                .map_err(JobError::fail)?;
        }
        // Slower than the grafter: a consumer that did not wait for it would run first.
        "slow" => tokio::time::sleep(Duration::from_millis(400)).await,
        "add" => {
            ctx.batch_add()
                .jobs((0..2).map(|i| g("slow", format!("added{i}"))))
                .map_err(JobError::fail)?
                .enqueue()
                .await
                .map_err(JobError::fail)?;
        }
        _ => {}
    }
    record(&ctx, &tag, "done").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_waits_for_what_its_dependency_grafted_at_every_depth_and_a_retry_adds_nothing_twice()
 {
    let db = TestDb::new().await;
    log_transitions(&db).await;
    let g = |role: &str, tag: &str| WfGrower {
        role: role.to_owned(),
        tag: tag.to_owned(),
    };
    let wf = Workflow::new("grow")
        .step("fetch", g("fetch", "fetch"))
        .unwrap()
        .step("other", g("leaf", "other"))
        .unwrap()
        .step_after("merge", g("leaf", "merge"), ["fetch", "other"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let worker = db
        .worker()
        .queues(["wf"])
        .concurrency(16)
        .start()
        .await
        .unwrap();
    wait_or_dump(
        &db,
        "the workflow completed",
        &format!(
            "SELECT COUNT(*) FROM mysqlq_workflow WHERE id = {} AND state = 'completed'",
            wf.0
        ),
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    // 3 declared + 3 resize (grafted once, though fetch grafted on both attempts) + 2 thumbs.
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM job_queue WHERE workflow_id = {}",
            wf.0
        ))
        .await,
        8
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM test_runs WHERE event = 'grafted' AND tag = 'grafted 3'")
            .await,
        2,
        "both attempts got the same three steps"
    );
    // merge was claimed after every grafted step completed, the nested ones included.
    let merge_after_all: i64 = db
        .scalar(&format!(
            "SELECT (SELECT MIN(l.id) FROM wf_log l WHERE l.job_id = {} AND l.new_status = 'processing') > \
             (SELECT MAX(l.id) FROM wf_log l JOIN mysqlq_wf_step s ON s.job_id = l.job_id \
              WHERE s.name IN ('resize', 'thumb') AND l.new_status = 'completed')",
            job_of(&db, wf.0, "merge").await
        ))
        .await;
    assert_eq!(
        merge_after_all, 1,
        "merge ran after what fetch grafted, at both depths"
    );
    check_order_and_single_release(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_success_waits_for_jobs_added_from_inside_the_batch() {
    let db = TestDb::new().await;
    log_transitions(&db).await;
    let g = |role: &str, tag: &str| WfGrower {
        role: role.to_owned(),
        tag: tag.to_owned(),
    };
    let b = Batch::new("growing")
        .jobs([g("add", "m0"), g("leaf", "m1")])
        .unwrap()
        .on_success(WfResult {
            role: "counts".to_owned(),
            n: 0,
        })
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let worker = db
        .worker()
        .queues(["wf"])
        .concurrency(4)
        .start()
        .await
        .unwrap();
    wait_or_dump(
        &db,
        "the batch completed",
        &format!(
            "SELECT COUNT(*) FROM mysqlq_workflow WHERE id = {} AND state = 'completed'",
            b.0
        ),
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    let counts: Vec<String> =
        sqlx::query_scalar("SELECT tag FROM test_runs WHERE event = 'counts'")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        counts,
        [r#"{"total":4,"completed":4,"failed":0,"cancelled":0,"open":0}"#],
        "the callback ran once, after the 2 added members too"
    );
    check_order_and_single_release(&db).await;
}

/// A waiting step holds its dedupe key as a never-claimed pending job does: while `ship` waits
/// for `charge`, a job enqueued with its key is deduplicated onto it (also in the "replace"
/// mode: a step is never rewritten); once `ship` is cancelled upstream the key is free again;
/// and an operator's retry of `charge` while another job holds the key retries `charge` but
/// leaves `ship` cancelled (reviving it would make two holders), saying so in the report.
/// Before: a dedupe key on a step with dependencies was refused at build time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_step_holds_its_dedupe_key_and_a_revive_that_would_collide_leaves_it_cancelled() {
    let db = TestDb::new().await;
    let keyed = EnqueueOptions::new().dedupe_key("ship-42");
    let wf = Workflow::new("keyed")
        .step("charge", step("charge", "fail"))
        .unwrap()
        .step_after_with("ship", step("ship", "ok"), ["charge"], &keyed)
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let ship = job_of(&db, wf.0, "ship").await;
    assert_eq!(db.status(ship).await.as_deref(), Some("waiting"));
    for opts in [keyed.clone(), keyed.clone().dedupe_replace()] {
        let e = step("other", "ok")
            .enqueue_with(&db.pool, &opts)
            .await
            .unwrap();
        assert!(e.is_duplicate(), "{e:?}");
        assert_eq!(e.id().0, ship);
    }
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM job_queue WHERE id = {ship} AND JSON_EXTRACT(payload, '$.tag') = 'ship'"
        ))
        .await,
        1,
        "the waiting step was not rewritten"
    );
    let worker = db.worker().queues(["wf"]).start().await.unwrap();
    db.wait_for(
        "ship cancelled upstream",
        &format!("SELECT COUNT(*) FROM job_queue WHERE id = {ship} AND status = 'cancelled'"),
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    // Free: another job takes the key.
    let other = step("other", "ok")
        .enqueue_with(&db.pool, &keyed.clone().queue("elsewhere"))
        .await
        .unwrap();
    assert!(!other.is_duplicate(), "{other:?}");
    // The retry of charge cannot bring ship back while `other` holds its key.
    let charge = job_of(&db, wf.0, "charge").await;
    let r = mysqlq::admin::Admin::new(db.pool.clone())
        .retry_failed(
            mysqlq::admin::Selection::Ids(&[mysqlq::JobId(charge)]),
            |_| {},
        )
        .await
        .unwrap();
    assert_eq!((r.retried, r.revived), (1, 0), "{r:?}");
    assert_eq!(
        r.not_revived
            .iter()
            .map(|c| (c.id.0, c.holder.map(|h| h.0)))
            .collect::<Vec<_>>(),
        vec![(ship, Some(other.id().0))]
    );
    assert_eq!(db.status(charge).await.as_deref(), Some("pending"));
    assert_eq!(db.status(ship).await.as_deref(), Some("cancelled"));
}

/// Marks `ids` claimed (`processing` under token `t<id>`) as a claim would, and returns them as
/// the completer owns them.
async fn claimed(db: &TestDb, ids: &[u64]) -> Vec<mysqlq::store::Owned> {
    let list = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    db.exec(&format!(
        "UPDATE job_queue SET status = 'processing', claim_token = CONCAT('t', id), attempts = 1, \
         lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id IN ({list})"
    ))
    .await;
    ids.iter()
        .map(|&id| mysqlq::store::Owned {
            id: mysqlq::JobId(id),
            token: format!("t{id}"),
        })
        .collect()
}

/// A step released by a completion is claimed in that transaction for the completing worker
/// (`waiting` → `processing`, never `pending`), within the room it reserved; not when a job of a
/// higher priority is ready in its queue, its queue is paused, it is scheduled later or it has
/// an ordering key (those are released `pending`, for a claim to take by its rules). A write
/// retried after a lost COMMIT reply finds, by the token, what its first attempt handed off.
#[tokio::test]
async fn a_released_step_is_handed_to_the_completing_worker_unless_a_claim_would_not_take_it() {
    use mysqlq::store::workflow::{Handoff, wf_complete_steps};
    let db = TestDb::new().await;
    log_transitions(&db).await;
    let later = EnqueueOptions::new().delay(Duration::from_secs(3600));
    let keyed = EnqueueOptions::new().ordering_key("k");
    let low = EnqueueOptions::new().priority(5);
    let wf = Workflow::new("handoff")
        .step("a", step("a", "ok"))
        .unwrap()
        .fan_out(
            "leaf",
            (0..5).map(|i| step(&format!("leaf{i}"), "ok")),
            ["a"],
        )
        .unwrap()
        .step_after_with("later", step("later", "ok"), ["a"], &later)
        .unwrap()
        .step_after_with("keyed", step("keyed", "ok"), ["a"], &keyed)
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let a = job_of(&db, wf.0, "a").await;
    let mut conn = db.connect().await;
    let token = "handoff-1".to_owned();
    let h = Handoff {
        worker_id: "w1",
        token: &token,
        lease: Duration::from_secs(60),
        room: vec![("wf".to_owned(), 3)],
    };
    let owned = claimed(&db, &[a]).await;
    let settled = wf_complete_steps(&mut conn, &owned, &[], Some(&h))
        .await
        .unwrap();
    assert_eq!(settled.released.len(), 7, "five leaves, `later`, `keyed`");
    let handed: Vec<u64> = settled.handed_off.iter().map(|j| j.job.id.0).collect();
    assert_eq!(handed.len(), 3, "as many as the room: {handed:?}");
    let leaves: Vec<u64> = sqlx::query_scalar(
        "SELECT job_id FROM mysqlq_wf_step WHERE workflow_id = ? AND name = 'leaf' ORDER BY job_id",
    )
    .bind(wf.0)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(handed, leaves[..3], "the first leaves, in claim order");
    for j in &settled.handed_off {
        assert_eq!((j.queue.as_str(), j.job.attempt), ("wf", 1));
    }
    let rows = |sql: String| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_as::<_, (u64, String, Option<String>, Option<String>, u32)>(
                sqlx::AssertSqlSafe(sql),
            )
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    let state = rows(format!(
        "SELECT id, CAST(status AS CHAR), claim_token, locked_by, attempts FROM job_queue \
         WHERE workflow_id = {} AND id <> {a} ORDER BY id",
        wf.0
    ))
    .await;
    for (id, status, token_, by, attempts) in &state {
        if handed.contains(id) {
            assert_eq!(
                (status.as_str(), token_.as_deref(), by.as_deref(), *attempts),
                ("processing", Some("handoff-1"), Some("w1"), 1),
                "job {id}"
            );
        } else {
            assert_eq!((status.as_str(), *attempts), ("pending", 0), "job {id}");
        }
    }
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM wf_log WHERE job_id IN ({}) AND old_status = 'waiting' \
             AND new_status = 'processing'",
            handed
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ))
        .await,
        3,
        "claimed straight from `waiting`, never `pending`"
    );

    // The same write again (its COMMIT reply was lost): the handed-off steps are adopted, no
    // step is claimed twice, nothing is released again.
    let again = wf_complete_steps(&mut conn, &owned, &[], Some(&h))
        .await
        .unwrap();
    let adopted: Vec<u64> = again.adopted.iter().map(|j| j.job.id.0).collect();
    assert_eq!(adopted, handed);
    assert!(again.handed_off.is_empty() && again.released.is_empty());
    assert_eq!(again.report.settled.len(), 1, "a's completion recognised");

    // A higher-priority job ready in the queue goes first; then a paused queue hands off
    // nothing; then the room is taken again.
    let two = |name: &str| {
        Workflow::new(name)
            .step("a", step(&format!("{name}-a"), "ok"))
            .unwrap()
            .step_after_with("b", step(&format!("{name}-b"), "ok"), ["a"], &low)
            .unwrap()
    };
    // The first workflow's steps left `pending` (priority 0) are out of the way.
    db.exec("DELETE FROM job_queue WHERE status = 'pending'")
        .await;
    let urgent = mysqlq::Job::enqueue_with(
        &step("urgent", "ok"),
        &db.pool,
        &EnqueueOptions::new().priority(1),
    )
    .await
    .unwrap()
    .id();
    for (name, paused, handed_off) in [("prio", false, 0), ("paused", true, 0), ("free", false, 1)]
    {
        let w = two(name).enqueue(&db.pool).await.unwrap();
        let (wa, wb) = (job_of(&db, w.0, "a").await, job_of(&db, w.0, "b").await);
        if name == "paused" {
            db.exec(&format!("DELETE FROM job_queue WHERE id = {}", urgent.0))
                .await;
        }
        db.exec(&format!(
            "INSERT INTO mysqlq_queue (queue_name, paused) VALUES ('wf', {paused}) \
             ON DUPLICATE KEY UPDATE paused = VALUES(paused)"
        ))
        .await;
        let owned = claimed(&db, &[wa]).await;
        let token = format!("handoff-{name}");
        let h = Handoff {
            token: &token,
            ..h.clone()
        };
        let s = wf_complete_steps(&mut conn, &owned, &[], Some(&h))
            .await
            .unwrap();
        assert_eq!(s.released, vec![mysqlq::JobId(wb)], "{name}");
        assert_eq!(s.handed_off.len(), handed_off, "{name}");
        let status: String =
            sqlx::query_scalar("SELECT CAST(status AS CHAR) FROM job_queue WHERE id = ?")
                .bind(wb)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        let want = if handed_off == 1 {
            "processing"
        } else {
            "pending"
        };
        assert_eq!(status, want, "{name}");
    }
}

/// A fan-out's root settles its steps a chunk per transaction (at most
/// `EDGES_PER_SETTLEMENT` = 1,000 edges each): the first chunk with its completion, the next
/// ones by the settlements that follow (`Settled::more`), each edge once, until none is open.
#[tokio::test]
async fn a_wide_fan_outs_root_releases_its_steps_a_chunk_per_transaction() {
    use mysqlq::store::workflow::wf_complete_steps;
    let db = TestDb::new().await;
    log_transitions(&db).await;
    let wf = fan_out(&db, "wide", 2500, true).await;
    let root = job_of(&db, wf.0, "root").await;
    let owned = claimed(&db, &[root]).await;
    let mut conn = db.connect().await;
    let first = wf_complete_steps(&mut conn, &owned, &[], None)
        .await
        .unwrap();
    assert_eq!(first.report.done, 1);
    assert_eq!(
        first.released.len(),
        1000,
        "the first chunk, with the completion"
    );
    assert_eq!(first.more, vec![mysqlq::JobId(root)]);
    assert!(first.unsettled.is_empty());
    let open_sql =
        format!("SELECT COUNT(*) FROM mysqlq_wf_edge WHERE dep_id = {root} AND state = 'open'");
    let open = || db.scalar(&open_sql);
    assert_eq!(open().await, 1500);
    let second = wf_complete_steps(&mut conn, &[], &first.more, None)
        .await
        .unwrap();
    assert_eq!((second.released.len(), second.more.len()), (1000, 1));
    let third = wf_complete_steps(&mut conn, &[], &second.more, None)
        .await
        .unwrap();
    assert_eq!((third.released.len(), third.more.len()), (500, 0));
    assert_eq!(open().await, 0);
    let mut all: Vec<u64> = [&first, &second, &third]
        .iter()
        .flat_map(|s| s.released.iter().map(|j| j.0))
        .collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 2500, "every leaf released, none twice");
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM wf_log WHERE old_status = 'waiting' AND new_status = 'pending'"
        )
        .await,
        2500
    );
    // Nothing left: a fourth settlement settles and releases nothing.
    let fourth = wf_complete_steps(&mut conn, &[], &[mysqlq::JobId(root)], None)
        .await
        .unwrap();
    assert!(fourth.released.is_empty() && fourth.more.is_empty());
}

/// A settlement that goes with a step completion and an earlier step's next chunk hands off
/// steps of both; written again (its COMMIT reply lost), it adopts every one of them — also
/// those released by the earlier step's chunk, not only its own completion's.
#[tokio::test]
async fn a_retried_settlement_adopts_what_it_handed_off_for_an_earlier_steps_chunk() {
    use mysqlq::store::workflow::{Handoff, wf_complete_steps};
    let db = TestDb::new().await;
    let wide = fan_out(&db, "wide", 1200, false).await;
    let root = job_of(&db, wide.0, "root").await;
    let mut conn = db.connect().await;
    let first = wf_complete_steps(&mut conn, &claimed(&db, &[root]).await, &[], None)
        .await
        .unwrap();
    assert_eq!((first.released.len(), first.more.len()), (1000, 1));
    // Out of the way: the first chunk's leaves, so that no ready job is ahead of the next.
    db.exec(&format!(
        "DELETE FROM job_queue WHERE workflow_id = {} AND status = 'pending'",
        wide.0
    ))
    .await;
    let small = Workflow::new("small")
        .step("a", step("a", "ok"))
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    let a = job_of(&db, small.0, "a").await;
    let owned = claimed(&db, &[a]).await;
    let token = "handoff-both".to_owned();
    let h = Handoff {
        worker_id: "w1",
        token: &token,
        lease: Duration::from_secs(60),
        room: vec![("wf".to_owned(), 5)],
    };
    let once = wf_complete_steps(&mut conn, &owned, &first.more, Some(&h))
        .await
        .unwrap();
    assert_eq!(once.released.len(), 200, "the root's last chunk");
    let mut handed: Vec<u64> = once.handed_off.iter().map(|j| j.job.id.0).collect();
    assert_eq!(handed.len(), 5, "as many as the room");
    let again = wf_complete_steps(&mut conn, &owned, &first.more, Some(&h))
        .await
        .unwrap();
    let mut adopted: Vec<u64> = again.adopted.iter().map(|j| j.job.id.0).collect();
    handed.sort_unstable();
    adopted.sort_unstable();
    assert_eq!(adopted, handed, "every step the first attempt handed off");
    assert!(again.handed_off.is_empty() && again.released.is_empty());
}

/// Grafts one step `keyed` with dedupe key `key`, after this step (`g`): records the graft
/// (`grafted:<id>`) or its refusal (`refused:<holder>`), then — the grafted step waiting, so
/// holding the key — what a plain enqueue with the key gets (`dedupe:<holder>`). Fails its first
/// attempt after grafting: the retry gets the same step back.
#[mysqlq::job(queue = "wf", retries = 1, backoff = "10ms")]
async fn wf_keyed(ctx: JobContext, key: String) -> Result<(), JobError> {
    let keyed = EnqueueOptions::new().dedupe_key(key.clone());
    let graft = ctx
        .graft()
        .step_after_with("keyed", step(&format!("keyed-{key}"), "ok"), ["g"], &keyed)
        .map_err(JobError::fail)?
        .enqueue()
        .await;
    match graft {
        Ok(ids) => {
            record(&ctx, &format!("grafted:{}", ids[0].0), "graft").await?;
            let pool = ctx.pool().expect("a pool");
            let again = mysqlq::Job::enqueue_with(
                &step("other", "ok"),
                pool,
                &EnqueueOptions::new().queue("elsewhere").dedupe_key(key),
            )
            .await
            .map_err(JobError::fail)?;
            let what = match again {
                mysqlq::Enqueued::Duplicate(h) => format!("dedupe:{}", h.0),
                other => format!("not deduplicated: {other:?}"),
            };
            record(&ctx, &what, "enqueue").await?;
            if ctx.attempt() == 1 {
                return Err(JobError::retry("fails once after grafting"));
            }
        }
        Err(mysqlq::Error::Workflow(WorkflowError::Duplicate { holder, .. })) => {
            record(&ctx, &format!("refused:{}", holder.0), "graft").await?;
        }
        Err(e) => return Err(JobError::fail(e)),
    }
    Ok(())
}

/// A grafted step keeps its dedupe key like any step: a key another job holds refuses the
/// graft (naming the holder, nothing added); a free key is held by the grafted step while it
/// waits (a plain enqueue with it is deduplicated onto the step); a retried grafter gets the
/// same step back, not a refusal by its own key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grafted_step_holds_its_dedupe_key_and_a_held_key_refuses_the_graft() {
    let db = TestDb::new().await;
    let holder = mysqlq::Job::enqueue_with(
        &step("holder", "ok"),
        &db.pool,
        &EnqueueOptions::new().queue("elsewhere").dedupe_key("held"),
    )
    .await
    .unwrap()
    .id();
    for key in ["held", "free"] {
        Workflow::new(key)
            .step(
                "g",
                WfKeyed {
                    key: key.to_owned(),
                },
            )
            .unwrap()
            .enqueue(&db.pool)
            .await
            .unwrap();
    }
    let w = db.worker().queues(["wf"]).start().await.unwrap();
    wait_or_dump(
        &db,
        "both grafters and the grafted step done",
        "SELECT COUNT(*) = 3 FROM job_queue WHERE queue_name = 'wf' AND status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    w.shutdown().await.unwrap();
    let tags = |event: &str| {
        let pool = db.pool.clone();
        let event = event.to_owned();
        async move {
            sqlx::query_scalar::<_, String>("SELECT tag FROM test_runs WHERE event = ? ORDER BY id")
                .bind(event)
                .fetch_all(&pool)
                .await
                .unwrap()
        }
    };
    let grafts = tags("graft").await;
    let refused = format!("refused:{}", holder.0);
    assert!(grafts.contains(&refused), "{grafts:?}");
    let grafted: Vec<&String> = grafts
        .iter()
        .filter(|t| t.starts_with("grafted:"))
        .collect();
    assert_eq!(
        grafted.len(),
        2,
        "the free key's grafter, twice: {grafts:?}"
    );
    assert_eq!(grafted[0], grafted[1], "the retry got the same step back");
    let step_id = &grafted[0]["grafted:".len()..];
    assert_eq!(
        tags("enqueue").await,
        vec![format!("dedupe:{step_id}"); 2],
        "the waiting grafted step holds its key"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_wf_step WHERE name = 'keyed'")
            .await,
        1,
        "nothing added for the held key, once for the free one"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM test_runs WHERE tag = 'keyed-free' AND event = 'start'")
            .await,
        1
    );
}
