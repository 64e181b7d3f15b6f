//! The completer's bookkeeping when the worker deletes completed jobs
//! ([`Config::delete_completed`](super::Config::delete_completed), `store::job_complete`): each
//! deleting write gets a receipt token of its own (the same on each retry of it); the
//! completions a write left in doubt (it failed, and may have committed: a lost COMMIT reply,
//! a claim transaction that carried them and failed) remember its receipt, so that their next
//! write tells from it whether their gone rows were deleted by this worker (counted once, no
//! warning) or by someone else (lost); and a receipt whose write's outcome is known is deleted,
//! in batches. Without the setting every method does nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::store::{self, Deleting};
use crate::worker::{Key, Shared};

/// Receipts deleted per statement.
const DELETE_CHUNK: usize = 1000;
/// Known receipts waiting for their deletion: deleted once this many are waiting…
const DELETE_AT: usize = 256;
/// …or once the oldest has waited this long.
const DELETE_AFTER: Duration = Duration::from_secs(5);

pub(crate) struct Receipts {
    enabled: bool,
    /// Completions whose earlier deleting write may have committed, with that write's receipt
    /// (one per such write). Empty nearly always.
    doubts: Mutex<HashMap<Key, Vec<Arc<str>>>>,
    /// Receipts of writes whose outcome is known, to delete, and since when the oldest waits.
    known: Mutex<(Vec<String>, Option<Instant>)>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Receipts {
    pub(crate) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            doubts: Mutex::default(),
            known: Mutex::default(),
        }
    }

    /// How a write of `keys` deletes: `None` when the worker keeps completed jobs; else a fresh
    /// receipt, and the receipts of their earlier writes left in doubt.
    pub(crate) fn plan(&self, keys: &[Key]) -> Option<Deleting> {
        if !self.enabled {
            return None;
        }
        let doubts = lock(&self.doubts);
        let earlier = keys
            .iter()
            .flat_map(|k| {
                doubts
                    .get(k)
                    .into_iter()
                    .flatten()
                    .map(|t| (k.owned(), t.to_string()))
            })
            .collect();
        Some(Deleting {
            receipt: uuid::Uuid::new_v4().to_string(),
            earlier,
        })
    }

    /// Splits off (and returns) the keys of `batch` whose job another key of it names already:
    /// a deleting write names each job once, so that its receipt's ids name its claims. Nothing
    /// when the worker keeps completed jobs.
    pub(crate) fn repeats(&self, batch: &mut Vec<Key>) -> Vec<Key> {
        if !self.enabled {
            return Vec::new();
        }
        let mut seen = std::collections::HashSet::new();
        let (once, again): (Vec<Key>, Vec<Key>) = std::mem::take(batch)
            .into_iter()
            .partition(|k| seen.insert(k.id));
        *batch = once;
        again
    }

    /// The write `d` of `keys` committed and its reply came back: its receipt is no longer
    /// needed, nor are its keys' doubts.
    pub(crate) fn known(&self, d: Option<&Deleting>, keys: &[Key]) {
        let Some(d) = d else { return };
        self.forget(keys);
        // So are the earlier writes' receipts this write read, once no completion left in
        // doubt names them any more.
        let mut done = vec![d.receipt.clone()];
        if !d.earlier.is_empty() {
            let doubts = lock(&self.doubts);
            for (_, token) in &d.earlier {
                let named = doubts.values().flatten().any(|t| **t == **token);
                if !named && !done.contains(token) {
                    done.push(token.clone());
                }
            }
        }
        let mut known = lock(&self.known);
        if known.0.is_empty() {
            known.1 = Some(Instant::now());
        }
        known.0.extend(done);
    }

    /// The write `d` of `keys` failed, perhaps after committing: its keys remember its receipt.
    pub(crate) fn in_doubt(&self, d: Option<&Deleting>, keys: &[Key]) {
        let Some(d) = d else { return };
        let token: Arc<str> = Arc::from(d.receipt.as_str());
        let mut doubts = lock(&self.doubts);
        for k in keys {
            doubts.entry(k.clone()).or_default().push(token.clone());
        }
    }

    /// `keys` are no longer written by this worker (written, or given up on).
    pub(crate) fn forget(&self, keys: &[Key]) {
        if !self.enabled {
            return;
        }
        let mut doubts = lock(&self.doubts);
        if !doubts.is_empty() {
            for k in keys {
                doubts.remove(k);
            }
        }
    }

    /// When the receipts waiting for their deletion are due to be deleted.
    pub(crate) fn due(&self) -> Option<Instant> {
        lock(&self.known).1.map(|since| since + DELETE_AFTER)
    }

    /// Deletes the receipts of known writes when enough of them wait or the oldest waited long
    /// enough, or all of them at once with `all` (shutdown: what a failed statement leaves is
    /// left to the leader's prune).
    pub(crate) async fn delete_known(&self, s: &Shared, all: bool) {
        loop {
            let tokens: Vec<String> = {
                let mut known = lock(&self.known);
                let due = known.1.is_some_and(|since| since.elapsed() >= DELETE_AFTER);
                if known.0.is_empty() || !(all || due || known.0.len() >= DELETE_AT) {
                    return;
                }
                let n = known.0.len().min(DELETE_CHUNK);
                let tokens = known.0.drain(..n).collect();
                known.1 = (!known.0.is_empty()).then(Instant::now);
                tokens
            };
            let result = async {
                let mut conn = s.db.acquire().await?;
                store::receipt_delete(&mut conn, &tokens).await
            }
            .await;
            if let Err(e) = result {
                tracing::debug!(receipts = tokens.len(), error = %crate::worker::write::error_chain(&e), "deleting completion receipts failed; later");
                if all {
                    return;
                }
                // Tried again a while later, not at the completer's next turn.
                let mut known = lock(&self.known);
                known.1 = Some(Instant::now());
                known.0.extend(tokens);
                return;
            }
        }
    }
}
