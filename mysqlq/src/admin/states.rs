//! `Admin::state_counts` and what a list needs to show each row's operator state
//! ([`OpState`]): a capped count of a finished state, and which rows of a page a limit holds
//! back.

use std::collections::HashSet;

use super::Admin;
use super::causal::CausalReads;
use crate::state::{Capped, OpState, QueueStates, Timestamp};
use crate::store::{self, PageRow};
use crate::{Error, JobId};

impl Admin {
    /// Every queue's jobs by operator state ([`OpState`]), by queue name: the queues that have
    /// a job or a row of their own (paused, limits). The unfinished states are exact, counted
    /// from one range of an index (finished jobs are never read for them); `completed`,
    /// `failed` and `cancelled` are each counted up to [`Capped::CAP`] per queue. The counts
    /// mirror [`OpState::classify`]. Read with causal reads on a Galera node.
    pub async fn state_counts(&self) -> Result<Vec<QueueStates>, Error> {
        let mut conn = CausalReads::acquire(&self.pool).await?;
        let out = store::state_counts(&mut conn).await?;
        conn.done().await;
        Ok(out)
    }

    /// [`state_counts`](Self::state_counts) without counting completed and cancelled jobs
    /// (they read `None`): the unfinished states exact, `failed` up to [`Capped::CAP`].
    pub async fn open_state_counts(&self) -> Result<Vec<QueueStates>, Error> {
        let mut conn = CausalReads::acquire(&self.pool).await?;
        let out = store::state_counts_open(&mut conn).await?;
        conn.done().await;
        Ok(out)
    }

    /// How many jobs are in the finished `state` (completed, failed or cancelled), of `queue`
    /// or of every queue, counted up to [`Capped::CAP`] on an index ("100k+" past it).
    pub async fn finished_count(
        &self,
        state: OpState,
        queue: Option<&str>,
    ) -> Result<Capped, Error> {
        if !state.is_final() {
            return Err(Error::invalid(
                "state",
                format!("`{state}` is not a finished state; `state_counts` counts it"),
            ));
        }
        let mut conn = CausalReads::acquire(&self.pool).await?;
        let n = store::finished_count(&mut conn, state.status(), queue).await?;
        conn.done().await;
        Ok(n)
    }

    /// Which of a page's `pending` rows a limit holds back at `now` (when the page was read,
    /// by the database's clock): their [`RowFacts::limited`](crate::state::RowFacts::limited),
    /// judged as the counts judge it (a live 429 hold names the job; or it is due and its rate
    /// key or its queue is held, at its rate, or at its global limit). At most
    /// [`MAX_PAGE_ROWS`](super::MAX_PAGE_ROWS) rows.
    pub async fn limited_rows(
        &self,
        rows: &[PageRow<'_>],
        now: Timestamp,
    ) -> Result<HashSet<JobId>, Error> {
        let mut conn = self.pool.acquire().await?;
        store::rows_limited(&mut conn, rows, now).await
    }
}
