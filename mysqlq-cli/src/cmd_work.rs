//! `work`: run a worker for the jobs linked into this binary until SIGINT/SIGTERM.

use std::sync::Arc;

use crate::Cli;
use crate::args::{ConnArgs, WorkArgs};
use crate::db::Target;
use crate::error::CliError;
use crate::metrics_http;
use crate::program;

/// Starts the worker (and the metrics endpoint), waits for a signal, shuts down gracefully.
/// A binary without jobs fails first, before the database URL is even looked at.
pub(crate) async fn work(
    target: Result<Target, CliError>,
    a: &WorkArgs,
    conn: &ConnArgs,
    app: Cli,
) -> Result<(), CliError> {
    #[cfg(not(feature = "otel"))]
    if a.telemetry.otel {
        return Err(CliError::usage(
            "`--otel` needs mysqlq-cli's cargo feature `otel`, which this binary was built without",
            "depend on mysqlq-cli with `features = [\"otel\"]` and build again (docs/cli.md)",
        ));
    }
    let registry = crate::registry()?;
    if registry.is_empty() {
        return Err(CliError::new(
            format!(
                "no jobs are linked into this binary (`{}`), so there is nothing to work on",
                program::name()
            ),
            program::no_jobs_fix(app.caller),
        ));
    }
    let target = target?;
    let queues: Vec<String> = if a.queues.is_empty() {
        registry.queues().into_iter().map(str::to_owned).collect()
    } else {
        a.queues.iter().map(|(q, _)| q.clone()).collect()
    };
    let limits: Vec<(String, usize)> = a
        .queues
        .iter()
        .filter_map(|(q, n)| n.map(|n| (q.clone(), n)))
        .collect();
    // Bind the metrics address first: a taken port is a start-up error, not a silent gap.
    let listener = match a.telemetry.metrics_addr {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            CliError::new(
                format!("cannot listen on {addr} for metrics: {e}"),
                "choose a free address with --metrics-addr HOST:PORT",
            )
        })?),
        None => None,
    };
    let all_limited = !limits.is_empty() && limits.len() == queues.len();
    let concurrency = match a.concurrency {
        Some(n) => usize::from(n),
        None if all_limited => limits.iter().map(|(_, n)| n).sum(),
        None => mysqlq::WorkerConfig::DEFAULT_CONCURRENCY,
    };
    // Before the worker, so that its first spans and metrics have somewhere to go.
    #[cfg(feature = "otel")]
    let telemetry = a.telemetry.otel.then(crate::otel::start).transpose()?;
    let pool = target
        .pool(mysqlq::Worker::recommended_pool_size(concurrency))
        .await?;
    let mut builder = mysqlq::Worker::builder(pool.clone())
        .registry(registry)
        .queues(queues.clone())
        .concurrency(concurrency)
        .batch_size(a.batch)
        .prefetch(a.prefetch, a.prefetch_wait)
        .claimers(usize::from(a.claimers))
        .lease(a.lease)
        .shutdown_timeout(a.shutdown_timeout)
        .poll_interval(a.poll_floor, a.poll_ceiling)
        .job_timeout(a.job_timeout)
        .maintenance(a.maintenance_interval, a.leader_ttl)
        .delete_completed(a.history.delete_completed);
    for (q, n) in limits {
        builder = builder.queue_concurrency(q, n);
    }
    for (q, rate) in &a.rate {
        builder = builder.queue_rate(q.clone(), *rate);
    }
    for (q, n) in &a.global {
        builder = builder.queue_global_limit(q.clone(), *n);
    }
    let mut builder = Cli::configure(app.configure, builder);
    if let Some(every) = a.heartbeat {
        builder = builder.heartbeat_interval(every);
    }
    #[cfg(feature = "otel")]
    if let Some(t) = &telemetry {
        // Global, so that jobs enqueued by this worker's handlers get their spans too.
        let hooks = mysqlq::hooks::global_hooks().with(mysqlq::otel::TraceHook::new());
        mysqlq::hooks::set_global_hooks(hooks);
        builder = builder.otel_meter(t.meter());
    }
    if let Some(id) = &a.worker_id {
        builder = builder.worker_id(id.clone());
    }
    #[cfg(feature = "redis")]
    if let Some(redis) = conn.redis.connect().await? {
        builder = builder.redis(redis);
    }
    #[cfg(not(feature = "redis"))]
    let _ = conn;
    let handle = builder
        .start()
        .await
        .map_err(|e| CliError::mysqlq("the worker could not start", &e))?;
    let server = listener.map(|l| {
        let addr = l
            .local_addr()
            .map_or_else(|_| "?".to_owned(), |a| a.to_string());
        tracing::info!(%addr, "serving Prometheus metrics at http://{addr}/metrics");
        let metrics = handle.metrics();
        let render: metrics_http::Render = Arc::new(move || metrics.render_prometheus());
        tokio::spawn(metrics_http::serve(l, render))
    });
    // The library logged "worker started" with its settings.
    tracing::info!("SIGINT or SIGTERM stops the worker gracefully");
    let result = handle.run_until_signal().await;
    if let Some(s) = server {
        s.abort();
    }
    pool.close().await;
    #[cfg(feature = "otel")]
    if let Some(t) = telemetry {
        // The exporters send synchronously: off the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
    }
    let report = result.map_err(|e| CliError::mysqlq("the worker stopped with an error", &e))?;
    tracing::info!(
        finished = report.finished,
        released = report.released,
        "worker stopped"
    );
    Ok(())
}
