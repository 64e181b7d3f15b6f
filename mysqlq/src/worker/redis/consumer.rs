//! The consumer: `XREADGROUP GROUP mysqlq <consumer> COUNT <free slots> BLOCK … STREAMS … >` on a
//! connection of its own, then the **take** in MySQL (one statement per read: guarded by each
//! entry's relay token, it hands the rows to this worker under a new token and lease and takes
//! the attempt), then the runtime's executor. An entry whose row moved on (taken already,
//! released, reaped, cancelled, finished) is not taken: it is acknowledged and dropped.
//!
//! At shutdown a blocked read is ended with `CLIENT UNBLOCK` and what it returned is taken like
//! any read; the executor does not start those jobs and the shutdown releases them to MySQL,
//! after which their entries are acknowledged.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::streams::StreamReadReply;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::Side;
use crate::redis::{Entry, EntryId, GROUP, ensure_group, is_no_group};
use crate::store::{self, Owned, TakeParams};
use crate::worker::write::{error_chain, write_retrying};
use crate::worker::{Key, Shared, WorkerEvent, executor, sleep_or_cancel};

/// One entry read: its stream, id and what it carries.
pub(super) struct Read {
    pub(super) stream: usize,
    pub(super) id: EntryId,
    pub(super) entry: Entry,
}

pub(super) async fn run(s: Arc<Shared>, side: Arc<Side>) {
    let mut conn: Option<(MultiplexedConnection, i64)> = None;
    let mut pause = Duration::from_millis(50);
    loop {
        if s.stop_fetching.is_cancelled() {
            return;
        }
        if s.lease_unconfirmed.load(Ordering::SeqCst) {
            // MySQL does not answer heartbeats: take nothing until it does.
            if !sleep_or_cancel(Duration::from_millis(50), &s.stop_fetching).await {
                return;
            }
            continue;
        }
        if s.slots.available_permits() == 0 {
            let freed = s.slot_freed.notified();
            if s.slots.available_permits() == 0 {
                tokio::select! {
                    () = freed => {}
                    () = s.stop_fetching.cancelled() => return,
                }
            }
            continue;
        }
        let (c, client_id) = match conn.take() {
            Some(c) => c,
            None => match connect(&side).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "cannot reach Redis to read the streams; retrying");
                    if !sleep_or_cancel(pause, &s.stop_fetching).await {
                        return;
                    }
                    pause = (pause * 2).min(Duration::from_secs(5));
                    continue;
                }
            },
        };
        // The slots are not held while the read blocks (the sweeper may need one); they are
        // taken when entries arrive, and what finds no slot then is handed back.
        let want = s
            .config
            .batch_size
            .min(u32::try_from(s.slots.available_permits()).unwrap_or(u32::MAX))
            .max(1);
        let mut c = c;
        match read(&s, &side, &mut c, client_id, want as usize).await {
            Ok(reads) => {
                pause = Duration::from_millis(50);
                conn = Some((c, client_id));
                let m = &s.metrics;
                m.add(&m.counters.polls, 1);
                if reads.is_empty() {
                    m.add(&m.counters.empty_polls, 1);
                    continue;
                }
                let free = s.slots.available_permits().min(reads.len());
                match s
                    .slots
                    .clone()
                    .try_acquire_many_owned(u32::try_from(free).unwrap_or(u32::MAX))
                {
                    Ok(permits) if free > 0 => {
                        start(&s, &side, reads, permits).await;
                    }
                    _ => hand_back(&s, &side, &reads).await,
                }
            }
            Err(e) if is_no_group(&e) => {
                // The stream or its group is gone (Redis restarted empty, flushed, the stream
                // deleted): make them again; the relay finds out what it lost on its own.
                tracing::warn!(
                    "a stream's consumer group is gone (Redis lost its data?); creating it again"
                );
                for stream in &side.streams {
                    if let Err(e) = ensure_group(&mut c, stream).await {
                        tracing::warn!(stream, error = %error_chain(&e), "cannot create the consumer group");
                    }
                }
                conn = Some((c, client_id));
            }
            Err(e) => {
                tracing::warn!(error = %crate::error_chain(&e), "XREADGROUP failed; reconnecting");
                s.metrics.add(&s.metrics.counters.db_errors, 1);
                if !sleep_or_cancel(pause, &s.stop_fetching).await {
                    return;
                }
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
    }
}

async fn connect(side: &Side) -> Result<(MultiplexedConnection, i64), crate::Error> {
    let mut c = side.redis.dedicated().await?;
    let id: i64 = redis::cmd("CLIENT").arg("ID").query_async(&mut c).await?;
    for stream in &side.streams {
        ensure_group(&mut c, stream).await?;
    }
    Ok((c, id))
}

/// One `XREADGROUP` over every stream (`COUNT` split between them), ended early by
/// `CLIENT UNBLOCK` when shutdown starts.
async fn read(
    s: &Shared,
    side: &Side,
    c: &mut MultiplexedConnection,
    client_id: i64,
    want: usize,
) -> redis::RedisResult<Vec<Read>> {
    let per = want.div_ceil(side.streams.len()).max(1);
    let block = u64::try_from(side.redis.config().block.as_millis()).unwrap_or(60_000);
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP")
        .arg(GROUP)
        .arg(&side.consumer)
        .arg("COUNT")
        .arg(per)
        .arg("BLOCK")
        .arg(block)
        .arg("STREAMS");
    for stream in &side.streams {
        cmd.arg(stream);
    }
    for _ in &side.streams {
        cmd.arg(">");
    }
    let fut = cmd.query_async::<Option<StreamReadReply>>(c);
    tokio::pin!(fut);
    let reply = tokio::select! {
        r = &mut fut => r?,
        () = s.stop_fetching.cancelled() => {
            let _: redis::RedisResult<i64> = redis::cmd("CLIENT")
                .arg("UNBLOCK")
                .arg(client_id)
                .query_async(&mut side.redis.conn())
                .await;
            match tokio::time::timeout(Duration::from_secs(5), &mut fut).await {
                Ok(r) => r?,
                Err(_) => None,
            }
        }
    };
    let mut out = Vec::new();
    for key in reply.map(|r| r.keys).unwrap_or_default() {
        let Some(stream) = side.streams.iter().position(|k| *k == key.key) else {
            continue;
        };
        for e in key.ids {
            out.extend(parse(side, stream, &e.id, &e.map));
        }
    }
    Ok(out)
}

/// Reads one entry; an unreadable one is dropped (its job, if any, comes back through MySQL).
pub(super) fn parse(
    side: &Side,
    stream: usize,
    id: &str,
    map: &std::collections::HashMap<String, redis::Value>,
) -> Option<Read> {
    let Some(eid) = EntryId::parse(id) else {
        tracing::warn!(id, "stream entry with an id Redis never makes; ignored");
        return None;
    };
    match Entry::parse(map) {
        Ok(entry) => Some(Read {
            stream,
            id: eid,
            entry,
        }),
        Err(why) => {
            tracing::warn!(stream = %side.streams[stream], id, why, "unreadable stream entry: acknowledged and dropped");
            side.drop_entry(stream, eid);
            None
        }
    }
}

/// Takes the jobs of `reads` in MySQL (one statement) and starts those taken, one permit each;
/// drops the entries whose row moved on. Reads beyond the permits are handed back to
/// `pending` (several streams can return more than was asked for in all). Returns how many
/// started.
pub(super) async fn start(
    s: &Arc<Shared>,
    side: &Side,
    mut reads: Vec<Read>,
    mut permits: OwnedSemaphorePermit,
) -> usize {
    let room = permits.num_permits();
    if reads.len() > room {
        let extra = reads.split_off(room);
        hand_back(s, side, &extra).await;
    }
    let owned: Vec<Owned> = reads.iter().map(|r| r.entry.owned()).collect();
    let token = uuid::Uuid::new_v4().to_string();
    let sent = Instant::now();
    let taken = write_retrying(s, "take jobs", false, || async {
        let mut conn = s.db.acquire().await?;
        let p = TakeParams {
            jobs: &owned,
            worker_id: &s.worker_id,
            token: &token,
            lease: s.config.lease,
        };
        store::job_take(&mut conn, &p).await
    })
    .await;
    let taken = match taken {
        Ok(t) => t,
        Err(e) => {
            // Left in this consumer's pending list: the relay lease or the sweeper brings the
            // jobs back.
            tracing::error!(jobs = reads.len(), error = %e, "could not take the jobs read from Redis");
            return 0;
        }
    };
    let token: Arc<str> = Arc::from(token);
    let mut started = 0;
    for r in reads {
        if !taken.contains(&r.entry.job) {
            side.drop_entry(r.stream, r.id);
            continue;
        }
        let key = Key {
            id: r.entry.job,
            token: token.clone(),
        };
        side.entries().insert(key, (r.stream, r.id));
        let one = permits.split(1).expect("one permit per job taken");
        executor::spawn(
            s,
            r.entry.claimed(),
            &side.queues[r.stream],
            token.clone(),
            executor::Slot::Running(one),
            sent,
        );
        started += 1;
    }
    let m = &s.metrics;
    m.add(&m.counters.claims, started as u64);
    s.emit(WorkerEvent::Polled { claimed: started });
    started
}

/// Entries read but not to be run here: their rows back to `pending` (no attempt was taken),
/// their entries acknowledged and dropped; the relays send the jobs again.
pub(super) async fn hand_back(s: &Shared, side: &Side, reads: &[Read]) {
    if reads.is_empty() {
        return;
    }
    let owned: Vec<Owned> = reads.iter().map(|r| r.entry.owned()).collect();
    let done = async {
        let mut conn = s.db.acquire().await?;
        store::job_relay_release(&mut conn, &owned).await
    }
    .await;
    match done {
        Ok(_) => {
            for r in reads {
                side.drop_entry(r.stream, r.id);
            }
        }
        Err(e) => {
            tracing::warn!(jobs = reads.len(), error = %error_chain(&e), "could not hand jobs read from Redis back; their relay lease brings them back");
        }
    }
}
