//! Handing claimed jobs back to `pending` without consuming the attempt: at shutdown, and when a
//! job's lease could not be renewed.

use std::sync::Arc;
use std::time::Duration;

use crate::CancelReason;
use crate::store;
use crate::worker::write::write_retrying;
use crate::worker::{InFlight, Key, Shared, WorkerEvent};

/// Takes the entries `pick` selects, cancels their handlers (reason: shutdown) and hands the
/// jobs back to `pending` without consuming the attempt, in one statement. Returns how many
/// were released. Bounded in time: if the database cannot be reached the leases bring the jobs
/// back.
pub(crate) async fn release_where(s: &Arc<Shared>, pick: impl Fn(&InFlight) -> bool) -> usize {
    let taken: Vec<(Key, InFlight)> = {
        let mut map = s.in_flight();
        let keys: Vec<Key> = map
            .iter()
            .filter(|(_, f)| pick(f))
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| map.remove(&k).map(|f| (k, f)))
            .collect()
    };
    if taken.is_empty() {
        return 0;
    }
    for (_, f) in &taken {
        f.ctx.cancel(CancelReason::Shutdown);
        if let Some(a) = &f.abort {
            a.abort();
        }
    }
    let keys: Vec<Key> = taken.into_iter().map(|(k, _)| k).collect();
    s.slot_freed.notify_waiters();
    release(s, &keys, Duration::from_secs(10)).await
}

/// Hands one claim back after it was stopped because its lease could not be renewed: one
/// bounded try (the database may well be unreachable; then the lease brings the job back).
pub(crate) async fn release_one(s: &Arc<Shared>, key: &Key) {
    if s.forget(key).is_some() {
        release(s, std::slice::from_ref(key), Duration::from_secs(2)).await;
    }
}

async fn release(s: &Arc<Shared>, keys: &[Key], limit: Duration) -> usize {
    let owned: Vec<store::Owned> = keys.iter().map(Key::owned).collect();
    let work = write_retrying(s, "release jobs", false, || {
        let db = s.db.clone();
        let owned = &owned;
        async move {
            let mut conn = db.acquire().await?;
            store::job_release(&mut conn, owned).await
        }
    });
    let report = match tokio::time::timeout(limit, work).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            tracing::error!(jobs = keys.len(), error = %e, "release failed; the leases will bring the jobs back");
            return 0;
        }
        Err(_) => {
            tracing::error!(
                jobs = keys.len(),
                "release timed out; the leases will bring the jobs back"
            );
            return 0;
        }
    };
    for k in keys {
        s.settled(k);
    }
    let m = &s.metrics;
    m.add(&m.counters.released, report.done);
    m.add(&m.counters.lost, report.lost.len() as u64);
    for k in keys {
        if !report.is_lost(k.id, &k.token) && !report.is_cancelled(k.id, &k.token) {
            s.emit(WorkerEvent::Released { id: k.id });
        }
    }
    usize::try_from(report.done + report.settled.len() as u64).unwrap_or(usize::MAX)
}
