//! The idle consumer of the pickup and idle scenarios: a framework worker with its defaults, or
//! the baseline's polling loop, started on a pool and stopped again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use mysqlq::WorkerHandle;
use sqlx::MySqlPool;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::baseline::baseline_poller;
use crate::bench::Bench;
use crate::error::{BenchError, q_err};
use crate::probe::Probe;

/// A running consumer: the worker, or the baseline's poller.
pub(crate) enum Consumer {
    Worker(WorkerHandle),
    Poller {
        task: JoinHandle<Result<(), BenchError>>,
        stop: Arc<(AtomicBool, Notify)>,
    },
}

impl Consumer {
    /// Starts the framework's worker or the baseline's poller on `pool`, reporting to `probe`.
    pub(crate) async fn start(
        bench: &Bench<'_>,
        framework: bool,
        pool: &MySqlPool,
        probe: &Arc<Probe>,
    ) -> Result<Self, BenchError> {
        if framework {
            let h = bench
                .worker(pool, probe)?
                .start()
                .await
                .map_err(q_err("the bench worker could not start"))?;
            return Ok(Self::Worker(h));
        }
        let stop = Arc::new((AtomicBool::new(false), Notify::new()));
        let (pool, probe, flag, batch) = (pool.clone(), probe.clone(), stop.clone(), bench.batch);
        let task = tokio::spawn(async move { baseline_poller(&pool, &probe, batch, &flag).await });
        Ok(Self::Poller { task, stop })
    }

    /// The worker, if this is the framework's consumer.
    pub(crate) fn worker(&self) -> Option<&WorkerHandle> {
        match self {
            Self::Worker(h) => Some(h),
            Self::Poller { .. } => None,
        }
    }

    /// Stops it: the worker's graceful shutdown, or the poller's stop flag and its end.
    pub(crate) async fn stop(self) -> Result<(), BenchError> {
        match self {
            Self::Worker(h) => {
                let _ = h.shutdown().await;
                Ok(())
            }
            Self::Poller { task, stop } => {
                stop.0.store(true, Ordering::SeqCst);
                stop.1.notify_waiters();
                match task.await {
                    Ok(r) => r,
                    Err(e) => Err(BenchError::new(
                        format!("the baseline poller failed: {e}"),
                        "this is a bug in the bench",
                    )),
                }
            }
        }
    }
}
