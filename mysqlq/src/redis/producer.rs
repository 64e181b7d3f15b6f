//! The fast producer (the article's periodic producer): [`Redis::enqueue_many`] writes jobs that
//! need no business transaction to MySQL and puts them straight into their streams, without
//! waiting for a relay's next round.
//!
//! What it guarantees: when it returns `Ok`, every job is committed in MySQL (so it runs at
//! least once, whatever Redis does next) and is either in its stream or `pending` for the
//! relays. The rows are written **first**, in bulk, in one transaction of its own (that is the
//! "non-transactional" part: it is not the caller's transaction), and claimed for a relay in
//! that transaction; the `XADD`s follow. A crash between the commit and the `XADD`s leaves rows
//! held by a relay that will never add them: they come back to `pending` after
//! [`RedisConfig::relay_lease`](super::RedisConfig::relay_lease) and are relayed then. No job
//! exists only in Redis.

use std::collections::BTreeMap;

use sqlx::MySqlPool;

use super::Redis;
use super::entry::{Entry, add_capped};
use crate::store::{self, ClaimParams, Owned};
use crate::{Enqueued, Error, JobId, NewJob};

impl Redis {
    /// Enqueues `jobs` in one MySQL transaction of its own (chunked multi-row INSERTs, dedupe
    /// keys honoured, hooks run), then adds those that can run now to their streams in one
    /// script per queue, capped like the relay's. Jobs that are delayed, have an ordering or
    /// concurrency key, are on a paused queue, or do not fit under the stream's cap stay
    /// `pending` and are relayed as usual. Returns what [`crate::enqueue_many`] returns.
    pub async fn enqueue_many(
        &self,
        pool: &MySqlPool,
        jobs: impl IntoIterator<Item = NewJob>,
    ) -> Result<Vec<Enqueued>, Error> {
        let jobs: Vec<NewJob> = jobs.into_iter().collect();
        let relay = producer_id();
        let token = uuid::Uuid::new_v4().to_string();
        let mut tx = pool.begin().await?;
        let enqueued = crate::enqueue_many(&mut *tx, jobs).await?;
        let new: Vec<JobId> = enqueued
            .iter()
            .filter_map(|e| match e {
                Enqueued::Inserted(id) => Some(*id),
                _ => None,
            })
            .collect();
        let params = ClaimParams {
            queue: "",
            limit: 0,
            skip: 0,
            worker_id: &relay,
            token: &token,
            lease: self.config().relay_lease,
        };
        let mut claimed = Vec::new();
        for chunk in new.chunks(5000) {
            claimed.extend(store::job_relay_claim_ids(&mut tx, chunk, &params).await?);
        }
        tx.commit().await?;
        let mut by_queue: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
        for r in &claimed {
            by_queue
                .entry(r.queue.clone())
                .or_default()
                .push(Entry::from_claimed(&r.job, &token));
        }
        let mut conn = self.conn();
        let mut unsent: Vec<Owned> = Vec::new();
        for (queue, entries) in &by_queue {
            let stream = self.stream_key(queue);
            match add_capped(&mut conn, &stream, self.config().stream_cap, entries).await {
                Ok(ids) => unsent.extend(entries[ids.len()..].iter().map(Entry::owned)),
                Err(e) => {
                    tracing::warn!(queue, error = %crate::error_chain(&e), "XADD failed; the jobs stay in MySQL for the relays");
                    unsent.extend(entries.iter().map(Entry::owned));
                }
            }
        }
        if !unsent.is_empty() {
            // Not in a stream (cap reached, Redis down): hand them to the relays now. If this
            // fails too, the relay lease brings them back.
            let released = async {
                let mut conn = pool.acquire().await?;
                store::job_relay_release(&mut conn, &unsent).await
            }
            .await;
            if let Err(e) = released {
                tracing::warn!(jobs = unsent.len(), error = %crate::error_chain(&e), "could not hand unsent jobs back at once; their relay lease brings them back");
            }
        }
        Ok(enqueued)
    }
}

/// The `locked_by` of jobs the fast producer put in a stream.
fn producer_id() -> String {
    let mut id = format!(
        "{}producer:{}:{:08x}",
        store::RELAY_PREFIX,
        std::process::id(),
        fastrand::u32(..)
    );
    id.truncate(128);
    id
}
