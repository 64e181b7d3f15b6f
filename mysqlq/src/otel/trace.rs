//! [`TraceHook`]: the enqueue span (producer) and the process span (consumer) of each attempt,
//! joined by the `traceparent` the first stores in the job's meta.

use opentelemetry::trace::{
    FutureExt, Link, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue, global};

use futures_util::future::BoxFuture;

use crate::hooks::{Hook, JobRun, Next};
use crate::{Error, ErrorClass, JobError, NewJob, Traceparent};

/// How a job's process span joins the span that enqueued it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Propagation {
    /// Each attempt is the root of a trace of its own, with a link to the enqueue span (the
    /// default; Sidekiq's OpenTelemetry instrumentation's default too).
    #[default]
    Link,
    /// Each attempt is a child of the enqueue span: the request's trace holds its jobs and their
    /// retries.
    Child,
}

/// The hook that traces enqueues and attempts with OpenTelemetry ([`crate::otel`]). Spans go to
/// the global tracer provider as it is when each span starts, so the hook may be installed
/// before the provider.
#[derive(Debug, Clone, Default)]
pub struct TraceHook {
    propagation: Propagation,
}

impl TraceHook {
    /// A hook whose attempts link to their enqueue span ([`Propagation::Link`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// How attempts join their enqueue span (default [`Propagation::Link`]).
    #[must_use]
    pub fn propagation(mut self, propagation: Propagation) -> Self {
        self.propagation = propagation;
        self
    }
}

fn tracer() -> global::BoxedTracer {
    global::tracer_with_scope(
        InstrumentationScope::builder(super::SCOPE)
            .with_version(crate::VERSION)
            .build(),
    )
}

/// The W3C `traceparent` of `sc`.
fn traceparent(sc: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

/// The remote span context a `traceparent` names (it was checked when stored).
fn span_context(tp: &str) -> Option<SpanContext> {
    let tp = Traceparent::parse(tp).ok()?;
    let flags = u8::from_str_radix(&tp.as_str()[53..55], 16).ok()?;
    Some(SpanContext::new(
        TraceId::from_hex(tp.trace_id()).ok()?,
        SpanId::from_hex(tp.parent_id()).ok()?,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    ))
}

fn common(
    operation: &'static str,
    kind: &'static str,
    queue: &str,
    kind_name: &str,
) -> Vec<KeyValue> {
    vec![
        KeyValue::new("messaging.system", "mysqlq"),
        KeyValue::new("messaging.operation.name", operation),
        KeyValue::new("messaging.operation.type", kind),
        KeyValue::new("messaging.destination.name", queue.to_owned()),
        KeyValue::new("mysqlq.job.kind", kind_name.to_owned()),
    ]
}

impl Hook for TraceHook {
    /// Starts and ends the enqueue span, and stores its `traceparent` in the job's meta. Its
    /// parent is the current OpenTelemetry context; without one, a `traceparent` the job already
    /// carries (a hook of yours, [`NewJob::set_traceparent`]).
    fn on_enqueue<'a>(&'a self, job: &'a mut NewJob) -> BoxFuture<'a, Result<(), Error>> {
        let current = Context::current();
        let parent = match crate::hooks::traceparent_of(job.meta()).and_then(span_context) {
            Some(sc) if !current.span().span_context().is_valid() => {
                Context::new().with_remote_span_context(sc)
            }
            _ => current,
        };
        let tracer = tracer();
        let span = tracer
            .span_builder(format!("enqueue {}", job.queue()))
            .with_kind(SpanKind::Producer)
            .with_attributes(common("enqueue", "send", job.queue(), job.kind()))
            .start_with_context(&tracer, &parent);
        let sc = opentelemetry::trace::Span::span_context(&span).clone();
        // No tracer provider: no span, and nothing to store.
        let stamped = if sc.is_valid() {
            job.set_traceparent(&traceparent(&sc))
        } else {
            Ok(())
        };
        drop(span);
        Box::pin(async move { stamped })
    }

    /// Runs the attempt inside its process span, current as the OpenTelemetry context.
    fn around_run<'a>(&'a self, job: &'a JobRun, next: Next<'a>) -> Next<'a> {
        let enqueued = job.traceparent().and_then(span_context);
        let mut attributes = common("process", "process", job.queue(), job.kind());
        attributes.push(KeyValue::new("messaging.message.id", job.id().to_string()));
        attributes.push(KeyValue::new(
            "mysqlq.job.attempt",
            i64::from(job.attempt()),
        ));
        let tracer = tracer();
        let mut builder = tracer
            .span_builder(format!("process {}", job.queue()))
            .with_kind(SpanKind::Consumer)
            .with_attributes(attributes);
        let parent = match (self.propagation, enqueued) {
            (Propagation::Child, Some(sc)) => Context::new().with_remote_span_context(sc),
            (Propagation::Link, Some(sc)) => {
                builder = builder.with_links(vec![Link::with_context(sc)]);
                Context::new()
            }
            (_, None) => Context::new(),
        };
        let cx = parent.with_span(tracer.build_with_context(builder, &parent));
        let mut ending = Ending(Some(cx.clone()));
        Box::pin(async move {
            let result = next.with_context(cx).await;
            if let Some(cx) = ending.0.take() {
                outcome(&cx, &result);
                cx.span().end();
            }
            result
        })
    }
}

/// Ends the process span of an attempt the worker dropped (timeout, lost lease, shutdown).
struct Ending(Option<Context>);

impl Drop for Ending {
    fn drop(&mut self) {
        if let Some(cx) = self.0.take() {
            let span = cx.span();
            span.set_attribute(KeyValue::new("mysqlq.job.outcome", "interrupted"));
            span.set_status(Status::error(
                "the worker stopped the attempt (timeout, lost lease or shutdown)",
            ));
            span.end();
        }
    }
}

/// Records an attempt's result on its span.
fn outcome(cx: &Context, result: &Result<(), JobError>) {
    let span = cx.span();
    let Err(e) = result else {
        span.set_attribute(KeyValue::new("mysqlq.job.outcome", "ok"));
        span.set_status(Status::Ok);
        return;
    };
    let name = match e.class() {
        ErrorClass::Retry => "retry",
        ErrorClass::Fail => "fail",
        ErrorClass::Snooze(_) => "snooze",
        ErrorClass::Cancel => "cancel",
        ErrorClass::RateLimited(_) => "rate_limited",
    };
    span.set_attribute(KeyValue::new("mysqlq.job.outcome", name));
    // A snooze or a rate limit is the handler's plan, not a failure.
    if !matches!(
        e.class(),
        ErrorClass::Snooze(_) | ErrorClass::RateLimited(_)
    ) {
        span.set_attribute(KeyValue::new("error.type", name));
        span.set_status(Status::error(crate::error_chain(e.source_error())));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};

    use super::*;
    use crate::{JobContext, JobId};

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    /// The global tracer provider of this test binary, exporting to memory.
    fn exporter() -> &'static InMemorySpanExporter {
        static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
        EXPORTER.get_or_init(|| {
            let exporter = InMemorySpanExporter::default();
            let provider = SdkTracerProvider::builder()
                .with_simple_exporter(exporter.clone())
                .build();
            global::set_tracer_provider(provider);
            exporter
        })
    }

    /// Runs job `id` (meta: `traceparent` = [`TP`]) through `hook` with `result`, or drops the
    /// attempt unfinished when `result` is `None`; returns its process span.
    async fn attempt(hook: &TraceHook, id: u64, result: Option<Result<(), JobError>>) -> SpanData {
        let exporter = exporter();
        let mut meta = crate::Meta::new();
        meta.insert(crate::TRACEPARENT_KEY.into(), TP.into());
        let ctx = JobContext::detached(JobId(id), "send_email", "mail");
        let run = JobRun::new(ctx, tracing::Span::none(), meta);
        match result {
            Some(result) => {
                let got = hook.around_run(&run, Box::pin(async move { result })).await;
                drop(got);
            }
            None => drop(hook.around_run(&run, Box::pin(std::future::pending()))),
        }
        let spans = exporter.get_finished_spans().unwrap();
        let id = id.to_string();
        spans
            .into_iter()
            .find(|s| {
                s.attributes.iter().any(|a| {
                    a.key.as_str() == "messaging.message.id" && a.value.as_str() == id.as_str()
                })
            })
            .expect("the attempt's span")
    }

    fn attribute(span: &SpanData, key: &str) -> Option<String> {
        span.attributes
            .iter()
            .find(|a| a.key.as_str() == key)
            .map(|a| a.value.to_string())
    }

    #[test]
    fn traceparents_round_trip_through_span_contexts() {
        let sc = span_context(TP).unwrap();
        assert!(sc.is_valid() && sc.is_remote() && sc.is_sampled());
        assert_eq!(traceparent(&sc), TP);
        assert_eq!(span_context("00-zz-00f067aa0ba902b7-01"), None);
    }

    #[tokio::test]
    async fn attempts_link_to_the_enqueue_span_by_default_or_are_its_children() {
        let enqueued = span_context(TP).unwrap();
        let linked = attempt(&TraceHook::new(), 9_001, Some(Ok(()))).await;
        assert_eq!(linked.span_kind, SpanKind::Consumer);
        assert_eq!(linked.name, "process mail");
        assert_eq!(linked.links.links.len(), 1, "{linked:#?}");
        assert_eq!(linked.links.links[0].span_context, enqueued);
        assert_ne!(linked.span_context.trace_id(), enqueued.trace_id());
        assert_eq!(linked.parent_span_id, SpanId::INVALID);
        assert_eq!(
            attribute(&linked, "mysqlq.job.outcome").as_deref(),
            Some("ok")
        );
        assert_eq!(linked.status, Status::Ok);

        let child = TraceHook::new().propagation(Propagation::Child);
        let child = attempt(&child, 9_002, Some(Ok(()))).await;
        assert!(child.links.links.is_empty(), "{child:#?}");
        assert_eq!(child.span_context.trace_id(), enqueued.trace_id());
        assert_eq!(child.parent_span_id, enqueued.span_id());
    }

    #[tokio::test]
    async fn failed_and_interrupted_attempts_say_so() {
        let failed = attempt(&TraceHook::new(), 9_003, Some(Err(JobError::retry("503")))).await;
        assert_eq!(
            attribute(&failed, "mysqlq.job.outcome").as_deref(),
            Some("retry")
        );
        assert_eq!(attribute(&failed, "error.type").as_deref(), Some("retry"));
        assert!(
            matches!(&failed.status, Status::Error { description } if description.contains("503"))
        );

        let snoozed = JobError::snooze(std::time::Duration::from_secs(1));
        let snoozed = attempt(&TraceHook::new(), 9_004, Some(Err(snoozed))).await;
        assert_eq!(
            attribute(&snoozed, "mysqlq.job.outcome").as_deref(),
            Some("snooze")
        );
        assert_eq!(snoozed.status, Status::Unset, "a snooze is no error");

        let dropped = attempt(&TraceHook::new(), 9_005, None).await;
        assert_eq!(
            attribute(&dropped, "mysqlq.job.outcome").as_deref(),
            Some("interrupted")
        );
        assert!(matches!(dropped.status, Status::Error { .. }));
    }
}
