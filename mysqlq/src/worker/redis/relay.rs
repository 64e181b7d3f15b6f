//! The relay: claims committed `pending` rows in MySQL first (`job_relay_claim`: the claim's
//! SELECT, ordering keys, concurrency limits and paused queues; a relay token and lease, no
//! attempt taken), then adds them to the queue's stream in one script that stops at the cap,
//! so the stream never holds more than [`RedisConfig::stream_cap`] entries and the backlog
//! waits in MySQL (back-pressure, never `MAXLEN`). Rows that did not fit, or whose `XADD`
//! failed, go straight back to `pending`.
//!
//! It remembers the entries it added until a consumer has read them, and every
//! [`RedisConfig::check_interval`] asks Redis which of those it no longer holds (restarted
//! without persistence, flushed, the stream deleted): their rows go back to `pending` at once
//! and are relayed again. It renews its lease on the rows whose entries still wait, so a long
//! backlog never expires; if the relay dies, its rows come back after the relay lease (the
//! reaper). Every relay works on rows SKIP LOCKED gave it alone, so any number of workers can
//! relay one queue; the cap holds for all of them together.
//!
//! At shutdown it deletes the entries nobody has read yet and hands their rows back.
//!
//! [`RedisConfig::stream_cap`]: crate::redis::RedisConfig::stream_cap
//! [`RedisConfig::check_interval`]: crate::redis::RedisConfig::check_interval

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use redis::streams::StreamInfoGroupsReply;
use tokio::time::Instant;

use super::Side;
use crate::Error;
use crate::redis::entry;
use crate::redis::{Entry, EntryId, GROUP, ensure_group};
use crate::store::{self, ClaimParams, GuardedReport, Owned};
use crate::wake::LOCAL_WAKE;
use crate::worker::write::error_chain;
use crate::worker::{Shared, WorkerEvent, unit_random};

/// The unread entries this relay added to one stream.
type Tracked = BTreeMap<EntryId, Owned>;

pub(super) async fn run(s: Arc<Shared>, side: Arc<Side>) {
    let cfg = side.redis.config().clone();
    let floor = s.config.poll_floor;
    let ceiling = s.config.poll_ceiling;
    let mut idle = floor;
    let mut tracked: Vec<Tracked> = vec![Tracked::new(); side.streams.len()];
    let mut next_check = Instant::now() + cfg.check_interval;
    let mut next_renew = Instant::now() + cfg.relay_lease / 3;
    loop {
        if s.stop_fetching.is_cancelled() {
            shutdown(&s, &side, &mut tracked).await;
            return;
        }
        let mut more = false;
        let mut any = false;
        let mut failed = false;
        for (i, t) in tracked.iter_mut().enumerate() {
            match relay_queue(&s, &side, i, t).await {
                Ok((added, full)) => {
                    any |= added > 0;
                    more |= full;
                }
                Err(e) => {
                    failed = true;
                    tracing::warn!(queue = %side.queues[i], error = %error_chain(&e), "relay round failed; retrying");
                }
            }
        }
        let now = Instant::now();
        if now >= next_check {
            for (i, t) in tracked.iter_mut().enumerate() {
                if let Err(e) = check(&s, &side, i, t).await {
                    tracing::warn!(queue = %side.queues[i], error = %error_chain(&e), "relay check of the stream failed; retrying");
                }
            }
            next_check = now + cfg.check_interval;
        }
        if now >= next_renew {
            if renew(&s, &cfg, &mut tracked).await.is_ok() {
                next_renew = now + cfg.relay_lease / 3;
            } else {
                next_renew = now + Duration::from_millis(200);
            }
        }
        if more {
            idle = floor;
            continue;
        }
        idle = if any {
            floor
        } else if failed {
            (idle * 4).min(ceiling.max(Duration::from_secs(5)))
        } else {
            (idle * 2).min(ceiling)
        };
        let wait = idle
            .mul_f64(0.75 + 0.25 * unit_random())
            .min(next_check.saturating_duration_since(Instant::now()));
        let woken = LOCAL_WAKE.notified();
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = woken => idle = floor,
            () = s.stop_fetching.cancelled() => {}
        }
    }
}

/// One round for one queue: room left under the cap, claim that many, add them. Returns
/// (entries added, whether a full batch went out so more may be waiting).
async fn relay_queue(
    s: &Shared,
    side: &Side,
    i: usize,
    tracked: &mut Tracked,
) -> Result<(usize, bool), Error> {
    let cfg = side.redis.config();
    let stream = &side.streams[i];
    let queue = &side.queues[i];
    let mut conn = side.redis.conn();
    let length: u64 = redis::cmd("XLEN")
        .arg(stream)
        .query_async(&mut conn)
        .await?;
    if length >= cfg.stream_cap {
        s.emit(WorkerEvent::StreamFull {
            queue: queue.clone(),
            length,
        });
        return Ok((0, false));
    }
    let want = u32::try_from(cfg.stream_cap - length)
        .unwrap_or(u32::MAX)
        .min(cfg.relay_batch);
    let token = uuid::Uuid::new_v4().to_string();
    let params = ClaimParams {
        queue,
        limit: want,
        skip: 0,
        worker_id: &side.relay_id,
        token: &token,
        lease: cfg.relay_lease,
    };
    let jobs = {
        let mut db = s.db.acquire().await?;
        match store::job_relay_claim(&mut db, &params).await {
            Ok(jobs) => jobs,
            Err(f) if !f.in_doubt.is_empty() => {
                // The COMMIT's reply was lost: ask which rows the claim holds.
                let mut db = s.db.acquire().await?;
                store::job_claim_resolve(&mut db, &token, &f.in_doubt).await?
            }
            Err(f) if store::is_lock_error(&f.error) => return Ok((0, true)),
            Err(f) => return Err(f.error),
        }
    };
    if jobs.is_empty() {
        return Ok((0, false));
    }
    let entries: Vec<Entry> = jobs
        .iter()
        .map(|j| Entry::from_claimed(j, &token))
        .collect();
    let added = match entry::add_capped(&mut conn, stream, cfg.stream_cap, &entries).await {
        Ok(ids) => ids,
        Err(e) => {
            // The entries may or may not be there: hand the rows back; an entry that did make
            // it is refused at its take (the row no longer carries its token).
            release(s, &entries.iter().map(Entry::owned).collect::<Vec<_>>()).await;
            return Err(e);
        }
    };
    for (id, e) in added.iter().zip(&entries) {
        tracked.insert(*id, e.owned());
    }
    if added.len() < entries.len() {
        // Others filled the stream meanwhile: the rest waits in MySQL.
        let rest: Vec<Owned> = entries[added.len()..].iter().map(Entry::owned).collect();
        release(s, &rest).await;
    }
    if !added.is_empty() {
        s.emit(WorkerEvent::Relayed {
            queue: queue.clone(),
            jobs: added.len(),
        });
    }
    Ok((
        added.len(),
        added.len() == want as usize && want == cfg.relay_batch,
    ))
}

/// Forgets entries a consumer has read, and hands back the jobs of entries Redis lost.
async fn check(s: &Shared, side: &Side, i: usize, tracked: &mut Tracked) -> Result<(), Error> {
    if tracked.is_empty() {
        return Ok(());
    }
    let stream = &side.streams[i];
    let mut conn = side.redis.conn();
    let ids: Vec<EntryId> = tracked.keys().copied().collect();
    // Missing first, delivered second: an entry read, run and deleted between the two is
    // then seen as delivered, not lost.
    let missing = entry::missing(&mut conn, stream, &ids).await?;
    let delivered = match redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(stream)
        .query_async::<StreamInfoGroupsReply>(&mut conn)
        .await
    {
        Ok(g) => g
            .groups
            .iter()
            .find(|g| g.name == GROUP)
            .and_then(|g| EntryId::parse(&g.last_delivered_id)),
        // "no such key": the stream is gone.
        Err(e) if e.code() == Some("ERR") => None,
        Err(e) => return Err(e.into()),
    };
    let Some(delivered) = delivered else {
        // No group (or no stream): Redis lost everything; the consumers make it again, and
        // so does this.
        ensure_group(&mut conn, stream).await?;
        let lost: Vec<Owned> = std::mem::take(tracked).into_values().collect();
        lost_entries(s, side, i, lost).await;
        return Ok(());
    };
    tracked.retain(|id, _| *id > delivered);
    let lost: Vec<Owned> = missing.iter().filter_map(|id| tracked.remove(id)).collect();
    lost_entries(s, side, i, lost).await;
    Ok(())
}

async fn lost_entries(s: &Shared, side: &Side, i: usize, lost: Vec<Owned>) {
    if lost.is_empty() {
        return;
    }
    tracing::warn!(
        queue = %side.queues[i],
        jobs = lost.len(),
        "Redis no longer holds entries the relay added (restarted empty, flushed, stream deleted?): their jobs go back to pending and are relayed again"
    );
    release(s, &lost).await;
    s.emit(WorkerEvent::EntriesLost {
        queue: side.queues[i].clone(),
        jobs: lost.len(),
    });
}

/// Renews the relay lease of rows whose entries still wait; forgets rows that moved on.
async fn renew(
    s: &Shared,
    cfg: &crate::redis::RedisConfig,
    tracked: &mut [Tracked],
) -> Result<(), Error> {
    let all: Vec<Owned> = tracked.iter().flat_map(|t| t.values().cloned()).collect();
    for chunk in all.chunks(1000) {
        let mut db = s.db.acquire().await?;
        let report: GuardedReport = store::job_heartbeat(&mut db, cfg.relay_lease, chunk).await?;
        let gone: Vec<_> = report
            .lost
            .iter()
            .chain(&report.settled)
            .chain(&report.cancelled)
            .collect();
        if !gone.is_empty() {
            for t in tracked.iter_mut() {
                t.retain(|_, o| !gone.contains(&&*o));
            }
        }
    }
    Ok(())
}

/// Deletes the entries nobody has read and hands their rows back (bounded in time: what is
/// left comes back with the relay lease).
async fn shutdown(s: &Shared, side: &Side, tracked: &mut [Tracked]) {
    let work = async {
        let mut conn = side.redis.conn();
        for (i, t) in tracked.iter().enumerate() {
            if t.is_empty() {
                continue;
            }
            let ids: Vec<String> = t.keys().map(ToString::to_string).collect();
            let r: redis::RedisResult<u64> = redis::cmd("XDEL")
                .arg(&side.streams[i])
                .arg(&ids)
                .query_async(&mut conn)
                .await;
            if let Err(e) = r {
                tracing::warn!(error = %crate::error_chain(&e), "could not delete unread entries at shutdown");
            }
        }
        let all: Vec<Owned> = tracked.iter().flat_map(|t| t.values().cloned()).collect();
        release(s, &all).await;
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), work).await;
}

/// Hands relayed rows back to `pending` (no attempt was taken); a failure is logged and left
/// to the relay lease.
async fn release(s: &Shared, jobs: &[Owned]) {
    if jobs.is_empty() {
        return;
    }
    let r = async {
        let mut db = s.db.acquire().await?;
        store::job_relay_release(&mut db, jobs).await
    }
    .await;
    if let Err(e) = r {
        tracing::warn!(jobs = jobs.len(), error = %error_chain(&e), "could not hand relayed jobs back; their relay lease brings them back");
    }
}
