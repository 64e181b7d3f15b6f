//! Operator cancellation and deletion of jobs in any state, and the per-attempt error history:
//! the library API against the real server, the worker's reaction to a cancel while the job
//! runs, the keys a cancel frees, the CLI in a real process and the dashboard over HTTP.

use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use mysqlq::admin::{Admin, AttemptOutcome, JobSelection, JobState};
use mysqlq::hooks::{BoxFuture, Hook, Hooks, JobRun};
use mysqlq::store::{self, Outcome, Owned, Written};
use mysqlq::{
    CancelReason, EnqueueOptions, Enqueued, JobContext, JobError, JobId, NewJob, WorkerEvent,
};
use mysqlq_cli::dashboard::{DashboardOptions, router};
use mysqlq_tests::http::{request, send};
use mysqlq_tests::{TestDb, wait_event};
use serde_json::json;

#[path = "harness/claim.rs"]
mod claim;

const BIN: &str = env!("CARGO_BIN_EXE_mysqlq-test-worker");

// ---------------------------------------------------------------------------------------------
// fixtures

/// Enqueues one `noop` job on `queue` with `opts`.
async fn enqueue(db: &TestDb, queue: &str, opts: &EnqueueOptions) -> Enqueued {
    let job = NewJob::new("noop", queue, &json!({"n": 1}), opts).unwrap();
    mysqlq::enqueue_many(&db.pool, [job]).await.unwrap()[0]
}

async fn enqueue_id(db: &TestDb, queue: &str) -> JobId {
    enqueue(db, queue, &EnqueueOptions::new()).await.id()
}

/// Claims up to `limit` jobs of `queue` for 60 s under a fresh token: the jobs, as owned.
async fn claim(db: &TestDb, queue: &str, limit: u32) -> Vec<Owned> {
    let (token, jobs) = claim::claim(db, queue, limit, Duration::from_secs(60)).await;
    claim::owned(&token, &jobs)
}

async fn attempt_rows(db: &TestDb, id: JobId) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM mysqlq_job_attempt WHERE job_id = ?")
        .bind(id.0)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

fn log<'a>(attempt: u32, outcome: &'a str, keep: u32) -> store::AttemptRecord<'a> {
    store::AttemptRecord {
        attempt,
        outcome,
        worker: "test-worker",
        ran_for: Duration::from_millis(5),
        keep,
    }
}

/// How long a test waits for a worker event: a stuck worker, not a slow one.
const EVENT_LIMIT: Duration = Duration::from_secs(60);

/// Contexts of the running `waits_for_cancel` jobs, for the test to look at.
static CONTEXTS: Mutex<Vec<JobContext>> = Mutex::new(Vec::new());

/// Runs until it is stopped from outside; then, if it were allowed to, it would complete.
#[mysqlq::job(queue = "cancel-run", retries = 0)]
async fn waits_for_cancel(ctx: JobContext) -> Result<(), JobError> {
    CONTEXTS.lock().unwrap().push(ctx.clone());
    ctx.cancelled().await;
    Ok(())
}

/// Fails every attempt; attempt 4's error is 10 KiB of two-byte characters.
#[mysqlq::job(queue = "cancel-attempts", retries = 4, backoff = "10ms")]
async fn fails_fast(ctx: JobContext) -> Result<(), JobError> {
    if ctx.attempt() == 4 {
        return Err(JobError::retry(format!("boom 4 {}", "é".repeat(5 * 1024))));
    }
    Err(JobError::retry(format!("boom {}", ctx.attempt())))
}

/// A worker hook recording every `on_cancelled` it hears: (job, reason).
#[derive(Default)]
struct SeesCancels(std::sync::Arc<Mutex<Vec<(JobId, String)>>>);

impl Hook for SeesCancels {
    fn on_cancelled<'a>(&'a self, job: &'a JobRun, reason: &'a str) -> BoxFuture<'a, ()> {
        self.0.lock().unwrap().push((job.id(), reason.to_owned()));
        Box::pin(async {})
    }
}

// ---------------------------------------------------------------------------------------------
// the library API

#[tokio::test]
async fn cancel_by_id_moves_waiting_jobs_and_records_who_when_why() {
    let db = TestDb::new().await;
    let admin = Admin::new(db.pool.clone());
    let ready = enqueue_id(&db, "q").await;
    let scheduled = enqueue(
        &db,
        "q",
        &EnqueueOptions::new().delay(Duration::from_secs(3600)),
    )
    .await
    .id();
    // A job waiting for its retry: claimed, failed once, runnable in an hour.
    let retrying = enqueue_id(&db, "r").await;
    let owned = claim(&db, "r", 1).await;
    let mut conn = db.connect().await;
    let retry = Outcome::Retry {
        delay: Duration::from_secs(3600),
    };
    assert_eq!(
        store::job_finish_attempt(&mut conn, &owned[0], &retry, "503")
            .await
            .unwrap(),
        Written::Now
    );
    let done = enqueue_id(&db, "c").await;
    let c = claim(&db, "c", 1).await;
    store::job_complete_many(&mut conn, &c).await.unwrap();
    let unknown = JobId(987_654_321);

    let err = admin
        .cancel(JobSelection::Ids(&[ready]), "  ", None, |_| {})
        .await
        .unwrap_err();
    assert!(err.to_string().contains("name who cancels"), "{err}");
    assert_eq!(
        db.status(ready.0).await.as_deref(),
        Some("pending"),
        "a refused cancel changes nothing"
    );

    let ids = [ready, scheduled, retrying, done, unknown];
    let r = admin
        .cancel(JobSelection::Ids(&ids), "alice", Some("bad batch"), |_| {})
        .await
        .unwrap();
    assert_eq!(r.cancelled, 3);
    assert!(r.running.is_empty());
    assert_eq!(r.not_cancellable, vec![done, unknown]);
    for id in [ready, scheduled, retrying] {
        let j = admin.job(id).await.unwrap().unwrap();
        assert_eq!(j.state, JobState::Cancelled);
        assert_eq!(j.cancelled_by.as_deref(), Some("alice"));
        assert_eq!(j.cancel_reason.as_deref(), Some("bad batch"));
        let at = j.cancelled_at.expect("cancelled_at");
        assert_eq!(j.finished_at, Some(at), "finished when cancelled");
        assert!(at <= j.read_at);
        assert!(j.lease_expires_at.is_none());
    }
    assert_eq!(
        db.status(done.0).await.as_deref(),
        Some("completed"),
        "a final job is left alone"
    );
    // Cancelled is final: a second cancel reports it.
    let again = admin
        .cancel(JobSelection::Ids(&[ready]), "bob", None, |_| {})
        .await
        .unwrap();
    assert_eq!((again.cancelled, again.not_cancellable), (0, vec![ready]));
    let j = admin.job(ready).await.unwrap().unwrap();
    assert_eq!(
        j.cancelled_by.as_deref(),
        Some("alice"),
        "the first cancel stands"
    );
    // A handler's own cancel decision is `cancelled` without an operator.
    let own = enqueue_id(&db, "h").await;
    let h = claim(&db, "h", 1).await;
    store::job_finish_attempt(&mut conn, &h[0], &Outcome::Cancel, "not needed")
        .await
        .unwrap();
    let j = admin.job(own).await.unwrap().unwrap();
    assert_eq!((j.state, j.cancelled_by), (JobState::Cancelled, None));
}

#[tokio::test]
async fn cancel_by_queue_and_kind_walks_every_page() {
    let db = TestDb::new().await;
    let admin = Admin::new(db.pool.clone());
    let job = |kind: &str, queue: &str| {
        NewJob::new(kind, queue, &json!({"n": 1}), &EnqueueOptions::new()).unwrap()
    };
    // More than two keyset pages (500 ids each) of the selected jobs, among others.
    let mut jobs: Vec<NewJob> = (0..1100).map(|_| job("a", "q1")).collect();
    jobs.extend((0..5).map(|_| job("b", "q1")));
    jobs.extend((0..5).map(|_| job("a", "q2")));
    mysqlq::enqueue_many(&db.pool, jobs).await.unwrap();
    let running = claim(&db, "q1", 1).await;
    assert_eq!(running.len(), 1);
    let mut looked = 0;
    let r = admin
        .cancel(
            JobSelection::Filter {
                queue: Some("q1"),
                kind: Some("a"),
            },
            "ops",
            None,
            |n| looked += n,
        )
        .await
        .unwrap();
    assert_eq!(r.cancelled, 1100);
    assert_eq!(r.running, vec![running[0].id]);
    assert!(r.not_cancellable.is_empty());
    assert_eq!(looked, 1100);
    let count = |q: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(q)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        count("SELECT COUNT(*) FROM job_queue WHERE status = 'cancelled' AND cancelled_by = 'ops'")
            .await,
        1100
    );
    assert_eq!(
        count("SELECT COUNT(*) FROM job_queue WHERE status = 'pending'").await,
        10,
        "other kinds and queues are untouched"
    );
    // A bad queue name is refused with the reason.
    let err = admin
        .cancel(
            JobSelection::Filter {
                queue: Some("no spaces"),
                kind: None,
            },
            "ops",
            None,
            |_| {},
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("queue"), "{err}");
}

#[tokio::test]
async fn the_bulk_cancel_walks_a_window_of_ids_on_an_index() {
    let db = TestDb::new().await;
    sqlx::raw_sql(
        "INSERT INTO job_queue (queue_name, kind, payload, status, finished_at, lease_expires_at) \
         SELECT CONCAT('q', seq % 4), 'noop', '{}', \
                ELT(1 + seq % 5, 'completed', 'completed', 'pending', 'processing', 'failed'), \
                IF(seq % 5 IN (0, 1, 4), UTC_TIMESTAMP(6) - INTERVAL seq SECOND, NULL), \
                IF(seq % 5 = 3, UTC_TIMESTAMP(6), NULL) \
         FROM seq_1_to_20000; ANALYZE TABLE job_queue",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut conn = db.connect().await;
    let plans = mysqlq::store::admin::stats_explain(&mut conn)
        .await
        .unwrap();
    let walks: Vec<_> = plans
        .iter()
        .filter(|(tag, _)| tag.starts_with("job_active_page"))
        .collect();
    assert_eq!(walks.len(), 1);
    // One window of ids: a range on `idx_job_finished` (its active rows) or on the primary key
    // (every row of the window), whichever the optimizer finds cheaper; both are bounded by the
    // window, neither sorts.
    for (tag, plan) in walks {
        assert_eq!(plan.len(), 1, "{tag}: {plan:?}");
        assert!(
            matches!(plan[0].key.as_deref(), Some("idx_job_finished" | "PRIMARY")),
            "{tag}: {plan:?}"
        );
        assert_eq!(plan[0].access.as_deref(), Some("range"), "{tag}: {plan:?}");
        let extra = plan[0].extra.as_deref().unwrap_or("");
        assert!(!extra.contains("filesort"), "{tag} sorts: {plan:?}");
    }
}

#[tokio::test]
async fn a_cancelled_running_jobs_late_writes_change_nothing() {
    let db = TestDb::new().await;
    let admin = Admin::new(db.pool.clone());
    let id = enqueue_id(&db, "g").await;
    let owned = claim(&db, "g", 1).await;
    let r = admin
        .cancel(JobSelection::Ids(&[id]), "alice", Some("stuck"), |_| {})
        .await
        .unwrap();
    assert_eq!((r.cancelled, r.running.clone()), (1, vec![id]));
    let before = admin.job(id).await.unwrap().unwrap();
    assert_eq!(
        before.locked_by.as_deref(),
        Some("test-worker"),
        "the worker that ran it is kept"
    );

    let mut conn = db.connect().await;
    let beat = store::job_heartbeat(&mut conn, Duration::from_secs(60), &owned)
        .await
        .unwrap();
    assert_eq!(
        (beat.done, beat.lost.clone(), beat.cancelled.clone()),
        (0, vec![], owned.clone()),
        "the heartbeat says cancelled, not lost"
    );
    let done = store::job_complete_many(&mut conn, &owned).await.unwrap();
    assert_eq!((done.done, done.cancelled.clone()), (0, owned.clone()));
    let written = store::job_finish_attempt_logged(
        &mut conn,
        &owned[0],
        &Outcome::Fail,
        "late failure",
        Some(&log(1, "fail", 20)),
    )
    .await
    .unwrap();
    assert_eq!(written, Written::Cancelled);
    let released = store::job_release(&mut conn, &owned).await.unwrap();
    assert_eq!(released.cancelled, owned);
    assert_eq!(attempt_rows(&db, id).await, 0, "no attempt recorded");

    let after = admin.job(id).await.unwrap().unwrap();
    assert_eq!(after.state, JobState::Cancelled);
    assert_eq!(after.finished_at, before.finished_at);
    assert_eq!(after.last_error, None);
    assert_eq!(after.attempts, 1);
    // Someone else's token is still "lost", not "cancelled".
    let stale = [Owned {
        id,
        token: mysqlq_tests::token(),
    }];
    let beat = store::job_heartbeat(&mut conn, Duration::from_secs(60), &stale)
        .await
        .unwrap();
    assert_eq!((beat.lost, beat.cancelled), (stale.to_vec(), vec![]));
}

#[tokio::test]
async fn a_running_handler_sees_the_cancel_through_its_context() {
    let db = TestDb::new().await;
    let admin = Admin::new(db.pool.clone());
    let heard = SeesCancels::default();
    let heard_list = heard.0.clone();
    let worker = db
        .worker()
        .queues(["cancel-run"])
        .hooks(Hooks::new().with(heard))
        .start()
        .await
        .unwrap();
    let mut events = worker.events();
    let id = WaitsForCancel {}.enqueue(&db.pool).await.unwrap().id();
    wait_event(&mut events, "the handler to start", EVENT_LIMIT, |e| {
        *e == WorkerEvent::Started { id }
    })
    .await;
    let r = admin
        .cancel(JobSelection::Ids(&[id]), "alice", None, |_| {})
        .await
        .unwrap();
    assert_eq!(r.running, vec![id]);
    wait_event(
        &mut events,
        "the worker to see the cancel",
        EVENT_LIMIT,
        |e| *e == WorkerEvent::CancelledByOperator { id },
    )
    .await;
    let ctx = CONTEXTS
        .lock()
        .unwrap()
        .iter()
        .find(|c| c.id() == id)
        .cloned()
        .expect("the handler ran");
    assert!(ctx.is_cancelled());
    assert_eq!(ctx.cancel_reason(), Some(CancelReason::Cancelled));
    assert_eq!(
        CancelReason::Cancelled.to_string(),
        "cancelled by an operator"
    );
    assert_eq!(
        worker.metrics().counters.snapshot().lost,
        0,
        "an operator's cancel is not a lost lease"
    );
    let report = worker.shutdown().await.unwrap();
    assert_eq!(
        report.released, 0,
        "nothing of the cancelled job is left to release"
    );
    assert_eq!(db.status(id.0).await.as_deref(), Some("cancelled"));
    assert_eq!(
        *heard_list.lock().unwrap(),
        vec![(id, "cancelled by an operator".to_owned())],
        "the worker's on_cancelled hook hears of the operator's cancel once"
    );
    let j = admin.job(id).await.unwrap().unwrap();
    assert_eq!(j.cancelled_by.as_deref(), Some("alice"));
    assert_eq!(attempt_rows(&db, id).await, 0);
}

// ---------------------------------------------------------------------------------------------
// keys

#[tokio::test]
async fn cancelling_the_holder_frees_its_dedupe_key() {
    let db = TestDb::new().await;
    let admin = Admin::new(db.pool.clone());
    let opts = EnqueueOptions::new().dedupe_key("report-42");
    let Enqueued::Inserted(holder) = enqueue(&db, "d", &opts).await else {
        panic!("the first job is inserted");
    };
    assert_eq!(enqueue(&db, "d", &opts).await, Enqueued::Duplicate(holder));
    admin
        .cancel(JobSelection::Ids(&[holder]), "ops", None, |_| {})
        .await
        .unwrap();
    let Enqueued::Inserted(next) = enqueue(&db, "d", &opts).await else {
        panic!("the key is free once its holder is cancelled");
    };
    assert_ne!(next, holder);
    // A running holder too.
    let owned = claim(&db, "d", 1).await;
    assert_eq!(owned[0].id, next);
    assert!(matches!(
        enqueue(&db, "d", &opts).await,
        Enqueued::Duplicate(_)
    ));
    admin
        .cancel(JobSelection::Ids(&[next]), "ops", None, |_| {})
        .await
        .unwrap();
    assert!(matches!(
        enqueue(&db, "d", &opts).await,
        Enqueued::Inserted(_)
    ));
}

#[tokio::test]
async fn cancelling_the_running_job_of_an_ordering_key_lets_the_next_run() {
    let db = TestDb::new().await;
    let admin = Admin::new(db.pool.clone());
    let opts = EnqueueOptions::new().ordering_key("account-7");
    let first = enqueue(&db, "o", &opts).await.id();
    let second = enqueue(&db, "o", &opts).await.id();
    let third = enqueue(&db, "o", &opts).await.id();
    let owned = claim(&db, "o", 10).await;
    assert_eq!(owned.iter().map(|o| o.id).collect::<Vec<_>>(), vec![first]);
    assert!(claim(&db, "o", 10).await.is_empty(), "the key is busy");
    admin
        .cancel(JobSelection::Ids(&[first]), "ops", None, |_| {})
        .await
        .unwrap();
    let next = claim(&db, "o", 10).await;
    assert_eq!(next.iter().map(|o| o.id).collect::<Vec<_>>(), vec![second]);
    // Cancelling a waiting job of the key skips it: the next one runs after `second`.
    admin
        .cancel(JobSelection::Ids(&[second]), "ops", None, |_| {})
        .await
        .unwrap();
    let last = claim(&db, "o", 10).await;
    assert_eq!(last.iter().map(|o| o.id).collect::<Vec<_>>(), vec![third]);
}

#[tokio::test]
async fn cancelling_a_running_job_frees_its_concurrency_slot() {
    let db = TestDb::new().await;
    let admin = Admin::new(db.pool.clone());
    let opts = EnqueueOptions::new().concurrency_limit("tenant-3", 1);
    let a = enqueue(&db, "cc", &opts).await.id();
    let b = enqueue(&db, "cc", &opts).await.id();
    let owned = claim(&db, "cc", 10).await;
    assert_eq!(owned.iter().map(|o| o.id).collect::<Vec<_>>(), vec![a]);
    assert!(claim(&db, "cc", 10).await.is_empty(), "the slot is taken");
    admin
        .cancel(JobSelection::Ids(&[a]), "ops", None, |_| {})
        .await
        .unwrap();
    let next = claim(&db, "cc", 10).await;
    assert_eq!(next.iter().map(|o| o.id).collect::<Vec<_>>(), vec![b]);
}

// ---------------------------------------------------------------------------------------------
// delete

#[tokio::test]
async fn delete_removes_any_job_but_a_running_one() {
    let db = TestDb::new().await;
    let admin = Admin::new(db.pool.clone());
    let pending = enqueue(&db, "x", &EnqueueOptions::new().dedupe_key("k"))
        .await
        .id();
    let failed = enqueue_id(&db, "f").await;
    let f = claim(&db, "f", 1).await;
    let mut conn = db.connect().await;
    store::job_finish_attempt_logged(
        &mut conn,
        &f[0],
        &Outcome::Fail,
        "bad",
        Some(&log(1, "fail", 20)),
    )
    .await
    .unwrap();
    assert_eq!(attempt_rows(&db, failed).await, 1);
    let running = enqueue_id(&db, "p").await;
    let p = claim(&db, "p", 1).await;
    let unknown = JobId(987_654_321);

    let r = admin
        .delete(&[pending, failed, running, unknown])
        .await
        .unwrap();
    assert_eq!(r.deleted, 2);
    assert_eq!(r.running, vec![running]);
    assert_eq!(r.unknown, vec![unknown]);
    assert!(admin.job(pending).await.unwrap().is_none());
    assert!(admin.job(failed).await.unwrap().is_none());
    assert_eq!(
        attempt_rows(&db, failed).await,
        0,
        "the history goes with its job"
    );
    assert_eq!(db.status(running.0).await.as_deref(), Some("processing"));
    assert!(
        matches!(
            enqueue(&db, "x", &EnqueueOptions::new().dedupe_key("k")).await,
            Enqueued::Inserted(_)
        ),
        "a deleted job's key is free"
    );
    // Cancel, then delete: the worker's late write is then "lost" (the row is gone).
    admin
        .cancel(JobSelection::Ids(&[running]), "ops", None, |_| {})
        .await
        .unwrap();
    assert_eq!(admin.delete(&[running]).await.unwrap().deleted, 1);
    let late = store::job_complete_many(&mut conn, &p).await.unwrap();
    assert_eq!((late.done, late.lost), (0, p.clone()));
}

// ---------------------------------------------------------------------------------------------
// attempt history

#[tokio::test]
async fn failed_attempts_are_kept_bounded_with_worker_and_times() {
    let db = TestDb::new().await;
    let admin = Admin::new(db.pool.clone());
    let worker = db
        .worker()
        .queues(["cancel-attempts"])
        .worker_id("attempts-worker")
        .attempt_history(3)
        .start()
        .await
        .unwrap();
    let mut events = worker.events();
    let id = FailsFast {}.enqueue(&db.pool).await.unwrap().id();
    wait_event(&mut events, "the job to fail for good", EVENT_LIMIT, |e| {
        *e == WorkerEvent::Recorded {
            id,
            outcome: "fail",
        }
    })
    .await;
    worker.shutdown().await.unwrap();

    let attempts = admin.attempts(id).await.unwrap();
    let summary: Vec<(u32, AttemptOutcome)> =
        attempts.iter().map(|a| (a.attempt, a.outcome)).collect();
    assert_eq!(
        summary,
        vec![
            (5, AttemptOutcome::Fail),
            (4, AttemptOutcome::Retry),
            (3, AttemptOutcome::Retry)
        ],
        "the newest 3 of 5, newest first"
    );
    assert_eq!(attempt_rows(&db, id).await, 3, "older rows are trimmed");
    for a in &attempts {
        assert_eq!(a.worker.as_deref(), Some("attempts-worker"));
        assert!(
            a.started_at.expect("a worker's attempt has a start") <= a.finished_at,
            "{a:?}"
        );
    }
    assert!(
        attempts[0].error.starts_with("boom 5"),
        "{}",
        attempts[0].error
    );
    assert!(!attempts[0].truncated);
    assert!(attempts[2].error.starts_with("boom 3"));
    let long = &attempts[1];
    assert!(long.truncated);
    assert!(long.error.len() <= store::MAX_ATTEMPT_ERROR_BYTES);
    assert!(long.error.starts_with("boom 4 é"));
    assert!(long.error.ends_with(store::TRUNCATED_MARK));
    assert!(long.error_bytes as usize > store::MAX_ATTEMPT_ERROR_BYTES);
    assert!(Some(attempts[1].finished_at) <= attempts[0].started_at);

    // Discarded with its job.
    let r = admin
        .discard_failed(mysqlq::admin::Selection::Ids(&[id]), |_| {})
        .await
        .unwrap();
    assert_eq!(r.discarded, 1);
    assert_eq!(attempt_rows(&db, id).await, 0);
    assert!(admin.attempts(id).await.unwrap().is_empty());
}

#[tokio::test]
async fn purge_deletes_the_history_with_its_jobs_and_keeps_the_rest() {
    let db = TestDb::new().await;
    let admin = Admin::new(db.pool.clone());
    let mut conn = db.connect().await;
    let mut failed = Vec::new();
    for _ in 0..3 {
        let id = enqueue_id(&db, "pr").await;
        let owned = claim(&db, "pr", 1).await;
        store::job_finish_attempt_logged(
            &mut conn,
            &owned[0],
            &Outcome::Fail,
            "bad",
            Some(&log(1, "fail", 20)),
        )
        .await
        .unwrap();
        failed.push(id);
    }
    // Two of them failed two days ago.
    sqlx::query(
        "UPDATE job_queue SET finished_at = UTC_TIMESTAMP(6) - INTERVAL 2 DAY WHERE id IN (?, ?)",
    )
    .bind(failed[0].0)
    .bind(failed[1].0)
    .execute(&db.pool)
    .await
    .unwrap();
    let n = admin
        .purge(JobState::Failed, Duration::from_secs(86_400), 1, |_| {})
        .await
        .unwrap();
    assert_eq!(n, 2, "batches of one, until none is left");
    assert_eq!(attempt_rows(&db, failed[0]).await, 0);
    assert_eq!(attempt_rows(&db, failed[1]).await, 0);
    assert_eq!(
        attempt_rows(&db, failed[2]).await,
        1,
        "a younger job keeps its history"
    );
    assert_eq!(db.status(failed[2].0).await.as_deref(), Some("failed"));
}

#[tokio::test]
async fn the_reaper_records_the_attempt_of_a_dead_worker() {
    let db = TestDb::new().await;
    let admin = Admin::new(db.pool.clone());
    let again = enqueue_id(&db, "reap").await;
    let last = enqueue(&db, "reap", &EnqueueOptions::new().max_attempts(1))
        .await
        .id();
    let owned = claim(&db, "reap", 10).await;
    assert_eq!(owned.len(), 2);
    // Both leases ran out (the worker died).
    sqlx::query(
        "UPDATE job_queue SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND \
         WHERE status = 'processing'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut conn = db.connect().await;
    let r = store::job_reap_expired(&mut conn, 100).await.unwrap();
    assert_eq!((r.retried, r.failed), (1, 1));
    for (id, outcome) in [(again, AttemptOutcome::Retry), (last, AttemptOutcome::Fail)] {
        let attempts = admin.attempts(id).await.unwrap();
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        let a = &attempts[0];
        assert_eq!((a.attempt, a.outcome), (1, outcome));
        assert_eq!(a.worker.as_deref(), Some("test-worker"));
        assert_eq!(a.started_at, None, "the start died with the worker");
        assert!(
            a.error.contains("lease expired while held by test-worker"),
            "{}",
            a.error
        );
        assert!(!a.truncated);
    }
    // Nothing left to reap: nothing recorded twice.
    let r = store::job_reap_expired(&mut conn, 100).await.unwrap();
    assert_eq!((r.retried, r.failed), (0, 0));
    assert_eq!(
        attempt_rows(&db, again).await + attempt_rows(&db, last).await,
        2
    );
}

#[tokio::test]
async fn an_attempt_is_recorded_only_with_its_outcome() {
    let db = TestDb::new().await;
    let id = enqueue_id(&db, "t").await;
    let owned = claim(&db, "t", 1).await;
    let mut conn = db.connect().await;
    let stale = Owned {
        id,
        token: mysqlq_tests::token(),
    };
    let retry = Outcome::Retry {
        delay: Duration::from_secs(60),
    };
    let w = store::job_finish_attempt_logged(
        &mut conn,
        &stale,
        &retry,
        "x",
        Some(&log(1, "retry", 20)),
    )
    .await
    .unwrap();
    assert_eq!(w, Written::Lost);
    assert_eq!(
        attempt_rows(&db, id).await,
        0,
        "a lost write records nothing"
    );
    let w = store::job_finish_attempt_logged(
        &mut conn,
        &owned[0],
        &retry,
        "503",
        Some(&log(1, "retry", 20)),
    )
    .await
    .unwrap();
    assert_eq!(w, Written::Now);
    // The same write again (its COMMIT reply lost): recognised, not recorded twice.
    let w = store::job_finish_attempt_logged(
        &mut conn,
        &owned[0],
        &retry,
        "503",
        Some(&log(1, "retry", 20)),
    )
    .await
    .unwrap();
    assert_eq!(w, Written::Already);
    assert_eq!(attempt_rows(&db, id).await, 1);
}

#[tokio::test]
async fn migration_4_runs_again_without_error() {
    let db = TestDb::new().await;
    sqlx::query("DELETE FROM mysqlq_migrations WHERE version = 4")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        mysqlq::migrate(&db.pool).await.unwrap(),
        mysqlq::SCHEMA_VERSION
    );
    let mut conn = db.connect().await;
    assert_eq!(
        mysqlq::schema_version(&mut conn).await.unwrap(),
        mysqlq::SCHEMA_VERSION
    );
    let (again,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM mysqlq_migrations WHERE version = 4")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(again, 1, "migration 4 ran again and was recorded");
}

// ---------------------------------------------------------------------------------------------
// the CLI, in a real process

fn run(url: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("DATABASE_URL", url)
        .env("USER", "tester")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("spawn mysqlq-test-worker")
}

fn ok(url: &str, args: &[&str]) -> String {
    let o = run(url, args);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{args:?}: {}\n{out}{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn fails(url: &str, args: &[&str], code: i32) -> String {
    let o = run(url, args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("{args:?}: no error line in {err}"));
    assert!(line.contains("; "), "{line}");
    assert!(!err.contains("panicked"), "{err}");
    line.to_owned()
}

#[tokio::test]
async fn cli_cancels_deletes_and_shows_the_attempts() {
    let db = TestDb::new().await;
    let url = db.url();
    let a = enqueue_id(&db, "cli").await;
    let b = enqueue_id(&db, "cli").await;
    let other = enqueue_id(&db, "keep").await;

    let out = ok(
        &url,
        &[
            "cancel",
            &a.to_string(),
            "--reason",
            "typo in payload",
            "--by",
            "ops",
        ],
    );
    assert!(out.contains("cancelled 1 job\n"), "{out}");
    let j = Admin::new(db.pool.clone()).job(a).await.unwrap().unwrap();
    assert_eq!(
        (
            j.state,
            j.cancelled_by.as_deref(),
            j.cancel_reason.as_deref()
        ),
        (JobState::Cancelled, Some("ops"), Some("typo in payload"))
    );
    // A cancel by queue or kind confirms first: without a terminal it needs --yes.
    let filter = ["cancel", "--queue", "cli", "--kind", "noop"];
    let err = fails(&url, &filter, 2);
    assert!(
        err.contains("refusing to cancel 1 job (waiting and running) of queue `cli` and kind `noop` without confirmation")
            && err.contains("add --yes"),
        "{err}"
    );
    let out = ok(&url, &[&filter[..], &["--dry-run"]].concat());
    assert!(out.contains("dry run: would cancel 1 job"), "{out}");
    assert_eq!(
        db.status(b.0).await.as_deref(),
        Some("pending"),
        "nothing changed"
    );
    let out = ok(&url, &[&filter[..], &["--yes"]].concat());
    assert!(out.contains("cancelled 1 job\n"), "{out}");
    let j = Admin::new(db.pool.clone()).job(b).await.unwrap().unwrap();
    assert_eq!(j.cancelled_by.as_deref(), Some("cli:tester"));
    assert_eq!(db.status(other.0).await.as_deref(), Some("pending"));

    let err = fails(&url, &["cancel", &a.to_string()], 1);
    assert!(err.contains("no job was cancelled"), "{err}");
    let err = fails(&url, &["cancel"], 2);
    assert!(err.contains("required"), "{err}");
    let err = fails(&url, &["cancel", "1", "--queue", "cli"], 2);
    assert!(err.contains("cannot be used with"), "{err}");

    // failed show: the attempt history.
    let f = enqueue_id(&db, "fs").await;
    let owned = claim(&db, "fs", 1).await;
    let mut conn = db.connect().await;
    store::job_finish_attempt_logged(
        &mut conn,
        &owned[0],
        &Outcome::Fail,
        "smtp said 550\nmailbox unavailable",
        Some(&log(1, "fail", 20)),
    )
    .await
    .unwrap();
    let out = ok(&url, &["failed", "show", &f.to_string()]);
    assert!(out.contains("attempts (newest first):"), "{out}");
    assert!(out.contains("#1 fail at "), "{out}");
    assert!(out.contains("on test-worker"), "{out}");
    assert!(
        out.contains("    smtp said 550\n    mailbox unavailable"),
        "{out}"
    );
    let out = ok(&url, &["failed", "show", &a.to_string()]);
    assert!(out.contains("cancelled by: ops"), "{out}");
    assert!(
        out.contains("operator actions (newest first):")
            && out.contains(" cancel by ops: typo in payload"),
        "{out}"
    );
    // The audit trail names both cancels, with who and how many jobs each changed.
    let listed = ok(&url, &["audit", "--json"]);
    let trail: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let trail: Vec<(String, String, u64)> = trail
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap().to_owned(),
                r["actor"].as_str().unwrap().to_owned(),
                r["jobs"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        trail,
        [
            ("cancel".to_owned(), "cli:tester".to_owned(), 0),
            ("cancel".to_owned(), "cli:tester".to_owned(), 1),
            ("cancel".to_owned(), "ops".to_owned(), 1)
        ],
        "newest first: the cancel of a job already cancelled is on record with no job changed; \
         the refused and the dry-run cancels are not"
    );
    assert!(out.contains("attempts: none recorded"), "{out}");
    let json = ok(&url, &["failed", "show", &f.to_string(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["attempt_history"][0]["outcome"], "fail");

    let two = ["delete", &a.to_string(), &f.to_string()].map(|s| s.to_owned());
    let two: Vec<&str> = two.iter().map(String::as_str).collect();
    let err = fails(&url, &two, 2);
    assert!(err.contains("refusing to delete 2 jobs"), "{err}");
    let out = ok(&url, &[&two[..], &["--yes", "--by", "alice"]].concat());
    assert!(out.contains("deleted 2 jobs"), "{out}");
    let out = ok(&url, &["audit", "--job", &a.to_string()]);
    assert!(
        out.contains("delete") && out.contains("alice") && out.contains("cancel"),
        "{out}"
    );
    let running = enqueue_id(&db, "run").await;
    claim(&db, "run", 1).await;
    let err = fails(&url, &["delete", &running.to_string()], 1);
    assert!(err.contains("no job was deleted"), "{err}");
    assert_eq!(db.status(running.0).await.as_deref(), Some("processing"));
}

// ---------------------------------------------------------------------------------------------
// the dashboard, over HTTP

#[tokio::test]
async fn dashboard_cancels_and_deletes_with_the_csrf_token() {
    let db = TestDb::new().await;
    let a = enqueue_id(&db, "web").await;
    let b = enqueue_id(&db, "web").await;
    let app = router(db.pool.clone(), DashboardOptions::new());
    let addr: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let get = |path: String, cookie: Option<String>| {
        let app = app.clone();
        async move {
            let headers: Vec<(&str, &str)> = match &cookie {
                Some(c) => vec![("Cookie", c.as_str())],
                None => vec![],
            };
            send(&app, request(addr, "GET", &path, &headers, None)).await
        }
    };
    let page = get(format!("/jobs/{a}"), None).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains(r#"id="cancel""#), "{}", page.body);
    assert!(page.body.contains("no failed attempts recorded"));
    let cookie = page.cookie("mysqlq_session").expect("a session cookie");
    let token = page
        .body
        .split(r#"name="mysqlq_csrf" value=""#)
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a CSRF field")
        .to_owned();
    let post = |path: &'static str, form: String, cookie: String| {
        let app = app.clone();
        async move {
            let headers = [("Cookie", cookie.as_str())];
            send(
                &app,
                request(
                    addr,
                    "POST",
                    path,
                    &headers,
                    Some(("application/x-www-form-urlencoded", &form)),
                ),
            )
            .await
        }
    };
    // Without the token: refused, nothing changes.
    let r = post(
        "/jobs/cancel",
        format!("only={a}&mysqlq_csrf=forged"),
        cookie.clone(),
    )
    .await;
    assert_eq!(r.status, 403);
    assert_eq!(db.status(a.0).await.as_deref(), Some("pending"));
    // From the job page, with a reason.
    let r = post(
        "/jobs/cancel",
        format!("only={a}&from=job&reason=wrong+customer&mysqlq_csrf={token}"),
        cookie.clone(),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let to = r.header("location").unwrap().to_owned();
    assert!(
        to.starts_with(&format!("/jobs/{a}?msg=cancelled+1")),
        "{to}"
    );
    let j = Admin::new(db.pool.clone()).job(a).await.unwrap().unwrap();
    assert_eq!(
        (j.cancelled_by.as_deref(), j.cancel_reason.as_deref()),
        (Some("dashboard"), Some("wrong customer"))
    );
    let page = get(format!("/jobs/{a}"), Some(cookie.clone())).await;
    assert!(page.body.contains("wrong customer"));
    assert!(
        !page.body.contains(r#"id="cancel""#),
        "a cancelled job has no cancel button"
    );
    // From the jobs list: the ticked rows.
    let list = get("/jobs?state=pending".to_owned(), Some(cookie.clone())).await;
    assert!(
        list.body.contains(&format!(r#"name="id" value="{b}""#)),
        "{}",
        list.body
    );
    let r = post(
        "/jobs/cancel",
        format!("id={b}&mysqlq_csrf={token}"),
        cookie.clone(),
    )
    .await;
    assert_eq!(r.status, 303);
    assert!(
        r.header("location")
            .unwrap()
            .starts_with("/jobs?msg=cancelled+1")
    );
    assert_eq!(db.status(b.0).await.as_deref(), Some("cancelled"));
    // Delete from the job page; a running job is refused.
    let r = post(
        "/jobs/delete",
        format!("only={a}&mysqlq_csrf={token}"),
        cookie.clone(),
    )
    .await;
    assert_eq!(r.status, 303);
    assert!(Admin::new(db.pool.clone()).job(a).await.unwrap().is_none());
    let running = enqueue_id(&db, "web-run").await;
    claim(&db, "web-run", 1).await;
    let r = post(
        "/jobs/delete",
        format!("only={running}&mysqlq_csrf={token}"),
        cookie.clone(),
    )
    .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("cancel it first"));
    // Read-only: no buttons, and the POST is refused.
    let ro = router(db.pool.clone(), DashboardOptions::new().read_only(true));
    let page = send(
        &ro,
        request(addr, "GET", &format!("/jobs/{running}"), &[], None),
    )
    .await;
    assert!(!page.body.contains(r#"id="cancel""#));
    let r = send(
        &ro,
        request(
            addr,
            "POST",
            "/jobs/cancel",
            &[],
            Some((
                "application/x-www-form-urlencoded",
                &format!("only={running}"),
            )),
        ),
    )
    .await;
    assert_eq!(r.status, 403);
    assert_eq!(db.status(running.0).await.as_deref(), Some("processing"));
}

/// `n` pending jobs of queue `held` (no worker serves it), in id order, among 10,000 jobs of
/// queue `filler`: on a table of only the held jobs the server reads 500 ids of 600 by a full
/// scan, which locks every row, so the first transaction would meet the held row.
async fn enqueue_held(db: &TestDb, n: usize) -> Vec<JobId> {
    let filler = (0..10_000)
        .map(|_| NewJob::new("noop", "filler", &json!({"n": 1}), &EnqueueOptions::new()).unwrap());
    mysqlq::enqueue_many(&db.pool, filler).await.unwrap();
    let jobs = (0..n)
        .map(|_| NewJob::new("noop", "held", &json!({"n": 1}), &EnqueueOptions::new()).unwrap());
    let mut ids: Vec<JobId> = mysqlq::enqueue_many(&db.pool, jobs)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id())
        .collect();
    ids.sort_unstable();
    ids
}

/// Holds job row `hold` in a transaction made heavy (it has written `weight` rows, so InnoDB
/// picks the other side of a deadlock as its victim), waits until `bulk` is waiting for that
/// row, then asks for row `grab`, which `bulk` has locked already: a deadlock, which `bulk`'s
/// transaction loses. Returns when the deadlock is over; `bulk`'s result is its own.
async fn lose_a_deadlock<T>(
    db: &TestDb,
    hold: JobId,
    grab: JobId,
    bulk: impl std::future::Future<Output = T> + Send + 'static,
) -> T
where
    T: Send + 'static,
{
    sqlx::query("CREATE TABLE weight (id INT PRIMARY KEY, v INT NOT NULL)")
        .execute(&db.pool)
        .await
        .unwrap();
    let rows: Vec<String> = (1..=3000).map(|i| format!("({i}, 0)")).collect();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO weight (id, v) VALUES {}",
        rows.join(", ")
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    let mut other = db.pool.begin().await.unwrap();
    sqlx::query("UPDATE weight SET v = v + 1")
        .execute(&mut *other)
        .await
        .unwrap();
    sqlx::query("SELECT id FROM job_queue WHERE id = ? FOR UPDATE")
        .bind(hold.0)
        .execute(&mut *other)
        .await
        .unwrap();
    let bulk = tokio::spawn(bulk);
    // Its locking read of the second 500 ids has waited a second: it holds ids below `hold`
    // (the first transaction's read never takes that long).
    db.wait_for(
        "the bulk action waiting for the held row",
        "SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE() \
         AND id <> CONNECTION_ID() AND time >= 1 AND info LIKE '%mysqlq:job\\_%\\_lock%'",
        Duration::from_secs(20),
    )
    .await;
    // The case under test: the first transaction committed, the second is the one that waits.
    let committed = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE queue_name = 'held' AND status <> 'pending'")
        .await
        + 600
        - db.scalar("SELECT COUNT(*) FROM job_queue WHERE queue_name = 'held'")
            .await;
    assert_eq!(
        committed, 500,
        "the bulk action's first transaction had not committed when the second waited"
    );
    let grabbed = sqlx::query("SELECT id FROM job_queue WHERE id = ? FOR UPDATE")
        .bind(grab.0)
        .execute(&mut *other)
        .await;
    assert!(
        grabbed.is_ok(),
        "the deadlock's victim was the heavy transaction, not the bulk action: {grabbed:?}"
    );
    other.rollback().await.unwrap();
    bulk.await.unwrap()
}

/// A bulk cancel writes 500 jobs per transaction. One that lost a deadlock in its second
/// transaction was retried from its first id: the first 500, cancelled and committed already,
/// were then "not cancellable" and went uncounted (seen with workers running: "the report counts
/// each job once", 2,500 of 3,000). Only the transaction that failed runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_cancel_that_loses_a_deadlock_counts_every_job_once() {
    let db = TestDb::new().await;
    let ids = enqueue_held(&db, 600).await;
    let admin = Admin::new(db.pool.clone());
    let asked = ids.clone();
    let report = lose_a_deadlock(&db, ids[599], ids[500], async move {
        admin
            .cancel(JobSelection::Ids(&asked), "ops", Some("deadlock"), |_| {})
            .await
    })
    .await
    .unwrap();
    assert_eq!(
        (report.cancelled, report.not_cancellable.len()),
        (600, 0),
        "every job counted once, none called not cancellable"
    );
    assert_eq!(db.count("cancelled").await, 600);
    assert_eq!(
        db.scalar("SELECT CAST(SUM(jobs) AS SIGNED) FROM mysqlq_audit WHERE action = 'cancel'")
            .await,
        600
    );
}

/// The same for a bulk delete: a retry from the first id found the first 500 gone and called
/// them unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_delete_that_loses_a_deadlock_counts_every_job_once() {
    let db = TestDb::new().await;
    let ids = enqueue_held(&db, 600).await;
    let admin = Admin::new(db.pool.clone());
    let asked = ids.clone();
    let report = lose_a_deadlock(&db, ids[599], ids[500], async move {
        admin.delete(&asked).await
    })
    .await
    .unwrap();
    assert_eq!(
        (report.deleted, report.unknown.len()),
        (600, 0),
        "every job counted once, none called unknown"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM job_queue WHERE queue_name = 'held'")
            .await,
        0
    );
}
