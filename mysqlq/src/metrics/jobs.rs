//! The gauge `mysqlq_jobs{queue,state}`: the leader's count of each queue's jobs by operator
//! state ([`OpState`]), the unfinished states and `failed`, read with the queue gauges.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Labels, QueueGauges, escape_label, help};
use crate::state::OpState;

/// The states `mysqlq_jobs` reports: every state a job leaves by itself, and `failed`.
pub(crate) const GAUGED: [OpState; 7] = [
    OpState::Waiting,
    OpState::Ready,
    OpState::RateLimited,
    OpState::Scheduled,
    OpState::Retrying,
    OpState::Running,
    OpState::Failed,
];

/// Registers `mysqlq_jobs{queue,state}` of `queues`.
pub(super) fn register(registry: &mut Registry, queues: &[QueueGauges]) {
    let family = Family::<Labels, Gauge>::default();
    for g in queues {
        for state in GAUGED {
            let n = g.states.get(state).map_or(0, |c| c.n);
            let labels = vec![
                ("queue".to_owned(), escape_label(&g.queue)),
                ("state".to_owned(), state.as_str().to_owned()),
            ];
            family
                .get_or_create(&labels)
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
    registry.register(
        "mysqlq_jobs",
        help(
            "Jobs by queue and operator state: waiting, ready (relayed ones included), \
             rate-limited, scheduled, retrying, running, failed.",
        ),
        family,
    );
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::metrics::{Metrics, QueueGauges};
    use crate::state::{Capped, StateCounts};

    #[test]
    fn every_gauged_state_of_every_queue_is_a_series() {
        let m = Metrics::new("w");
        let alpha = QueueGauges {
            queue: "alpha".into(),
            states: StateCounts {
                waiting: 1,
                ready: 5,
                in_stream: 2,
                rate_limited: 3,
                scheduled: 4,
                retrying: 6,
                running: 7,
                failed: Capped::exact(8),
                completed: Some(Capped::exact(9)),
                cancelled: None,
            },
            ..QueueGauges::default()
        };
        m.set_leader(true);
        m.set_queue_gauges(vec![alpha], Vec::new(), Duration::from_secs(60));
        let text = m.render_prometheus();
        for (state, n) in [
            ("waiting", 1),
            ("ready", 5),
            ("rate-limited", 3),
            ("scheduled", 4),
            ("retrying", 6),
            ("running", 7),
            ("failed", 8),
        ] {
            let line = format!("mysqlq_jobs{{queue=\"alpha\",state=\"{state}\"}} {n}");
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        assert!(!text.contains("state=\"completed\""), "{text}");
        assert!(text.contains("# HELP mysqlq_jobs Jobs by queue"), "{text}");
    }
}
