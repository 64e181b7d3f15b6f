//! Per-key admission in the claim, raced (issue 26): the claim takes at most the head of an
//! ordering key, and only while none of the key runs, whatever committed while it scanned;
//! a claim never waits for another claim's key (so a frozen claimer holding a key stalls nobody,
//! and the completions a claim carries are never held behind such a wait).

use std::time::{Duration, Instant};

use mysqlq::EnqueueOptions;
use mysqlq::store::ClaimedJob;
use mysqlq_tests::TestDb;
use mysqlq_tests::jobs::Sleepy;
use sqlx::Connection as _;

#[path = "harness/claim.rs"]
#[allow(dead_code)] // `owned` is for the files that write under a token
mod claim;
use claim::claim;

/// Blocker rows: pending jobs of queue `q` ahead of everything in claim order (priority -1)
/// whose ordering key `blocked` has a running head, so the claim's scan visits and skips each.
async fn slow_scan_blockers(db: &TestDb, n: usize) {
    db.exec(
        "INSERT INTO job_queue (queue_name, kind, payload, status, priority, ordering_key, claim_token, locked_by, lease_expires_at) \
         VALUES ('q', 'noop', '{}', 'processing', -1, 'blocked', 'x', 'elsewhere', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)",
    )
    .await;
    db.exec("CREATE TABLE digits (d INT PRIMARY KEY)").await;
    db.exec("INSERT INTO digits VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9)")
        .await;
    let mut left = n;
    while left > 0 {
        let chunk = left.min(10_000);
        db.exec(&format!(
            "INSERT INTO job_queue (queue_name, kind, payload, priority, ordering_key) \
             SELECT 'q', 'noop', '{{}}', -1, 'blocked' FROM digits a, digits b, digits c, digits d LIMIT {chunk}"
        ))
        .await;
        left -= chunk;
    }
}

/// Issue 26, violation 3: two jobs of one ordering key, committed while a claim's scan runs, were
/// both taken by that claim (its ordering subquery reads a snapshot from the statement's start,
/// which misses them, while its locking scan sees them) and ran at once. The claim must take the
/// key's head alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_takes_one_job_of_an_ordering_key_committed_while_it_scans() {
    let db = TestDb::new().await;
    slow_scan_blockers(&db, 60_000).await;
    let lease = Duration::from_secs(60);
    // How long a claim's scan takes here.
    let began = Instant::now();
    let (_, none) = claim(&db, "q", 10, lease).await;
    assert!(none.is_empty(), "the blockers are never claimed: {none:?}");
    let scan = began.elapsed();
    let mut in_window = 0;
    for trial in 0..24 {
        let pair = format!("k{trial}");
        // The pair is written first and committed just after the claim began: its scan then sees
        // the rows, while the snapshot of its subqueries, taken as it started, may not.
        let mut conn = db.connect().await;
        let mut tx = conn.begin().await.unwrap();
        for _ in 0..2 {
            sqlx::query(
                "INSERT INTO job_queue (queue_name, kind, payload, priority, ordering_key) VALUES ('q', 'noop', '{}', 0, ?)",
            )
            .bind(&pair)
            .execute(&mut *tx)
            .await
            .unwrap();
        }
        let mut claimer_conn = db.connect().await;
        let t0 = Instant::now();
        let claimer = tokio::spawn(async move {
            let token = mysqlq_tests::token();
            let jobs = mysqlq::store::job_claim(
                &mut claimer_conn,
                &mysqlq::store::ClaimParams {
                    queue: "q",
                    limit: 10,
                    skip: 0,
                    worker_id: "w",
                    token: &token,
                    lease: Duration::from_secs(60),
                },
            )
            .await
            .unwrap();
            (jobs, t0.elapsed())
        });
        let delay = Duration::from_micros(500 * (trial % 6));
        while t0.elapsed() < delay {
            std::hint::spin_loop();
        }
        tx.commit().await.unwrap();
        let committed = t0.elapsed();
        let (jobs, took): (Vec<ClaimedJob>, Duration) = claimer.await.unwrap();
        let ids: Vec<u64> = jobs.iter().map(|j| j.id.0).collect();
        assert!(
            ids.len() <= 1,
            "trial {trial}: one claim took {} jobs of ordering key `{pair}` at once: {ids:?} (scan {took:?})",
            ids.len()
        );
        // The pair committed while the claim ran, and the claim saw it.
        if !ids.is_empty() && committed < took {
            in_window += 1;
        }
        // Leave no job of this key behind for the next trial's claim.
        db.exec(&format!(
            "DELETE FROM job_queue WHERE ordering_key = '{pair}'"
        ))
        .await;
        if in_window >= 12 {
            break;
        }
    }
    assert!(
        in_window > 0,
        "no trial's claim saw the pair committed during its scan (scan {scan:?}): the test proved nothing"
    );
}

/// Issue 26, violation 2: a claim carried the completions of finished jobs into its transaction,
/// wrote them first, then waited (up to the lock wait timeout) for a concurrency key that another
/// transaction held — a frozen claimer, here a test transaction. The finished jobs' rows stayed
/// locked all that time, so their heartbeats waited behind it: their leases ran out on a healthy
/// worker and the reaper could take back jobs whose handlers had returned `Ok`. A claim must
/// never wait for another claim's key, and its completions must not sit behind anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_keep_their_lease_while_a_claim_meets_a_key_held_elsewhere() {
    let db = TestDb::new().await;
    db.exec("INSERT INTO mysqlq_concurrency (concurrency_key) VALUES ('k')")
        .await;
    let mut blocker = db.connect().await;
    let mut held = blocker.begin().await.unwrap();
    sqlx::query(
        "SELECT concurrency_key FROM mysqlq_concurrency WHERE concurrency_key = 'k' FOR UPDATE",
    )
    .execute(&mut *held)
    .await
    .unwrap();
    let lease = Duration::from_secs(1);
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(Sleepy { ms: 300 }.enqueue(&db.pool).await.unwrap().id());
    }
    let worker = db
        .worker()
        .concurrency(10)
        .lease(lease)
        .maintenance(Duration::from_millis(100), Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    db.wait_for(
        "jobs running",
        "SELECT COUNT(*) FROM test_runs WHERE event = 'start'",
        Duration::from_secs(30),
    )
    .await;
    // A job of the held key: every claim that meets it must pass it by.
    let keyed = Sleepy { ms: 10 }
        .enqueue_with(&db.pool, &EnqueueOptions::new().concurrency_limit("k", 1))
        .await
        .unwrap()
        .id();
    // Meanwhile no job of this healthy worker may sit `processing` past its lease.
    let watch = Instant::now();
    let mut worst = 0;
    while watch.elapsed() < lease * 4 {
        let expired = db
            .scalar(
                "SELECT COUNT(*) FROM job_queue WHERE status = 'processing' \
                 AND lease_expires_at < UTC_TIMESTAMP(6)",
            )
            .await;
        worst = worst.max(expired);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let done_while_held = db.count("completed").await;
    held.commit().await.unwrap();
    db.wait_for(
        "every job completed",
        "SELECT COUNT(*) = 21 FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(60),
    )
    .await;
    worker.shutdown().await.unwrap();
    assert_eq!(
        worst, 0,
        "jobs sat `processing` past their lease on a healthy worker while a claim met a key held elsewhere"
    );
    assert_eq!(
        done_while_held, 20,
        "the jobs of other keys completed while the key was held"
    );
    let reaped = db
        .scalar("SELECT COUNT(*) FROM job_queue WHERE attempts <> 1 OR last_error IS NOT NULL")
        .await;
    assert_eq!(reaped, 0, "no job was reaped or run twice");
    assert_eq!(db.status(keyed.0).await.as_deref(), Some("completed"));
}

/// Enqueues a `Sleepy { ms }` whose dedupe key (`slow-update`) is held until it starts, and holds
/// that key's index entry in a transaction (a covering, share-locked read: the job's row stays
/// free), so a claim takes the row but its UPDATE, which frees the key, waits until `tx` ends.
async fn hold_a_dedupe_entry(db: &TestDb, ms: u64) -> sqlx::Transaction<'static, sqlx::MySql> {
    let opts = EnqueueOptions::new()
        .dedupe_key("slow-update")
        .dedupe_scope(mysqlq::DedupeScope::UntilStarted);
    Sleepy { ms }.enqueue_with(&db.pool, &opts).await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let held: Vec<String> = sqlx::query_scalar(
        "SELECT dedupe_active FROM job_queue FORCE INDEX (uq_job_dedupe) \
         WHERE dedupe_active = 'slow-update' LOCK IN SHARE MODE",
    )
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    assert_eq!(held.len(), 1, "the key's index entry is held");
    tx
}

/// Issue 26, seen in a suite run after the tallies: a claim's UPDATE waited 2.9 s (a worker
/// SIGSTOPped inside its own claim held locks on index entries the UPDATE had to change), and the
/// lease it wrote counted from the statement's start — so the jobs reached their worker with their
/// 2 s lease already run out, and the reaper took them from a healthy worker before their handlers
/// started. Here another transaction holds a shared lock on the claimed job's dedupe key entry (a
/// covering read: the row itself stays free, so the claim's SELECT takes it); the claim's UPDATE
/// frees that key (`until started`), so it waits until the holder ends, 3 s later. The claim must
/// hand out the job with most of its lease still ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_update_waited_hands_out_the_jobs_with_their_whole_lease() {
    let db = TestDb::new().await;
    let tx = hold_a_dedupe_entry(&db, 1).await;
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        tx.rollback().await.unwrap();
    });
    let started = Instant::now();
    let (_, jobs) = claim(&db, "test", 10, Duration::from_secs(2)).await;
    let waited = started.elapsed();
    release.await.unwrap();
    assert_eq!(jobs.len(), 1, "the job was claimed");
    assert!(
        waited >= Duration::from_millis(2_500),
        "the claim did not wait for the held key entry ({waited:?}): this test shows nothing"
    );
    let left_ms = db
        .scalar(
            "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_expires_at) DIV 1000 \
             FROM job_queue WHERE status = 'processing'",
        )
        .await;
    assert!(
        left_ms >= 1_000,
        "the claim handed out a job whose 2 s lease has {left_ms} ms left (it waited {waited:?})"
    );
}

/// The same through a worker: its watchdog counts a lease from when the statement that wrote it
/// was sent, so after a slow claim it must count from the rewrite, not from the claim's start
/// (which would stop the job at once as if its lease had run out). The job runs once, on its
/// first attempt, and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_claim_waited_runs_the_job_on_its_first_attempt() {
    let db = TestDb::new().await;
    let tx = hold_a_dedupe_entry(&db, 300).await;
    let worker = db
        .worker()
        .lease(Duration::from_secs(2))
        .maintenance(Duration::from_millis(100), Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    tx.rollback().await.unwrap();
    db.wait_for(
        "the job completed",
        "SELECT COUNT(*) FROM job_queue WHERE status = 'completed'",
        Duration::from_secs(30),
    )
    .await;
    worker.shutdown().await.unwrap();
    let (attempts, starts) = (
        db.scalar("SELECT CAST(attempts AS SIGNED) FROM job_queue")
            .await,
        db.scalar("SELECT COUNT(*) FROM test_runs WHERE event = 'start'")
            .await,
    );
    assert_eq!(
        (attempts, starts),
        (1, 1),
        "the job ran once, on its first attempt (attempts, handler starts)"
    );
}
