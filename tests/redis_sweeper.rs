//! The Redis transport's sweeper (`XAUTOCLAIM` of entries whose consumer stopped) and the
//! token guard against entries Redis hands out again, against the shared Redis (a key prefix
//! per test) and the shared database. A "ghost" consumer reads entries and never takes them:
//! a consumer process that died at once.

use std::time::Duration;

use mysqlq::{JobId, WorkerEvent};
use mysqlq_tests::TestDb;
use mysqlq_tests::redis::{TestRedis, group_pending, job_read_by_ghost, runs, status_of};

#[tokio::test]
async fn an_entry_read_by_a_consumer_that_died_before_taking_it_is_run_by_the_sweeper() {
    let db = TestDb::new().await;
    let mut r = TestRedis::shared();
    r.config.relay_lease = Duration::from_secs(60); // the relay lease is not what brings it back
    let (id, _, _) = job_read_by_ghost(&db, &r).await;
    let worker = db
        .worker()
        .lease(Duration::from_secs(1))
        .redis(r.connect().await)
        .start()
        .await
        .unwrap();
    let mut events = worker.events();
    mysqlq_tests::wait_event(
        &mut events,
        "the sweeper runs it",
        Duration::from_secs(20),
        |e| matches!(e, WorkerEvent::Swept { run: 1, .. }),
    )
    .await;
    db.wait_for(
        "completed",
        &format!("SELECT COUNT(*) FROM job_queue WHERE id = {} AND status = 'completed' AND attempts = 1", id.0),
        Duration::from_secs(20),
    )
    .await;
    worker.shutdown().await.unwrap();
    assert_eq!(runs(&db, "done").await, vec![(id.0, 1)]);
    assert_eq!(r.len("test").await, 0);
    assert_eq!(group_pending(&r, "test").await, 0);
}

#[tokio::test]
async fn an_entry_delivered_more_times_than_its_attempts_and_never_taken_is_dead_lettered() {
    let db = TestDb::new().await;
    let mut r = TestRedis::shared();
    r.config.relay_lease = Duration::from_secs(60);
    let (id, entry, _) = job_read_by_ghost(&db, &r).await;
    // Delivered again and again (XCLAIM counts a delivery): 5 deliveries, 4 attempts allowed.
    for _ in 0..4 {
        let _: redis::Value = redis::cmd("XCLAIM")
            .arg(r.stream("test"))
            .arg("mysqlq")
            .arg("ghost")
            .arg(0)
            .arg(&entry)
            .query_async(&mut r.raw().await)
            .await
            .unwrap();
    }
    let worker = db
        .worker()
        .lease(Duration::from_secs(1))
        .redis(r.connect().await)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "dead-lettered",
        &format!(
            "SELECT COUNT(*) FROM job_queue WHERE id = {} AND status = 'failed'",
            id.0
        ),
        Duration::from_secs(20),
    )
    .await;
    worker.shutdown().await.unwrap();
    let (_, attempts, err) = status_of(&db, id).await;
    assert_eq!(attempts, 0, "it never ran");
    assert!(err.unwrap().contains("delivered 6 times and never taken"));
    assert!(runs(&db, "done").await.is_empty());
    assert_eq!(r.len("test").await, 0);
}

#[tokio::test]
async fn a_job_whose_consumer_died_after_taking_it_is_retried_or_dead_by_its_attempts() {
    let db = TestDb::new().await;
    let mut r = TestRedis::shared();
    r.config.relay_lease = Duration::from_secs(60);
    // Two jobs read by the ghost, taken in MySQL under the ghost's token with a short lease,
    // one of them on its last attempt.
    let (alive, _, f1) = job_read_by_ghost(&db, &r).await;
    let (last, _, f2) = job_read_by_ghost(&db, &r).await;
    let token_of = |f: &[(String, String)]| f.iter().find(|(k, _)| k == "token").unwrap().1.clone();
    let mut conn = db.connect().await;
    for (id, token) in [(alive, token_of(&f1)), (last, token_of(&f2))] {
        let owned = [mysqlq::store::Owned { id, token }];
        let p = mysqlq::store::TakeParams {
            jobs: &owned,
            worker_id: "ghost-worker",
            token: &uuid_like(id),
            lease: Duration::from_millis(500),
        };
        assert_eq!(
            mysqlq::store::job_take(&mut conn, &p).await.unwrap(),
            vec![id]
        );
    }
    sqlx::query("UPDATE job_queue SET attempts = max_attempts WHERE id = ?")
        .bind(last.0)
        .execute(&db.pool)
        .await
        .unwrap();
    // Maintenance far away: the sweeper, not the reaper, finds them.
    let worker = db
        .worker()
        .lease(Duration::from_secs(1))
        .maintenance(Duration::from_secs(60), Duration::from_secs(120))
        .redis(r.connect().await)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "retried and completed, and dead",
        &format!(
            "SELECT (SELECT status = 'completed' FROM job_queue WHERE id = {}) \
             AND (SELECT status = 'failed' FROM job_queue WHERE id = {})",
            alive.0, last.0
        ),
        Duration::from_secs(20),
    )
    .await;
    worker.shutdown().await.unwrap();
    let (_, attempts, _) = status_of(&db, alive).await;
    assert_eq!(attempts, 2, "the dead consumer's attempt counts");
    let (_, _, err) = status_of(&db, last).await;
    let err = err.unwrap();
    assert!(
        err.contains("ghost-worker") && err.contains("consumer presumed dead"),
        "{err}"
    );
    let history: String = sqlx::query_scalar(
        "SELECT CAST(error AS CHAR) FROM mysqlq_job_attempt WHERE job_id = ? ORDER BY attempt LIMIT 1",
    )
    .bind(alive.0)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(history.contains("ghost-worker"), "{history}");
    assert_eq!(runs(&db, "done").await, vec![(alive.0, 1)]);
    assert_eq!(r.len("test").await, 0);
    assert_eq!(group_pending(&r, "test").await, 0);
}

fn uuid_like(id: JobId) -> String {
    format!("00000000-0000-0000-0000-{:012}", id.0)
}

#[tokio::test]
async fn a_resurrected_entry_of_a_finished_job_is_refused_by_the_token_guard() {
    let db = TestDb::new().await;
    let r = TestRedis::shared();
    let (id, _, fields) = job_read_by_ghost(&db, &r).await;
    let worker = db
        .worker()
        .lease(Duration::from_secs(1))
        .redis(r.connect().await)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "completed",
        &format!(
            "SELECT COUNT(*) FROM job_queue WHERE id = {} AND status = 'completed'",
            id.0
        ),
        Duration::from_secs(20),
    )
    .await;
    let mut events = worker.events();
    // A Redis restored from an old snapshot hands the same entry out again.
    let mut add = redis::cmd("XADD");
    add.arg(r.stream("test")).arg("*");
    for (k, v) in &fields {
        add.arg(k).arg(v);
    }
    let _: String = add.query_async(&mut r.raw().await).await.unwrap();
    mysqlq_tests::wait_event(
        &mut events,
        "the copy is acknowledged",
        Duration::from_secs(20),
        |e| matches!(e, WorkerEvent::Acked { .. }),
    )
    .await;
    worker.shutdown().await.unwrap();
    assert_eq!(runs(&db, "done").await, vec![(id.0, 1)], "it ran once");
    assert_eq!(r.len("test").await, 0);
}
