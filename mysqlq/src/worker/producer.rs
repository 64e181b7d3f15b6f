//! The claim loop: claims only for free slots, loops at once while batches come back full,
//! backs off exponentially with jitter when idle, sleeps while saturated until a slot frees,
//! and wakes at once when this process enqueues.

use std::sync::Arc;
use std::time::Duration;

use crate::store::{self, ClaimParams};
use crate::worker::{LOCAL_WAKE, Shared, executor, unit_random};

/// Tries of one claim on deadlock / lock wait timeout before backing off to the next poll.
const CLAIM_LOCK_RETRIES: u32 = 5;

pub(crate) async fn run(s: Arc<Shared>, claimer: usize) {
    let floor = s.config.poll_floor;
    let ceiling = s.config.poll_ceiling;
    let mut idle = floor;
    let mut next_queue = claimer;
    loop {
        if s.stop_fetching.is_cancelled() {
            return;
        }
        if s.slots.available_permits() == 0 {
            // Saturated: sleep until a job finishes (or shutdown).
            let freed = s.slot_freed.notified();
            if s.slots.available_permits() == 0 {
                tokio::select! {
                    () = freed => {}
                    () = s.stop_fetching.cancelled() => return,
                }
            }
            continue;
        }
        gather_slots(&s).await;
        let mut any = false;
        let mut full = false;
        let mut failed = false;
        let n = s.config.queues.len();
        for i in 0..n {
            let queue = &s.config.queues[(next_queue + i) % n];
            match claim_queue(&s, queue).await {
                Ok((got, wanted)) => {
                    any |= got > 0;
                    full |= got > 0 && got == wanted;
                }
                Err(()) => failed = true,
            }
            if s.slots.available_permits() == 0 || s.stop_fetching.is_cancelled() {
                break;
            }
        }
        next_queue = (next_queue + 1) % n.max(1);
        if full {
            idle = floor;
            continue;
        }
        if any {
            idle = floor;
        } else if failed {
            idle = (idle * 4).min(ceiling.max(Duration::from_secs(5)));
        } else {
            idle = (idle * 2).min(ceiling);
        }
        // Jitter downwards only, so the ceiling stays a true bound on the idle wait.
        let wait = idle.mul_f64(0.75 + 0.25 * unit_random());
        let woken = LOCAL_WAKE.notified();
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = woken => idle = floor,
            () = s.stop_fetching.cancelled() => return,
        }
    }
}

/// While jobs are running and fewer slots are free than half a batch, waits a moment (at most
/// the poll floor) for more to free up, so that a busy worker claims in batches instead of one
/// claim transaction per finished job. Never waits when the worker is idle.
async fn gather_slots(s: &Shared) {
    let threshold = usize::try_from(s.config.batch_size)
        .unwrap_or(usize::MAX)
        .min(s.config.concurrency)
        .div_ceil(s.config.claimers);
    let free = s.slots.available_permits();
    if free >= threshold || free >= s.config.concurrency {
        return;
    }
    let deadline = tokio::time::Instant::now() + s.config.poll_floor;
    while s.slots.available_permits() < threshold {
        let freed = s.slot_freed.notified();
        tokio::select! {
            () = freed => {}
            () = tokio::time::sleep_until(deadline) => return,
            () = s.stop_fetching.cancelled() => return,
        }
    }
}

/// Claims up to the free slots from one queue and starts the jobs. Returns (claimed, asked).
async fn claim_queue(s: &Arc<Shared>, queue: &str) -> Result<(usize, usize), ()> {
    let want = s
        .config
        .batch_size
        .min(u32::try_from(s.slots.available_permits()).unwrap_or(u32::MAX));
    if want == 0 {
        return Ok((0, 0));
    }
    let Ok(permits) = s.slots.clone().try_acquire_many_owned(want) else {
        return Ok((0, 0));
    };
    let token = uuid::Uuid::new_v4().to_string();
    let params = ClaimParams {
        queue,
        limit: want,
        worker_id: &s.worker_id,
        token: &token,
        lease: s.config.lease,
    };
    let m = &s.metrics;
    let mut attempt = 0;
    let jobs = loop {
        attempt += 1;
        let result = match s.pool.acquire().await {
            Ok(mut conn) => store::job_claim(&mut conn, &params).await,
            Err(e) => Err(e.into()),
        };
        match result {
            Ok(jobs) => break jobs,
            Err(e) if store::is_lock_error(&e) && attempt < CLAIM_LOCK_RETRIES => {
                count_lock_error(s, &e);
                // Redo the whole claim from its SELECT after a short jittered pause.
                let pause = Duration::from_millis(2u64 << attempt).mul_f64(0.5 + unit_random());
                tokio::time::sleep(pause).await;
            }
            Err(e) => {
                if store::is_lock_error(&e) {
                    count_lock_error(s, &e);
                } else {
                    m.add(&m.counters.db_errors, 1);
                }
                tracing::warn!(queue, error = %crate::worker::executor::error_chain(&e), "claim failed; will retry");
                return Err(());
            }
        }
    };
    m.add(&m.counters.polls, 1);
    if jobs.is_empty() {
        m.add(&m.counters.empty_polls, 1);
        return Ok((0, want as usize));
    }
    m.add(&m.counters.claims, jobs.len() as u64);
    let token: Arc<str> = Arc::from(token);
    let mut permits = permits;
    let count = jobs.len();
    for job in jobs {
        let one = permits.split(1).expect("one permit per claimed job");
        executor::spawn(s.clone(), job, queue, token.clone(), one);
    }
    drop(permits); // unused slots go back
    Ok((count, want as usize))
}

fn count_lock_error(s: &Shared, e: &crate::Error) {
    let m = &s.metrics;
    match store::db_error_number(e) {
        Some(1213) => m.add(&m.counters.deadlocks, 1),
        _ => m.add(&m.counters.lock_waits, 1),
    }
}
