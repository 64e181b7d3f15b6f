//! The worker's side of the Redis Streams transport (`docs/redis.md`), in place of the claim
//! loops: [`relay`] (pending rows → streams), [`consumer`] (`XREADGROUP` → take → the usual
//! executor), [`acker`] (`XACK` + `XDEL` once MySQL has the outcome; keeps held entries fresh)
//! and [`sweeper`] (`XAUTOCLAIM` of entries whose consumer stopped). Everything after the take
//! — handlers, timeouts, heartbeats, the completer, releases at shutdown — is the runtime's own.

mod acker;
mod consumer;
mod relay;
mod sweeper;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::Error;
use crate::redis::{EntryId, MIN_VERSION, Redis};
use crate::store;
use crate::worker::{Key, Shared};

/// An entry to acknowledge and delete whatever became of its job: stale (its row moved on),
/// unreadable, or handed back.
pub(super) struct Stale {
    stream: usize,
    id: EntryId,
}

/// What the transport's tasks share.
pub(super) struct Side {
    redis: Redis,
    /// The worker's queues and their streams, by index.
    queues: Vec<String>,
    streams: Vec<String>,
    /// This worker's consumer name in the group: its process identity, `worker-id#random`.
    consumer: String,
    /// `locked_by` of the rows this worker's relay holds.
    relay_id: String,
    /// The stream entry of every job this worker took and has not acknowledged yet.
    entries: Mutex<HashMap<Key, (usize, EntryId)>>,
    stale: mpsc::UnboundedSender<Stale>,
}

impl Side {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (usize, EntryId)>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn drop_entry(&self, stream: usize, id: EntryId) {
        let _ = self.stale.send(Stale { stream, id });
    }
}

/// Checks Redis (reachable, 6.2 or newer), creates the groups, and starts the transport's tasks:
/// (fetchers the shutdown waits for, services stopped with the others).
pub(super) async fn spawn(
    s: &Arc<Shared>,
    redis: Redis,
    settled: mpsc::UnboundedReceiver<Key>,
) -> Result<(Vec<JoinHandle<()>>, Vec<JoinHandle<()>>), Error> {
    let (major, minor, patch) = redis.version().await?;
    if (major, minor) < MIN_VERSION {
        return Err(Error::Config(format!(
            "Redis {major}.{minor}.{patch} is too old for the Redis transport: XAUTOCLAIM needs 6.2 or newer"
        )));
    }
    let queues = s.config.queues.clone();
    for q in &queues {
        redis.ensure_group(q).await?;
    }
    let streams = queues.iter().map(|q| redis.stream_key(q)).collect();
    let mut relay_id = format!("{}{}", store::RELAY_PREFIX, s.instance);
    relay_id.truncate(128);
    let (stale_tx, stale_rx) = mpsc::unbounded_channel();
    let side = Arc::new(Side {
        redis,
        queues,
        streams,
        consumer: s.instance.clone(),
        relay_id,
        entries: Mutex::new(HashMap::new()),
        stale: stale_tx,
    });
    tracing::info!(
        streams = ?side.streams,
        cap = side.redis.config().stream_cap,
        "serving the queues over Redis Streams (relay + consumer group `mysqlq`)"
    );
    let fetchers = vec![
        tokio::spawn(relay::run(s.clone(), side.clone())),
        tokio::spawn(consumer::run(s.clone(), side.clone())),
    ];
    let services = vec![
        tokio::spawn(acker::run(s.clone(), side.clone(), settled, stale_rx)),
        tokio::spawn(sweeper::run(s.clone(), side)),
    ];
    Ok((fetchers, services))
}
