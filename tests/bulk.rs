//! Acting on many jobs (`Admin::act`) against the real server: never more than the confirmed
//! count, only jobs that still match the search and the action's guard, every change in the
//! audit trail with the actor, the confirmed count and the final state.

use std::sync::atomic::AtomicBool;

use mysqlq::admin::{Action, Admin, Target};
use mysqlq::filter::Filter;
use mysqlq_tests::TestDb;

/// `n` scheduled jobs of kind `k` (due in an hour), ids returned in order.
async fn scheduled(db: &TestDb, n: u32, kind: &str) -> Vec<u64> {
    db.exec(&format!(
        "INSERT INTO job_queue (queue_name, kind, payload, available_at) \
         SELECT 'q', '{kind}', JSON_OBJECT('n', seq), UTC_TIMESTAMP(6) + INTERVAL 1 HOUR \
         FROM seq_1_to_{n}"
    ))
    .await;
    sqlx::query_scalar("SELECT id FROM job_queue WHERE kind = ? ORDER BY id")
        .bind(kind)
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

async fn audit_row(db: &TestDb, id: u64) -> (String, String, Option<u64>, u64, Option<String>) {
    sqlx::query_as(
        "SELECT actor, action, expected, jobs, CAST(state AS CHAR) FROM mysqlq_audit WHERE id = ?",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn never_changes_more_than_the_confirmed_count() {
    let db = TestDb::new().await;
    scheduled(&db, 1100, "k").await;
    // 20 ready jobs of the kind, with ids below the horizon, not in the search yet.
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload) \
         SELECT 'q', 'k', JSON_OBJECT('late', seq) FROM seq_1_to_20",
    )
    .await;
    let admin = Admin::new(db.pool.clone()).by("alice");
    let filter = Filter::parse("state:scheduled kind:k").unwrap();
    let counted = admin.count_matching(&filter).await.unwrap();
    assert_eq!(counted.count, 1100);
    // After the count, the 20 enter the search (scheduled), and 30 new ones are enqueued
    // (above the horizon).
    db.exec("UPDATE job_queue SET available_at = UTC_TIMESTAMP(6) + INTERVAL 1 DAY WHERE JSON_EXTRACT(payload, '$.late') IS NOT NULL").await;
    scheduled(&db, 30, "k").await;
    let mut seen = Vec::new();
    let report = admin
        .act(
            Action::RunNow,
            Target::Matching {
                filter: &filter,
                confirmed: counted,
            },
            None,
            |r| seen.push(r.changed),
        )
        .await
        .unwrap();
    assert_eq!(report.changed, 1100, "{report:?}");
    assert!(
        seen.len() >= 3 && seen.windows(2).all(|w| w[0] <= w[1]),
        "{seen:?}"
    );
    let ran_now = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE available_at <= UTC_TIMESTAMP(6)")
        .await;
    assert_eq!(ran_now, 1100, "exactly the confirmed count became due");
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM job_queue WHERE id > {} AND available_at <= UTC_TIMESTAMP(6)",
            counted.horizon
        ))
        .await,
        0,
        "nothing above the horizon changed"
    );
    assert_eq!(
        report.match_now,
        Some(50),
        "20 entered the search, 30 came after the count"
    );
    let (actor, action, expected, jobs, state) = audit_row(&db, report.audit).await;
    assert_eq!(
        (
            actor.as_str(),
            action.as_str(),
            expected,
            jobs,
            state.as_deref()
        ),
        ("alice", "run_now", Some(1100), 1100, Some("done"))
    );
    let linked = db
        .scalar(&format!(
            "SELECT COUNT(*) FROM mysqlq_audit_job WHERE audit_id = {}",
            report.audit
        ))
        .await;
    assert_eq!(linked, 1100);
}

#[tokio::test]
async fn jobs_that_left_the_search_are_left_and_reported() {
    let db = TestDb::new().await;
    let ids = scheduled(&db, 40, "k").await;
    let admin = Admin::new(db.pool.clone())
        .by("bob")
        .because("provider down");
    let filter = Filter::parse("state:scheduled").unwrap();
    let counted = admin.count_matching(&filter).await.unwrap();
    // Ten are claimed between the count and the action: running now, not scheduled.
    db.exec(&format!(
        "UPDATE job_queue SET status = 'processing', locked_by = 'w', claim_token = 'x', \
         lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE WHERE id <= {}",
        ids[9]
    ))
    .await;
    let report = admin
        .act(
            Action::Cancel,
            Target::Matching {
                filter: &filter,
                confirmed: counted,
            },
            None,
            |_| {},
        )
        .await
        .unwrap();
    assert_eq!(report.changed, 30, "{report:?}");
    assert_eq!(
        db.count("processing").await,
        10,
        "claimed jobs are left running"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE status = 'cancelled' AND cancelled_by = 'bob' AND cancel_reason = 'provider down'").await,
        30
    );
    assert_eq!(report.match_now, Some(0));
}

#[tokio::test]
async fn ids_retry_delete_and_a_stop_flag() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, status, attempts, finished_at, last_error) \
         SELECT 'q', 'f', JSON_OBJECT('n', seq), 'failed', 5, UTC_TIMESTAMP(6), 'boom' FROM seq_1_to_5",
    )
    .await;
    let failed: Vec<u64> = sqlx::query_scalar("SELECT id FROM job_queue ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let sched = scheduled(&db, 3, "k").await;
    let admin = Admin::new(db.pool.clone()).by("carol");
    let ids: Vec<mysqlq::JobId> = failed
        .iter()
        .chain(&sched)
        .map(|id| mysqlq::JobId(*id))
        .collect();
    // Retry applies to the failed ones only.
    let r = admin
        .act(Action::Retry, Target::Ids(&ids), None, |_| {})
        .await
        .unwrap();
    assert_eq!((r.changed, r.left), (5, 3), "{r:?}");
    assert_eq!(db.count("failed").await, 0);
    // Delete by filter, but the stop flag is already set: nothing changes, state stopped.
    let stop = AtomicBool::new(true);
    let filter = Filter::parse("kind:k").unwrap();
    let counted = admin.count_matching(&filter).await.unwrap();
    let r = admin
        .act(
            Action::Delete,
            Target::Matching {
                filter: &filter,
                confirmed: counted,
            },
            Some(&stop),
            |_| {},
        )
        .await
        .unwrap();
    assert!(r.stopped && r.changed == 0, "{r:?}");
    assert_eq!(audit_row(&db, r.audit).await.4.as_deref(), Some("stopped"));
    let r = admin
        .act(
            Action::Delete,
            Target::Matching {
                filter: &filter,
                confirmed: counted,
            },
            None,
            |_| {},
        )
        .await
        .unwrap();
    assert_eq!(r.changed, 3);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE kind = 'k'")
            .await,
        0
    );
}
