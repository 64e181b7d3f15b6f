//! Dedupe keys held for a window after completion ("unique for 10 minutes"), and the "replace"
//! mode that updates a pending holder instead of refusing (debounce): single, bulk and
//! concurrent enqueuers, against the real server.

use std::time::Duration;

use mysqlq::{DedupeScope, EnqueueOptions, Enqueued, JobId, NewJob};
use mysqlq_tests::TestDb;
use mysqlq_tests::jobs::{Noop, Sleepy};

/// Runs a worker until `n` jobs are completed.
async fn drain(db: &TestDb, n: i64) {
    let w = db.worker().start().await.unwrap();
    db.wait_for(
        "completed",
        &format!("SELECT COUNT(*) = {n} FROM job_queue WHERE status = 'completed'"),
        Duration::from_secs(30),
    )
    .await;
    w.shutdown().await.unwrap();
}

/// Waits until the window of the completed holder of `key` has passed by the database clock.
async fn wait_past_window(db: &TestDb, key: &str) {
    db.wait_for(
        "the window to pass",
        &format!(
            "SELECT COUNT(*) FROM job_queue WHERE dedupe_key = '{key}' AND status = 'completed' \
             AND finished_at + INTERVAL dedupe_window_us MICROSECOND <= UTC_TIMESTAMP(6)"
        ),
        Duration::from_secs(30),
    )
    .await;
}

/// Enqueues in a transaction of the caller's, redone from the top when a deadlock rolls it
/// back (the documented contract: only the caller can redo its transaction).
async fn in_transaction(pool: &sqlx::MySqlPool, job: Noop, opts: &EnqueueOptions) -> Enqueued {
    for _ in 0..20 {
        let mut tx = pool.begin().await.unwrap();
        match job.enqueue_with(&mut tx, opts).await {
            Ok(e) => {
                tx.commit().await.unwrap();
                return e;
            }
            Err(e) if e.is_transient() => continue,
            Err(e) => panic!("enqueue failed: {e}"),
        }
    }
    panic!("20 deadlocks in a row")
}

async fn payload(db: &TestDb, id: JobId) -> serde_json::Value {
    let text: String =
        sqlx::query_scalar("SELECT CAST(payload AS CHAR) FROM job_queue WHERE id = ?")
            .bind(id.0)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn a_key_stays_taken_for_the_window_after_completion_then_is_free() {
    let db = TestDb::new().await;
    let long = EnqueueOptions::new()
        .dedupe_key("digest:long")
        .dedupe_window(Duration::from_secs(600));
    let short = EnqueueOptions::new()
        .dedupe_key("digest:short")
        .dedupe_window(Duration::from_millis(300));
    let plain = EnqueueOptions::new().dedupe_key("digest:plain");
    let first_long = Noop { n: 1 }.enqueue_with(&db.pool, &long).await.unwrap();
    let first_short = Noop { n: 2 }.enqueue_with(&db.pool, &short).await.unwrap();
    Noop { n: 3 }.enqueue_with(&db.pool, &plain).await.unwrap();
    drain(&db, 3).await;

    // Inside the window: the completed job still holds its key.
    assert_eq!(
        Noop { n: 4 }.enqueue_with(&db.pool, &long).await.unwrap(),
        Enqueued::Duplicate(first_long.id())
    );
    let mut tx = db.pool.begin().await.unwrap();
    assert_eq!(
        Noop { n: 4 }.enqueue_with(&mut tx, &long).await.unwrap(),
        Enqueued::Duplicate(first_long.id()),
        "inside the caller's transaction too"
    );
    tx.rollback().await.unwrap();
    // Without a window the key was freed on completion, as before.
    assert!(matches!(
        Noop { n: 5 }.enqueue_with(&db.pool, &plain).await.unwrap(),
        Enqueued::Inserted(_)
    ));
    // After the window: the key is taken by a new job, once.
    wait_past_window(&db, "digest:short").await;
    let mut tx = db.pool.begin().await.unwrap();
    let second = Noop { n: 6 }.enqueue_with(&mut tx, &short).await.unwrap();
    tx.commit().await.unwrap();
    assert!(
        matches!(second, Enqueued::Inserted(id) if id != first_short.id()),
        "{second:?}"
    );
    assert_eq!(
        Noop { n: 7 }.enqueue_with(&db.pool, &short).await.unwrap(),
        Enqueued::Duplicate(second.id())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueuers_after_the_window_make_one_job() {
    let db = TestDb::new().await;
    let opts = EnqueueOptions::new()
        .dedupe_key("sync:42")
        .dedupe_window(Duration::from_millis(200));
    let first = Noop { n: 0 }.enqueue_with(&db.pool, &opts).await.unwrap();
    drain(&db, 1).await;
    wait_past_window(&db, "sync:42").await;
    let mut tasks = Vec::new();
    for n in 1..=16 {
        let pool = db.pool.clone();
        let opts = opts.clone();
        tasks.push(tokio::spawn(async move {
            match n % 3 {
                0 => Noop { n }.enqueue_with(&pool, &opts).await.unwrap(),
                1 => in_transaction(&pool, Noop { n }, &opts).await,
                _ => mysqlq::enqueue_many(&pool, [NewJob::from_job(&Noop { n }, &opts).unwrap()])
                    .await
                    .unwrap()[0],
            }
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let inserted: Vec<JobId> = results
        .iter()
        .filter_map(|e| match e {
            Enqueued::Inserted(id) => Some(*id),
            _ => None,
        })
        .collect();
    assert_eq!(inserted.len(), 1, "{results:?}");
    assert_ne!(inserted[0], first.id());
    assert!(
        results.iter().all(|e| e.id() == inserted[0]),
        "every duplicate names the new holder: {results:?}"
    );
    assert_eq!(db.count("pending").await, 1);
}

#[tokio::test]
async fn enqueue_many_holds_window_keys_too() {
    let db = TestDb::new().await;
    let opts = |k: &str| {
        EnqueueOptions::new()
            .dedupe_key(k)
            .dedupe_window(Duration::from_secs(600))
    };
    let out = mysqlq::enqueue_many(
        &db.pool,
        [
            NewJob::from_job(&Noop { n: 1 }, &opts("a")).unwrap(),
            NewJob::from_job(&Noop { n: 2 }, &opts("a")).unwrap(),
            NewJob::from_job(&Noop { n: 3 }, &opts("b")).unwrap(),
        ],
    )
    .await
    .unwrap();
    assert!(matches!(out[0], Enqueued::Inserted(_)));
    assert_eq!(out[1], Enqueued::Duplicate(out[0].id()));
    drain(&db, 2).await;
    let again = mysqlq::enqueue_many(
        &db.pool,
        [
            NewJob::from_job(&Noop { n: 4 }, &opts("a")).unwrap(),
            NewJob::from_job(&Noop { n: 5 }, &opts("c")).unwrap(),
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        again[0],
        Enqueued::Duplicate(out[0].id()),
        "completed, in the window"
    );
    assert!(matches!(again[1], Enqueued::Inserted(_)));
}

#[tokio::test]
async fn replace_updates_a_pending_holder_and_leaves_others_alone() {
    let db = TestDb::new().await;
    let later = EnqueueOptions::new()
        .dedupe_key("search-index:7")
        .delay(Duration::from_secs(600));
    let replace = EnqueueOptions::new()
        .dedupe_key("search-index:7")
        .dedupe_replace()
        .priority(-5)
        .meta("source", serde_json::json!("edit"));
    let first = Noop { n: 1 }.enqueue_with(&db.pool, &later).await.unwrap();
    let replaced = Noop { n: 2 }
        .enqueue_with(&db.pool, &replace)
        .await
        .unwrap();
    assert_eq!(replaced, Enqueued::Replaced(first.id()));
    assert_eq!(
        payload(&db, first.id()).await,
        serde_json::json!({ "n": 2 })
    );
    let (runnable, priority): (i64, i16) = sqlx::query_as(
        "SELECT available_at <= UTC_TIMESTAMP(6), priority FROM job_queue WHERE id = ?",
    )
    .bind(first.id().0)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (runnable, priority),
        (1, -5),
        "run time and priority replaced"
    );
    let mut tx = db.pool.begin().await.unwrap();
    let in_tx = Noop { n: 3 }.enqueue_with(&mut tx, &replace).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(in_tx, Enqueued::Replaced(first.id()));
    assert_eq!(
        payload(&db, first.id()).await,
        serde_json::json!({ "n": 3 })
    );
    let bulk = mysqlq::enqueue_many(
        &db.pool,
        [NewJob::from_job(&Noop { n: 4 }, &replace).unwrap()],
    )
    .await
    .unwrap();
    assert_eq!(
        bulk,
        [Enqueued::Replaced(first.id())],
        "in enqueue_many too"
    );
    assert_eq!(
        payload(&db, first.id()).await,
        serde_json::json!({ "n": 4 })
    );
    assert_eq!(db.count("pending").await, 1, "one row for the key");

    // A holder of another kind is not replaced.
    let other = Sleepy { ms: 1 }
        .enqueue_with(&db.pool, &replace)
        .await
        .unwrap();
    assert_eq!(other, Enqueued::Duplicate(first.id()));
    assert_eq!(
        payload(&db, first.id()).await,
        serde_json::json!({ "n": 4 })
    );

    // A running holder is not replaced.
    sqlx::query("UPDATE job_queue SET status = 'processing', claim_token = 't' WHERE id = ?")
        .bind(first.id().0)
        .execute(&db.pool)
        .await
        .unwrap();
    let running = Noop { n: 9 }
        .enqueue_with(&db.pool, &replace)
        .await
        .unwrap();
    assert_eq!(running, Enqueued::Duplicate(first.id()));
    assert_eq!(
        payload(&db, first.id()).await,
        serde_json::json!({ "n": 4 })
    );

    // Without a holder, replace mode inserts.
    let fresh = Noop { n: 5 }
        .enqueue_with(
            &db.pool,
            &EnqueueOptions::new().dedupe_key("other").dedupe_replace(),
        )
        .await
        .unwrap();
    assert!(matches!(fresh, Enqueued::Inserted(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_replacers_leave_one_pending_job_with_one_of_their_payloads() {
    let db = TestDb::new().await;
    let opts = EnqueueOptions::new()
        .dedupe_key("debounce:1")
        .dedupe_replace()
        .delay(Duration::from_secs(600));
    let mut tasks = Vec::new();
    for n in 0..16 {
        let pool = db.pool.clone();
        let opts = opts.clone();
        tasks.push(tokio::spawn(async move {
            if n % 2 == 0 {
                Noop { n }.enqueue_with(&pool, &opts).await.unwrap()
            } else {
                in_transaction(&pool, Noop { n }, &opts).await
            }
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let inserted: Vec<&Enqueued> = results
        .iter()
        .filter(|e| matches!(e, Enqueued::Inserted(_)))
        .collect();
    assert_eq!(inserted.len(), 1, "{results:?}");
    let id = inserted[0].id();
    assert!(results.iter().all(|e| e.id() == id), "{results:?}");
    assert!(
        results.iter().all(|e| !e.is_duplicate()),
        "a pending holder is always replaced: {results:?}"
    );
    assert_eq!(db.count("pending").await, 1);
    let n = payload(&db, id).await["n"].as_u64().unwrap();
    assert!(n < 16, "{n}");
}

#[test]
fn dedupe_options_that_do_not_fit_are_refused() {
    let window_started = EnqueueOptions::new()
        .dedupe_key("k")
        .dedupe_scope(DedupeScope::UntilStarted)
        .dedupe_window(Duration::from_secs(60));
    let e = NewJob::from_job(&Noop { n: 1 }, &window_started).unwrap_err();
    assert!(e.to_string().contains("UntilFinished"), "{e}");
    let no_key = EnqueueOptions::new().dedupe_replace();
    let e = NewJob::from_job(&Noop { n: 1 }, &no_key).unwrap_err();
    assert!(e.to_string().contains("need a `dedupe_key`"), "{e}");
}
