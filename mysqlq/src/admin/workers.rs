//! `Admin::workers` and `Admin::running_jobs`: the workers page — who runs, with which settings,
//! who leads, and which jobs each holds.

use std::time::Duration;

use serde::Serialize;

use super::Admin;
use super::causal::CausalReads;
use crate::state::Timestamp;
use crate::store::{RUNNING_READ, RunningRow, WorkerLiveRow};
use crate::{Error, JobId};

/// Most running jobs [`Admin::running_jobs`] lists; past it only the count of each worker's
/// last report is known.
pub const RUNNING_CAP: usize = 5000;

// The store reads one row more than the page lists, to know there are more.
const _: () = assert!(RUNNING_READ as usize == RUNNING_CAP + 1);

/// A worker not stopped whose last report is older than this is stale: it may have died
/// (an idle worker reports every 30 s, a busy one every statistics interval).
pub const STALE_AFTER: Duration = Duration::from_secs(60);

/// One queue a worker serves, with the settings it started with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerQueue {
    /// The queue.
    pub queue: String,
    /// Its own concurrency limit on this worker (`work --queues q=N`); `None`: it shares the
    /// worker's slots.
    pub concurrency: Option<u32>,
    /// The queue-wide rate this worker set at start (`--rate`), if any.
    pub rate: Option<String>,
    /// The queue-wide global limit this worker set at start (`--global`), if any.
    pub global: Option<u32>,
}

/// A worker the workers page lists: not stopped, or stopped within the last hour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveWorker {
    /// Its id (`locked_by` of its claims).
    pub worker_id: String,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// The mysqlq version it runs (`None`: a worker older than schema 10).
    pub version: Option<String>,
    /// The queues it serves, in the order it was given them.
    pub queues: Vec<WorkerQueue>,
    /// Its slots: jobs run at once.
    pub concurrency: u32,
    /// Jobs running at its last report.
    pub running: u32,
    /// Its lease, in milliseconds.
    pub lease_ms: Option<u64>,
    /// It runs over Redis Streams.
    pub redis: Option<bool>,
    /// When it started.
    pub started_at: Timestamp,
    /// Its last report.
    pub last_seen_at: Timestamp,
    /// Microseconds since its last report, by the database's clock.
    pub last_seen_age_us: u64,
    /// When it stopped cleanly.
    pub stopped_at: Option<Timestamp>,
    /// Not stopped, and silent for longer than [`STALE_AFTER`].
    pub stale: bool,
    /// It holds the maintenance lease (reaper, pruner, gauges, depth history).
    pub leader: bool,
}

/// The workers page's workers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Workers {
    /// Running ones first, then stopped; by id.
    pub workers: Vec<LiveWorker>,
    /// The identity holding the maintenance lease (`worker_id#random`), if a live one does.
    pub leader: Option<String>,
    /// The database's clock when read (`None` without a worker row).
    pub read_at: Option<Timestamp>,
}

/// Who holds a running job.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Holder {
    /// A worker runs it (`locked_by`).
    Worker(String),
    /// A Redis relay holds it in a stream, not taken yet: the relaying worker's id.
    Relay(String),
}

/// A running (`processing`) job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunningJob {
    /// The job.
    pub id: JobId,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: Option<String>,
    /// Who holds it (`None`: no `locked_by`).
    pub holder: Option<Holder>,
    /// When its current attempt was claimed (`None` for a claim made before schema 10).
    pub claimed_at: Option<Timestamp>,
    /// Microseconds since then, by the database's clock.
    pub running_us: Option<u64>,
    /// When its lease ends.
    pub lease_expires_at: Option<Timestamp>,
    /// Microseconds until then (negative: expired; the reaper takes the job back).
    pub lease_left_us: Option<i64>,
    /// The attempt running.
    pub attempt: u32,
    /// Its most attempts.
    pub max_attempts: u32,
}

/// The running jobs, at most [`RUNNING_CAP`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunningJobs {
    /// In lease order.
    pub jobs: Vec<RunningJob>,
    /// More than [`RUNNING_CAP`] jobs run: `jobs` is empty, count each worker's by its report.
    pub capped: bool,
}

/// The worker id of an instance identity (`worker_id#random`, the id cut to 90 characters).
fn instance_worker(instance: &str) -> &str {
    instance.rsplit_once('#').map_or(instance, |(w, _)| w)
}

/// `true` when `instance` (the leader lease's holder) is a process of `worker_id`.
fn is_instance_of(instance: &str, worker_id: &str) -> bool {
    let w = instance_worker(instance);
    w == worker_id || (worker_id.chars().count() > 90 && worker_id.chars().take(90).eq(w.chars()))
}

/// A job's holder from its `locked_by`.
pub(crate) fn holder(locked_by: Option<&str>) -> Option<Holder> {
    let l = locked_by?;
    Some(match l.strip_prefix(crate::store::RELAY_PREFIX) {
        Some(instance) => Holder::Relay(instance_worker(instance).to_owned()),
        None => Holder::Worker(l.to_owned()),
    })
}

/// The settings `config` (JSON, `worker/stats.rs::config_json`) gives; `queues` (the
/// comma-separated column) when there is none.
fn worker_of(r: WorkerLiveRow, leader: Option<&str>) -> LiveWorker {
    let config: Option<serde_json::Value> = r
        .config
        .as_deref()
        .and_then(|c| serde_json::from_str(c).ok());
    let field = |name: &str| config.as_ref().and_then(|c| c.get(name));
    let u32_of = |v: &serde_json::Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
    let settings = field("queues").and_then(serde_json::Value::as_object);
    let queues = r
        .queues
        .split(',')
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .map(|q| {
            let s = settings.and_then(|m| m.get(q));
            let get = |k: &str| s.and_then(|o| o.get(k));
            WorkerQueue {
                queue: q.to_owned(),
                concurrency: get("concurrency").and_then(u32_of),
                rate: get("rate")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned),
                global: get("global").and_then(u32_of),
            }
        })
        .collect();
    let stale = r.stopped_at.is_none() && Duration::from_micros(r.last_seen_age_us) > STALE_AFTER;
    LiveWorker {
        leader: r.stopped_at.is_none() && leader.is_some_and(|l| is_instance_of(l, &r.worker_id)),
        version: field("version")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
        lease_ms: field("lease_ms").and_then(serde_json::Value::as_u64),
        redis: field("redis").and_then(serde_json::Value::as_bool),
        worker_id: r.worker_id,
        host: r.host,
        pid: r.pid,
        queues,
        concurrency: r.concurrency,
        running: r.running,
        started_at: r.started_at,
        last_seen_at: r.last_seen_at,
        last_seen_age_us: r.last_seen_age_us,
        stopped_at: r.stopped_at,
        stale,
    }
}

fn running_of(r: RunningRow) -> RunningJob {
    RunningJob {
        holder: holder(r.locked_by.as_deref()),
        id: r.id,
        queue: r.queue,
        kind: r.kind,
        claimed_at: r.claimed_at,
        running_us: r.running_us,
        lease_expires_at: r.lease_expires_at,
        lease_left_us: r.lease_left_us,
        attempt: r.attempts,
        max_attempts: r.max_attempts,
    }
}

impl Admin {
    /// The workers not stopped, or stopped within the last hour (a worker silent for a day is
    /// pruned and gone), with their settings from `mysqlq_worker.config`, whether each is stale
    /// ([`STALE_AFTER`]) and which one leads. Three small reads: `idx_worker_seen`, the
    /// leader row.
    pub async fn workers(&self) -> Result<Workers, Error> {
        let mut conn = CausalReads::acquire(&self.pool).await?;
        let rows = crate::store::workers_live(&mut conn).await?;
        let leader = crate::store::workers_leader(&mut conn).await?;
        conn.done().await;
        let read_at = rows.first().map(|r| r.now);
        let mut workers: Vec<LiveWorker> = rows
            .into_iter()
            .map(|r| worker_of(r, leader.as_deref()))
            .collect();
        workers.sort_by(|a, b| {
            (a.stopped_at.is_some(), &a.worker_id).cmp(&(b.stopped_at.is_some(), &b.worker_id))
        });
        Ok(Workers {
            workers,
            leader,
            read_at,
        })
    }

    /// The running (`processing`) jobs, at most [`RUNNING_CAP`], read from one range of
    /// `idx_job_recover` (and each row, for its holder); past the cap none are listed and
    /// [`RunningJobs::capped`] says so.
    pub async fn running_jobs(&self) -> Result<RunningJobs, Error> {
        let mut conn = CausalReads::acquire(&self.pool).await?;
        let rows = crate::store::workers_running(&mut conn).await?;
        conn.done().await;
        if rows.len() > RUNNING_CAP {
            return Ok(RunningJobs {
                jobs: Vec::new(),
                capped: true,
            });
        }
        Ok(RunningJobs {
            jobs: rows.into_iter().map(running_of).collect(),
            capped: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_and_leaders_are_read_from_their_identities() {
        assert_eq!(
            holder(Some("redis-relay:w-1#0af3")),
            Some(Holder::Relay("w-1".into()))
        );
        assert_eq!(holder(Some("w-1")), Some(Holder::Worker("w-1".into())));
        assert_eq!(holder(None), None);
        assert!(is_instance_of("w-1#abc", "w-1"));
        assert!(!is_instance_of("w-10#abc", "w-1"));
        assert!(is_instance_of("w#x#abc", "w#x"), "a `#` in the id");
        let long = "x".repeat(100);
        assert!(is_instance_of(&format!("{}#abc", &long[..90]), &long));
    }
}
