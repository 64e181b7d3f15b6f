//! The bench's job and its registry.

use std::sync::Arc;

use mysqlq::{JobContext, JobError, Registry};

use crate::error::BenchError;
use crate::probe::{Probe, now_us};
use crate::scenario::rate_worker::Recorder;

/// The queue of the bench job.
pub(crate) const QUEUE: &str = "mysqlq-bench";
/// The kind name of the bench job.
pub(crate) const KIND: &str = "mysqlq_bench_noop";
/// The queue of the rate scenario's job.
pub(crate) const RATE_QUEUE: &str = "mysqlq-bench-rate";

/// The bench's job: does nothing but count its run (and note when it started) in the probe the
/// bench gave the worker.
#[mysqlq::job(queue = "mysqlq-bench", name = "mysqlq_bench_noop")]
pub(crate) async fn bench_noop(ctx: JobContext, seq: u64) -> Result<(), JobError> {
    let _ = seq;
    if let Some(probe) = ctx.state::<Arc<Probe>>() {
        probe.ran(ctx.id().0);
    }
    Ok(())
}

/// The rate scenario's job: a no-op that notes when its handler started, first thing, and hands
/// it to its process's [`Recorder`] (which writes it to `bench_starts` later, in batches). `tag`
/// is the job's rate key, or `plain` for a job without one.
#[mysqlq::job(queue = "mysqlq-bench-rate", name = "mysqlq_bench_rate")]
pub(crate) async fn bench_rate(ctx: JobContext, tag: String) -> Result<(), JobError> {
    let at = now_us();
    if let Some(r) = ctx.state::<Arc<Recorder>>() {
        r.started(ctx.id().0, tag, at);
    }
    Ok(())
}

/// A registry of the rate scenario's job only.
pub(crate) fn rate_registry() -> Result<Registry, BenchError> {
    Registry::new()
        .register::<BenchRate>()
        .map_err(|e| BenchError::mysqlq("cannot register the bench's rate job", &e))
}

/// A registry of the bench job only.
pub(crate) fn registry() -> Result<Registry, BenchError> {
    Registry::new()
        .register::<BenchNoop>()
        .map_err(|e| BenchError::mysqlq("cannot register the bench job", &e))
}
