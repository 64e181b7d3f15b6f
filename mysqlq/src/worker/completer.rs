//! Batched completion: handlers that returned `Ok` queue their job here; one statement per
//! flush marks them all `completed`, each guarded by its claim token.
//!
//! When the worker claims from MySQL, queued completions first wait a moment (`carry_wait`, two
//! poll floors) for the next claim: a claim loop takes them into its own transaction
//! ([`Completer::carry`]), so that the completions of one batch and the claim of the next cost
//! one commit (one fsync) instead of two. What no claim took in that time is flushed here, on
//! its own. Without claims to ride on (the Redis transport) a flush starts as soon as the
//! previous one ended, so batching adds no waiting: under load a flush carries every completion
//! that arrived during the last one.
//!
//! A flush that hits a lock wait (an application transaction holds a lock on one of the rows)
//! or an error the server keeps refusing falls back to completing each job on its own, so one
//! blocked row never stalls the others. A completion whose COMMIT reply was lost is retried and
//! recognised as already written (the token stays on the row), never reported as lost; so is a
//! carried completion whose claim failed, which comes back here to be written again. A worker
//! that deletes completed jobs (`Config::delete_completed`) recognises its own earlier
//! deletions by their receipts instead ([`super::receipts`], `store::job_complete`).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::JobId;
use crate::store::{self, Deleting, GuardedReport, Owned};
use crate::worker::buffer::Hold;
use crate::worker::deferred::Deferred;
use crate::worker::executor::{self, Slot};
use crate::worker::flush::{done, flush};
use crate::worker::receipts::Receipts;
use crate::worker::write::write_retrying;
use crate::worker::{Key, Phase, Shared, release};

/// Most completions per statement.
const MAX_FLUSH: usize = 1000;
/// Room reserved per completing step for the steps its settlement may hand off to this worker
/// (at least a claim's batch in all).
const HANDOFF_PER_STEP: usize = 4;
/// How long a stopping worker goes on trying the settlements it deferred before it leaves them
/// to the leader's sweep.
const STOP_SETTLE: Duration = Duration::from_secs(2);
pub(crate) struct Completer {
    queue: Mutex<Vec<Key>>,
    /// Completions a claim's transaction failed to write (a lock wait on one of them, a lost
    /// connection): written by the completer alone from now on, never carried again, so that
    /// a row an application transaction keeps locked cannot stall claim after claim.
    solo: Mutex<Vec<Key>>,
    /// Completions of workflow steps: written with their settlement in a transaction of their
    /// own ([`store::workflow::wf_complete_steps`]), never carried by a claim; a settlement
    /// that finds its rows held follows a moment later ([`super::deferred`]).
    steps: Mutex<Vec<Key>>,
    arrived: Notify,
    /// How long queued completions wait for a claim to carry them (zero: not at all).
    carry_wait: Duration,
    /// The receipts of writes that delete their rows (nothing when the worker keeps them).
    pub(crate) receipts: Receipts,
}

impl Completer {
    pub(crate) fn new(carry_wait: Duration, delete: bool) -> Self {
        Self {
            queue: Mutex::new(Vec::new()),
            solo: Mutex::new(Vec::new()),
            steps: Mutex::new(Vec::new()),
            arrived: Notify::new(),
            carry_wait,
            receipts: Receipts::new(delete),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Vec<Key>> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues a completion (the handler has returned `Ok`).
    pub(crate) fn complete(&self, job: Key) {
        let mut q = self.queue();
        q.push(job);
        if q.len() == 1 {
            self.arrived.notify_one();
        }
    }

    fn steps(&self) -> std::sync::MutexGuard<'_, Vec<Key>> {
        self.steps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues the completion of a workflow step.
    pub(crate) fn complete_step(&self, job: Key) {
        let mut q = self.steps();
        q.push(job);
        if q.len() == 1 {
            self.arrived.notify_one();
        }
    }

    /// The next settlement's worth of step completions.
    fn next_steps(&self) -> Vec<Key> {
        let mut q = self.steps();
        let n = q.len().min(MAX_FLUSH);
        q.drain(..n).collect()
    }

    /// Takes the queued completions (at most one statement's worth) for a claim's transaction.
    /// Whatever the claim does not write (it failed, or it was dropped on the way) comes back
    /// to the queue when the returned value is dropped.
    pub(crate) fn carry(self: &Arc<Self>) -> Carried {
        let mut keys = if self.carry_wait.is_zero() {
            Vec::new()
        } else {
            let mut q = self.queue();
            let n = q.len().min(MAX_FLUSH);
            q.drain(..n).collect()
        };
        self.give_back(self.receipts.repeats(&mut keys));
        let deleting = if keys.is_empty() {
            None
        } else {
            self.receipts.plan(&keys)
        };
        Carried {
            completer: self.clone(),
            keys,
            deleting,
        }
    }

    /// Completions to write alone (a claim did not write them), first at the next flush.
    pub(crate) fn give_back(&self, keys: Vec<Key>) {
        if keys.is_empty() {
            return;
        }
        self.solo
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(keys);
        self.arrived.notify_one();
    }

    /// The next statement's worth: completions given back first, then queued ones.
    fn next_batch(&self) -> Vec<Key> {
        let mut batch: Vec<Key> = {
            let mut solo = self
                .solo
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let n = solo.len().min(MAX_FLUSH);
            solo.drain(..n).collect()
        };
        let mut q = self.queue();
        let n = q.len().min(MAX_FLUSH - batch.len());
        batch.extend(q.drain(..n));
        batch
    }

    /// Only step completions queued: nothing a claim could carry.
    fn only_steps(&self) -> bool {
        self.queue().is_empty()
            && self
                .solo
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_empty()
    }

    fn is_empty(&self) -> bool {
        self.queue().is_empty()
            && self.steps().is_empty()
            && self
                .solo
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_empty()
    }
}

/// Completions a claim carries into its transaction; back to the queue unless written.
pub(crate) struct Carried {
    completer: Arc<Completer>,
    keys: Vec<Key>,
    /// How the claim deletes their rows, when the worker deletes completed jobs.
    deleting: Option<Deleting>,
}

impl Carried {
    pub(crate) fn keys(&self) -> &[Key] {
        &self.keys
    }

    pub(crate) fn deleting(&self) -> Option<&Deleting> {
        self.deleting.as_ref()
    }

    /// The claim's transaction committed with these completions in it.
    pub(crate) fn written(mut self, s: &Shared, report: &GuardedReport) {
        let keys = std::mem::take(&mut self.keys);
        if keys.is_empty() {
            return;
        }
        self.completer.receipts.known(self.deleting.as_ref(), &keys);
        let m = &s.metrics;
        m.add(&m.counters.completion_flushes, 1);
        m.add(&m.counters.piggybacked, keys.len() as u64);
        done(s, &keys, report);
    }
}

impl Drop for Carried {
    fn drop(&mut self) {
        let keys = std::mem::take(&mut self.keys);
        // The claim failed, perhaps after its COMMIT: the next write of them reads its receipt.
        self.completer
            .receipts
            .in_doubt(self.deleting.as_ref(), &keys);
        self.completer.give_back(keys);
    }
}

pub(crate) async fn run(s: Arc<Shared>) {
    let c = s.completer.clone();
    // Completed steps whose settlement found its rows held, and when each is tried again.
    let mut deferred = Deferred::default();
    loop {
        if c.is_empty() {
            let due = deferred.next_due();
            tokio::select! {
                () = c.arrived.notified() => {}
                () = sleep_until(due) => {}
                () = sleep_until(c.receipts.due()) => {}
                () = s.stop_services.cancelled() => {}
            }
        }
        let stopping = s.stop_services.is_cancelled();
        if !stopping && !c.is_empty() {
            // Step completions are never carried by a claim: with nothing else queued, waiting
            // for one would only delay their dependents.
            if c.carry_wait.is_zero() || c.only_steps() {
                // Let the handlers finishing right now queue their completions too (a few
                // scheduler turns, no timer): one statement and one fsync then cover them all.
                for _ in 0..4 {
                    tokio::task::yield_now().await;
                }
            } else {
                // Give the next claim a moment to carry them.
                tokio::select! {
                    () = tokio::time::sleep(c.carry_wait) => {}
                    () = s.stop_services.cancelled() => {}
                }
            }
        }
        let mut batch = c.next_batch();
        if !batch.is_empty() {
            flush(&s, &mut batch).await;
        }
        let steps = c.next_steps();
        complete_steps(&s, steps, &mut deferred, Handoff::Allowed).await;
        c.receipts.delete_known(&s, stopping).await;
        if stopping && c.is_empty() {
            settle_before_stop(&s, &mut deferred, STOP_SETTLE).await;
            return;
        }
    }
}

async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Writes every queued completion now, with the flush of [`run`] (`mysqlq::testing`, which
/// runs no completer service: [`super::inline`]), and every settlement they defer.
pub(crate) async fn flush_now(s: &Arc<Shared>) {
    let mut deferred = Deferred::default();
    loop {
        let mut batch = s.completer.next_batch();
        if !batch.is_empty() {
            flush(s, &mut batch).await;
        }
        let steps = s.completer.next_steps();
        complete_steps(s, steps, &mut deferred, Handoff::Never).await;
        if let Some(due) = deferred.next_due() {
            tokio::time::sleep_until(due).await;
            complete_steps(s, Vec::new(), &mut deferred, Handoff::Never).await;
        }
        if s.completer.is_empty() && deferred.is_empty() {
            s.completer.receipts.delete_known(s, true).await;
            return;
        }
    }
}

/// Whether a settlement may claim the steps it releases for this worker.
#[derive(Debug, Clone, Copy)]
enum Handoff {
    /// The completer's own writes, while the worker claims.
    Allowed,
    /// `mysqlq::testing`'s drain (which runs what it claims itself, inline) and the settlements
    /// left at shutdown.
    Never,
}

/// Writes step completions with their settlement (one transaction), settling in it too the
/// earlier completions whose settlement is due again; what finds its rows held is scheduled
/// (again). Nothing to do without either.
async fn complete_steps(s: &Arc<Shared>, keys: Vec<Key>, deferred: &mut Deferred, may: Handoff) {
    let earlier = deferred.take_due();
    if keys.is_empty() && earlier.is_empty() {
        return;
    }
    let jobs: Vec<Owned> = keys.iter().map(Key::owned).collect();
    let mut room = match may {
        Handoff::Allowed => handoff_room(s, &keys),
        Handoff::Never => HashMap::new(),
    };
    let token = uuid::Uuid::new_v4().to_string();
    let handoff = (!room.is_empty()).then(|| store::workflow::Handoff {
        worker_id: &s.worker_id,
        token: &token,
        lease: s.config.lease,
        room: room
            .iter()
            .map(|(q, h)| (q.clone(), u32::try_from(h.len()).unwrap_or(u32::MAX)))
            .collect(),
    });
    let started = tokio::time::Instant::now();
    let result = write_retrying(s, "complete workflow steps", false, || async {
        let mut conn = s.db.acquire().await?;
        store::workflow::wf_complete_steps(&mut conn, &jobs, &earlier, handoff.as_ref()).await
    })
    .await;
    match result {
        Ok(mut settled) => {
            let m = &s.metrics;
            if !keys.is_empty() {
                m.add(&m.counters.completion_flushes, 1);
            }
            m.add(&m.counters.workflow_released, settled.released.len() as u64);
            m.add(
                &m.counters.workflow_settle_deferred,
                settled.deferred_now as u64,
            );
            // The steps handed off are this worker's before the completions let go of theirs,
            // so that a shutdown never finds it holding nothing in between (and stops waiting).
            let lease_from = settled
                .lease_sent
                .map_or(started, tokio::time::Instant::from_std);
            let taken = std::mem::take(&mut settled.handed_off);
            let adopted = std::mem::take(&mut settled.adopted);
            let handed = !taken.is_empty() || !adopted.is_empty();
            start_handed_off(s, &token, &mut room, taken, lease_from);
            start_handed_off(s, &token, &mut room, adopted, started);
            done(s, &keys, &settled.report);
            drop(room);
            s.slot_freed.notify_waiters();
            if handed && s.stopping.load(Ordering::SeqCst) {
                // The shutdown began while this was written: what it handed off does not start;
                // hand it back now, the shutdown may be past its last release.
                release::release_where(s, |f| f.phase == Phase::Claimed).await;
            }
            if !settled.released_queues.is_empty() {
                wake_for_released(s, &settled.released_queues);
            }
            let kept: Vec<JobId> = settled
                .unsettled
                .iter()
                .chain(&settled.more)
                .copied()
                .collect();
            deferred.written(&earlier, &kept);
            deferred.held(settled.unsettled);
            deferred.more(settled.more);
        }
        Err(e) => {
            // Earlier completions keep open edges: the leader's sweep settles them.
            if !earlier.is_empty() {
                tracing::warn!(steps = earlier.len(), error = %e, "settling completed workflow steps failed; the workflow sweep will");
                deferred.written(&earlier, &[]);
            }
            if !keys.is_empty() {
                tracing::error!(jobs = keys.len(), error = %e, "step completions not written; the leases will bring the jobs back");
                for k in &keys {
                    s.forget(k);
                }
            }
        }
    }
}

/// The room a settlement may claim released steps into ([`store::workflow::Handoff`]): in the
/// queues of the steps it completes, at most a claim's batch each or [`HANDOFF_PER_STEP`] per
/// step. None over the Redis transport (a released step goes through the relay), while the
/// worker stops or claims nothing (its leases unconfirmed), or without room.
fn handoff_room(s: &Shared, keys: &[Key]) -> HashMap<String, Hold> {
    let mut room = HashMap::new();
    if keys.is_empty()
        || s.settled.is_some()
        || s.stop_fetching.is_cancelled()
        || s.lease_unconfirmed.load(Ordering::SeqCst)
    {
        return room;
    }
    let queues: BTreeSet<String> = {
        let map = s.in_flight();
        keys.iter()
            .filter_map(|k| map.get(k).map(|f| f.ctx.queue().to_owned()))
            .collect()
    };
    // A claim's batch, or more when many steps complete (each may release several).
    let want = usize::try_from(s.config.batch_size)
        .unwrap_or(usize::MAX)
        .max(keys.len().saturating_mul(HANDOFF_PER_STEP));
    for q in queues {
        if s.config.queues.contains(&q) {
            let hold = s.lanes.reserve(&q, want, &s.config);
            if hold.len() > 0 {
                room.insert(q, hold);
            }
        }
    }
    room
}

/// Starts the released steps a settlement claimed for this worker, each in the room reserved
/// for its queue. The settlement never claims more than that room.
fn start_handed_off(
    s: &Arc<Shared>,
    token: &str,
    room: &mut HashMap<String, Hold>,
    jobs: Vec<store::workflow::HandedOff>,
    lease_from: tokio::time::Instant,
) {
    if jobs.is_empty() {
        return;
    }
    let m = &s.metrics;
    m.add(&m.counters.claims, jobs.len() as u64);
    m.add(&m.counters.workflow_handed_off, jobs.len() as u64);
    let token: Arc<str> = Arc::from(token);
    for h in jobs {
        let slot = match room.get_mut(&h.queue) {
            Some(hold) if hold.len() > 0 => hold.split_one(),
            // Not reachable (the settlement stays within the room); a job claimed beyond it
            // still runs, in room reserved now, rather than wait for its lease to end.
            _ => s.lanes.reserve_forced(&h.queue),
        };
        let lease_from = h
            .job
            .lease_sent
            .map_or(lease_from, tokio::time::Instant::from_std);
        executor::spawn(
            s,
            h.job,
            &h.queue,
            token.clone(),
            Slot::Buffered(slot),
            lease_from,
        );
    }
}

/// Steps were released into `queues`: this worker has the room their dependencies just gave
/// back, so one of its own claim loops claims them — not every claim loop of the process, which
/// all but one would then find nothing (an empty claim transaction each). The process's other
/// workers (and the Redis relay) are woken only for a queue this worker does not claim from.
fn wake_for_released(s: &Shared, queues: &[String]) {
    s.steps_released.notify_one();
    if s.settled.is_some() || queues.iter().any(|q| !s.config.queues.contains(q)) {
        crate::wake::wake_local();
    }
}

/// At shutdown: tries the settlements left for at most `limit`, then leaves the rest to the
/// leader's sweep.
async fn settle_before_stop(s: &Arc<Shared>, deferred: &mut Deferred, limit: Duration) {
    let end = tokio::time::Instant::now() + limit;
    while let Some(due) = deferred.next_due() {
        if due > end {
            break;
        }
        tokio::time::sleep_until(due).await;
        complete_steps(s, Vec::new(), deferred, Handoff::Never).await;
    }
    if !deferred.is_empty() {
        tracing::info!(
            steps = deferred.len(),
            "workflow settlements still held at shutdown; the workflow sweep will write them"
        );
    }
}
