//! The fault invariants, checked with SQL after a fault scenario (`tests/faults.rs`,
//! `tests/galera.rs`, `tests/clusters.rs`):
//!
//! 1. every job is final: `completed`, or `failed` with a `last_error` when that is expected;
//! 2. no job is marked completed twice (a trigger logs every transition to `completed`);
//! 3. every completion was made by the owner of the job at that moment: the claim token the row
//!    held when it was completed belongs to a run whose handler had returned (`done`) by then —
//!    a stale worker can never complete a job another worker owns;
//! 4. every job whose handler started was completed or is re-run (follows from 1 and 3);
//! 5. no business row without its job and no job without its business row.

use std::time::Duration;

use sqlx::MySqlPool;

use crate::jobs::Noop;
use crate::{TestDb, scalar_on};

/// Creates the completion log and its trigger ([`TestDb::log_completions`]), and the `orders`
/// table of invariant 5.
pub async fn install(db: &TestDb) {
    db.log_completions().await;
    sqlx::query(
        "CREATE TABLE orders (order_no BIGINT UNSIGNED PRIMARY KEY, job_id BIGINT UNSIGNED NOT NULL)",
    )
    .execute(&db.pool)
    .await
    .expect("create the orders table");
}

/// Checks the invariants listed at the top of this module on the database behind `db`.
/// `failed_ok` is the number of jobs expected to end `failed`.
pub async fn check(db: &MySqlPool, failed_ok: i64) {
    let not_final = scalar_on(
        db,
        "SELECT COUNT(*) FROM job_queue WHERE status NOT IN ('completed', 'failed')",
    )
    .await;
    assert_eq!(not_final, 0, "1: every job is final");
    let failed = scalar_on(db, "SELECT COUNT(*) FROM job_queue WHERE status = 'failed'").await;
    assert_eq!(failed, failed_ok, "1: only the expected jobs failed");
    let silent = scalar_on(db, "SELECT COUNT(*) FROM job_queue WHERE status = 'failed' AND (last_error IS NULL OR last_error = '')").await;
    assert_eq!(silent, 0, "1: a failed job carries its reason");
    let twice = scalar_on(db, "SELECT COUNT(*) FROM (SELECT job_id FROM completion_log GROUP BY job_id HAVING COUNT(*) > 1) t").await;
    assert_eq!(twice, 0, "2: no job completed twice");
    let unlogged = scalar_on(
        db,
        "SELECT COUNT(*) FROM job_queue j WHERE j.status = 'completed' \
         AND NOT EXISTS (SELECT 1 FROM completion_log c WHERE c.job_id = j.id)",
    )
    .await;
    assert_eq!(unlogged, 0, "2: every completion went through a transition");
    let by_stranger = scalar_on(
        db,
        "SELECT COUNT(*) FROM completion_log c WHERE NOT EXISTS (\
           SELECT 1 FROM test_runs r WHERE r.job_id = c.job_id AND r.claim_token = c.claim_token \
           AND r.event = 'done' AND r.at <= c.at)",
    )
    .await;
    assert_eq!(
        by_stranger, 0,
        "3: every completion was made by the job's owner after its handler returned"
    );
    let started_never_finished = scalar_on(
        db,
        "SELECT COUNT(DISTINCT r.job_id) FROM test_runs r JOIN job_queue j ON j.id = r.job_id \
         WHERE r.event = 'start' AND j.status NOT IN ('completed', 'failed')",
    )
    .await;
    assert_eq!(
        started_never_finished, 0,
        "4: a started job was completed or re-run"
    );
    let orphan_orders = scalar_on(
        db,
        "SELECT COUNT(*) FROM orders o LEFT JOIN job_queue j ON j.id = o.job_id WHERE j.id IS NULL",
    )
    .await;
    let orphan_jobs = scalar_on(
        db,
        "SELECT COUNT(*) FROM job_queue j WHERE j.queue_name = 'test' AND j.kind = 'noop' \
         AND JSON_EXTRACT(j.payload, '$.n') >= 1000000 \
         AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.job_id = j.id)",
    )
    .await;
    assert_eq!(
        (orphan_orders, orphan_jobs),
        (0, 0),
        "5: business rows and jobs commit together"
    );
}

/// Order `order_no` (a row of `orders`) and its job, in one transaction.
pub async fn place_order(pool: &MySqlPool, order_no: u64) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    let id = Noop {
        n: 1_000_000 + order_no,
    }
    .enqueue(&mut tx)
    .await
    .map_err(|e| match e {
        mysqlq::Error::Database(e) => e,
        other => sqlx::Error::Protocol(other.to_string()),
    })?;
    sqlx::query("INSERT INTO orders (order_no, job_id) VALUES (?, ?)")
        .bind(order_no)
        .bind(id.id().0)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}

/// `true` when a [`place_order`] error means the order is there: its number is taken.
pub fn already_placed(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(e) if e.message().contains("Duplicate entry"))
}

/// Places `n` orders, each in one transaction with its job; retries a transaction that failed
/// (server gone), treating a duplicate order number as "that commit did land".
pub async fn place_orders(pool: MySqlPool, first: u64, n: u64) {
    for order_no in first..first + n {
        loop {
            match place_order(&pool, order_no).await {
                Ok(()) => break,
                Err(e) if already_placed(&e) => break,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until no job is `pending` or `processing` (polling every 50 ms, at most `limit`;
/// errors, as during a failover, are waited out).
pub async fn wait_final(db: &MySqlPool, limit: Duration) {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let open: Result<i64, _> = sqlx::query_scalar(
            "SELECT COUNT(*) FROM job_queue WHERE status IN ('pending', 'processing')",
        )
        .fetch_one(db)
        .await;
        if matches!(open, Ok(0)) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for every job to be final ({open:?} open)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
