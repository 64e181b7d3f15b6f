//! [`TraceHook`]: the enqueue span (producer) and the process span (consumer) of each attempt,
//! joined by the `traceparent` the first stores in the job's meta.

use opentelemetry::trace::{
    FutureExt, Link, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue, global};

use crate::hooks::{BoxFuture, Hook, JobRun, Next};
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
    use super::*;

    #[test]
    fn traceparents_round_trip_through_span_contexts() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let sc = span_context(tp).unwrap();
        assert!(sc.is_valid() && sc.is_remote() && sc.is_sampled());
        assert_eq!(traceparent(&sc), tp);
        assert_eq!(span_context("00-zz-00f067aa0ba902b7-01"), None);
    }
}
