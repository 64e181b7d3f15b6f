//! The periodic-refresh example's checks: waiting for producer ticks, the refresh jobs' rows,
//! open jobs per place.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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
pub(super) type JobRow = crate::job_rows::JobRow<RefreshPlace>;

impl JobRow {
    /// The place the job refreshes (0 when its payload does not decode).
    pub(super) fn place_id(&self) -> u64 {
        self.job.as_ref().map_or(0, |j| j.place_id)
    }
}

/// Every [`RefreshPlace`] row, by id.
pub(super) async fn job_rows(pool: &MySqlPool) -> Result<HashMap<u64, JobRow>, String> {
    crate::job_rows::job_rows(pool).await
}

/// Pending or running [`RefreshPlace`] jobs per place.
pub(super) async fn open_jobs_per_place(pool: &MySqlPool) -> Result<BTreeMap<u64, u64>, String> {
    let mut out = BTreeMap::new();
    for j in job_rows(pool).await?.into_values() {
        if j.status == "pending" || j.status == "processing" {
            *out.entry(j.place_id()).or_insert(0) += 1;
        }
    }
    Ok(out)
}
