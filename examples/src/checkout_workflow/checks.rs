//! The checkout-workflow example's checks: waiting until no workflow is `running`, and what the
//! orders, units, payments, receipts, steps and workflows look like afterwards.

use std::time::{Duration, Instant};

use sqlx::MySqlPool;

use super::{POLL, Placed, UPSTREAM_RESERVE_FAILED};

/// Waits until no workflow is `running` (the sweep marks a workflow finished once none of its
/// steps is left to run); returns how long that took.
pub(super) async fn wait_workflows_done(
    pool: &MySqlPool,
    timeout: Duration,
) -> Result<Duration, String> {
    let started = Instant::now();
    loop {
        let running: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM mysqlq_workflow WHERE state = 'running'")
                .fetch_one(pool)
                .await
                .map_err(|e| format!("cannot read mysqlq_workflow: {e}"))?;
        if running == 0 {
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            return Err(format!(
                "{running} checkout workflows still running after {timeout:?}"
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The state of the round's database once every workflow ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcomes {
    /// `orders` rows.
    pub orders: u64,
    /// Orders `shipped`.
    pub shipped: u64,
    /// `mysqlq_workflow` rows.
    pub workflows: u64,
    /// Workflows `completed`.
    pub workflows_completed: u64,
    /// Workflows `failed`.
    pub workflows_failed: u64,
    /// `job_queue` rows.
    pub jobs: u64,
    /// Jobs whose `order_id` is no order (a rolled-back order's steps would be).
    pub orphan_jobs: u64,
    /// `ship` steps `completed`.
    pub ship_completed: u64,
    /// `ship` steps `cancelled` with the reason "upstream \`reserve\` failed".
    pub ship_cancelled_upstream: u64,
    /// `reserve` steps `failed`.
    pub reserve_failed: u64,
    /// `charge` steps that took more than one attempt.
    pub charges_retried: u64,
    /// Units `reserved`.
    pub units_reserved: u64,
    /// Units with more than one row in `reservation_log`, or whose log row names another order.
    pub units_reserved_twice: u64,
    /// Shipped orders without exactly one payment, one receipt and their units reserved.
    pub shipped_incomplete: u64,
    /// Orders with more than one payment.
    pub charged_twice: u64,
    /// Dependency edges whose dependent was claimed before its dependency completed.
    pub started_early: u64,
}

/// Reads the [`Outcomes`].
pub(super) async fn outcomes(pool: &MySqlPool) -> Result<Outcomes, String> {
    let e = |e: sqlx::Error| format!("cannot read the outcome: {e}");
    let row: (i64, i64, i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT \
           (SELECT COUNT(*) FROM orders), \
           (SELECT COUNT(*) FROM orders WHERE status = 'shipped'), \
           (SELECT COUNT(*) FROM mysqlq_workflow), \
           (SELECT COUNT(*) FROM mysqlq_workflow WHERE state = 'completed'), \
           (SELECT COUNT(*) FROM mysqlq_workflow WHERE state = 'failed'), \
           (SELECT COUNT(*) FROM job_queue), \
           (SELECT COUNT(*) FROM job_queue j \
              WHERE NOT EXISTS (SELECT 1 FROM orders o \
                WHERE o.id = CAST(JSON_VALUE(j.payload, '$.order_id') AS UNSIGNED)))",
    )
    .fetch_one(pool)
    .await
    .map_err(e)?;
    let steps: (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT \
           COUNT(CASE WHEN s.name = 'ship' AND j.status = 'completed' THEN 1 END), \
           COUNT(CASE WHEN s.name = 'ship' AND j.status = 'cancelled' AND j.cancel_reason = ? \
             THEN 1 END), \
           COUNT(CASE WHEN s.name = 'reserve' AND j.status = 'failed' THEN 1 END), \
           COUNT(CASE WHEN s.name = 'charge' AND j.attempts > 1 THEN 1 END) \
         FROM mysqlq_wf_step s JOIN job_queue j ON j.id = s.job_id",
    )
    .bind(UPSTREAM_RESERVE_FAILED)
    .fetch_one(pool)
    .await
    .map_err(e)?;
    let units: (i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT \
           (SELECT COUNT(*) FROM stock_unit WHERE status = 'reserved'), \
           (SELECT COUNT(*) FROM (SELECT sku, unit_no FROM reservation_log \
              GROUP BY sku, unit_no HAVING COUNT(*) > 1) twice) \
           + (SELECT COUNT(*) FROM reservation_log l JOIN stock_unit u \
              ON u.sku = l.sku AND u.unit_no = l.unit_no \
              WHERE NOT (u.order_id <=> l.order_id)), \
           (SELECT COUNT(*) FROM orders o WHERE o.status = 'shipped' AND ( \
              (SELECT COUNT(*) FROM payment p WHERE p.order_id = o.id) <> 1 \
              OR (SELECT COUNT(*) FROM receipt r WHERE r.order_id = o.id) <> 1 \
              OR (SELECT COUNT(*) FROM stock_unit u WHERE u.order_id = o.id) <> o.quantity)), \
           (SELECT COUNT(*) FROM (SELECT order_id FROM payment \
              GROUP BY order_id HAVING COUNT(*) > 1) twice), \
           (SELECT COUNT(*) FROM mysqlq_wf_edge e \
              JOIN job_queue d ON d.id = e.dep_id \
              JOIN job_queue t ON t.id = e.dependent_id \
              WHERE t.first_claimed_at IS NOT NULL \
                AND (d.status <> 'completed' OR d.finished_at IS NULL \
                     OR t.first_claimed_at < d.finished_at))",
    )
    .fetch_one(pool)
    .await
    .map_err(e)?;
    let u = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(Outcomes {
        orders: u(row.0),
        shipped: u(row.1),
        workflows: u(row.2),
        workflows_completed: u(row.3),
        workflows_failed: u(row.4),
        jobs: u(row.5),
        orphan_jobs: u(row.6),
        ship_completed: u(steps.0),
        ship_cancelled_upstream: u(steps.1),
        reserve_failed: u(steps.2),
        charges_retried: u(steps.3),
        units_reserved: u(units.0),
        units_reserved_twice: u(units.1),
        shipped_incomplete: u(units.2),
        charged_twice: u(units.3),
        started_early: u(units.4),
    })
}

/// `orders` rows, `job_queue` rows and `mysqlq_workflow` rows that the order `placed` left
/// (a rolled-back order must leave none).
pub(super) async fn traces_of(pool: &MySqlPool, placed: Placed) -> Result<(u64, u64, u64), String> {
    let (orders, jobs, workflows): (i64, i64, i64) = sqlx::query_as(
        "SELECT \
           (SELECT COUNT(*) FROM orders WHERE id = ?), \
           (SELECT COUNT(*) FROM job_queue \
              WHERE CAST(JSON_VALUE(payload, '$.order_id') AS UNSIGNED) = ? OR workflow_id = ?), \
           (SELECT COUNT(*) FROM mysqlq_workflow WHERE id = ?) \
           + (SELECT COUNT(*) FROM mysqlq_wf_step WHERE workflow_id = ?)",
    )
    .bind(placed.order_id)
    .bind(placed.order_id)
    .bind(placed.workflow.0)
    .bind(placed.workflow.0)
    .bind(placed.workflow.0)
    .fetch_one(pool)
    .await
    .map_err(|e| format!("cannot look for order {}: {e}", placed.order_id))?;
    let u = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok((u(orders), u(jobs), u(workflows)))
}
