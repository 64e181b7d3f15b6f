//! The claim loop: claims as many jobs as the lanes have room for (free slots plus the
//! prefetch buffer, per queue; see [`crate::worker::buffer`]), carrying the completions queued
//! since the last claim in the same transaction; loops at once while batches come back full,
//! backs off exponentially with jitter when idle (an idle loop asks one cheap index probe which
//! queues have work before it opens a claim transaction), sleeps while saturated until a job
//! returns, and wakes at once when this process enqueues.
//!
//! Lock conflicts (deadlocks, lock wait timeouts, Galera certification failures) are retried
//! with jitter, past the rows just lost, and never lengthen the idle backoff: a worker that
//! lost a race is not idle.
//! They are logged as one aggregated line per interval, not one line per error. A claim whose
//! COMMIT reply was lost is resolved on a fresh connection: its jobs are run if it committed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::store::{self, ClaimParams, ClaimedJob, Owned};
use crate::wake::LOCAL_WAKE;
use crate::worker::executor::Slot;
use crate::worker::write::Held;
use crate::worker::{Key, Shared, WorkerEvent, executor, unit_random, write};

/// Tries of one claim on deadlock / lock wait timeout before going round the loop again.
const CLAIM_LOCK_RETRIES: u32 = 5;
/// Lock conflicts of claims are summed up in one log line at most this often.
const CONFLICT_LOG_EVERY: Duration = Duration::from_secs(10);

/// What went wrong in a claim.
enum ClaimError {
    /// Lost a lock race (deadlock, lock wait, certification failure) after a few tries.
    Conflict,
    /// Anything else (the server is unreachable, …).
    Other,
}

pub(crate) async fn run(s: Arc<Shared>, claimer: usize) {
    let floor = s.config.poll_floor;
    let ceiling = s.config.poll_ceiling;
    let mut idle = floor;
    let mut next_queue = claimer;
    let mut conflicts = Conflicts::default();
    // The last round found nothing: probe cheaply before opening a claim transaction.
    let mut probe = false;
    let mut conn = Held::default();
    loop {
        if s.stop_fetching.is_cancelled() {
            return;
        }
        if s.lease_unconfirmed.load(Ordering::SeqCst) {
            // Leases could not be renewed: claim nothing until a heartbeat succeeds again.
            if !crate::worker::sleep_or_cancel(
                floor.max(Duration::from_millis(50)),
                &s.stop_fetching,
            )
            .await
            {
                return;
            }
            continue;
        }
        if most_room(&s) == 0 {
            // Saturated (every lane full, or another loop's claim reserved the room): sleep
            // until a job returns or a claim gives back room (or shutdown); at most a poll
            // ceiling, as a backstop. The connection goes back to the pool meanwhile: the jobs
            // running now need it for their outcomes.
            conn.release();
            let freed = s.slot_freed.notified();
            if most_room(&s) == 0 {
                tokio::select! {
                    () = freed => {}
                    () = tokio::time::sleep(ceiling) => {}
                    () = s.stop_fetching.cancelled() => return,
                }
            }
            continue;
        }
        gather_room(&s).await;
        // The wait above ends at shutdown too: claim nothing then (a claim now would take the
        // very jobs the shutdown just handed back, and run them before it ends).
        if s.stop_fetching.is_cancelled() {
            return;
        }
        let queues: Vec<&String> = if probe {
            ready_queues(&s, &mut conn).await
        } else {
            s.config.queues.iter().collect()
        };
        let mut any = false;
        let mut full = false;
        let mut failed = false;
        let mut conflicted = false;
        let n = queues.len();
        for i in 0..n {
            let queue = queues[(next_queue + i) % n];
            let claimed = claim_queue(&s, queue, &mut conflicts, &mut conn).await;
            // The room this claim reserved and did not use is free again: another claim loop
            // may be waiting for it (with nothing running, no finishing job would wake it).
            s.slot_freed.notify_waiters();
            match claimed {
                Ok((got, wanted)) => {
                    any |= got > 0;
                    full |= got > 0 && got == wanted;
                }
                Err(ClaimError::Conflict) => conflicted = true,
                Err(ClaimError::Other) => failed = true,
            }
            if most_room(&s) == 0 || s.stop_fetching.is_cancelled() {
                break;
            }
        }
        next_queue = (next_queue + 1) % s.config.queues.len().max(1);
        probe = !(any || conflicted || failed);
        if any {
            // Work again: the parked claim loops join in.
            s.work_seen.notify_waiters();
        }
        if full {
            idle = floor;
            continue;
        }
        conflicts.log_if_due();
        if any || conflicted {
            // Lost a lock race: others are working this queue, so it is not idle.
            idle = floor;
        } else if failed {
            idle = (idle * 4).min(ceiling.max(Duration::from_secs(5)));
        } else {
            idle = (idle * 2).min(ceiling);
        }
        let woken = LOCAL_WAKE.notified();
        if probe && claimer > 0 {
            // Idle: one claim loop (the first) keeps polling; the others park, holding no
            // connection, until it finds work or this process enqueues.
            conn.release();
            let seen = s.work_seen.notified();
            tokio::select! {
                () = seen => {}
                () = woken => {}
                () = s.steps_released.notified() => {}
                () = s.stop_fetching.cancelled() => return,
            }
            idle = floor;
            probe = false;
            continue;
        }
        // Jitter downwards only, so the ceiling stays a true bound on the idle wait. A rate key
        // that is full now is claimed from again the moment it opens.
        let mut wait = idle.mul_f64(0.75 + 0.25 * unit_random());
        if let Some(open) = s.rate.next_open_in() {
            wait = wait.min(open);
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = woken => {
                idle = floor;
                probe = false;
            }
            () = s.steps_released.notified() => {
                idle = floor;
                probe = false;
            }
            () = s.stop_fetching.cancelled() => return,
        }
    }
}

/// The most room any queue has to claim into now.
fn most_room(s: &Shared) -> usize {
    s.config
        .queues
        .iter()
        .map(|q| s.lanes.room(q, &s.config))
        .max()
        .unwrap_or(0)
}

/// The queues with a job ready now, by one index-only probe ([`store::job_ready_queues`]);
/// every queue when the probe fails (the claim will say what is wrong).
async fn ready_queues<'a>(s: &'a Shared, conn: &mut Held) -> Vec<&'a String> {
    let ready = match conn.get(s).await {
        Ok(c) => store::job_ready_queues(c, &s.config.queues).await,
        Err(e) => Err(e),
    };
    match ready {
        Ok(ready) => {
            let m = &s.metrics;
            m.add(&m.counters.polls, 1);
            m.add(&m.counters.probes, 1);
            if ready.is_empty() {
                m.add(&m.counters.empty_polls, 1);
            }
            s.emit(WorkerEvent::Probed { ready: ready.len() });
            s.config
                .queues
                .iter()
                .filter(|q| ready.contains(q))
                .collect()
        }
        Err(e) => {
            conn.release();
            let m = &s.metrics;
            m.add(&m.counters.db_errors, 1);
            tracing::warn!(error = %write::error_chain(&e), "ready probe failed; claiming instead");
            s.config.queues.iter().collect()
        }
    }
}

/// While jobs are held and no queue has room for half a batch, waits a moment (at most the
/// poll floor) for more room, so that a busy worker claims in batches instead of one claim
/// transaction per finished job. Never waits when the worker holds nothing.
async fn gather_room(s: &Shared) {
    let threshold = usize::try_from(s.config.batch_size)
        .unwrap_or(usize::MAX)
        .min(s.lanes.capacity(&s.config))
        .div_ceil(s.config.claimers);
    if most_room(s) >= threshold || s.lanes.held() == 0 {
        return;
    }
    let deadline = tokio::time::Instant::now() + s.config.poll_floor;
    while most_room(s) < threshold && s.lanes.held() > 0 {
        let freed = s.slot_freed.notified();
        tokio::select! {
            () = freed => {}
            () = tokio::time::sleep_until(deadline) => return,
            () = s.stop_fetching.cancelled() => return,
        }
    }
}

/// Claims from one queue as many jobs as its lanes have room for (at most a batch), carrying
/// the queued completions in the same transaction, and starts the jobs. Returns (claimed,
/// asked).
async fn claim_queue(
    s: &Arc<Shared>,
    queue: &str,
    conflicts: &mut Conflicts,
    conn: &mut Held,
) -> Result<(usize, usize), ClaimError> {
    let batch = usize::try_from(s.config.batch_size).unwrap_or(usize::MAX);
    let mut hold = s.lanes.reserve(queue, batch, &s.config);
    let mut want = u32::try_from(hold.len()).unwrap_or(u32::MAX);
    if want == 0 {
        return Ok((0, 0));
    }
    // A queue with a queue-wide rate: every job counts as a start, so the claim takes only as
    // many as there are running slots free now.
    let queue_rated = s.rate.queue_rated(queue);
    let token = uuid::Uuid::new_v4().to_string();
    // Rate keys take only running slots free now: their starts are what the limits count.
    let mut slots = Vec::new();
    let mut plan = None;
    if s.rate.due(queue, s.config.poll_ceiling) {
        while slots.len() < hold.len()
            && let Some(a) = hold.try_admit_now(&s.slots)
        {
            slots.push(a);
        }
        if queue_rated {
            want = u32::try_from(slots.len()).unwrap_or(u32::MAX);
            if want == 0 {
                return Ok((0, 0));
            }
        } else {
            slots.truncate(s.rate.keyed_room(queue, slots.len()) as usize);
        }
        // Without room the claim still learns whether a key waits for some (then the
        // buffer is drained, freeing slots for it).
        plan = Some(store::RatePlan {
            room: u32::try_from(slots.len()).unwrap_or(u32::MAX),
            slack_floor: s.rate.slack_floor(),
            idle_recheck: s.config.poll_ceiling,
        });
    }
    let mut params = ClaimParams {
        queue,
        limit: want,
        // A loop that lost its last claims' races starts past the head of the queue.
        skip: conflicts.skip(want),
        worker_id: &s.worker_id,
        token: &token,
        lease: s.config.lease,
    };
    let m = &s.metrics;
    // A claim deciding rate keys carries no completions: its jobs must start soon after it.
    let mut carried = slots.is_empty().then(|| s.completer.carry());
    let mut attempt = 0;
    let (jobs, sent) = loop {
        attempt += 1;
        let owned: Vec<Owned> = carried
            .as_ref()
            .map(|c| c.keys().iter().map(Key::owned).collect())
            .unwrap_or_default();
        let complete = store::Completing {
            jobs: &owned,
            delete: carried.as_ref().and_then(|c| c.deleting()),
        };
        let got = conn.get(s).await;
        // After the connection is at hand, before anything is sent: the start guard counts from
        // here, and a rate decision's time (its locking statement's) comes after it.
        let sent = Instant::now();
        let result = match (got, &plan) {
            (Ok(c), Some(plan)) => store::job_claim_rated(c, &params, plan, &complete).await,
            (Ok(c), None) => store::job_claim_completing(c, &params, &complete)
                .await
                .map(|(jobs, done)| (jobs, done, store::RateReport::default())),
            (Err(error), _) => Err(store::ClaimFailed {
                error,
                in_doubt: Vec::new(),
            }),
        };
        if result.is_err() {
            // Not written (or not known to be): back to the completer, which writes them again
            // and recognises an earlier write of its own. The connection may be broken, or on
            // a server that stopped being the writer: take a fresh one from the pool.
            carried = None;
            conn.release();
        }
        match result {
            Ok((jobs, completed, report)) => {
                if let Some(c) = carried.take() {
                    c.written(s, &completed);
                }
                if plan.is_some() {
                    let plain = jobs.iter().filter(|j| j.rate_slack.is_none()).count();
                    s.rate.record(queue, &report, Instant::now(), plain);
                } else if jobs.iter().any(|j| j.rate_slack.is_some()) {
                    // Admitted by a queue-wide rate this worker did not know of (set by
                    // another worker's start): from now on its claims take free slots only.
                    s.rate.found_rated(queue, Instant::now());
                }
                // Nothing beyond the contested rows: try the head of the queue again.
                if jobs.is_empty() && params.skip > 0 && attempt < CLAIM_LOCK_RETRIES {
                    params.skip = 0;
                    continue;
                }
                conflicts.streak = 0;
                break (jobs, sent);
            }
            Err(f) if !f.in_doubt.is_empty() => {
                m.add(&m.counters.db_errors, 1);
                let jobs = resolve(s, &token, f).await;
                if !jobs.is_empty() {
                    s.emit(WorkerEvent::ClaimAdopted { jobs: jobs.len() });
                }
                break (jobs, sent);
            }
            Err(f) if store::is_lock_error(&f.error) => {
                conflicts.count(s, &f.error);
                if attempt >= CLAIM_LOCK_RETRIES || s.stop_fetching.is_cancelled() {
                    return Err(ClaimError::Conflict);
                }
                // Redo the whole claim from its SELECT after a short jittered pause, past the
                // rows just lost: a claimer on another Galera node (whose row locks SKIP
                // LOCKED cannot see) is taking the head of the queue, and racing it for the
                // same rows again would lose again (a worker starved for seconds that way).
                let pause = Duration::from_millis(2u64 << attempt).mul_f64(0.5 + unit_random());
                tokio::time::sleep(pause).await;
                params.skip = conflicts.skip(want);
            }
            Err(f) => {
                m.add(&m.counters.db_errors, 1);
                tracing::warn!(queue, error = %write::error_chain(&f.error), "claim failed; will retry");
                return Err(ClaimError::Other);
            }
        }
    };
    if s.rate.active(queue) {
        s.lanes
            .suspend_ahead(Instant::now() + s.config.buffer_wait() * 2);
    }
    m.add(&m.counters.polls, 1);
    s.emit(WorkerEvent::Polled {
        claimed: jobs.len(),
    });
    if jobs.is_empty() {
        m.add(&m.counters.empty_polls, 1);
        return Ok((0, want as usize));
    }
    m.add(&m.counters.claims, jobs.len() as u64);
    let rated = jobs.iter().filter(|j| j.rate_slack.is_some()).count();
    m.add(&m.counters.rate_admitted, rated as u64);
    let token: Arc<str> = Arc::from(token);
    let count = jobs.len();
    hold.shrink(count);
    for job in jobs {
        let one = match job.rate_slack {
            // Admitted by a rate key: it runs now, on a slot taken before the claim, or is
            // handed back at its first poll if that came later than ε after the claim was sent.
            Some(slack) => Slot::Rated {
                hold: hold.split_one(),
                admitted: slots.pop(),
                deadline: sent + slack.saturating_sub(Duration::from_millis(1)),
            },
            None => {
                // The slots the keys did not use are free for the buffered jobs.
                slots.clear();
                Slot::Buffered(hold.split_one())
            }
        };
        // A claim whose UPDATE was slow wrote its leases again later (`store::ClaimedJob`).
        let lease_from = job.lease_sent.map_or(sent, Instant::from_std);
        executor::spawn(s, job, queue, token.clone(), one, lease_from);
    }
    Ok((count, want as usize))
}

/// Resolves a claim whose COMMIT reply was lost: asks the database, on a fresh connection,
/// which of its jobs are `processing` under its token (waiting for the transaction to end),
/// retrying while the lease would still leave time to run them. Returns the jobs to run.
async fn resolve(s: &Shared, token: &str, failed: store::ClaimFailed) -> Vec<ClaimedJob> {
    tracing::warn!(
        jobs = failed.in_doubt.len(),
        error = %write::error_chain(&failed.error),
        "claim COMMIT sent but no reply came back; asking the database whether it committed"
    );
    let give_up = Instant::now() + s.config.lease - s.config.lease_margin();
    let mut pause = Duration::from_millis(20);
    loop {
        let result = async {
            let mut conn = s.db.acquire().await?;
            store::job_claim_resolve(&mut conn, token, &failed.in_doubt).await
        }
        .await;
        match result {
            Ok(jobs) => {
                tracing::info!(
                    claimed = jobs.len(),
                    of = failed.in_doubt.len(),
                    "in-doubt claim resolved"
                );
                return jobs;
            }
            Err(e) if Instant::now() + pause < give_up => {
                tracing::warn!(error = %write::error_chain(&e), "resolving the in-doubt claim failed; retrying");
                tokio::time::sleep(pause.mul_f64(0.5 + unit_random())).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                tracing::error!(error = %write::error_chain(&e), "could not resolve the in-doubt claim; its jobs come back when their lease ends");
                return Vec::new();
            }
        }
    }
}

/// Lock conflicts of claims, counted and summed up in one log line per interval.
#[derive(Default)]
struct Conflicts {
    /// Races lost since this loop's last claim that went through.
    streak: u32,
    since_log: u64,
    last_error: Option<String>,
    logged_at: Option<Instant>,
}

impl Conflicts {
    fn count(&mut self, s: &Shared, e: &crate::Error) {
        let m = &s.metrics;
        match e.server_code() {
            Some(1213) => m.add(&m.counters.deadlocks, 1),
            _ => m.add(&m.counters.lock_waits, 1),
        }
        self.since_log += 1;
        self.streak = self.streak.saturating_add(1);
        self.last_error = Some(write::error_chain(e));
    }

    /// Ready jobs a claim passes over first: none while this loop wins its races; after lost
    /// ones, a random number of claims' worth, up to twice as many for each race lost in a
    /// row (at most 32). A node that applies the other nodes' claims late (short of CPU) reads
    /// a head of the queue they took already, and loses again wherever those claims reach;
    /// a few batches past it was not far enough (one worker of three did 38 of 1,500 jobs).
    fn skip(&self, want: u32) -> u32 {
        match self.streak {
            0 => 0,
            n => want.saturating_mul(fastrand::u32(1..=1 << n.min(5))),
        }
    }

    fn log_if_due(&mut self) {
        if self.since_log == 0 {
            return;
        }
        let now = Instant::now();
        if self.logged_at.is_some_and(|t| now < t + CONFLICT_LOG_EVERY) {
            return;
        }
        tracing::warn!(
            conflicts = self.since_log,
            last = self.last_error.as_deref().unwrap_or_default(),
            "claims lost lock races with other claimers (retried at once with jitter)"
        );
        self.since_log = 0;
        self.logged_at = Some(now);
    }
}
