//! The Redis Streams transport against the shared Redis (a key prefix per test, deleted
//! afterwards) and the shared database: jobs enqueued in MySQL transactions run through the
//! streams once each, with the runtime's error classes, dead letters, back-pressure and
//! graceful shutdown. Fault cases (kill, restart empty, flush) are in `redis_faults.rs`.

use std::time::Duration;

use mysqlq::{Job, JobId, WorkerEvent};
use mysqlq_tests::TestDb;
use mysqlq_tests::jobs::{Noop, Sleepy};
use mysqlq_tests::redis::TestRedis;

async fn runs(db: &TestDb, event: &str) -> Vec<(u64, i64)> {
    sqlx::query_as(
        "SELECT job_id, COUNT(*) FROM test_runs WHERE event = ? GROUP BY job_id ORDER BY job_id",
    )
    .bind(event)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

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
    assert!(done.iter().all(|(_, n)| *n == 1), "every job ran once: {done:?}");
    assert_eq!(db.count("completed").await, 36);
    // Taken by the consumer: locked_by is the worker, and the attempt was taken once.
    let odd: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM job_queue WHERE locked_by <> ? OR attempts <> 1",
    )
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
