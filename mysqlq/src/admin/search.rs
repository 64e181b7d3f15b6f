//! `Admin::search` and `Admin::count_matching`: the job search of the dashboard and the CLI
//! (statements in `store/search`; syntax in [`crate::filter`]).

use serde::Serialize;

use super::Admin;
use crate::Error;
use crate::filter::Filter;
use crate::store::search::{self as sql, Cursor, SearchPage};

/// How long a confirmation's count may take before the server stops it.
pub const COUNT_TIMEOUT_SECONDS: u32 = 10;

/// An exact count of the jobs a search matches, taken for a confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counted {
    /// Jobs matching at the time of the count.
    pub count: u64,
    /// The newest job id when counting: an action confirmed on this count acts on ids up to
    /// it only, so a job enqueued after the count is never touched by it.
    pub horizon: u64,
}

impl Admin {
    /// One page of jobs matching `filter` (empty: every job), after `cursor` (`None`: the
    /// first page), at most `limit` (1..=500), in the order of the index the states choose:
    /// unfinished states due first, finished states newest first, anything else newest id
    /// first. A page whose filters reached the read cap says so in
    /// [`window`](SearchPage::window); its [`next`](SearchPage::next) continues below it.
    pub async fn search(
        &self,
        filter: &Filter,
        cursor: Option<Cursor>,
        limit: u32,
    ) -> Result<SearchPage, Error> {
        let mut conn = self.pool.acquire().await?;
        sql::search(&mut conn, filter, cursor, limit).await
    }

    /// The exact number of jobs matching `filter` now, uncapped, and the horizon it was
    /// counted at. Refused with an error naming the fix when counting takes longer than
    /// [`COUNT_TIMEOUT_SECONDS`].
    pub async fn count_matching(&self, filter: &Filter) -> Result<Counted, Error> {
        let mut conn = self.pool.acquire().await?;
        let (count, horizon) =
            sql::count_matching(&mut conn, filter, COUNT_TIMEOUT_SECONDS).await?;
        Ok(Counted { count, horizon })
    }
}
