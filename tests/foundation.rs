//! Foundation: schema, transactional enqueue, bulk enqueue, SKIP LOCKED claim, token-guarded
//! writes, the article's recovery SQL, and the claim plan. Real server, one database per test.

use std::collections::HashSet;
use std::time::Duration;

use mysqlq::store::{self, ClaimParams, Owned};
use mysqlq::{EnqueueOptions, Enqueued, Job, JobContext, JobError, JobId, NewJob};
use mysqlq_tests::TestDb;
use mysqlq_tests::jobs::PlainNoop;
use serde::{Deserialize, Serialize};

#[path = "harness/claim.rs"]
mod claim;
use claim::{claim, owned};

#[derive(Debug, Serialize, Deserialize)]
struct Big {
    blob: String,
}

impl Job for Big {
    const KIND: &'static str = "big";

    async fn run(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn migrate_is_idempotent_and_creates_the_articles_table() {
    let db = TestDb::new().await;
    assert_eq!(
        mysqlq::migrate(&db.pool).await.unwrap(),
        mysqlq::SCHEMA_VERSION
    );
    assert_eq!(
        mysqlq::migrate(&db.pool).await.unwrap(),
        mysqlq::SCHEMA_VERSION
    );
    let mut conn = db.connect().await;
    assert_eq!(
        mysqlq::schema_version(&mut conn).await.unwrap(),
        mysqlq::SCHEMA_VERSION
    );
    let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM mysqlq_migrations")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    // Versions need not be contiguous (branches add migrations side by side): one row per file.
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../mysqlq/migrations"))
        .expect("the migrations directory")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sql"))
        })
        .count();
    assert_eq!(
        applied,
        i64::try_from(files).unwrap(),
        "each migration is recorded once"
    );
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT index_name FROM information_schema.statistics \
         WHERE table_schema = DATABASE() AND table_name = 'job_queue' ORDER BY index_name",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for name in [
        "PRIMARY",
        "idx_job_claim",
        "idx_job_rate",
        "idx_job_recover",
        "uq_job_dedupe",
    ] {
        assert!(
            indexes.iter().any(|i| i == name),
            "{name} missing from {indexes:?}"
        );
    }
    // The article's own INSERT (no kind, no mysqlq columns) still works.
    sqlx::query(
        "INSERT INTO job_queue (queue_name, payload, status, available_at) \
         VALUES ('order-email', JSON_OBJECT('orderId', 1), 'pending', NOW(6))",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(db.count("pending").await, 1);
}

#[tokio::test]
async fn enqueue_follows_the_callers_transaction() {
    let db = TestDb::new().await;
    sqlx::query("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
        .execute(&db.pool)
        .await
        .unwrap();

    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO orders (id) VALUES (1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let rolled_back = PlainNoop { n: 1 }.enqueue(&mut tx).await.unwrap();
    assert!(!rolled_back.is_duplicate());
    tx.rollback().await.unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "rollback removes the job with the order");

    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO orders (id) VALUES (2)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let id = PlainNoop { n: 2 }.enqueue(&mut tx).await.unwrap().id();
    // Not visible to others before commit.
    let before: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(before, 0);
    tx.commit().await.unwrap();
    let (kind, queue, payload, status, attempts, max_attempts): (String, String, String, String, u32, u32) =
        sqlx::query_as(
            "SELECT kind, queue_name, CAST(payload AS CHAR), status, attempts, max_attempts FROM job_queue WHERE id = ?",
        )
        .bind(id.0)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        (kind.as_str(), queue.as_str(), status.as_str()),
        ("noop", "test", "pending")
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&payload).unwrap(),
        serde_json::json!({"n": 2})
    );
    assert_eq!((attempts, max_attempts), (0, 5));

    // On a pool and on a plain connection too.
    PlainNoop { n: 3 }.enqueue(&db.pool).await.unwrap();
    let mut conn = db.connect().await;
    PlainNoop { n: 4 }.enqueue(&mut conn).await.unwrap();
    assert_eq!(db.count("pending").await, 3);
}

#[tokio::test]
async fn per_call_options_are_stored() {
    let db = TestDb::new().await;
    let opts = EnqueueOptions::new()
        .queue("other")
        .priority(-5)
        .max_attempts(9)
        .delay(Duration::from_secs(3600))
        .ordering_key("order-7");
    let id = PlainNoop { n: 1 }
        .enqueue_with(&db.pool, &opts)
        .await
        .unwrap()
        .id();
    let (queue, priority, max_attempts, ordering_key, delay_s): (
        String,
        i16,
        u32,
        Option<String>,
        i64,
    ) = sqlx::query_as(
        "SELECT queue_name, priority, max_attempts, ordering_key, \
         TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), available_at) FROM job_queue WHERE id = ?",
    )
    .bind(id.0)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((queue.as_str(), priority, max_attempts), ("other", -5, 9));
    assert_eq!(ordering_key.as_deref(), Some("order-7"));
    assert!(
        (3590..=3600).contains(&delay_s),
        "delay of an hour, got {delay_s}s"
    );

    // Absolute run time.
    let at = std::time::SystemTime::now() + Duration::from_secs(7200);
    let id = PlainNoop { n: 2 }
        .enqueue_with(&db.pool, &EnqueueOptions::new().run_at(at))
        .await
        .unwrap()
        .id();
    let delay_s: i64 = sqlx::query_scalar(
        "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), available_at) FROM job_queue WHERE id = ?",
    )
    .bind(id.0)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        (7190..=7200).contains(&delay_s),
        "run_at two hours ahead, got {delay_s}s"
    );

    // Bad input is refused with a message naming it, and nothing is written.
    let err = PlainNoop { n: 3 }
        .enqueue_with(
            &db.pool,
            &EnqueueOptions::new().queue("bad queue'; DROP TABLE job_queue; --"),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("queue name"), "{err}");
    let err = PlainNoop { n: 3 }
        .enqueue_with(&db.pool, &EnqueueOptions::new().max_attempts(0))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_attempts"), "{err}");
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(total, 2);
}

#[tokio::test]
async fn dedupe_key_returns_the_holder() {
    let db = TestDb::new().await;
    let opts = EnqueueOptions::new().dedupe_key("refresh:place-1");
    let first = PlainNoop { n: 1 }
        .enqueue_with(&db.pool, &opts)
        .await
        .unwrap();
    let second = PlainNoop { n: 2 }
        .enqueue_with(&db.pool, &opts)
        .await
        .unwrap();
    assert!(matches!(first, Enqueued::Inserted(_)));
    assert_eq!(second, Enqueued::Duplicate(first.id()));
    // Inside a transaction, the duplicate does not poison it.
    let mut tx = db.pool.begin().await.unwrap();
    let third = PlainNoop { n: 3 }
        .enqueue_with(&mut tx, &opts)
        .await
        .unwrap();
    assert_eq!(third, Enqueued::Duplicate(first.id()));
    let other = PlainNoop { n: 4 }.enqueue(&mut tx).await.unwrap();
    tx.commit().await.unwrap();
    assert!(!other.is_duplicate());
    assert_eq!(db.count("pending").await, 2);

    // Once the holder finished, the key is free again.
    let (token, jobs) = claim(&db, "test", 10, Duration::from_secs(60)).await;
    let owned = owned(&token, &jobs);
    let mut conn = db.connect().await;
    assert_eq!(
        store::job_complete_many(&mut conn, &owned)
            .await
            .unwrap()
            .done,
        2
    );
    let again = PlainNoop { n: 5 }
        .enqueue_with(&db.pool, &opts)
        .await
        .unwrap();
    assert!(matches!(again, Enqueued::Inserted(id) if id != first.id()));
}

#[tokio::test]
async fn oversized_payload_is_refused() {
    let db = TestDb::new().await;
    let err = Big {
        blob: "x".repeat(mysqlq::MAX_PAYLOAD_BYTES + 1),
    }
    .enqueue(&db.pool)
    .await
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, mysqlq::Error::PayloadTooLarge { .. }),
        "{msg}"
    );
    assert!(msg.contains("big") && msg.contains("limit"), "{msg}");
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(total, 0);
}

#[tokio::test]
async fn bulk_enqueue_lands_every_row_with_its_id() {
    let db = TestDb::new().await;
    let jobs: Vec<NewJob> = (0..10_000u64)
        .map(|n| NewJob::from_job(&PlainNoop { n }, &EnqueueOptions::new()).unwrap())
        .collect();
    let mut tx = db.pool.begin().await.unwrap();
    let out = mysqlq::enqueue_many(&mut tx, jobs).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(out.len(), 10_000);
    let rows: Vec<(u64, String)> =
        sqlx::query_as("SELECT id, CAST(payload AS CHAR) FROM job_queue ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(rows.len(), 10_000);
    for (n, (enq, (id, payload))) in out.iter().zip(&rows).enumerate() {
        assert_eq!(enq.id().0, *id, "returned id of job {n}");
        let v: serde_json::Value = serde_json::from_str(payload).unwrap();
        assert_eq!(v["n"], n as u64, "payload of job {n}");
    }
    // Dedupe keys inside bulk: duplicates reported, within the batch and against the table.
    let keyed: Vec<NewJob> = ["a", "b", "a"]
        .iter()
        .map(|k| {
            NewJob::from_job(&PlainNoop { n: 0 }, &EnqueueOptions::new().dedupe_key(*k)).unwrap()
        })
        .collect();
    let out = mysqlq::enqueue_many(&db.pool, keyed).await.unwrap();
    assert!(!out[0].is_duplicate() && !out[1].is_duplicate());
    assert_eq!(out[2], Enqueued::Duplicate(out[0].id()));
}

#[tokio::test]
async fn concurrent_claimers_claim_every_job_exactly_once() {
    let db = TestDb::new().await;
    let jobs: Vec<NewJob> = (0..5_000u64)
        .map(|n| NewJob::from_job(&PlainNoop { n }, &EnqueueOptions::new()).unwrap())
        .collect();
    mysqlq::enqueue_many(&db.pool, jobs).await.unwrap();

    let mut tasks = Vec::new();
    for w in 0..8 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            let mut conn = pool.acquire().await.unwrap();
            loop {
                let token = mysqlq_tests::token();
                let worker = format!("claimer-{w}");
                let params = ClaimParams {
                    queue: "test",
                    limit: 37,
                    skip: 0,
                    worker_id: &worker,
                    token: &token,
                    lease: Duration::from_secs(300),
                };
                match store::job_claim(&mut conn, &params).await {
                    Ok(batch) if batch.is_empty() => break,
                    Ok(batch) => mine.extend(batch.into_iter().map(|j| j.id)),
                    Err(e) if mysqlq_tests::is_lock_error(&e) => continue,
                    Err(e) => panic!("claim failed: {e:?}"),
                }
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let unique: HashSet<JobId> = all.iter().copied().collect();
    assert_eq!(all.len(), 5_000, "every job claimed");
    assert_eq!(unique.len(), 5_000, "no job claimed twice");
    let (processing, once): (i64, i64) = sqlx::query_as(
        "SELECT CAST(SUM(status = 'processing') AS SIGNED), CAST(SUM(attempts = 1) AS SIGNED) FROM job_queue",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((processing, once), (5_000, 5_000));
}

#[tokio::test]
async fn stale_token_changes_nothing_and_is_reported() {
    let db = TestDb::new().await;
    let id = PlainNoop { n: 1 }.enqueue(&db.pool).await.unwrap().id();
    let (token, jobs) = claim(&db, "test", 10, Duration::from_secs(60)).await;
    assert_eq!(jobs.len(), 1);
    assert_eq!(
        (jobs[0].id, jobs[0].attempt, jobs[0].kind.as_deref()),
        (id, 1, Some("noop"))
    );
    let mut conn = db.connect().await;

    let stale = [Owned {
        id,
        token: mysqlq_tests::token(),
    }];
    let report = store::job_complete_many(&mut conn, &stale).await.unwrap();
    assert_eq!((report.done, report.lost.clone()), (0, stale.to_vec()));
    assert_eq!(
        store::job_finish_attempt(&mut conn, &stale[0], &store::Outcome::Fail, "late")
            .await
            .unwrap(),
        store::Written::Lost
    );
    assert_eq!(
        store::job_heartbeat(&mut conn, Duration::from_secs(60), &stale)
            .await
            .unwrap()
            .lost,
        stale.to_vec()
    );
    assert_eq!(
        db.count("processing").await,
        1,
        "the stale writes changed nothing"
    );

    let good = [Owned { id, token }];
    let report = store::job_complete_many(&mut conn, &good).await.unwrap();
    assert_eq!((report.done, report.lost.len()), (1, 0));
    assert_eq!(db.count("completed").await, 1);
    // Completing twice under the same token (a retry after a lost COMMIT reply): recognised as
    // this token's own earlier write — neither a second completion nor a lost lease.
    let again = store::job_complete_many(&mut conn, &good).await.unwrap();
    assert_eq!(
        (again.done, again.lost.clone(), again.settled.clone()),
        (0, vec![], good.to_vec())
    );
    // A heartbeat racing the completion is not "lost" either.
    let beat = store::job_heartbeat(&mut conn, Duration::from_secs(60), &good)
        .await
        .unwrap();
    assert_eq!(
        (beat.done, beat.lost, beat.settled),
        (0, vec![], good.to_vec())
    );
    // A stale token is still lost after the completion.
    let report = store::job_complete_many(&mut conn, &stale).await.unwrap();
    assert_eq!((report.lost, report.settled), (stale.to_vec(), vec![]));
}

/// A token-guarded write names its rows by id and never waits for a row it does not name —
/// whatever index the optimizer would pick. Before: the completion's UPDATE (`WHERE id IN (64
/// ids) AND status = 'processing' AND (id, claim_token) IN (…)`), retried after its first
/// COMMIT reply was lost (60 of the 64 completed already), was planned on `idx_job_finished`
/// (`status = 'processing'`: 5 entries against 64 ids) and waited for another worker's running
/// row held by its own transaction — a lock wait timeout in CI's workflow test.
#[tokio::test]
async fn guarded_writes_never_wait_for_a_row_they_do_not_name() {
    let db = TestDb::new().await;
    let jobs: Vec<NewJob> = (0..66u64)
        .map(|n| NewJob::from_job(&PlainNoop { n }, &EnqueueOptions::new()).unwrap())
        .collect();
    let ids: Vec<u64> = mysqlq::enqueue_many(&db.pool, jobs)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id().0)
        .collect();
    let list = |ids: &[u64]| ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    // 64 ours (4 running, 60 completed by the lost write), one other worker's running job and
    // one ready job, both held by another transaction.
    db.exec(&format!(
        "UPDATE job_queue SET status = 'processing', claim_token = CONCAT('t', id), \
         lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, attempts = 1 WHERE id IN ({})",
        list(&ids[..65])
    ))
    .await;
    db.exec(&format!(
        "UPDATE job_queue SET status = 'completed', finished_at = UTC_TIMESTAMP(6) WHERE id IN ({})",
        list(&ids[4..64])
    ))
    .await;
    db.exec("ANALYZE TABLE job_queue").await;
    let mut holder = db.connect().await;
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT id FROM job_queue WHERE id IN ({}) FOR UPDATE",
        list(&ids[64..])
    )))
    .fetch_all(&mut holder)
    .await
    .unwrap();
    let mut conn = db.connect().await;
    sqlx::query("SET SESSION innodb_lock_wait_timeout = 1")
        .execute(&mut conn)
        .await
        .unwrap();
    let ours: Vec<Owned> = ids[..64]
        .iter()
        .map(|&id| Owned {
            id: JobId(id),
            token: format!("t{id}"),
        })
        .collect();
    let beat = store::job_heartbeat(&mut conn, Duration::from_secs(60), &ours)
        .await
        .expect("a heartbeat does not wait for another job's row");
    assert_eq!((beat.done, beat.settled.len()), (4, 60));
    let done = store::job_complete_many(&mut conn, &ours)
        .await
        .expect("a completion does not wait for another job's row");
    // Settled: the 60 the lost write completed; its own 4 are `done` only, each counted once
    // (`a_partly_lost_completion_counts_each_written_claim_once`).
    assert_eq!((done.done, done.settled.len(), done.lost.len()), (4, 60, 0));
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    assert_eq!(db.count("completed").await, 64);
}

#[tokio::test]
async fn attempt_outcomes_move_jobs_as_documented() {
    let db = TestDb::new().await;
    for n in 0..4 {
        PlainNoop { n }.enqueue(&db.pool).await.unwrap();
    }
    let (token, jobs) = claim(&db, "test", 10, Duration::from_secs(60)).await;
    assert_eq!(jobs.len(), 4);
    let owned = owned(&token, &jobs);
    let mut conn = db.connect().await;
    let delay = Duration::from_secs(100);
    assert!(
        store::job_finish_attempt(
            &mut conn,
            &owned[0],
            &store::Outcome::Retry { delay },
            "boom"
        )
        .await
        .unwrap()
            == store::Written::Now
    );
    assert!(
        store::job_finish_attempt(
            &mut conn,
            &owned[1],
            &store::Outcome::Snooze { delay },
            "snoozed"
        )
        .await
        .unwrap()
            == store::Written::Now
    );
    assert!(
        store::job_finish_attempt(&mut conn, &owned[2], &store::Outcome::Fail, "bad input")
            .await
            .unwrap()
            == store::Written::Now
    );
    // Written again under the same token (a retry after a lost COMMIT reply): already done.
    assert_eq!(
        store::job_finish_attempt(&mut conn, &owned[2], &store::Outcome::Fail, "bad input")
            .await
            .unwrap(),
        store::Written::Already
    );
    assert_eq!(
        store::job_release(&mut conn, &owned[3..])
            .await
            .unwrap()
            .done,
        1
    );

    let rows: Vec<(u64, String, u32, Option<String>, i64)> = sqlx::query_as(
        "SELECT id, status, attempts, last_error, TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), available_at) \
         FROM job_queue ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (rows[0].1.as_str(), rows[0].2, rows[0].3.as_deref()),
        ("pending", 1, Some("boom"))
    );
    assert!(
        (90..=100).contains(&rows[0].4),
        "retry at +100s, got {}",
        rows[0].4
    );
    assert_eq!(
        (rows[1].1.as_str(), rows[1].2),
        ("pending", 0),
        "snooze gives the attempt back"
    );
    assert_eq!(
        (rows[2].1.as_str(), rows[2].3.as_deref()),
        ("failed", Some("bad input"))
    );
    assert_eq!(
        (rows[3].1.as_str(), rows[3].2),
        ("pending", 0),
        "release gives the attempt back"
    );
    assert!(rows[3].4 <= 0, "a released job is runnable at once");
}

#[tokio::test]
async fn the_articles_recovery_sql_returns_expired_jobs() {
    let db = TestDb::new().await;
    let keep = PlainNoop { n: 1 }.enqueue(&db.pool).await.unwrap().id();
    let last = PlainNoop { n: 2 }
        .enqueue_with(&db.pool, &EnqueueOptions::new().max_attempts(1))
        .await
        .unwrap()
        .id();
    let (_token, jobs) = claim(&db, "test", 10, Duration::ZERO).await;
    assert_eq!(jobs.len(), 2);
    tokio::time::sleep(Duration::from_millis(5)).await; // the lease (zero) must be in the past

    // The article's recovery statements, verbatim.
    sqlx::query(
        "UPDATE job_queue
SET status = 'pending',
    available_at = NOW(6),
    locked_by = NULL,
    claim_token = NULL,
    lease_expires_at = NULL
WHERE status = 'processing'
  AND lease_expires_at < NOW(6)
  AND attempts < max_attempts",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE job_queue
SET status = 'failed',
    locked_by = NULL,
    claim_token = NULL,
    lease_expires_at = NULL
WHERE status = 'processing'
  AND lease_expires_at < NOW(6)
  AND attempts >= max_attempts",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(db.status(keep.0).await.as_deref(), Some("pending"));
    assert_eq!(db.status(last.0).await.as_deref(), Some("failed"));

    // mysqlq's reaper does the same and says why.
    let (_t, again) = claim(&db, "test", 10, Duration::ZERO).await;
    assert_eq!(again.len(), 1);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut conn = db.connect().await;
    let report = store::job_reap_expired(&mut conn, 100).await.unwrap();
    assert_eq!((report.retried, report.failed), (1, 0));
    let err: Option<String> = sqlx::query_scalar("SELECT last_error FROM job_queue WHERE id = ?")
        .bind(keep.0)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(err.unwrap_or_default().contains("lease expired"));
}

#[tokio::test]
async fn claim_query_uses_the_claim_index_without_filesort() {
    let db = TestDb::new().await;
    let jobs: Vec<NewJob> = (0..3_000u64)
        .map(|n| {
            let queue = ["test", "mail", "reports"][(n % 3) as usize];
            let opts = EnqueueOptions::new().queue(queue).priority((n % 4) as i16);
            NewJob::from_job(&PlainNoop { n }, &opts).unwrap()
        })
        .collect();
    mysqlq::enqueue_many(&db.pool, jobs).await.unwrap();
    sqlx::query("ANALYZE TABLE job_queue")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut conn = db.connect().await;
    let plan = store::job_claim_explain(&mut conn, "test").await.unwrap();
    let main = plan
        .iter()
        .find(|r| r.table.as_deref() == Some("j"))
        .unwrap_or_else(|| panic!("no row for job_queue j in {plan:?}"));
    assert_eq!(main.key.as_deref(), Some("idx_job_rate"), "plan: {plan:?}");
    for row in &plan {
        let extra = row.extra.as_deref().unwrap_or("");
        assert!(!extra.contains("filesort"), "filesort in {row:?}");
    }
}

#[tokio::test]
async fn priority_orders_claims_and_pause_stops_them() {
    let db = TestDb::new().await;
    for n in 0..5 {
        PlainNoop { n }.enqueue(&db.pool).await.unwrap();
    }
    let urgent = PlainNoop { n: 99 }
        .enqueue_with(&db.pool, &EnqueueOptions::new().priority(-10))
        .await
        .unwrap()
        .id();
    let admin = mysqlq::admin::Admin::new(db.pool.clone());
    admin.pause("test").await.unwrap();
    let (_t, none) = claim(&db, "test", 1, Duration::from_secs(60)).await;
    assert!(none.is_empty(), "a paused queue hands out nothing");
    admin.resume("test").await.unwrap();
    let (_t, first) = claim(&db, "test", 1, Duration::from_secs(60)).await;
    assert_eq!(first[0].id, urgent, "lower priority value runs first");
}

#[tokio::test]
async fn leader_lease_has_one_holder_and_fails_over() {
    let db = TestDb::new().await;
    let mut conn = db.connect().await;
    let ttl = Duration::from_millis(300);
    assert!(
        store::leader_elect(&mut conn, "maintenance", "a", ttl)
            .await
            .unwrap()
    );
    assert!(
        !store::leader_elect(&mut conn, "maintenance", "b", ttl)
            .await
            .unwrap()
    );
    assert!(
        store::leader_elect(&mut conn, "maintenance", "a", ttl)
            .await
            .unwrap(),
        "renewal"
    );
    tokio::time::sleep(Duration::from_millis(400)).await; // let the lease lapse
    assert!(
        store::leader_elect(&mut conn, "maintenance", "b", ttl)
            .await
            .unwrap(),
        "failover after expiry"
    );
    store::leader_resign(&mut conn, "maintenance", "b")
        .await
        .unwrap();
    assert!(
        store::leader_elect(&mut conn, "maintenance", "a", ttl)
            .await
            .unwrap(),
        "takeover after resign"
    );
}

/// Completes `id` from a connection of its own that waits at most 1 s for row locks, as a
/// worker completing the job would. `Err` carries the server's error number.
async fn complete_with_short_lock_wait(db: &TestDb, id: JobId) -> Result<u64, Option<u16>> {
    let mut conn = db.connect().await;
    sqlx::query("SET SESSION innodb_lock_wait_timeout = 1")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE job_queue SET status = 'completed', finished_at = UTC_TIMESTAMP(6) \
         WHERE id = ? AND status IN ('pending', 'processing')",
    )
    .bind(id.0)
    .execute(&mut conn)
    .await
    .map(|r| r.rows_affected())
    .map_err(|e| mysqlq::Error::Database(e).server_code())
}

#[tokio::test]
async fn a_duplicate_enqueue_leaves_no_lock_on_the_holder() {
    let db = TestDb::new().await;
    let opts = EnqueueOptions::new().dedupe_key("refresh:place-7");
    let holder = PlainNoop { n: 1 }
        .enqueue_with(&db.pool, &opts)
        .await
        .unwrap();
    assert!(!holder.is_duplicate());

    // On a pool: the statement is its own transaction.
    let dup = PlainNoop { n: 2 }
        .enqueue_with(&db.pool, &opts)
        .await
        .unwrap();
    assert_eq!(dup, Enqueued::Duplicate(holder.id()));

    // Inside an application transaction at READ COMMITTED that stays open: completing the
    // holder from another connection must not wait for it.
    let mut app = db.connect().await;
    sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut app)
        .await
        .unwrap();
    let mut tx = sqlx::Connection::begin(&mut app).await.unwrap();
    let dup = PlainNoop { n: 3 }
        .enqueue_with(&mut *tx, &opts)
        .await
        .unwrap();
    assert_eq!(dup, Enqueued::Duplicate(holder.id()));
    assert_eq!(
        complete_with_short_lock_wait(&db, holder.id()).await,
        Ok(1),
        "the holder completes while the enqueuing transaction is open"
    );
    // The key is free now: the same transaction can take it.
    let next = PlainNoop { n: 4 }
        .enqueue_with(&mut *tx, &opts)
        .await
        .unwrap();
    assert!(!next.is_duplicate(), "{next:?}");
    tx.commit().await.unwrap();
    assert_eq!(db.count("pending").await, 1);
}

#[tokio::test]
async fn bulk_enqueue_cuts_statements_by_bytes() {
    let db = TestDb::new().await;
    let packet: u64 = sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS UNSIGNED)")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    // 500 rows of 60 KB: one 500-row statement would be 30 MB.
    let rows = 500usize;
    let blob = "x".repeat(60_000);
    assert!(
        (rows * blob.len()) as u64 > packet,
        "the test needs rows larger than max_allowed_packet ({packet})"
    );
    let jobs: Vec<NewJob> = (0..rows)
        .map(|_| NewJob::from_job(&Big { blob: blob.clone() }, &EnqueueOptions::new()).unwrap())
        .collect();
    let out = mysqlq::enqueue_many(&db.pool, jobs).await.unwrap();
    assert_eq!(out.len(), rows);
    let ids: Vec<u64> = sqlx::query_scalar("SELECT id FROM job_queue ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(ids, out.iter().map(|e| e.id().0).collect::<Vec<_>>());
}

#[tokio::test]
async fn bulk_enqueue_on_a_pool_is_all_or_nothing() {
    let db = TestDb::new().await;
    // A row the server refuses, after the first full chunk.
    sqlx::raw_sql(
        "CREATE TRIGGER refuse_poison BEFORE INSERT ON job_queue FOR EACH ROW \
         BEGIN IF NEW.kind = 'poison' THEN \
           SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'poison row'; END IF; END",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut jobs: Vec<NewJob> = (0..store::INSERT_CHUNK_ROWS as u64 + 10)
        .map(|n| NewJob::from_job(&PlainNoop { n }, &EnqueueOptions::new()).unwrap())
        .collect();
    jobs.push(
        NewJob::new(
            "poison",
            "test",
            &serde_json::json!({}),
            &EnqueueOptions::new(),
        )
        .unwrap(),
    );
    let err = mysqlq::enqueue_many(&db.pool, jobs).await.unwrap_err();
    assert!(format!("{err:?}").contains("poison row"), "{err:?}");
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM job_queue")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(total, 0, "no chunk was committed on its own");
}

/// Issue 26, violation 1: a job snoozed and at once claimed again by the same worker has two
/// claims in that worker's bookkeeping for a moment, and one heartbeat may name both. The report
/// must tell them apart by token: the old claim lost, the new one renewed. (A report by job id
/// named the job lost, and the worker cancelled the new claim before its handler started; its
/// lease then expired on a healthy worker.)
#[tokio::test]
async fn a_heartbeat_naming_two_claims_of_one_job_tells_them_apart() {
    let db = TestDb::new().await;
    let id = PlainNoop { n: 1 }.enqueue(&db.pool).await.unwrap().id();
    let lease = Duration::from_secs(60);
    let (old, jobs) = claim(&db, "test", 10, lease).await;
    assert_eq!(jobs.len(), 1);
    let old = Owned { id, token: old };
    let mut conn = db.connect().await;
    let snooze = store::Outcome::Snooze {
        delay: Duration::ZERO,
    };
    assert_eq!(
        store::job_finish_attempt(&mut conn, &old, &snooze, "snoozed")
            .await
            .unwrap(),
        store::Written::Now
    );
    let (new, jobs) = claim(&db, "test", 10, lease).await;
    assert_eq!(jobs.len(), 1, "the snoozed job is claimed again");
    let new = Owned { id, token: new };
    let both = [old.clone(), new.clone()];
    let report = store::job_heartbeat(&mut conn, lease, &both).await.unwrap();
    assert_eq!(report.done, 1, "the new claim's lease is renewed");
    assert_eq!(
        (report.lost.clone(), report.settled.clone()),
        (vec![old.clone()], vec![]),
        "only the old claim is lost: {report:?}"
    );
    assert!(report.is_lost(id, &old.token) && !report.is_lost(id, &new.token));
    // The same for a completion carrying both (the new claim completes, the old one is lost).
    let report = store::job_complete_many(&mut conn, &both).await.unwrap();
    assert_eq!(
        (report.done, report.lost),
        (1, vec![old]),
        "the new claim completes"
    );
    assert_eq!(db.count("completed").await, 1);
}

/// The key parts of every secondary index of `job_queue`, as `(index, column)` in index order.
async fn secondary_key_parts(db: &TestDb) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT CAST(INDEX_NAME AS CHAR), CAST(COLUMN_NAME AS CHAR) FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'job_queue' AND INDEX_NAME <> 'PRIMARY' \
         ORDER BY INDEX_NAME, SEQ_IN_INDEX",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// Each secondary index's entry for job `id`: its key parts' values, by index name.
async fn index_entries(
    db: &TestDb,
    parts: &[(String, String)],
    id: JobId,
) -> std::collections::BTreeMap<String, String> {
    let mut columns: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (index, column) in parts {
        columns
            .entry(index.clone())
            .or_default()
            .push(column.clone());
    }
    let mut out = std::collections::BTreeMap::new();
    for (index, cols) in columns {
        let sql = format!(
            "SELECT CAST(JSON_ARRAY({}) AS CHAR) FROM job_queue WHERE id = ?",
            cols.join(", ")
        );
        let entry: String = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(id.0)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        out.insert(index, entry);
    }
    out
}

/// A job without an ordering, concurrency, workflow, dedupe or rate key moves, as it is claimed
/// and as it is completed, only the entries of the indexes that find jobs by their state
/// (`idx_job_claim`, `idx_job_rate`, `idx_job_recover`, `idx_job_finished`). Every other
/// secondary index keeps its entry, its key parts being NULL for such a job in every state
/// (migration 13: an index whose key carries `status` rewrites its entry on every claim and
/// completion, a delete-mark and an insert in InnoDB, whether or not the job has the index's
/// key). Issue 34: that was 7 + 7 entries per job, 14 of the drain's server work.
#[tokio::test]
async fn a_job_without_keys_moves_only_the_indexes_that_find_it_by_state() {
    let db = TestDb::new().await;
    let id = PlainNoop { n: 1 }.enqueue(&db.pool).await.unwrap().id();
    let parts = secondary_key_parts(&db).await;
    let pending = index_entries(&db, &parts, id).await;
    let (token, jobs) = claim(&db, "test", 10, Duration::from_secs(60)).await;
    assert_eq!(jobs.len(), 1);
    let processing = index_entries(&db, &parts, id).await;
    let mut conn = db.connect().await;
    let done = store::job_complete_many(&mut conn, &owned(&token, &jobs))
        .await
        .unwrap();
    assert_eq!(done.done, 1);
    let completed = index_entries(&db, &parts, id).await;
    fn moved(
        a: &std::collections::BTreeMap<String, String>,
        b: &std::collections::BTreeMap<String, String>,
    ) -> Vec<String> {
        a.iter()
            .filter(|(index, entry)| b.get(*index) != Some(*entry))
            .map(|(index, _)| index.clone())
            .collect()
    }
    let by_state = [
        "idx_job_claim",
        "idx_job_finished",
        "idx_job_rate",
        "idx_job_recover",
    ];
    assert_eq!(
        moved(&pending, &processing),
        by_state,
        "the claim moved these entries: {pending:?} -> {processing:?}"
    );
    assert_eq!(
        moved(&processing, &completed),
        by_state,
        "the completion moved these entries: {processing:?} -> {completed:?}"
    );
}

/// A completion that writes some of its claims and finds another lost counts each written claim
/// once: the claims it wrote itself are in `done`, and `settled` names only claims an earlier
/// write under the same token had moved (a retry after a lost COMMIT reply). The ownership read
/// after the write used to list this write's own rows as `settled` as well, and the worker's
/// `completions` counter (`done + settled`) counted them twice (the torture's COUNTED invariant,
/// seed 2500667586151024120: one completion more than written).
#[tokio::test]
async fn a_partly_lost_completion_counts_each_written_claim_once() {
    let db = TestDb::new().await;
    for n in 0..3 {
        PlainNoop { n }.enqueue(&db.pool).await.unwrap();
    }
    let (token, jobs) = claim(&db, "test", 10, Duration::from_secs(60)).await;
    assert_eq!(jobs.len(), 3);
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    // Job 2 is another claim's now (its lease expired and it was claimed again).
    sqlx::query("UPDATE job_queue SET claim_token = 'another-claim' WHERE id = ?")
        .bind(ids[2].0)
        .execute(&db.pool)
        .await
        .unwrap();
    let mut conn = db.connect().await;
    // Job 0 was completed by an earlier write under this token (its COMMIT reply was lost).
    let earlier = [Owned {
        id: ids[0],
        token: token.clone(),
    }];
    assert_eq!(
        store::job_complete_many(&mut conn, &earlier)
            .await
            .unwrap()
            .done,
        1
    );
    // The retry carries all three: job 1 is written now, job 0 was, job 2 is lost.
    let all = owned(&token, &jobs);
    let report = store::job_complete_many(&mut conn, &all).await.unwrap();
    assert_eq!(report.done, 1, "{report:?}");
    assert_eq!(report.lost, vec![all[2].clone()], "{report:?}");
    assert_eq!(
        report.done + report.settled.len() as u64,
        2,
        "jobs 0 and 1 are this token's completions, each counted once: {report:?}"
    );
    assert_eq!(report.settled, vec![all[0].clone()], "{report:?}");
}
