//! OpenTelemetry (cargo feature `otel`): spans for enqueueing and for each attempt, linked
//! across processes through the job's `traceparent` meta, and the worker's metrics mirrored as
//! OpenTelemetry instruments.
//!
//! mysqlq depends on the OpenTelemetry **API** only: spans go to the global tracer provider and
//! metrics to the meter you hand the worker. Installing an SDK and an exporter is the
//! application's part — or `mysqlq-cli work --otel` does it, configured by the standard `OTEL_*`
//! environment variables (OTLP over http/protobuf).
//!
//! - [`TraceHook`], a [hook](crate::hooks), makes the spans. Install it process-wide, so that
//!   enqueues (which go through no client object) see it too:
//!   `set_global_hooks(global_hooks().with(TraceHook::new()))`.
//!   - **enqueue** (kind producer, named `enqueue <queue>`): a child of the current
//!     OpenTelemetry context ([`opentelemetry::Context::current`]); its W3C `traceparent` is
//!     stored in the job's meta under [`TRACEPARENT_KEY`](crate::TRACEPARENT_KEY), the key a
//!     producer in any language can write.
//!   - **process** (kind consumer, named `process <queue>`), one per attempt, in the worker: by
//!     default the root of a trace of its own with a **link** to the enqueue span
//!     ([`Propagation::Link`], as Sidekiq's OpenTelemetry instrumentation does by default and
//!     OpenTelemetry's messaging conventions recommend: a job may run minutes later, several
//!     times, and a request's trace should not stretch over its retries); or its **child**
//!     ([`Propagation::Child`], one trace from the request to the job). While the handler runs,
//!     the span is the current OpenTelemetry context, so jobs it enqueues are its children.
//! - [`WorkerBuilder::otel_meter`](crate::WorkerBuilder::otel_meter) mirrors the worker's
//!   metrics (the Prometheus ones, [`Metrics::render_prometheus`](crate::Metrics::render_prometheus))
//!   as instruments of that meter: the same names and labels, read from the same counters.
//!
//! Attributes follow OpenTelemetry's messaging conventions: `messaging.system` = `mysqlq`,
//! `messaging.operation.name` (`enqueue`, `process`), `messaging.operation.type` (`send`,
//! `process`), `messaging.destination.name` (the queue), `messaging.message.id` (the job id, on
//! the process span: the id does not exist before the row is written), and mysqlq's own
//! `mysqlq.job.kind`, `mysqlq.job.attempt` and `mysqlq.job.outcome` (`ok`, `retry`, `fail`,
//! `snooze`, `cancel`, `rate_limited`, or `interrupted` when the worker stopped the attempt: a
//! timeout, a lost lease, shutdown); a failed attempt also has `error.type` and an error status.

mod metrics;
mod trace;

pub(crate) use metrics::mirror;
pub use trace::{Propagation, TraceHook};

/// The instrumentation scope of mysqlq's spans and instruments.
pub const SCOPE: &str = "mysqlq";
