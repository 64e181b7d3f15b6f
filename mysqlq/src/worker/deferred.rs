//! When the settlements written after their completions are tried. The completer writes step
//! completions with their settlement (`store::workflow::wf_complete_steps`); a completion
//! whose dependent's gate, head or row another transaction holds is written without its
//! settlement, which follows a moment later — with the next step completions' transaction, or
//! in one of its own when none is queued — holding no job of this worker while it waits. So a
//! held gate costs its dependent a few milliseconds and never keeps a completion (its lease,
//! its slot) waiting. Tried again at once, then after 5 ms doubling to [`MAX_PAUSE`] while the
//! rows stay held; a worker that stops first leaves them to the leader's sweep, which settles
//! every completed step with an open edge.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::JobId;

/// Longest pause between two tries of one settlement.
const MAX_PAUSE: Duration = Duration::from_millis(200);
/// Tries of one settlement before it is left to the leader's sweep (about 20 s of held rows:
/// a stopped transaction, or gates changed by hand, which the sweep reports).
const MAX_TRIES: u32 = 100;

/// The pause before a settlement found held `n` times (n >= 1) is tried again: none after the
/// first (the holder is a settlement like ours, committing within our own flush's time), then
/// 5 ms doubling, at most [`MAX_PAUSE`].
pub(super) fn pause(n: u32) -> Duration {
    if n <= 1 {
        return Duration::ZERO;
    }
    Duration::from_millis(5)
        .saturating_mul(1 << (n - 2).min(8))
        .min(MAX_PAUSE)
}

/// Completed steps waiting for their settlement, each with how often it was found held and
/// when it is tried next.
#[derive(Debug, Default)]
pub(super) struct Deferred {
    due: HashMap<JobId, (u32, Instant)>,
}

impl Deferred {
    /// Schedules `ids`, found held once more each.
    pub(super) fn held(&mut self, ids: impl IntoIterator<Item = JobId>) {
        let now = Instant::now();
        let mut given_up = Vec::new();
        for id in ids {
            let e = self.due.entry(id).or_insert((0, now));
            e.0 += 1;
            e.1 = now + pause(e.0).mul_f64(0.5 + crate::worker::unit_random());
            if e.0 > MAX_TRIES {
                given_up.push(id);
            }
        }
        if !given_up.is_empty() {
            for id in &given_up {
                self.due.remove(id);
            }
            tracing::warn!(steps = ?given_up.iter().map(|j| j.0).collect::<Vec<_>>(), "workflow settlements held for {MAX_TRIES} tries; left to the workflow sweep");
        }
    }

    /// Schedules `ids` at once: their settlement goes on in parts (more open edges than one
    /// transaction settles), it was not held; how often each was found held is kept.
    pub(super) fn more(&mut self, ids: impl IntoIterator<Item = JobId>) {
        let now = Instant::now();
        for id in ids {
            self.due.entry(id).or_insert((0, now)).1 = now;
        }
    }

    /// The earliest time a settlement is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.due.values().map(|e| e.1).min()
    }

    /// Takes out the settlements due now (at most one statement's worth).
    pub(super) fn take_due(&mut self) -> Vec<JobId> {
        let now = Instant::now();
        let ids: Vec<JobId> = self
            .due
            .iter()
            .filter(|(_, e)| e.1 <= now)
            .map(|(id, _)| *id)
            .take(1000)
            .collect();
        ids
    }

    /// Forgets the settlements written.
    pub(super) fn written(&mut self, tried: &[JobId], held: &[JobId]) {
        for id in tried {
            if !held.contains(id) {
                self.due.remove(id);
            }
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.due.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.due.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settlement_held_again_waits_longer_up_to_the_cap() {
        let ms = |n| pause(n).as_millis();
        assert_eq!([ms(1), ms(2), ms(3), ms(4), ms(7)], [0, 5, 10, 20, 160]);
        assert_eq!(ms(8), 200);
        assert_eq!(ms(u32::MAX), 200);
    }

    #[test]
    fn a_settlement_held_too_often_is_left_to_the_sweep() {
        let mut d = Deferred::default();
        for _ in 0..MAX_TRIES {
            d.held([JobId(1)]);
        }
        assert_eq!(d.len(), 1);
        d.held([JobId(1)]);
        assert!(d.is_empty());
    }

    #[tokio::test]
    async fn a_settlement_is_due_at_once_after_its_first_hold_and_forgotten_once_written() {
        let mut d = Deferred::default();
        d.held([JobId(1), JobId(2)]);
        assert_eq!(d.len(), 2);
        let mut due = d.take_due();
        due.sort();
        assert_eq!(due, vec![JobId(1), JobId(2)]);
        // 1 written, 2 held again: 2 waits 2.5–7.5 ms.
        d.written(&due, &[JobId(2)]);
        d.held([JobId(2)]);
        assert_eq!(d.len(), 1);
        assert!(d.take_due().is_empty(), "not due again at once");
        assert!(d.next_due().unwrap() > Instant::now());
    }
}
