//! The idle step of the pickup scenario: what a consumer costs the server while its queue is
//! empty. A framework worker (default settings) or the baseline's polling loop is started on an
//! empty queue with its pool pointed at a [`Proxy`] that counts the commands it sends; after
//! [`IDLE_SETTLE`] the commands of the next [`IDLE_WINDOW`] are counted and divided by the
//! window. The worker's own service pool is opened from the connect options of the pool it is
//! given, so its claims, maintenance and statistics go through the proxy too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mysqlq::Worker;
use sqlx::MySqlPool;
use sqlx::mysql::{MySqlPoolOptions, MySqlSslMode};

use crate::bench::{Bench, who};
use crate::error::BenchError;
use crate::probe::{Probe, lock};
use crate::proxy::{Proxy, command_name};
use crate::scenario::consumer::Consumer;

/// How long the consumer runs before counting starts (start-up, the idle backoff's ramp).
pub(crate) const IDLE_SETTLE: Duration = Duration::from_secs(1);
/// How long its commands are counted.
pub(crate) const IDLE_WINDOW: Duration = Duration::from_secs(5);

impl Bench<'_> {
    /// One idle run; returns the consumer's statements (commands) per second.
    pub(crate) async fn idle(&mut self, framework: bool) -> Result<f64, BenchError> {
        let label = format!("idle {}", who(framework));
        self.reset().await?;
        self.phase(&format!("{label}: counting statements"), 1);
        let options = self.setup.connect_options();
        if options.get_socket().is_some() {
            return Err(BenchError::new(
                "the idle measurement needs a TCP connection to the server",
                "use a host:port DATABASE_URL, or run --scenario drain or enqueue",
            ));
        }
        let proxy = Proxy::start(options.get_host(), options.get_port())
            .await
            .map_err(|e| {
                BenchError::new(
                    format!("cannot start the counting proxy on 127.0.0.1: {e}"),
                    "check that loopback TCP is available",
                )
            })?;
        let proxied = (*options)
            .clone()
            .host("127.0.0.1")
            .port(proxy.port())
            .ssl_mode(MySqlSslMode::Disabled);
        let pool: MySqlPool = MySqlPoolOptions::new()
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(10))
            .max_connections(Worker::recommended_pool_size(self.concurrency))
            .connect_lazy_with(proxied);
        lock(&self.scratch.pools).push(pool.clone());
        let probe = Arc::new(Probe::counting(Vec::new()));
        let consumer = Consumer::start(self, framework, &pool, &probe).await?;
        tokio::time::sleep(IDLE_SETTLE).await;
        let (before, by_before) = proxy.counts();
        let started = Instant::now();
        tokio::time::sleep(IDLE_WINDOW).await;
        let (after, by_after) = proxy.counts();
        let took = started.elapsed();
        consumer.stop().await?;
        pool.close().await;
        drop(proxy);
        let sent = after.saturating_sub(before);
        let kinds: Vec<String> = by_after
            .iter()
            .filter_map(|&(c, n)| {
                let was = by_before
                    .iter()
                    .find(|(b, _)| *b == c)
                    .map_or(0, |(_, m)| *m);
                (n > was).then(|| format!("{} {}", n - was, command_name(c)))
            })
            .collect();
        let ran = probe.total();
        let detail = format!(
            "{sent} statements in {:.1} s on an empty queue ({}), {ran} handler runs",
            took.as_secs_f64(),
            if kinds.is_empty() {
                "none".to_owned()
            } else {
                kinds.join(", ")
            }
        );
        self.check(
            format!("{label}: no job ran"),
            if ran == 0 { Ok(detail) } else { Err(detail) },
        );
        #[allow(clippy::cast_precision_loss)]
        Ok(sent as f64 / took.as_secs_f64().max(1e-9))
    }
}
