//! The services' own pulse. Every service of a worker — heartbeats, the watchdog, the
//! completer, the claim loops — runs on one thread ([`super::threads`]); when that thread gets
//! too little CPU (an overloaded host, a container's CPU quota), or a service holds it, every
//! heartbeat waits as long, and a lease can run out on a worker that is alive. Nothing else
//! would tell: the process is scheduled, the database answers.
//!
//! So a task on that thread sleeps a short tick at a time and measures how late it wakes. A
//! wake later than a tick is a [`WorkerEvent::ServiceLag`]; one late by half the lease's safety
//! margin or more is logged as a warning, with what to do about it. The tick is a twentieth of
//! the margin (5 ms to 250 ms): fine enough to see a lag that threatens a lease, cheap at
//! production leases (4 wakes a second at the default 60 s).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::worker::{Shared, WorkerEvent};

/// How long the pulse sleeps between measurements, for a lease margin of `margin`.
pub(crate) fn tick(margin: Duration) -> Duration {
    (margin / 20).clamp(Duration::from_millis(5), Duration::from_millis(250))
}

pub(crate) async fn run(s: Arc<Shared>) {
    let margin = s.config.lease_margin();
    let every = tick(margin);
    loop {
        let before = Instant::now();
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = s.stop_services.cancelled() => return,
        }
        let lag = before.elapsed().saturating_sub(every);
        if lag <= every {
            continue;
        }
        s.emit(WorkerEvent::ServiceLag {
            lag,
            at: SystemTime::now(),
        });
        if lag >= margin / 2 {
            tracing::warn!(
                worker = %s.worker_id,
                lag_ms = u64::try_from(lag.as_millis()).unwrap_or(u64::MAX),
                lease_ms = u64::try_from(s.config.lease.as_millis()).unwrap_or(u64::MAX),
                "the worker's service thread ran {} late: heartbeats and completions waited as \
                 long (a lease runs out {} after its last renewal). The process is short of CPU \
                 (an overloaded host, a CPU quota) or something blocked that thread — give it \
                 more CPU, run fewer slots, or raise the lease",
                crate::backoff::format_duration(lag),
                crate::backoff::format_duration(s.config.lease),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tick_follows_the_lease_margin_within_bounds() {
        assert_eq!(tick(Duration::from_millis(200)), Duration::from_millis(10));
        assert_eq!(tick(Duration::from_millis(20)), Duration::from_millis(5));
        assert_eq!(tick(Duration::from_secs(5)), Duration::from_millis(250));
    }
}
