//! `Admin::queue_settings` and `Admin::queue_history`: what the queues pages show besides the
//! state counts ([`Admin::state_counts`]) and the latency histograms ([`Admin::latency`]) —
//! each queue's pause flag and limits, and a queue's last hour minute by minute.

use super::Admin;
use super::causal::CausalReads;
use crate::Error;
pub use crate::store::{DEPTH_STATES, DepthRow, QueueSettings, ThroughputRow};

/// One queue's last hour, minute by minute.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueHistory {
    /// The leader's counts of the unfinished states and `failed` ([`DEPTH_STATES`]), written
    /// once a minute; oldest first. A minute with rows was counted, and a state it lacks had no
    /// job; a minute without rows was not counted (no leader ran).
    pub depth: Vec<DepthRow>,
    /// Attempts completed and failed per minute (`mysqlq_run_minute`), oldest first; minutes
    /// with neither are absent.
    pub throughput: Vec<ThroughputRow>,
}

impl Admin {
    /// Every queue that is paused or has limits (a `mysqlq_queue` row), by name, with its pause
    /// flag and [`QueueLimits`](super::QueueLimits); a queue absent here runs without limits.
    pub async fn queue_settings(&self) -> Result<Vec<QueueSettings>, Error> {
        let mut conn = CausalReads::acquire(&self.pool).await?;
        let out = crate::store::queue_settings_all(&mut conn).await?;
        conn.done().await;
        Ok(out)
    }

    /// `queue`'s last hour: its depth by state as the leader counted it once a minute, and its
    /// completed and failed attempts per minute.
    pub async fn queue_history(&self, queue: &str) -> Result<QueueHistory, Error> {
        crate::queue::validate_queue_name(queue)?;
        let mut conn = CausalReads::acquire(&self.pool).await?;
        let depth = crate::store::depth_minute_read(&mut conn, queue).await?;
        let throughput = crate::store::run_minute_queue(&mut conn, queue).await?;
        conn.done().await;
        Ok(QueueHistory { depth, throughput })
    }
}
