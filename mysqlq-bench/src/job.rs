//! The bench's job and its registry.

use std::sync::Arc;

use mysqlq::{JobContext, JobError, Registry};

use crate::error::BenchError;
use crate::probe::Probe;

/// The queue of the bench job.
pub(crate) const QUEUE: &str = "mysqlq-bench";
/// The kind name of the bench job.
pub(crate) const KIND: &str = "mysqlq_bench_noop";

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

/// A registry of the bench job only.
pub(crate) fn registry() -> Result<Registry, BenchError> {
    Registry::new()
        .register::<BenchNoop>()
        .map_err(|e| BenchError::mysqlq("cannot register the bench job", &e))
}
