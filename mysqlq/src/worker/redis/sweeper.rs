//! The sweeper: every heartbeat interval, `XAUTOCLAIM`s the entries idle for longer than the
//! lease — live consumers touch theirs, so these are entries whose consumer stopped — and
//! decides from the MySQL row (and the entry's Redis delivery count) what becomes of each:
//!
//! | the row | what happens |
//! |---|---|
//! | still held under the entry's relay token (read, never taken: its consumer stopped at once) | delivered more times than the job has attempts: `failed` (the dead letter); else run here, or handed back to `pending` when no slot is free |
//! | taken by a consumer whose lease expired (it died running it) | the reaper's rule for this job now: `pending` when attempts remain, else `failed`, the attempt recorded |
//! | taken, lease still running (its worker is alive, only its Redis side stalled) | left alone: its worker acknowledges it when done |
//! | anything else (finished, released, relayed again, gone) | acknowledged and deleted |
//!
//! Every write is token-guarded: a consumer that was only slow keeps what it still owns.

use std::collections::HashMap;
use std::sync::Arc;

use redis::streams::{StreamAutoClaimReply, StreamPendingCountReply};

use super::Side;
use super::consumer::{self, Read};
use crate::redis::GROUP;
use crate::store::{self, Outcome, Owned, RELAY_PREFIX, Reaped};
use crate::worker::write::error_chain;
use crate::worker::{Shared, WorkerEvent, sleep_or_cancel};
use crate::{Error, JobId};

/// Entries looked at per `XAUTOCLAIM`.
const COUNT: usize = 100;

pub(super) async fn run(s: Arc<Shared>, side: Arc<Side>) {
    let every = s.config.heartbeat();
    while sleep_or_cancel(every, &s.stop_services).await {
        for i in 0..side.streams.len() {
            if let Err(e) = sweep(&s, &side, i).await {
                tracing::warn!(stream = %side.streams[i], error = %error_chain(&e), "sweeping the stream failed; trying again next round");
            }
        }
    }
}

#[derive(Default)]
struct Swept {
    run: usize,
    retried: usize,
    failed: usize,
    stale: usize,
}

async fn sweep(s: &Arc<Shared>, side: &Side, i: usize) -> Result<(), Error> {
    let stream = &side.streams[i];
    let mut conn = side.redis.conn();
    let idle = u64::try_from(s.config.lease.as_millis()).unwrap_or(u64::MAX);
    let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
        .arg(stream)
        .arg(GROUP)
        .arg(&side.consumer)
        .arg(idle)
        .arg("0-0")
        .arg("COUNT")
        .arg(COUNT)
        .query_async(&mut conn)
        .await?;
    if reply.claimed.is_empty() {
        return Ok(());
    }
    // Delivery counts of what this consumer now holds (the claimed entries among them).
    let pending: StreamPendingCountReply = redis::cmd("XPENDING")
        .arg(stream)
        .arg(GROUP)
        .arg("-")
        .arg("+")
        .arg(10_000)
        .arg(&side.consumer)
        .query_async(&mut conn)
        .await?;
    let deliveries: HashMap<String, u64> = pending
        .ids
        .into_iter()
        .map(|p| (p.id, p.times_delivered as u64))
        .collect();
    let reads: Vec<(Read, u64)> = reply
        .claimed
        .iter()
        .filter_map(|e| {
            let n = deliveries.get(&e.id).copied().unwrap_or(1);
            consumer::parse(side, i, &e.id, &e.map).map(|r| (r, n))
        })
        .collect();
    let ids: Vec<JobId> = reads.iter().map(|(r, _)| r.entry.job).collect();
    let rows = {
        let mut db = s.db.acquire().await?;
        store::job_relay_inspect(&mut db, &ids).await?
    };
    let mut out = Swept::default();
    let mut to_run = Vec::new();
    for (r, delivered) in reads {
        let Some(row) = rows.iter().find(|row| row.id == r.entry.job) else {
            out.stale += 1;
            side.drop_entry(r.stream, r.id);
            continue;
        };
        let processing = row.status == "processing";
        let relayed = row
            .locked_by
            .as_deref()
            .is_some_and(|l| l.starts_with(RELAY_PREFIX));
        if processing && row.token.as_deref() == Some(r.entry.token.as_str()) {
            // Read and never taken.
            if delivered > u64::from(row.max_attempts.max(1)) {
                dead_letter(s, &r, delivered).await?;
                out.failed += 1;
                side.drop_entry(r.stream, r.id);
            } else {
                to_run.push(r);
            }
        } else if processing && !relayed && row.lease_expired {
            let job = Owned {
                id: row.id,
                token: row.token.clone().unwrap_or_default(),
            };
            let mut db = s.db.acquire().await?;
            match store::job_reap_taken(&mut db, &job, delivered).await? {
                Reaped::Retried => out.retried += 1,
                Reaped::Failed => out.failed += 1,
                Reaped::Untouched => {}
            }
            side.drop_entry(r.stream, r.id);
        } else if processing && !relayed {
            // Its worker still renews the lease: it acknowledges the entry when done.
        } else {
            out.stale += 1;
            side.drop_entry(r.stream, r.id);
        }
    }
    if !to_run.is_empty() {
        let n = to_run.len();
        let permits = if s.stop_fetching.is_cancelled() {
            None
        } else {
            s.slots
                .clone()
                .try_acquire_many_owned(u32::try_from(n).unwrap_or(u32::MAX))
                .ok()
        };
        match permits {
            Some(p) => out.run += consumer::start(s, side, to_run, p).await,
            None => consumer::hand_back(s, side, &to_run).await,
        }
    }
    tracing::info!(
        stream = %stream,
        run = out.run,
        retried = out.retried,
        failed = out.failed,
        stale = out.stale,
        "took over entries whose consumer stopped (XAUTOCLAIM after the lease)"
    );
    s.emit(WorkerEvent::Swept {
        run: out.run,
        retried: out.retried,
        failed: out.failed,
        stale: out.stale,
    });
    Ok(())
}

/// The job of an entry delivered more often than the job has attempts, never taken: `failed`
/// (guarded by the relay token it still carries), the dead letter `failed list` shows.
async fn dead_letter(s: &Shared, r: &Read, delivered: u64) -> Result<(), Error> {
    let message = format!(
        "stream entry delivered {delivered} times and never taken: every consumer that read it \
         stopped before it could start the job (dead letter)"
    );
    tracing::warn!(id = r.entry.job.0, delivered, "{message}");
    let mut db = s.db.acquire().await?;
    store::job_finish_attempt_logged(&mut db, &r.entry.owned(), &Outcome::Fail, &message, None)
        .await?;
    Ok(())
}
