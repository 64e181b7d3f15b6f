//! The local prefetch buffer and per-queue concurrency.
//!
//! The claim loop claims whole batches ahead of free slots: jobs claimed beyond the running ones
//! wait here, in claim order, for a slot of their queue and of the worker. They are claimed
//! rows like any other (`processing`, under the claim's token and lease): heartbeats renew
//! them, shutdown hands them back at once without consuming their attempt, and a job that
//! waited longer than `prefetch_wait` is handed back the same way so that another worker can
//! run it.
//!
//! How much is claimed ahead adapts to how fast this worker starts jobs: at most
//! `prefetch` jobs, and at most half the jobs started in the last `prefetch_wait` per lane, so
//! a worker of slow jobs holds (almost) nothing it cannot start soon, while a worker of fast
//! jobs claims full batches whatever its concurrency.
//!
//! A **lane** is the worker as a whole, or one queue with a concurrency limit of its own
//! (`--queues emails=10,reports=2`): each counts the jobs it holds (buffered or running) and has
//! its own running slots, so a slow queue cannot take the slots of the others. The claim loop
//! visits the queues round-robin, and each claim asks for no more than both its queue's lane
//! and the worker's lane have room for.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::worker::Config;

/// One lane: the worker, or a queue with its own concurrency limit.
#[derive(Debug)]
pub(crate) struct Lane {
    /// Jobs of this lane allowed to run at once.
    limit: usize,
    /// Running slots of a queue lane (`None` for the worker's lane, whose slots are
    /// [`crate::worker::Shared::slots`], shared with the Redis transport).
    run: Option<Arc<Semaphore>>,
    /// Jobs claimed and not yet returned by their handler (buffered or running).
    held: AtomicUsize,
    starts: Mutex<Window>,
    /// No claiming ahead before this instant: the worker serves rate-limited jobs, which must
    /// find a free running slot the moment they are claimed (shared by every lane).
    no_ahead_until: Arc<Mutex<Option<Instant>>>,
}

/// Starts counted over the current and the previous window of `prefetch_wait`.
#[derive(Debug)]
struct Window {
    began: Instant,
    current: usize,
    previous: usize,
}

impl Lane {
    fn new(limit: usize, own_slots: bool, no_ahead_until: Arc<Mutex<Option<Instant>>>) -> Self {
        Self {
            no_ahead_until,
            limit,
            run: own_slots.then(|| Arc::new(Semaphore::new(limit))),
            held: AtomicUsize::new(0),
            starts: Mutex::new(Window {
                began: Instant::now(),
                current: 0,
                previous: 0,
            }),
        }
    }

    fn window(&self, every: Duration) -> std::sync::MutexGuard<'_, Window> {
        let mut w = self
            .starts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if now >= w.began + every * 2 {
            *w = Window {
                began: now,
                current: 0,
                previous: 0,
            };
        } else if now >= w.began + every {
            w.previous = w.current;
            w.current = 0;
            w.began += every;
        }
        w
    }

    /// Jobs this lane may hold beyond its running slots now.
    fn ahead(&self, c: &Config) -> usize {
        let suspended = *self
            .no_ahead_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if suspended.is_some_and(|t| Instant::now() < t) {
            return 0;
        }
        let w = self.window(c.buffer_wait());
        c.prefetch.min(w.current.max(w.previous) / 2)
    }

    /// Reserves room for up to `want` jobs; returns how many were reserved.
    fn reserve(&self, want: usize, c: &Config) -> usize {
        let target = self.limit + self.ahead(c);
        let mut held = self.held.load(Ordering::SeqCst);
        loop {
            let n = want.min(target.saturating_sub(held));
            if n == 0 {
                return 0;
            }
            match self
                .held
                .compare_exchange(held, held + n, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return n,
                Err(now) => held = now,
            }
        }
    }

    fn unreserve(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::SeqCst);
    }

    /// Room the lane has now, without reserving it.
    fn room(&self, c: &Config) -> usize {
        (self.limit + self.ahead(c)).saturating_sub(self.held.load(Ordering::SeqCst))
    }

    fn started(&self, c: &Config) {
        self.window(c.buffer_wait()).current += 1;
    }
}

/// The worker's lane and the lanes of queues with their own limit.
#[derive(Debug)]
pub(crate) struct Lanes {
    worker: Arc<Lane>,
    queues: HashMap<String, Arc<Lane>>,
    no_ahead: Arc<Mutex<Option<Instant>>>,
}

impl Lanes {
    pub(crate) fn new(c: &Config) -> Self {
        let no_ahead = Arc::new(Mutex::new(None));
        Self {
            worker: Arc::new(Lane::new(c.concurrency, false, no_ahead.clone())),
            queues: c
                .queue_concurrency
                .iter()
                .map(|(q, &n)| (q.clone(), Arc::new(Lane::new(n, true, no_ahead.clone()))))
                .collect(),
            no_ahead,
        }
    }

    /// Claims nothing ahead of free running slots until `until` (rate-limited work is about:
    /// its jobs must get a slot at once; buffered jobs would stand before them).
    pub(crate) fn suspend_ahead(&self, until: Instant) {
        let mut t = self
            .no_ahead
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if t.is_none_or(|t| t < until) {
            *t = Some(until);
        }
    }

    /// Jobs the worker may hold now: its slots and what it may claim ahead.
    pub(crate) fn capacity(&self, c: &Config) -> usize {
        self.worker.limit + self.worker.ahead(c)
    }

    /// Jobs claimed and not yet returned by their handler.
    pub(crate) fn held(&self) -> usize {
        self.worker.held.load(Ordering::SeqCst)
    }

    /// Room to claim for `queue` now (both lanes), without reserving it.
    pub(crate) fn room(&self, queue: &str, c: &Config) -> usize {
        let all = self.worker.room(c);
        match self.queues.get(queue) {
            Some(lane) => all.min(lane.room(c)),
            None => all,
        }
    }

    /// Reserves room for up to `want` jobs of `queue` in both lanes; the claim then gives back
    /// what it did not get with [`Hold::shrink`].
    pub(crate) fn reserve(&self, queue: &str, want: usize, c: &Config) -> Hold {
        let lane = self.queues.get(queue).cloned();
        let mut n = self.worker.reserve(want, c);
        if let Some(l) = &lane {
            let m = l.reserve(n, c);
            self.worker.unreserve(n - m);
            n = m;
        }
        Hold {
            worker: self.worker.clone(),
            queue: lane,
            n,
        }
    }
}

impl Lanes {
    /// Room for one job of `queue` that is already claimed, held whatever the room (the lanes
    /// go over their limit until it returns): a claimed job is run, never left to its lease.
    pub(crate) fn reserve_forced(&self, queue: &str) -> Hold {
        let lane = self.queues.get(queue).cloned();
        self.worker.held.fetch_add(1, Ordering::SeqCst);
        if let Some(l) = &lane {
            l.held.fetch_add(1, Ordering::SeqCst);
        }
        Hold {
            worker: self.worker.clone(),
            queue: lane,
            n: 1,
        }
    }
}

/// Room held in the lanes for `n` jobs; given back when dropped.
#[derive(Debug)]
pub(crate) struct Hold {
    worker: Arc<Lane>,
    queue: Option<Arc<Lane>>,
    n: usize,
}

impl Hold {
    pub(crate) fn len(&self) -> usize {
        self.n
    }

    /// Keeps room for `n` jobs only.
    pub(crate) fn shrink(&mut self, n: usize) {
        let extra = self.n.saturating_sub(n);
        self.worker.unreserve(extra);
        if let Some(q) = &self.queue {
            q.unreserve(extra);
        }
        self.n -= extra;
    }

    /// Splits off the room of one job.
    pub(crate) fn split_one(&mut self) -> Hold {
        assert!(self.n > 0, "a hold split past its size");
        self.n -= 1;
        Hold {
            worker: self.worker.clone(),
            queue: self.queue.clone(),
            n: 1,
        }
    }

    /// Waits for a running slot of this job's queue lane and of the worker (in that order, in
    /// claim order), and counts the start. `None` when `until` passed first.
    pub(crate) async fn admit(
        &self,
        slots: &Arc<Semaphore>,
        until: Instant,
        c: &Config,
    ) -> Option<Admitted> {
        let wait = async {
            let queue = match self.queue.as_ref().and_then(|q| q.run.clone()) {
                Some(run) => Some(run.acquire_owned().await.ok()?),
                None => None,
            };
            let worker = slots.clone().acquire_owned().await.ok()?;
            Some(Admitted {
                _queue: queue,
                _worker: worker,
            })
        };
        let admitted = tokio::time::timeout_at(until, wait).await.ok().flatten()?;
        self.worker.started(c);
        if let Some(q) = &self.queue {
            q.started(c);
        }
        Some(admitted)
    }
}

impl Hold {
    /// Running slots for one job of this hold's queue, taken now or not at all (none is taken
    /// while jobs wait for slots: those stand first).
    pub(crate) fn try_admit_now(&self, slots: &Arc<Semaphore>) -> Option<Admitted> {
        let queue = match self.queue.as_ref().and_then(|q| q.run.clone()) {
            Some(run) => Some(run.try_acquire_owned().ok()?),
            None => None,
        };
        let worker = slots.clone().try_acquire_owned().ok()?;
        Some(Admitted {
            _queue: queue,
            _worker: worker,
        })
    }

    /// Counts a start made with slots from [`Hold::try_admit_now`].
    pub(crate) fn count_start(&self, c: &Config) {
        self.worker.started(c);
        if let Some(q) = &self.queue {
            q.started(c);
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.shrink(0);
    }
}

/// The running slots of one job (its queue's and the worker's), freed when dropped.
#[derive(Debug)]
pub(crate) struct Admitted {
    _queue: Option<OwnedSemaphorePermit>,
    _worker: OwnedSemaphorePermit,
}
