//! The typed operator API (`mysqlq::admin`) against a real server.

use std::time::Duration;

use mysqlq::JobId;
use mysqlq::admin::{Admin, JobState, Selection};
use mysqlq_tests::TestDb;

/// `n` failed jobs in `queue`, inserted by plain SQL.
async fn failed_jobs(db: &TestDb, queue: &str, n: usize) -> Vec<JobId> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = sqlx::query(
            "INSERT INTO job_queue (queue_name, kind, payload, status, attempts, max_attempts, \
             last_error, finished_at) VALUES (?, 'noop', JSON_OBJECT('n', ?), 'failed', 3, 3, \
             'boom', UTC_TIMESTAMP(6) - INTERVAL ? SECOND)",
        )
        .bind(queue)
        .bind(i as u64)
        .bind(10 * i as u64) // ten seconds apart
        .execute(&db.pool)
        .await
        .unwrap()
        .last_insert_id();
        ids.push(JobId(id));
    }
    ids
}

#[tokio::test]
async fn failed_jobs_are_listed_typed_and_retried_or_discarded_in_keyset_pages() {
    let db = TestDb::new().await;
    let alpha = failed_jobs(&db, "alpha", 1_100).await; // more than two bulk pages
    let beta = failed_jobs(&db, "beta", 3).await;
    let admin = Admin::new(db.pool.clone());

    let listed = admin.failed(Some("beta"), 10).await.unwrap();
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[0].id, beta[0], "newest failure first");
    assert!(
        listed
            .iter()
            .all(|j| j.failed_at.is_some() && j.attempts == 3)
    );
    assert_eq!(admin.failed_count(Some("alpha")).await.unwrap(), 1_100);

    let job = admin.job(beta[1]).await.unwrap().unwrap();
    assert_eq!((job.state, job.queue.as_str()), (JobState::Failed, "beta"));
    assert!(job.finished_at.unwrap() <= job.read_at);

    let mut seen = 0;
    let r = admin
        .retry_failed(
            Selection::All {
                queue: Some("alpha"),
            },
            |n| seen += n,
        )
        .await
        .unwrap();
    assert_eq!((r.retried, seen), (1_100, 1_100));
    assert_eq!(db.count("pending").await, 1_100);
    assert_eq!(admin.failed_count(None).await.unwrap(), 3, "beta untouched");

    let r = admin
        .discard_failed(Selection::Ids(&[beta[0], alpha[0]]), |_| {})
        .await
        .unwrap();
    assert_eq!((r.discarded, r.not_failed), (1, vec![alpha[0]]));
}

#[tokio::test]
async fn purge_deletes_old_final_jobs_and_refuses_other_states() {
    let db = TestDb::new().await;
    failed_jobs(&db, "alpha", 30).await;
    let admin = Admin::new(db.pool.clone());
    let mut batches = 0;
    let n = admin
        .purge(JobState::Failed, Duration::from_secs(95), 7, |_| {
            batches += 1
        })
        .await
        .unwrap();
    assert_eq!(n, 20, "the 20 that failed 100 s ago or earlier");
    assert!(batches >= 3);
    let err = admin
        .purge(JobState::Pending, Duration::ZERO, 10, |_| {})
        .await
        .unwrap_err();
    assert!(err.to_string().contains("only final states"), "{err}");
    admin.pause("alpha").await.unwrap();
    assert!(admin.queue_has_jobs("alpha").await.unwrap());
    admin.resume("alpha").await.unwrap();
}

#[tokio::test]
async fn doctor_returns_its_checks_as_data() {
    use mysqlq::admin::Level;
    let db = TestDb::new().await;
    failed_jobs(&db, "elsewhere", 1).await;
    sqlx::query(
        "INSERT INTO job_queue (queue_name, kind, payload) VALUES ('elsewhere', 'noop', '{}')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let checks = Admin::new(db.pool.clone())
        .doctor(&["test".to_owned()])
        .await
        .unwrap();
    let find = |name: &str| {
        checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no `{name}` check in {checks:?}"))
    };
    assert_eq!(find("schema").level, Level::Ok);
    assert_eq!(find("indexes").level, Level::Ok);
    let stranded = find("queues");
    assert_eq!(stranded.level, Level::Warn, "{stranded:?}");
    assert!(
        stranded.detail.contains("`elsewhere` (1 pending)"),
        "{stranded:?}"
    );
}

/// Runs `op` while another transaction holds job `id`'s row, changed by `hold` (not yet
/// committed); commits that transaction once `op` waits on the row, then returns what `op` did.
async fn while_row_held<T: Send + 'static>(
    db: &TestDb,
    id: JobId,
    hold: &'static str,
    op: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let mut other = db.pool.begin().await.unwrap();
    sqlx::query(hold)
        .bind(id.0)
        .execute(&mut *other)
        .await
        .unwrap();
    let op = tokio::spawn(op);
    // `op` reaches the locked row and waits for it (its locking check, or the write itself).
    db.wait_for(
        "the operation to wait for the other transaction's row lock",
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
         WHERE DB = DATABASE() AND ID <> CONNECTION_ID() \
           AND (INFO LIKE '%mysqlq:job_failed_check%FOR UPDATE%' \
                OR INFO LIKE '%mysqlq:job_discard_failed%' \
                OR INFO LIKE '%mysqlq:job_retry_failed%')",
        Duration::from_secs(30),
    )
    .await;
    other.commit().await.unwrap();
    op.await.unwrap()
}

/// An attempt-history row of job `id`; returns the query counting them.
async fn with_history(db: &TestDb, id: JobId) -> String {
    sqlx::query(
        "INSERT INTO mysqlq_job_attempt (job_id, attempt, outcome, worker, started_at, \
         finished_at, error, error_bytes) \
         VALUES (?, 3, 'fail', 'w1', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 'boom', 4)",
    )
    .bind(id.0)
    .execute(&db.pool)
    .await
    .unwrap();
    format!(
        "SELECT COUNT(*) FROM mysqlq_job_attempt WHERE job_id = {}",
        id.0
    )
}

/// An operator retries a failed job while another discards it. The discard's check locks the
/// rows it deletes, so it waits for the retry and then leaves the job, now `pending`, alone with
/// its attempt history. (Its check once read without a lock: it deleted the history of the job
/// the retry had just moved back to `pending`, and counted the job as discarded.)
#[tokio::test]
async fn a_discard_racing_a_retry_leaves_the_retried_job_and_its_history() {
    let db = TestDb::new().await;
    let id = failed_jobs(&db, "race", 1).await[0];
    let history = with_history(&db, id).await;
    let admin = Admin::new(db.pool.clone());
    let report = while_row_held(
        &db,
        id,
        "UPDATE job_queue SET status = 'pending', attempts = 0, finished_at = NULL WHERE id = ?",
        async move { admin.discard_failed(Selection::Ids(&[id]), |_| {}).await },
    )
    .await
    .unwrap();
    assert_eq!(report.discarded, 0, "{report:?}");
    assert_eq!(report.not_failed, vec![id], "{report:?}");
    assert_eq!(db.status(id.0).await.as_deref(), Some("pending"));
    assert_eq!(
        db.scalar(&history).await,
        1,
        "the retried job's history must stay"
    );
}

/// The other way round: a retry racing a discard waits for it, and does not count the job it
/// never moved as retried.
#[tokio::test]
async fn a_retry_racing_a_discard_does_not_count_the_discarded_job() {
    let db = TestDb::new().await;
    let id = failed_jobs(&db, "race", 1).await[0];
    let admin = Admin::new(db.pool.clone());
    let report = while_row_held(&db, id, "DELETE FROM job_queue WHERE id = ?", async move {
        admin.retry_failed(Selection::Ids(&[id]), |_| {}).await
    })
    .await
    .unwrap();
    assert_eq!(report.retried, 0, "{report:?}");
    assert_eq!(report.not_failed, vec![id], "{report:?}");
    assert_eq!(db.status(id.0).await, None);
}
