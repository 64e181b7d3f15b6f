//! Acknowledging: an entry is `XACK`ed and `XDEL`ed — both in one `MULTI`/`EXEC`, so an entry
//! is never acknowledged and left in the stream — once MySQL has its job's outcome (the
//! runtime's completer, executor, releases and heartbeats report it through
//! `Shared::settled`), or when its job moved on without it (stale). Acknowledgements are
//! batched per stream; one that fails is tried again a few times, then left to the sweeper.
//!
//! Between two heartbeats the acker also touches every entry this worker holds (`XCLAIM … 0
//! JUSTID`, which resets its idle time without counting a delivery), so only entries whose
//! consumer stopped for a lease look idle to the sweepers.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Side, Stale};
use crate::redis::{EntryId, GROUP};
use crate::worker::write::error_chain;
use crate::worker::{Key, Shared, WorkerEvent};

/// Most entries per `XACK`.
const MAX_BATCH: usize = 1000;
/// Tries of one acknowledgement before it is left to the sweeper.
const TRIES: u32 = 5;

pub(super) async fn run(
    s: Arc<Shared>,
    side: Arc<Side>,
    mut settled: mpsc::UnboundedReceiver<Key>,
    mut stale: mpsc::UnboundedReceiver<Stale>,
) {
    let mut touch = tokio::time::interval(s.config.heartbeat());
    touch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // (stream, entry) → tries so far.
    let mut due: BTreeMap<(usize, EntryId), u32> = BTreeMap::new();
    let mut suspects: HashSet<Key> = HashSet::new();
    loop {
        tokio::select! {
            k = settled.recv() => if let Some(k) = k { take_key(&side, &k, &mut due) },
            e = stale.recv() => if let Some(e) = e { due.entry((e.stream, e.id)).or_insert(0); },
            _ = touch.tick() => {
                forget_unsettled(&s, &side, &mut suspects);
                touch_held(&side).await;
                continue;
            }
            () = s.stop_services.cancelled() => {
                while let Ok(k) = settled.try_recv() {
                    take_key(&side, &k, &mut due);
                }
                while let Ok(e) = stale.try_recv() {
                    due.entry((e.stream, e.id)).or_insert(0);
                }
                let _ = tokio::time::timeout(Duration::from_secs(5), flush(&s, &side, &mut due)).await;
                return;
            }
        }
        while due.len() < MAX_BATCH {
            if let Ok(k) = settled.try_recv() {
                take_key(&side, &k, &mut due);
            } else if let Ok(e) = stale.try_recv() {
                due.entry((e.stream, e.id)).or_insert(0);
            } else {
                break;
            }
        }
        if !flush(&s, &side, &mut due).await {
            // Redis does not answer: wait a little before trying again.
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
                () = s.stop_services.cancelled() => {}
            }
        }
    }
}

fn take_key(side: &Side, key: &Key, due: &mut BTreeMap<(usize, EntryId), u32>) {
    if let Some((stream, id)) = side.entries().remove(key) {
        due.entry((stream, id)).or_insert(0);
    }
}

/// `MULTI; XACK …; XDEL …; EXEC` per stream. `false` when something failed.
async fn flush(s: &Shared, side: &Side, due: &mut BTreeMap<(usize, EntryId), u32>) -> bool {
    if due.is_empty() {
        return true;
    }
    let mut by_stream: BTreeMap<usize, Vec<EntryId>> = BTreeMap::new();
    for &(stream, id) in due.keys() {
        by_stream.entry(stream).or_default().push(id);
    }
    let mut conn = side.redis.conn();
    let mut ok = true;
    for (stream, ids) in by_stream {
        let key = &side.streams[stream];
        let list: Vec<String> = ids.iter().map(ToString::to_string).collect();
        let r: redis::RedisResult<()> = redis::pipe()
            .atomic()
            .cmd("XACK")
            .arg(key)
            .arg(GROUP)
            .arg(&list)
            .ignore()
            .cmd("XDEL")
            .arg(key)
            .arg(&list)
            .ignore()
            .query_async(&mut conn)
            .await;
        match r {
            Ok(()) => {
                for id in &ids {
                    due.remove(&(stream, *id));
                }
                s.emit(WorkerEvent::Acked { entries: ids.len() });
            }
            Err(e) => {
                ok = false;
                tracing::warn!(stream = %key, entries = ids.len(), error = %crate::error_chain(&e), "XACK/XDEL failed; retrying");
                for id in &ids {
                    if let Some(t) = due.get_mut(&(stream, *id)) {
                        *t += 1;
                        if *t >= TRIES {
                            due.remove(&(stream, *id));
                        }
                    }
                }
            }
        }
    }
    ok
}

/// Stops holding entries whose job this worker let go of without MySQL recording an outcome
/// (a write that failed for good: the lease brings the job back, relayed anew): they are not
/// acknowledged, only no longer touched, so a sweeper finds them idle after a lease and drops
/// them as stale. A key is let go of only when it was missing from the in-flight map at two
/// touches in a row (a job being started is in `entries` a moment before it is in flight).
fn forget_unsettled(s: &Shared, side: &Side, suspects: &mut HashSet<Key>) {
    let held: HashSet<Key> = s.in_flight().keys().cloned().collect();
    let mut entries = side.entries();
    let gone: HashSet<Key> = entries
        .keys()
        .filter(|k| !held.contains(*k))
        .cloned()
        .collect();
    for k in gone.intersection(suspects) {
        entries.remove(k);
    }
    *suspects = gone;
}

/// `XCLAIM <stream> mysqlq <me> 0 <ids…> JUSTID` for the entries this worker holds.
async fn touch_held(side: &Side) {
    let mut by_stream: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (stream, id) in side.entries().values() {
        by_stream.entry(*stream).or_default().push(id.to_string());
    }
    let mut conn = side.redis.conn();
    for (stream, ids) in by_stream {
        for chunk in ids.chunks(MAX_BATCH) {
            let r: redis::RedisResult<redis::Value> = redis::cmd("XCLAIM")
                .arg(&side.streams[stream])
                .arg(GROUP)
                .arg(&side.consumer)
                .arg(0)
                .arg(chunk)
                .arg("JUSTID")
                .query_async(&mut conn)
                .await;
            if let Err(e) = r {
                tracing::debug!(error = %error_chain(&e), "touching held entries failed");
            }
        }
    }
}
