//! Where a worker's code runs. Its services — claim loops, the supervisor of each job (slot,
//! timeout, outcome), the completer, heartbeats, the watchdog, maintenance, the periodic-job
//! scheduler, statistics, the Redis transport — run on a runtime of their own, on a thread of
//! their own; the handlers and hooks run on the application's runtime, the one
//! [`start`](super::WorkerBuilder::start) was awaited on. A handler that blocks its thread (a CPU-bound loop, a blocking call, a panic whose
//! backtrace is being symbolized) can then hold up other handlers, never the heartbeats that keep
//! their leases, nor the watchdog, the timeouts or the completions. The worker's own pool is made
//! on the services' runtime and used from there, so its connections are driven by a thread no
//! handler can block.

use std::future::Future;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use crate::Error;

/// The services' thread and its runtime; stopped by [`ServiceThread::stop`], or when the
/// application's runtime goes away (as the services did when they ran on it).
#[derive(Debug)]
pub(crate) struct ServiceThread {
    handle: Handle,
    stop: CancellationToken,
}

/// Cancels its token when dropped: the sentinel task on the application's runtime holds one, so
/// that runtime's end (its tasks are dropped) stops the services' runtime too.
struct StopOnDrop(CancellationToken);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl ServiceThread {
    /// Starts the thread; `app` is the application's runtime.
    pub(crate) fn start(app: &Handle) -> Result<Self, Error> {
        let failed = |e: std::io::Error| {
            Error::Config(format!(
                "could not start the worker's service thread: {e} (out of threads or memory?)"
            ))
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(failed)?;
        let handle = rt.handle().clone();
        let stop = CancellationToken::new();
        let until = stop.clone();
        std::thread::Builder::new()
            .name("mysqlq-worker".into())
            // Dropping the runtime here, on its own thread, drops whatever tasks are left.
            .spawn(move || rt.block_on(until.cancelled()))
            .map_err(failed)?;
        let guard = StopOnDrop(stop.clone());
        let done = stop.clone();
        app.spawn(async move {
            let _guard = guard;
            done.cancelled().await;
        });
        Ok(Self { handle, stop })
    }

    /// The services' runtime.
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Ends the thread; tasks still on it are dropped.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }
}

/// Runs `fut` on `rt` and waits for it; `None` when that runtime stopped first.
pub(crate) async fn on<T: Send + 'static>(
    rt: &Handle,
    fut: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    rt.spawn(fut).await.ok()
}
