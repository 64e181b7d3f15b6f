//! Workers that delete completed jobs (`WorkerBuilder::delete_completed`, "no history"): what
//! they delete and what they keep (failed and cancelled jobs, workflow steps, dedupe keys held
//! for a window), the counts (metrics, per-minute statistics, latency histograms) equal to the
//! jobs run, and a deleting completion whose COMMIT reply was lost recognised as this worker's
//! own and counted once — written alone, carried by a claim, and in the store — while a row
//! another worker deleted stays a lost claim.

use std::sync::OnceLock;
use std::time::Duration;

use mysqlq::store::{self, ClaimParams, Completing, Deleting, Owned};
use mysqlq::workflow::Workflow;
use mysqlq::{EnqueueOptions, Enqueued, Job, JobContext, JobError, WorkerEvent};
use mysqlq_tests::TestDb;
use mysqlq_tests::jobs::{Ends, Noop, Panicker, Permanent, PlainNoop, Snoozer, record};
use mysqlq_tests::torture::fault_proxy::{ProxyEvent, through_link};

#[path = "harness/claim.rs"]
mod claim;
use claim::{claim, owned};

/// Every event `pick` names, until the channel is drained.
fn drain_events(
    rx: &mut tokio::sync::broadcast::Receiver<WorkerEvent>,
    pick: impl Fn(&WorkerEvent) -> bool,
) -> Vec<WorkerEvent> {
    let mut out = Vec::new();
    loop {
        match rx.try_recv() {
            Ok(e) if pick(&e) => out.push(e),
            Ok(_) | Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(_) => return out,
        }
    }
}

fn completed_or_lost(e: &WorkerEvent) -> bool {
    matches!(
        e,
        WorkerEvent::Completed { .. } | WorkerEvent::LeaseLost { .. }
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_deleting_completed_jobs_keeps_failed_cancelled_steps_and_held_keys() {
    let db = TestDb::new().await;
    let plain = 40u64;
    for n in 0..plain {
        Noop { n }.enqueue(&db.pool).await.unwrap();
    }
    // Attempts that did not complete before the one that did: their history goes with the row.
    let panicked = Panicker {}.enqueue(&db.pool).await.unwrap().id();
    let snoozed = Snoozer {}.enqueue(&db.pool).await.unwrap().id();
    let failed = Permanent {}.enqueue(&db.pool).await.unwrap().id();
    let cancelled = Ends {
        how: "cancel".into(),
    }
    .enqueue(&db.pool)
    .await
    .unwrap()
    .id();
    let held = EnqueueOptions::new()
        .dedupe_key("digest:held")
        .dedupe_window(Duration::from_secs(600));
    let freed = EnqueueOptions::new().dedupe_key("digest:freed");
    let holder = Noop { n: 100 }
        .enqueue_with(&db.pool, &held)
        .await
        .unwrap()
        .id();
    Noop { n: 101 }
        .enqueue_with(&db.pool, &freed)
        .await
        .unwrap();
    let wf = Workflow::new("kept")
        .step("a", Noop { n: 200 })
        .unwrap()
        .step_after("b", Noop { n: 201 }, ["a"])
        .unwrap()
        .step_after("c", Noop { n: 202 }, ["b"])
        .unwrap()
        .enqueue(&db.pool)
        .await
        .unwrap();
    // Every job that ends completed: the plain ones, the retried and snoozed ones, the two keyed
    // ones and the three steps.
    let completions = plain + 2 + 2 + 3;

    let worker = db
        .worker()
        .queues(["test", "ends"])
        .delete_completed(true)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "every job to end and the workflow to finish",
        "SELECT (SELECT COUNT(*) FROM job_queue \
           WHERE status IN ('waiting', 'pending', 'processing')) = 0 \
         AND NOT EXISTS (SELECT 1 FROM mysqlq_workflow WHERE state = 'running')",
        Duration::from_secs(60),
    )
    .await;
    // Counted after the shutdown: a completion's count follows its commit, which the database
    // shows first.
    let metrics = worker.metrics();
    worker.shutdown().await.unwrap();
    let counters = metrics.counters.snapshot();

    // Kept: the failed and cancelled jobs, the key held for its window, the workflow's steps.
    let rows: Vec<(u64, String)> =
        sqlx::query_as("SELECT id, CAST(status AS CHAR) FROM job_queue ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let steps: Vec<u64> = sqlx::query_scalar(
        "SELECT job_id FROM mysqlq_wf_step WHERE workflow_id = ? ORDER BY job_id",
    )
    .bind(wf.0)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut expected = vec![
        (failed.0, "failed".to_owned()),
        (cancelled.0, "cancelled".to_owned()),
        (holder.0, "completed".to_owned()),
    ];
    expected.extend(steps.iter().map(|&id| (id, "completed".to_owned())));
    expected.sort();
    assert_eq!(rows, expected, "only the kept rows are left");
    assert_eq!(steps.len(), 3);
    // The window's key is still held; the key without a window was freed with its row.
    assert_eq!(
        Noop { n: 102 }.enqueue_with(&db.pool, &held).await.unwrap(),
        Enqueued::Duplicate(holder)
    );
    assert!(matches!(
        Noop { n: 103 }
            .enqueue_with(&db.pool, &freed)
            .await
            .unwrap(),
        Enqueued::Inserted(_)
    ));
    // The retried and snoozed jobs had history; it went with their rows. The failed and
    // cancelled jobs keep theirs.
    assert!(db.status(panicked.0).await.is_none() && db.status(snoozed.0).await.is_none());
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM mysqlq_job_attempt a WHERE NOT EXISTS \
             (SELECT 1 FROM job_queue j WHERE j.id = a.job_id)"
        )
        .await,
        0,
        "no history left of a deleted job"
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(DISTINCT job_id) FROM mysqlq_job_attempt WHERE job_id IN ({}, {})",
            failed.0, cancelled.0
        ))
        .await,
        2
    );
    // Each job ran to its `done` once.
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM test_runs WHERE tag = 'noop'")
            .await,
        i64::try_from(plain + 2 + 3).unwrap()
    );
    // The counts: the worker's metrics, its per-minute statistics (flushed at shutdown) and
    // the latency histograms each count every completion once.
    assert_eq!(counters.completions, completions);
    assert_eq!(counters.lost, 0);
    assert_eq!(
        db.scalar("SELECT CAST(SUM(completions) AS SIGNED) FROM mysqlq_stats_minute")
            .await,
        i64::try_from(completions).unwrap()
    );
    assert_eq!(
        db.scalar(
            "SELECT CAST(SUM(n) AS SIGNED) FROM mysqlq_run_minute WHERE series = 'completed'"
        )
        .await,
        i64::try_from(completions).unwrap()
    );
    // The worker deleted its receipts once their writes were known.
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_completion_receipt")
            .await,
        0
    );
}

/// The gates of [`gated`] jobs, one per test: `true` lets their jobs return.
fn gate(i: usize) -> &'static tokio::sync::watch::Sender<bool> {
    static GATES: OnceLock<Vec<tokio::sync::watch::Sender<bool>>> = OnceLock::new();
    &GATES.get_or_init(|| {
        (0..4)
            .map(|_| tokio::sync::watch::channel(false).0)
            .collect()
    })[i]
}

/// Records its start, waits for [`gate`] `gate` (none: 0), records `done`.
#[mysqlq::job(queue = "gated", retries = 0)]
async fn gated(ctx: JobContext, gate: usize) -> Result<(), JobError> {
    record(&ctx, "gated", "start").await?;
    if gate > 0 {
        let mut open = self::gate(gate).subscribe();
        open.wait_for(|&o| o).await.map_err(JobError::fail)?;
    }
    record(&ctx, "gated", "done").await
}

/// A worker deleting completed jobs on a pool through a proxy link, quiet but for claims and
/// completions while the test runs — no heartbeat, statistics flush or pruner (another process
/// holds the leader lease) —, so that the link's next `COMMIT` is a claim's or a completion's.
async fn quiet_worker(
    db: &TestDb,
    pool: sqlx::MySqlPool,
    poll_floor: Duration,
) -> mysqlq::WorkerHandle {
    db.exec(
        "UPDATE mysqlq_leader SET leader_id = 'elsewhere', \
         expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 DAY",
    )
    .await;
    mysqlq::Worker::builder(pool)
        .queues(["gated"])
        .delete_completed(true)
        .claimers(1)
        .poll_interval(poll_floor, poll_floor.max(Duration::from_millis(100)))
        .lease(Duration::from_secs(60))
        .heartbeat_interval(Duration::from_secs(50))
        .stats_interval(Duration::from_secs(3600))
        .maintenance(Duration::from_secs(3600), Duration::from_secs(7200))
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_whose_commit_reply_was_lost_is_counted_once() {
    let db = TestDb::new().await;
    let (link, pool) = through_link(&db, 10).await;
    let worker = quiet_worker(&db, pool, Duration::from_millis(5)).await;
    let mut events = worker.events();
    let id = Gated { gate: 1 }.enqueue(&db.pool).await.unwrap().id();
    db.wait_for(
        "the handler to start",
        &format!(
            "SELECT COUNT(*) FROM test_runs WHERE job_id = {} AND event = 'start'",
            id.0
        ),
        Duration::from_secs(10),
    )
    .await;
    // The next COMMIT on the link is the completion's own (no claim carries it: the queue is
    // empty): committed, its reply lost.
    link.lose_commit_replies(1);
    gate(1).send_replace(true);
    mysqlq_tests::wait_event(
        &mut events,
        "the completion",
        Duration::from_secs(30),
        |e| matches!(e, WorkerEvent::Completed { id: done } if *done == id),
    )
    .await;
    // Counted after the shutdown: a completion's count follows its commit, which the database
    // shows first.
    let metrics = worker.metrics();
    worker.shutdown().await.unwrap();
    let counters = metrics.counters.snapshot();
    assert!(matches!(
        link.events().as_slice(),
        [ProxyEvent::CommitReplyLost { .. }]
    ));
    assert_eq!(db.status(id.0).await, None, "deleted");
    assert_eq!(
        (counters.completions, counters.lost),
        (1, 0),
        "counted once, not as lost"
    );
    assert!(
        drain_events(&mut events, completed_or_lost).is_empty(),
        "one completion event, no lost lease"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_completion_receipt")
            .await,
        0,
        "the receipt is deleted once the retry knew the outcome"
    );
    link.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_carried_by_a_claim_whose_commit_reply_was_lost_is_counted_once() {
    let db = TestDb::new().await;
    let (link, pool) = through_link(&db, 10).await;
    // Completions wait two poll floors (1 s) for a claim to carry them.
    let worker = quiet_worker(&db, pool, Duration::from_millis(500)).await;
    let mut events = worker.events();
    let first = Gated { gate: 2 }.enqueue(&db.pool).await.unwrap().id();
    mysqlq_tests::wait_event(
        &mut events,
        "the first start",
        Duration::from_secs(10),
        |e| matches!(e, WorkerEvent::Started { id } if *id == first),
    )
    .await;
    gate(2).send_replace(true);
    mysqlq_tests::wait_event(
        &mut events,
        "the first return",
        Duration::from_secs(10),
        |e| matches!(e, WorkerEvent::Returned { id } if *id == first),
    )
    .await;
    // Its completion waits for a claim; this enqueue wakes one, which carries it: that claim's
    // COMMIT happens, its reply is lost.
    link.lose_commit_replies(1);
    let second = Gated { gate: 0 }.enqueue(&db.pool).await.unwrap().id();
    mysqlq_tests::wait_event(
        &mut events,
        "the claim resolved",
        Duration::from_secs(30),
        |e| matches!(e, WorkerEvent::ClaimAdopted { jobs: 1 }),
    )
    .await;
    let mut done = Vec::new();
    while done.len() < 2 {
        let e = mysqlq_tests::wait_event(
            &mut events,
            "both completions",
            Duration::from_secs(30),
            completed_or_lost,
        )
        .await;
        done.push(e);
    }
    // Counted after the shutdown: a completion's count follows its commit, which the database
    // shows first.
    let metrics = worker.metrics();
    worker.shutdown().await.unwrap();
    let counters = metrics.counters.snapshot();
    assert!(
        done.iter()
            .all(|e| matches!(e, WorkerEvent::Completed { id } if *id == first || *id == second)),
        "{done:?}"
    );
    assert!(matches!(
        link.events().as_slice(),
        [ProxyEvent::CommitReplyLost { .. }]
    ));
    assert_eq!(
        (counters.completions, counters.lost),
        (2, 0),
        "each counted once, none as lost"
    );
    assert_eq!(db.status(first.0).await, None);
    assert_eq!(db.status(second.0).await, None);
    assert!(drain_events(&mut events, completed_or_lost).is_empty());
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM mysqlq_completion_receipt")
            .await,
        0,
        "the claim's receipt too, once the write that read it was known"
    );
    link.close();
}

/// A deleting write of `jobs` under a fresh receipt, with `earlier` receipts.
fn deleting(earlier: Vec<(Owned, String)>) -> Deleting {
    Deleting {
        receipt: mysqlq_tests::token(),
        earlier,
    }
}

#[tokio::test]
async fn the_store_tells_its_own_lost_deletion_from_a_row_another_worker_deleted() {
    let db = TestDb::new().await;
    for n in 0..4 {
        PlainNoop { n }.enqueue(&db.pool).await.unwrap();
    }
    let holder = PlainNoop { n: 9 }
        .enqueue_with(
            &db.pool,
            &EnqueueOptions::new()
                .dedupe_key("held")
                .dedupe_window(Duration::from_secs(600)),
        )
        .await
        .unwrap()
        .id();
    let (token, jobs) = claim(&db, "test", 10, Duration::from_secs(60)).await;
    let ours = owned(&token, &jobs);
    assert_eq!(ours.len(), 5);
    // Written through a link that loses the COMMIT's reply: committed, outcome unknown here.
    let (link, pool) = through_link(&db, 1).await;
    link.lose_commit_replies(1);
    let first = deleting(Vec::new());
    let mut conn = pool.acquire().await.unwrap();
    let lost_reply = store::job_complete(
        &mut conn,
        &Completing {
            jobs: &ours,
            delete: Some(&first),
        },
    )
    .await;
    assert!(lost_reply.is_err(), "{lost_reply:?}");
    drop(conn);
    link.close();
    assert_eq!(db.count("completed").await, 1, "the held key's row is kept");
    assert_eq!(db.status(holder.0).await.as_deref(), Some("completed"));
    assert_eq!(db.scalar("SELECT COUNT(*) FROM job_queue").await, 1);

    // The retry of the same write: its own rows, by its receipt and by the token left on the
    // kept row; nothing written again, nothing lost.
    let mut conn = db.pool.acquire().await.unwrap();
    let again = store::job_complete(
        &mut conn,
        &Completing {
            jobs: &ours,
            delete: Some(&first),
        },
    )
    .await
    .unwrap();
    assert_eq!(again.done, 0);
    assert_eq!(again.settled.len(), 5, "{again:?}");
    assert!(again.lost.is_empty() && again.gone.is_empty(), "{again:?}");
    // A later write of them that knows the first only as an earlier write in doubt: the same.
    let doubt: Vec<(Owned, String)> = ours
        .iter()
        .map(|o| (o.clone(), first.receipt.clone()))
        .collect();
    let later = store::job_complete(
        &mut conn,
        &Completing {
            jobs: &ours,
            delete: Some(&deleting(doubt)),
        },
    )
    .await
    .unwrap();
    assert_eq!((later.done, later.settled.len()), (0, 5), "{later:?}");
    // Without that receipt the gone rows read as lost: nothing says this worker deleted them.
    let blind = store::job_complete(
        &mut conn,
        &Completing {
            jobs: &ours,
            delete: Some(&deleting(Vec::new())),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        (blind.settled.len(), blind.lost.len(), blind.gone.len()),
        (1, 4, 4)
    );
}

#[tokio::test]
async fn a_row_another_worker_completed_after_the_lease_ran_out_is_lost_not_counted() {
    let db = TestDb::new().await;
    let a = PlainNoop { n: 1 }.enqueue(&db.pool).await.unwrap().id();
    let b = PlainNoop { n: 2 }.enqueue(&db.pool).await.unwrap().id();
    let (stale, jobs) = claim(&db, "test", 10, Duration::from_secs(60)).await;
    let mine = owned(&stale, &jobs);
    assert_eq!(mine.len(), 2);
    // `a`'s lease runs out; the reaper takes it back; another worker claims and completes it,
    // deleting its row.
    db.exec(&format!(
        "UPDATE job_queue SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = {}",
        a.0
    ))
    .await;
    let mut conn = db.pool.acquire().await.unwrap();
    store::job_reap_expired(&mut conn, 100).await.unwrap();
    let (other, again) = claim(&db, "test", 10, Duration::from_secs(60)).await;
    assert_eq!(again.iter().map(|j| j.id).collect::<Vec<_>>(), [a]);
    let theirs = store::job_complete(
        &mut conn,
        &Completing {
            jobs: &owned(&other, &again),
            delete: Some(&deleting(Vec::new())),
        },
    )
    .await
    .unwrap();
    assert_eq!(theirs.done, 1);
    // The stale claim's completion, with an earlier write of its own in doubt that never
    // committed (its receipt does not exist): `b` is written, `a` is lost — and gone.
    let doubt = vec![(mine[0].clone(), mysqlq_tests::token())];
    let report = store::job_complete(
        &mut conn,
        &Completing {
            jobs: &mine,
            delete: Some(&deleting(doubt)),
        },
    )
    .await
    .unwrap();
    assert_eq!(report.done, 1);
    assert!(report.settled.is_empty(), "{report:?}");
    assert_eq!(report.lost.iter().map(|o| o.id).collect::<Vec<_>>(), [a]);
    assert_eq!(report.gone, report.lost);
    assert_eq!(db.status(b.0).await, None);
    // A heartbeat of the stale claim reads the same: lost, gone.
    let beat = store::job_heartbeat(&mut conn, Duration::from_secs(60), &mine[..1])
        .await
        .unwrap();
    assert_eq!((beat.lost.len(), beat.gone.len()), (1, 1));
    // A write naming a job twice is refused before anything is written.
    let twice = [mine[1].clone(), mine[1].clone()];
    assert!(
        store::job_complete(
            &mut conn,
            &Completing {
                jobs: &twice,
                delete: Some(&deleting(Vec::new())),
            },
        )
        .await
        .is_err()
    );
}

#[tokio::test]
async fn a_claim_carrying_a_deleting_completion_whose_commit_reply_was_lost() {
    let db = TestDb::new().await;
    for n in 0..3 {
        PlainNoop { n }.enqueue(&db.pool).await.unwrap();
    }
    let (token, jobs) = claim(&db, "test", 10, Duration::from_secs(60)).await;
    let ours = owned(&token, &jobs);
    let (link, pool) = through_link(&db, 1).await;
    link.lose_commit_replies(1);
    let carried = deleting(Vec::new());
    let next = mysqlq_tests::token();
    let mut conn = pool.acquire().await.unwrap();
    let failed = store::job_claim_completing(
        &mut conn,
        &ClaimParams {
            queue: "test",
            limit: 10,
            skip: 0,
            worker_id: "test-worker",
            token: &next,
            lease: Duration::from_secs(60),
        },
        &Completing {
            jobs: &ours,
            delete: Some(&carried),
        },
    )
    .await;
    assert!(failed.is_err());
    drop(conn);
    link.close();
    assert_eq!(db.scalar("SELECT COUNT(*) FROM job_queue").await, 0);
    // Written again alone, naming the claim's receipt as an earlier write in doubt.
    let doubt = ours
        .iter()
        .map(|o| (o.clone(), carried.receipt.clone()))
        .collect();
    let mut conn = db.pool.acquire().await.unwrap();
    let report = store::job_complete(
        &mut conn,
        &Completing {
            jobs: &ours,
            delete: Some(&deleting(doubt)),
        },
    )
    .await
    .unwrap();
    assert_eq!((report.done, report.settled.len()), (0, 3), "{report:?}");
    assert!(report.lost.is_empty());
    // Receipts are deleted by their worker, or pruned after a day.
    assert_eq!(
        store::receipt_delete(&mut conn, std::slice::from_ref(&carried.receipt))
            .await
            .unwrap(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heartbeats_racing_deleting_completions_report_no_lost_lease() {
    let db = TestDb::new().await;
    let n = 3000u64;
    let jobs: Vec<mysqlq::NewJob> = (0..n)
        .map(|n| mysqlq::NewJob::from_job(&Noop { n }, &EnqueueOptions::new()).unwrap())
        .collect();
    // A heartbeat every millisecond: many read rows a completion deleted a moment before the
    // worker learnt of it.
    let worker = db
        .worker()
        .delete_completed(true)
        .concurrency(32)
        .lease(Duration::from_secs(2))
        .heartbeat_interval(Duration::from_millis(1))
        .start()
        .await
        .unwrap();
    let mut events = worker.events();
    mysqlq::enqueue_many(&db.pool, jobs).await.unwrap();
    db.wait_for(
        "the queue to drain",
        "SELECT COUNT(*) = 0 FROM job_queue",
        Duration::from_secs(120),
    )
    .await;
    // Counted after the shutdown: a completion's count follows its commit, which the database
    // shows first.
    let metrics = worker.metrics();
    worker.shutdown().await.unwrap();
    let counters = metrics.counters.snapshot();
    let lost = drain_events(&mut events, |e| matches!(e, WorkerEvent::LeaseLost { .. }));
    assert_eq!(
        (counters.completions, counters.lost, lost.len()),
        (n, 0, 0),
        "every job completed once, no lease reported lost"
    );
}

#[tokio::test]
async fn over_redis_streams_a_deleting_worker_acknowledges_each_completion_once() {
    let db = TestDb::new().await;
    let r = mysqlq_tests::redis::TestRedis::shared();
    for n in 0..30 {
        Noop { n }.enqueue(&db.pool).await.unwrap();
    }
    let worker = db
        .worker()
        .concurrency(8)
        .delete_completed(true)
        .redis(r.connect().await)
        .start()
        .await
        .unwrap();
    db.wait_for(
        "every job done and deleted",
        "SELECT (SELECT COUNT(*) FROM test_runs WHERE event = 'done') = 30 \
         AND (SELECT COUNT(*) FROM job_queue) = 0",
        Duration::from_secs(30),
    )
    .await;
    let metrics = worker.metrics();
    worker.shutdown().await.unwrap();
    let done = mysqlq_tests::redis::runs(&db, "done").await;
    assert!(
        done.len() == 30 && done.iter().all(|(_, n)| *n == 1),
        "{done:?}"
    );
    // Every entry acknowledged and deleted once its row was.
    assert_eq!(r.len("test").await, 0, "the stream is empty");
    let c = metrics.counters.snapshot();
    assert_eq!((c.completions, c.lost), (30, 0));
}
