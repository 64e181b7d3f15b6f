//! The audit trail of operator actions (issue 27, item 6): every action taken through
//! `mysqlq::admin::Admin` (and so the CLI and the dashboard) is on record with who, when, what,
//! why and the jobs it changed, each job linked in the transaction that changed it.

use std::time::Duration;

use mysqlq::JobId;
use mysqlq::admin::{Admin, AuditQuery, AuditRecord, JobSelection, JobState, Selection};
use mysqlq_tests::TestDb;
use mysqlq_tests::jobs::Noop;

async fn enqueue(db: &TestDb, n: u64) -> JobId {
    Noop { n }.enqueue(&db.pool).await.unwrap().id()
}

async fn fail(db: &TestDb, id: JobId) {
    sqlx::query(
        "UPDATE job_queue SET status = 'failed', attempts = 1, finished_at = UTC_TIMESTAMP(6) \
         WHERE id = ?",
    )
    .bind(id.0)
    .execute(&db.pool)
    .await
    .unwrap();
}

fn summary(trail: &[AuditRecord]) -> Vec<(String, String, u64, Option<String>)> {
    trail
        .iter()
        .map(|r| (r.action.clone(), r.actor.clone(), r.jobs, r.reason.clone()))
        .collect()
}

fn row(
    action: &str,
    actor: &str,
    jobs: u64,
    reason: Option<&str>,
) -> (String, String, u64, Option<String>) {
    (
        action.to_owned(),
        actor.to_owned(),
        jobs,
        reason.map(str::to_owned),
    )
}

/// Before: retry, discard, delete, pause, resume and purge left no trace of who did them or
/// when (only a cancel set `cancelled_by`), and a retried job's page showed two "attempt 1"
/// rows with nothing between them.
#[tokio::test]
async fn every_operator_action_is_on_record_with_who_why_and_the_jobs_it_changed() {
    let db = TestDb::new().await;
    let (a, b, c, d) = (
        enqueue(&db, 1).await,
        enqueue(&db, 2).await,
        enqueue(&db, 3).await,
        enqueue(&db, 4).await,
    );
    fail(&db, a).await;
    fail(&db, b).await;
    let alice = Admin::new(db.pool.clone())
        .by("alice")
        .because("bad deploy");
    // An id named twice is one job: counted and linked once (found by the operator torture
    // test: the count said 2 where one job changed).
    let retried = alice
        .retry_failed(Selection::Ids(&[a, a, d]), |_| {})
        .await
        .unwrap();
    assert_eq!((retried.retried, retried.not_failed.clone()), (1, vec![d]));
    let discarded = alice
        .discard_failed(Selection::Ids(&[b, b]), |_| {})
        .await
        .unwrap();
    assert_eq!(discarded.discarded, 1);
    let cancelled = alice
        .cancel(
            JobSelection::Ids(&[c, a]),
            "bob",
            Some("not needed"),
            |_| {},
        )
        .await
        .unwrap();
    assert_eq!(cancelled.cancelled, 2);
    assert_eq!(alice.delete(&[c]).await.unwrap().deleted, 1);
    alice.pause("test").await.unwrap();
    alice.resume("test").await.unwrap();
    let purged = Admin::new(db.pool.clone())
        .purge(JobState::Cancelled, Duration::ZERO, 10, |_| {})
        .await
        .unwrap();
    assert_eq!(purged, 1, "job a, cancelled");

    let all = alice
        .audit(&AuditQuery {
            limit: 50,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    let why = Some("bad deploy");
    assert_eq!(
        summary(&all),
        [
            row("purge", Admin::DEFAULT_ACTOR, 1, None),
            row("resume", "alice", 0, why),
            row("pause", "alice", 0, why),
            row("delete", "alice", 1, why),
            row("cancel", "bob", 2, Some("not needed")),
            row("discard", "alice", 1, why),
            row("retry", "alice", 1, why),
        ],
        "newest first"
    );
    assert_eq!(all[1].queue.as_deref(), Some("test"));
    assert!(
        all[0]
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("cancelled jobs finished more than"))
    );
    assert_eq!(
        all[6].detail.as_deref(),
        Some(&*format!("ids {}, {}", a.0, d.0)),
        "each id once"
    );
    assert!(
        all.windows(2)
            .all(|w| w[0].at >= w[1].at && w[0].id > w[1].id)
    );

    // A job's actions: those that changed it (a purge records its count only; d was asked
    // for but not failed, so the retry did not change it).
    let of = |id: JobId| {
        let admin = alice.clone();
        async move {
            let trail = admin
                .audit(&AuditQuery {
                    job: Some(id),
                    limit: 10,
                    ..AuditQuery::default()
                })
                .await
                .unwrap();
            trail.into_iter().map(|r| r.action).collect::<Vec<_>>()
        }
    };
    assert_eq!(of(a).await, ["cancel", "retry"]);
    assert_eq!(of(b).await, ["discard"]);
    assert_eq!(of(c).await, ["delete", "cancel"]);
    assert!(of(d).await.is_empty());
    let queue = alice
        .audit(&AuditQuery {
            queue: Some("test"),
            limit: 10,
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(
        queue.iter().map(|r| r.action.as_str()).collect::<Vec<_>>(),
        ["resume", "pause"]
    );

    // A name the trail cannot hold is refused before anything changes.
    let before = db.scalar("SELECT COUNT(*) FROM mysqlq_audit").await;
    let e = Admin::new(db.pool.clone())
        .by("")
        .pause("test")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("acting operator"), "{e}");
    let e = Admin::new(db.pool.clone())
        .by("x".repeat(129))
        .delete(&[d])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("1 to 128 characters"), "{e}");
    assert_eq!(db.status(d.0).await.as_deref(), Some("pending"));
    assert_eq!(db.scalar("SELECT COUNT(*) FROM mysqlq_audit").await, before);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_queue WHERE paused = 1")
            .await,
        0
    );
}

/// The trail is bounded: the leader prunes actions older than the failed jobs' retention, with
/// their job links; newer ones stay.
#[tokio::test]
async fn the_leader_prunes_actions_past_the_failed_retention() {
    let db = TestDb::new().await;
    let id = enqueue(&db, 1).await;
    fail(&db, id).await;
    let admin = Admin::new(db.pool.clone()).by("ops");
    admin
        .retry_failed(Selection::Ids(&[id]), |_| {})
        .await
        .unwrap();
    admin.pause("test").await.unwrap();
    db.exec(
        "UPDATE mysqlq_audit SET at = UTC_TIMESTAMP(6) - INTERVAL 3 DAY WHERE action = 'retry'",
    )
    .await;
    let worker = db
        .worker()
        .queues(["other"])
        .maintenance(Duration::from_millis(100), Duration::from_secs(2))
        .retention(
            Duration::from_secs(3600),
            Duration::from_secs(2 * 24 * 3600),
        )
        .start()
        .await
        .unwrap();
    db.wait_for(
        "the old action pruned with its links",
        "SELECT (SELECT COUNT(*) FROM mysqlq_audit WHERE action = 'retry') = 0 \
         AND (SELECT COUNT(*) FROM mysqlq_audit_job) = 0",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_audit WHERE action = 'pause'")
            .await,
        1,
        "the recent action stays"
    );
}
