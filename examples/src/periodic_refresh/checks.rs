//! The periodic-refresh example's checks: waiting for producer ticks, the refresh jobs' rows,
//! open jobs per place.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mysqlq::Job;
use sqlx::MySqlPool;

use super::{RefreshPlace, RefreshState};

/// Waits until the producer has run `n` ticks in all.
pub(super) async fn wait_ticks(
    state: &RefreshState,
    n: u64,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while state.producer.ticks.load(Ordering::SeqCst) < n {
        if Instant::now() > deadline {
            return Err(format!(
                "the producer ran {} of {n} ticks in {timeout:?}",
                state.producer.ticks.load(Ordering::SeqCst)
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// A [`RefreshPlace`] row of `job_queue`.
#[derive(Debug, Clone)]
pub(super) struct JobRow {
    pub(super) id: u64,
    pub(super) status: String,
    pub(super) place_id: u64,
    pub(super) last_error: Option<String>,
}

pub(super) async fn job_rows(pool: &MySqlPool) -> Result<HashMap<u64, JobRow>, String> {
    let rows: Vec<(u64, String, String, Option<String>)> = sqlx::query_as(
        "SELECT id, CAST(status AS CHAR), CAST(payload AS CHAR), last_error FROM job_queue WHERE kind = ?",
    )
    .bind(RefreshPlace::KIND)
    .fetch_all(pool)
    .await
    .map_err(|e| format!("cannot read job_queue: {e}"))?;
    Ok(rows
        .into_iter()
        .map(|(id, status, payload, last_error)| {
            let place_id = serde_json::from_str::<serde_json::Value>(&payload)
                .ok()
                .and_then(|v| v["place_id"].as_u64())
                .unwrap_or(0);
            (
                id,
                JobRow {
                    id,
                    status,
                    place_id,
                    last_error,
                },
            )
        })
        .collect())
}

/// Pending or running [`RefreshPlace`] jobs per place.
pub(super) async fn open_jobs_per_place(pool: &MySqlPool) -> Result<BTreeMap<u64, u64>, String> {
    let mut out = BTreeMap::new();
    for j in job_rows(pool).await?.into_values() {
        if j.status == "pending" || j.status == "processing" {
            *out.entry(j.place_id).or_insert(0) += 1;
        }
    }
    Ok(out)
}
