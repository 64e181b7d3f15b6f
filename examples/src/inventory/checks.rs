//! The inventory example's invariant checks: the rush SKU's counts, replenishment rows, the
//! available units per SKU, and waiting until the queue has run every job.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use mysqlq::Job;
use sqlx::MySqlPool;

use super::{RUSH_SKU, Replenish};

/// The rush SKU's counts.
#[derive(Debug, Clone, Copy)]
pub(super) struct RushState {
    pub(super) sold: u64,
    pub(super) reserved: u64,
    pub(super) available: u64,
    pub(super) ledger_rows: u64,
    pub(super) ledger_distinct: u64,
    /// Ledger rows whose unit is not `sold` by the same reservation.
    pub(super) mismatched: u64,
}

pub(super) async fn rush_state(pool: &MySqlPool) -> Result<RushState, String> {
    let (sold, reserved, available, ledger_rows, ledger_distinct, mismatched): (
        i64,
        i64,
        i64,
        i64,
        i64,
        i64,
    ) = sqlx::query_as(
        "SELECT \
           (SELECT COUNT(*) FROM inventory_unit WHERE sku = ? AND status = 'sold'), \
           (SELECT COUNT(*) FROM inventory_unit WHERE sku = ? AND status = 'reserved'), \
           (SELECT COUNT(*) FROM inventory_unit WHERE sku = ? AND status = 'available'), \
           (SELECT COUNT(*) FROM ledger WHERE sku = ?), \
           (SELECT COUNT(DISTINCT unit_no) FROM ledger WHERE sku = ?), \
           (SELECT COUNT(*) FROM ledger l LEFT JOIN inventory_unit u \
              ON u.sku = l.sku AND u.unit_no = l.unit_no \
              AND u.status = 'sold' AND u.reservation_id = l.reservation_id \
            WHERE l.sku = ? AND u.unit_no IS NULL)",
    )
    .bind(RUSH_SKU)
    .bind(RUSH_SKU)
    .bind(RUSH_SKU)
    .bind(RUSH_SKU)
    .bind(RUSH_SKU)
    .bind(RUSH_SKU)
    .fetch_one(pool)
    .await
    .map_err(|e| format!("cannot read the rush's state: {e}"))?;
    let u = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(RushState {
        sold: u(sold),
        reserved: u(reserved),
        available: u(available),
        ledger_rows: u(ledger_rows),
        ledger_distinct: u(ledger_distinct),
        mismatched: u(mismatched),
    })
}

/// Replenish rows in `job_queue`, per SKU.
pub(super) async fn replenish_rows(pool: &MySqlPool) -> Result<BTreeMap<String, u64>, String> {
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT CAST(payload AS CHAR) FROM job_queue WHERE kind = ?")
            .bind(Replenish::KIND)
            .fetch_all(pool)
            .await
            .map_err(|e| format!("cannot read job_queue: {e}"))?;
    let mut out = BTreeMap::new();
    for (payload,) in rows {
        let sku = serde_json::from_str::<serde_json::Value>(&payload)
            .ok()
            .and_then(|v| v["sku"].as_str().map(str::to_owned))
            .unwrap_or_default();
        *out.entry(sku).or_insert(0) += 1;
    }
    Ok(out)
}

/// Of `units`, those `available` with no reservation.
pub(super) async fn units_available(
    pool: &MySqlPool,
    units: &[(String, u32)],
) -> Result<Vec<(String, u32)>, String> {
    let rows: Vec<(String, u32)> = sqlx::query_as(
        "SELECT sku, unit_no FROM inventory_unit WHERE status = 'available' AND reservation_id IS NULL",
    )
    .fetch_all(pool)
    .await
    .map_err(|e| format!("cannot read units: {e}"))?;
    let free: std::collections::HashSet<(String, u32)> = rows.into_iter().collect();
    Ok(units.iter().filter(|u| free.contains(u)).cloned().collect())
}

/// Waits until every job of `ids` is `completed` or `failed`.
pub(super) async fn wait_jobs_done(
    pool: &MySqlPool,
    ids: &[u64],
    timeout: Duration,
) -> Result<Duration, String> {
    let start = Instant::now();
    loop {
        let rows: Vec<(u64, String)> =
            sqlx::query_as("SELECT id, CAST(status AS CHAR) FROM job_queue")
                .fetch_all(pool)
                .await
                .map_err(|e| format!("cannot read job_queue: {e}"))?;
        let status: HashMap<u64, String> = rows.into_iter().collect();
        let open: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| {
                !status
                    .get(id)
                    .is_some_and(|s| s == "completed" || s == "failed")
            })
            .collect();
        if open.is_empty() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "after {timeout:?}, jobs {open:?} are still not finished"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
