//! Job meta: set at enqueue, updated by the running handler through its context (token-guarded),
//! size-capped, shown by `mysqlq::admin` and on the dashboard's job page.

use std::sync::LazyLock;
use std::time::Duration;

use mysqlq::admin::Admin;
use mysqlq::store::{Owned, job_set_meta};
use mysqlq::{EnqueueOptions, Error, JobContext, JobError, JobId, MAX_META_BYTES, NewJob};
use mysqlq_cli::dashboard::{DashboardOptions, router};
use mysqlq_tests::TestDb;
use mysqlq_tests::http::{request, send};
use serde_json::json;
use tokio::sync::{Mutex, Notify, mpsc};

/// Lets a running [`reports_progress`] go on past its first progress report.
static GO_ON: LazyLock<Notify> = LazyLock::new(Notify::new);
/// Where [`reports_progress`] sends the result of its second meta write.
type Reports = mpsc::UnboundedSender<Result<(), String>>;
/// What [`reports_progress`] reports back: the result of its second meta write.
static REPORTS: LazyLock<Mutex<Option<Reports>>> = LazyLock::new(|| Mutex::new(None));

/// Reports 50 %, waits for the test, then writes a checkpoint and reports 100 %.
#[mysqlq::job(queue = "meta", retries = 0)]
async fn reports_progress(ctx: JobContext, steps: u32) -> Result<(), JobError> {
    ctx.progress(50.0).await.map_err(JobError::fail)?;
    GO_ON.notified().await;
    let second = ctx
        .set_meta("checkpoint", json!({ "step": steps }))
        .await
        .map_err(|e| e.to_string());
    let ok = second.is_ok();
    if let Some(tx) = REPORTS.lock().await.as_ref() {
        let _ = tx.send(second);
    }
    if ok {
        ctx.progress(100.0).await.map_err(JobError::fail)?;
    }
    Ok(())
}

/// Tries to write more meta than the limit.
#[mysqlq::job(queue = "meta", retries = 0)]
async fn oversized_meta(ctx: JobContext) -> Result<(), JobError> {
    match ctx.set_meta("blob", "x".repeat(MAX_META_BYTES)).await {
        Err(e) => Err(JobError::fail(e)),
        Ok(()) => Ok(()),
    }
}

fn worker(db: &TestDb) -> mysqlq::WorkerBuilder {
    db.worker()
        .queues(["meta"])
        // Heartbeats far apart: the lost-claim test changes the token under a running handler.
        .lease(Duration::from_secs(120))
        .heartbeat_interval(Duration::from_secs(100))
        .shutdown_timeout(Duration::from_millis(200))
}

async fn meta_of(db: &TestDb, id: JobId) -> serde_json::Value {
    Admin::new(db.pool.clone())
        .job(id)
        .await
        .unwrap()
        .expect("the job exists")
        .meta
        .unwrap_or(serde_json::Value::Null)
}

// One test drives the handler's statics, so the two handler stories run in sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_handler_updates_its_meta_and_a_lost_claim_writes_nothing() {
    let db = TestDb::new().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    *REPORTS.lock().await = Some(tx);
    let w = worker(&db).start().await.unwrap();

    // 1. Meta from the enqueue, progress while running, a checkpoint, progress at the end.
    let id = ReportsProgress { steps: 3 }
        .enqueue_with(
            &db.pool,
            &EnqueueOptions::new().meta("request_id", json!("req-42")),
        )
        .await
        .unwrap()
        .id();
    db.wait_for(
        "progress 50 written while running",
        &format!(
            "SELECT COUNT(*) FROM job_queue WHERE id = {id} AND status = 'processing' \
             AND JSON_EXTRACT(meta, '$.progress') = 50"
        ),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        meta_of(&db, id).await,
        json!({ "request_id": "req-42", "progress": 50.0 })
    );
    // The dashboard's job page shows it while the job runs.
    let app = router(db.pool.clone(), DashboardOptions::new());
    let page = send(
        &app,
        request(
            "127.0.0.1:9".parse().unwrap(),
            "GET",
            &format!("/jobs/{id}"),
            &[],
            None,
        ),
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains(r#"id="meta""#), "{}", page.body);
    assert!(page.body.contains("req-42"), "{}", page.body);
    assert!(page.body.contains("progress 50 %"), "{}", page.body);

    GO_ON.notify_one();
    assert_eq!(rx.recv().await, Some(Ok(())));
    db.wait_for(
        "completed",
        &format!("SELECT COUNT(*) FROM job_queue WHERE id = {id} AND status = 'completed'"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        meta_of(&db, id).await,
        json!({ "request_id": "req-42", "progress": 100.0, "checkpoint": { "step": 3 } }),
        "the meta is kept on the completed row"
    );

    // 2. Another claim takes the job (its token changes) while the handler runs: the handler's
    // next write is refused and changes nothing.
    let id = ReportsProgress { steps: 7 }
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    db.wait_for(
        "progress 50 written",
        &format!(
            "SELECT COUNT(*) FROM job_queue WHERE id = {id} AND JSON_EXTRACT(meta, '$.progress') = 50"
        ),
        Duration::from_secs(30),
    )
    .await;
    sqlx::query(
        "UPDATE job_queue SET claim_token = 'another-claim-0000000000000000000000' WHERE id = ?",
    )
    .bind(id.0)
    .execute(&db.pool)
    .await
    .unwrap();
    GO_ON.notify_one();
    let refused = rx.recv().await.expect("the handler reports").unwrap_err();
    assert!(refused.contains("no longer owned"), "{refused}");
    assert_eq!(
        meta_of(&db, id).await,
        json!({ "progress": 50.0 }),
        "nothing written by the attempt that lost its claim"
    );
    w.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_meta_write_is_guarded_by_the_claim_token_and_the_state() {
    let db = TestDb::new().await;
    let id = ReportsProgress { steps: 1 }
        .enqueue(&db.pool)
        .await
        .unwrap()
        .id();
    sqlx::query(
        "UPDATE job_queue SET status = 'processing', claim_token = 'token-a-0000000000000000000000000000' \
         WHERE id = ?",
    )
    .bind(id.0)
    .execute(&db.pool)
    .await
    .unwrap();
    let mut conn = db.connect().await;
    let owner = Owned {
        id,
        token: "token-a-0000000000000000000000000000".into(),
    };
    let stranger = Owned {
        id,
        token: "token-b-0000000000000000000000000000".into(),
    };
    assert!(
        !job_set_meta(&mut conn, &stranger, Some(r#"{"x":1}"#))
            .await
            .unwrap()
    );
    assert!(
        job_set_meta(&mut conn, &owner, Some(r#"{"x":2}"#))
            .await
            .unwrap()
    );
    assert!(
        job_set_meta(&mut conn, &owner, Some(r#"{"x":2}"#))
            .await
            .unwrap(),
        "an unchanged value is still a successful write"
    );
    sqlx::query("UPDATE job_queue SET status = 'completed' WHERE id = ?")
        .bind(id.0)
        .execute(&db.pool)
        .await
        .unwrap();
    assert!(
        !job_set_meta(&mut conn, &owner, Some(r#"{"x":3}"#))
            .await
            .unwrap(),
        "a finished job's meta is not the old claim's to write"
    );
    assert_eq!(meta_of(&db, id).await, json!({ "x": 2 }));
}

#[tokio::test]
async fn oversized_meta_is_refused_at_enqueue_and_in_the_handler() {
    let db = TestDb::new().await;
    let big = EnqueueOptions::new().meta("blob", json!("x".repeat(MAX_META_BYTES)));
    let err = ReportsProgress { steps: 1 }
        .enqueue_with(&db.pool, &big)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Invalid {
                what: "job meta",
                ..
            }
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(&MAX_META_BYTES.to_string()), "{text}");
    assert!(text.contains("reports_progress"), "names the job: {text}");
    let err = NewJob::new("k", "meta", &json!({}), &big).unwrap_err();
    assert!(err.to_string().contains("over the limit"), "{err}");
    assert_eq!(db.count("pending").await, 0, "nothing written");

    // Just under the limit is accepted.
    let fits = EnqueueOptions::new().meta("blob", json!("x".repeat(MAX_META_BYTES - 20)));
    ReportsProgress { steps: 1 }
        .enqueue_with(&db.pool, &fits)
        .await
        .unwrap();

    let id = OversizedMeta {}.enqueue(&db.pool).await.unwrap().id();
    let w = worker(&db).start().await.unwrap();
    db.wait_for(
        "failed",
        &format!("SELECT COUNT(*) FROM job_queue WHERE id = {id} AND status = 'failed'"),
        Duration::from_secs(30),
    )
    .await;
    w.shutdown().await.unwrap();
    let job = Admin::new(db.pool.clone()).job(id).await.unwrap().unwrap();
    let last = job.last_error.unwrap_or_default();
    assert!(last.contains("over the limit"), "{last}");
    assert_eq!(job.meta, None, "the oversized meta was not written");
}

#[tokio::test]
async fn migration_5_can_run_again_after_an_interrupted_run() {
    let db = TestDb::new().await;
    // As if a run applied the statements but stopped before recording the migration.
    sqlx::query("DELETE FROM mysqlq_migrations WHERE version = 5")
        .execute(&db.pool)
        .await
        .unwrap();
    mysqlq::migrate(&db.pool).await.unwrap();
    let mut conn = db.connect().await;
    assert_eq!(
        mysqlq::schema_version(&mut conn).await.unwrap(),
        mysqlq::SCHEMA_VERSION
    );
    let columns: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() \
         AND table_name = 'job_queue' AND column_name IN ('meta', 'dedupe_window_us')",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(columns, 2);
}

#[tokio::test]
async fn failed_show_prints_the_meta() {
    let db = TestDb::new().await;
    let id = ReportsProgress { steps: 1 }
        .enqueue_with(
            &db.pool,
            &EnqueueOptions::new().meta("request_id", json!("req-cli-9")),
        )
        .await
        .unwrap()
        .id();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mysqlq-test-worker"))
        .args(["failed", "show", &id.to_string()])
        .env("DATABASE_URL", db.url())
        .env_remove("RUST_LOG")
        .output()
        .expect("spawn mysqlq-test-worker");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("meta:"), "{text}");
    assert!(text.contains("req-cli-9"), "{text}");
    let json = std::process::Command::new(env!("CARGO_BIN_EXE_mysqlq-test-worker"))
        .args(["failed", "show", &id.to_string(), "--json"])
        .env("DATABASE_URL", db.url())
        .env_remove("RUST_LOG")
        .output()
        .expect("spawn mysqlq-test-worker");
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["meta"], json!({ "request_id": "req-cli-9" }));
}
