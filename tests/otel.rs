//! OpenTelemetry (feature `otel`): the enqueue span of this process and the process span of a
//! real worker process (`work --otel`, exporting over OTLP/HTTP to a receiver here) are linked
//! through the job's `traceparent`; and the worker's OpenTelemetry instruments report the values
//! of its Prometheus exposition.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use mysqlq::hooks::{Hooks, set_global_hooks};
use mysqlq::otel::TraceHook;
use mysqlq_tests::jobs::{Noop, Permanent};
use mysqlq_tests::{FAST_TIMINGS, Proc, TestDb};
use opentelemetry::context::FutureExt as _;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{
    Span as _, SpanKind, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue, global};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{KeyValue as ProtoKeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{Span as ProtoSpan, span::SpanKind as ProtoKind};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use prost::Message as _;

/// This test binary's spans: the global tracer provider, exporting to memory, and the
/// [`TraceHook`] as the global hooks (once per process).
fn spans_in_memory() -> InMemorySpanExporter {
    static EXPORTER: Mutex<Option<InMemorySpanExporter>> = Mutex::new(None);
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        global::set_tracer_provider(provider);
        set_global_hooks(Hooks::new().with(TraceHook::new()));
        *EXPORTER.lock().unwrap() = Some(exporter);
    });
    EXPORTER.lock().unwrap().clone().unwrap()
}

/// An OTLP/HTTP receiver (`POST /v1/traces`, `POST /v1/metrics`) on a free port of 127.0.0.1:
/// its endpoint, and the trace requests it decoded.
async fn otlp_receiver() -> (String, Arc<Mutex<Vec<ExportTraceServiceRequest>>>) {
    type Received = Arc<Mutex<Vec<ExportTraceServiceRequest>>>;
    async fn traces(State(got): State<Received>, body: Bytes) -> Vec<u8> {
        let request = ExportTraceServiceRequest::decode(body).expect("an OTLP trace request");
        got.lock().unwrap().push(request);
        Vec::new() // an empty ExportTraceServiceResponse
    }
    let got = Received::default();
    let app = Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/metrics", post(|| async { Vec::<u8>::new() }))
        .with_state(got.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (endpoint, got)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn proto_attr<'a>(attrs: &'a [ProtoKeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn proto_str(attrs: &[ProtoKeyValue], key: &str) -> Option<String> {
    match proto_attr(attrs, key) {
        Some(any_value::Value::StringValue(s)) => Some(s.clone()),
        _ => None,
    }
}

fn sdk_attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|a| a.key.as_str() == key)
        .map(|a| a.value.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_span_of_a_worker_process_links_to_the_enqueue_span() {
    let exporter = spans_in_memory();
    let db = TestDb::new().await;
    let (endpoint, received) = otlp_receiver().await;

    // The request of this process, enqueueing a job inside its span.
    let tracer = global::tracer_provider().tracer("request-handler");
    let request = tracer.start("POST /orders");
    let request_sc = request.span_context().clone();
    let cx = Context::current_with_span(request);
    let id = Noop { n: 42 }
        .enqueue(&db.pool)
        .with_context(cx.clone())
        .await
        .unwrap()
        .id();
    cx.span().end();

    let spans = exporter.get_finished_spans().unwrap();
    let enqueue = spans
        .iter()
        // This binary's other test enqueues too: the span of this request's trace.
        .find(|s| s.span_kind == SpanKind::Producer && s.parent_span_id == request_sc.span_id())
        .unwrap_or_else(|| panic!("no enqueue span among {spans:#?}"));
    let enqueue_sc = enqueue.span_context.clone();
    assert_eq!(enqueue_sc.trace_id(), request_sc.trace_id(), "{enqueue:#?}");
    assert_eq!(enqueue.name, "enqueue test");
    assert_eq!(
        sdk_attr(enqueue, "messaging.system").as_deref(),
        Some("mysqlq")
    );
    assert_eq!(
        sdk_attr(enqueue, "messaging.destination.name").as_deref(),
        Some("test")
    );
    let stored: String = sqlx::query_scalar(
        "SELECT JSON_UNQUOTE(JSON_EXTRACT(meta, '$.traceparent')) FROM job_queue WHERE id = ?",
    )
    .bind(id.0)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        stored,
        format!("00-{}-{}-01", enqueue_sc.trace_id(), enqueue_sc.span_id()),
        "the job's meta carries the enqueue span's traceparent"
    );

    // A real worker process runs it with `--otel`, exporting to the receiver above.
    let log = std::env::temp_dir().join(format!("{}-otel.log", db.name));
    let child = Command::new(env!("CARGO_BIN_EXE_mysqlq-test-worker"))
        .args([
            "work",
            "--worker-id",
            "otel-w",
            "--otel",
            "--queues",
            "test",
        ])
        .args(FAST_TIMINGS)
        .env("DATABASE_URL", db.url())
        .env("RUST_LOG", "warn")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_SERVICE_NAME", "otel-test-worker")
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).map_or(Stdio::null(), Stdio::from))
        .spawn()
        .expect("spawn the test worker binary");
    let mut worker = Proc {
        child,
        id: "otel-w".into(),
        log,
    };
    db.wait_for(
        "the job to complete in the worker process",
        &format!(
            "SELECT COUNT(*) FROM job_queue WHERE id = {} AND status = 'completed'",
            id.0
        ),
        Duration::from_secs(60),
    )
    .await;
    // Its graceful shutdown flushes the span exporter: the receiver has the span before exit.
    let status = worker.terminate(Duration::from_secs(60));
    assert!(status.success(), "{status}: {}", worker.log_text());

    let requests = received.lock().unwrap().clone();
    let resource_names: Vec<String> = requests
        .iter()
        .flat_map(|r| &r.resource_spans)
        .filter_map(|rs| rs.resource.as_ref())
        .filter_map(|r| proto_str(&r.attributes, "service.name"))
        .collect();
    let runs: Vec<&ProtoSpan> = requests
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .filter(|s| s.kind == ProtoKind::Consumer as i32)
        .collect();
    let [run] = runs.as_slice() else {
        panic!(
            "expected one process span from the worker, got {runs:#?}\nworker log:\n{}",
            worker.log_text()
        );
    };
    assert!(
        resource_names.iter().all(|n| n == "otel-test-worker") && !resource_names.is_empty(),
        "OTEL_SERVICE_NAME names the worker's resource: {resource_names:?}"
    );
    assert_eq!(run.name, "process test");
    assert_eq!(
        run.links.len(),
        1,
        "one link, to the enqueue span: {run:#?}"
    );
    let link = &run.links[0];
    assert_eq!(hex(&link.trace_id), enqueue_sc.trace_id().to_string());
    assert_eq!(hex(&link.span_id), enqueue_sc.span_id().to_string());
    assert!(
        run.parent_span_id.is_empty(),
        "linked, not parented: the attempt roots a trace of its own ({run:#?})"
    );
    assert_ne!(hex(&run.trace_id), enqueue_sc.trace_id().to_string());
    for (key, want) in [
        ("messaging.system", "mysqlq"),
        ("messaging.operation.type", "process"),
        ("messaging.destination.name", "test"),
        ("mysqlq.job.kind", "noop"),
        ("mysqlq.job.outcome", "ok"),
    ] {
        assert_eq!(
            proto_str(&run.attributes, key).as_deref(),
            Some(want),
            "{key} of {run:#?}"
        );
    }
    assert_eq!(
        proto_str(&run.attributes, "messaging.message.id"),
        Some(id.0.to_string())
    );
    assert!(
        matches!(
            proto_attr(&run.attributes, "mysqlq.job.attempt"),
            Some(any_value::Value::IntValue(1))
        ),
        "{run:#?}"
    );
}

/// `(labels without worker, value)` of every line of the Prometheus exposition `text` that
/// starts with `series{`.
fn prom(text: &str, series: &str) -> HashMap<String, f64> {
    let open = format!("{series}{{");
    text.lines()
        .filter_map(|l| l.strip_prefix(&open))
        .filter_map(|rest| {
            let (labels, value) = rest.rsplit_once("} ")?;
            let labels = labels
                .split(',')
                .filter(|l| !l.starts_with("worker="))
                .collect::<Vec<_>>()
                .join(",");
            Some((labels, value.parse().ok()?))
        })
        .collect()
}

/// The same shape from the OpenTelemetry instrument `name`: sums (counters) and histogram counts
/// by their labels (`kind="…"`, without `worker`).
fn otel(metrics: &ResourceMetrics, name: &str) -> HashMap<String, f64> {
    let labels = |attrs: &mut dyn Iterator<Item = &KeyValue>| {
        attrs
            .filter(|kv| kv.key.as_str() != "worker")
            .map(|kv| format!("{}=\"{}\"", kv.key, kv.value))
            .collect::<Vec<_>>()
            .join(",")
    };
    let metric = metrics
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .find(|m| m.name() == name)
        .unwrap_or_else(|| panic!("no OpenTelemetry instrument {name}"));
    #[allow(clippy::cast_precision_loss)]
    match metric.data() {
        AggregatedMetrics::U64(MetricData::Sum(sum)) => sum
            .data_points()
            .map(|p| (labels(&mut p.attributes()), p.value() as f64))
            .collect(),
        AggregatedMetrics::F64(MetricData::Sum(sum)) => sum
            .data_points()
            .map(|p| (labels(&mut p.attributes()), p.value()))
            .collect(),
        AggregatedMetrics::F64(MetricData::Histogram(h)) => h
            .data_points()
            .map(|p| (labels(&mut p.attributes()), p.count() as f64))
            .collect(),
        AggregatedMetrics::U64(MetricData::Gauge(g)) => g
            .data_points()
            .map(|p| (labels(&mut p.attributes()), p.value() as f64))
            .collect(),
        AggregatedMetrics::F64(MetricData::Gauge(g)) => g
            .data_points()
            .map(|p| (labels(&mut p.attributes()), p.value()))
            .collect(),
        other => panic!("{name}: unexpected data {other:?}"),
    }
}

#[tokio::test]
async fn the_opentelemetry_instruments_report_the_prometheus_values() {
    let db = TestDb::new().await;
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(
            PeriodicReader::builder(exporter.clone())
                .with_interval(Duration::from_secs(3600))
                .build(),
        )
        .build();
    for n in 0..5 {
        Noop { n }.enqueue(&db.pool).await.unwrap();
    }
    Permanent {}.enqueue(&db.pool).await.unwrap();
    let worker = db
        .worker()
        .otel_meter(provider.meter("mysqlq"))
        .start()
        .await
        .unwrap();
    let metrics = worker.metrics();
    db.wait_for(
        "the six jobs to finish",
        "SELECT COUNT(*) FROM (SELECT 1 FROM job_queue WHERE status IN ('completed', 'failed') \
         HAVING COUNT(*) = 6) AS done",
        Duration::from_secs(60),
    )
    .await;
    // Stopped, the worker's counters stand still: both readings see the same moment.
    worker.shutdown().await.unwrap();
    let text = metrics.render_prometheus();
    provider.force_flush().unwrap();
    let exported = exporter.get_finished_metrics().unwrap();
    let last = exported.last().expect("one export after force_flush");

    // Every metric of the exposition, by its type: counters (`_total`) against the instrument's
    // sum, gauges against its value, histograms' `_count` against the instrument's count.
    let mut compared = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        let series = match kind {
            "counter" => format!("{name}_total"),
            "gauge" => name.to_owned(),
            "histogram" => format!("{name}_count"),
            other => panic!("{name}: unexpected type {other}"),
        };
        let want = prom(&text, &series);
        assert!(!want.is_empty(), "{series} in:\n{text}");
        assert_eq!(
            otel(last, name),
            want,
            "{series} against the instrument {name}"
        );
        compared.push(name.to_owned());
    }
    for name in [
        "mysqlq_claims",
        "mysqlq_completions",
        "mysqlq_failures",
        "mysqlq_polls",
        "mysqlq_job_runs",
        "mysqlq_job_errors",
        "mysqlq_job_seconds",
        "mysqlq_job_run_seconds",
        "mysqlq_job_pickup_seconds",
        "mysqlq_running",
        "mysqlq_leader",
    ] {
        assert!(
            compared.iter().any(|c| c == name),
            "{name} compared: {compared:?}"
        );
    }
    assert_eq!(prom(&text, "mysqlq_claims_total")[""], 6.0, "{text}");
    assert_eq!(prom(&text, "mysqlq_failures_total")[""], 1.0, "{text}");
    assert_eq!(
        prom(&text, "mysqlq_job_run_seconds_count")["kind=\"noop\""],
        5.0,
        "{text}"
    );
}
