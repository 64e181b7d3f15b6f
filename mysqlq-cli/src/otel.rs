//! `work --otel`: OpenTelemetry's SDK with OTLP exporters (http/protobuf), configured by the
//! standard `OTEL_*` environment variables, installed as the global tracer and meter providers;
//! [`Telemetry::shutdown`] flushes both.

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::{InstrumentationScope, Key, global};
use opentelemetry_otlp::{MetricExporter, SpanExporter};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::error::CliError;
use crate::program;

/// The only OTLP protocol this build speaks.
const PROTOCOL: &str = "http/protobuf";

/// The installed providers, to flush and stop at shutdown.
#[derive(Debug)]
pub(crate) struct Telemetry {
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
}

/// Refuses an `OTEL_EXPORTER_OTLP_*PROTOCOL` other than http/protobuf, which the exporter would
/// otherwise ignore (gRPC is not built in).
fn check_protocol() -> Result<(), CliError> {
    for var in [
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    ] {
        match std::env::var(var) {
            Ok(p) if p.trim() != PROTOCOL && !p.trim().is_empty() => {
                return Err(CliError::usage(
                    format!("{var}={p}: this build exports OTLP over {PROTOCOL} only"),
                    format!(
                        "unset {var} or set it to {PROTOCOL}, and point OTEL_EXPORTER_OTLP_ENDPOINT \
                         at the collector's HTTP port (4318 by default)"
                    ),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The resource of every span and metric: the SDK's reading of `OTEL_SERVICE_NAME` and
/// `OTEL_RESOURCE_ATTRIBUTES`, with this program's name as the service when they name none.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&Key::from_static_str("service.name"))
        .is_some_and(|v| !v.as_str().starts_with("unknown_service"));
    if named {
        detected
    } else {
        Resource::builder()
            .with_service_name(program::name())
            .build()
    }
}

/// Builds the exporters and installs the providers as OpenTelemetry's globals.
pub(crate) fn start() -> Result<Telemetry, CliError> {
    check_protocol()?;
    let failed = |what: &str, e: &dyn std::error::Error| {
        CliError::new(
            format!("cannot set up the OTLP {what} exporter: {e}"),
            "check the OTEL_EXPORTER_OTLP_* variables (endpoint, headers, timeout)",
        )
    };
    let spans = SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| failed("span", &e))?;
    let metrics = MetricExporter::builder()
        .with_http()
        .build()
        .map_err(|e| failed("metric", &e))?;
    let resource = resource();
    let tracer = SdkTracerProvider::builder()
        .with_batch_exporter(spans)
        .with_resource(resource.clone())
        .build();
    let meter = SdkMeterProvider::builder()
        .with_periodic_exporter(metrics)
        .with_resource(resource)
        .build();
    global::set_tracer_provider(tracer.clone());
    global::set_meter_provider(meter.clone());
    Ok(Telemetry { tracer, meter })
}

impl Telemetry {
    /// The meter the worker's metrics are mirrored to.
    pub(crate) fn meter(&self) -> opentelemetry::metrics::Meter {
        self.meter.meter_with_scope(
            InstrumentationScope::builder(mysqlq::otel::SCOPE)
                .with_version(mysqlq::VERSION)
                .build(),
        )
    }

    /// Exports what is left (the last spans, a last reading of the metrics) and stops the
    /// exporters. Blocks while they send: run on a blocking thread.
    pub(crate) fn shutdown(self) {
        if let Err(e) = self.tracer.shutdown() {
            tracing::warn!(error = %e, "the OpenTelemetry spans could not all be exported");
        }
        if let Err(e) = self.meter.shutdown() {
            tracing::warn!(error = %e, "the OpenTelemetry metrics could not all be exported");
        }
    }
}
