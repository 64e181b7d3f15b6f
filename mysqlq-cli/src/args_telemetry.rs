//! `work`'s telemetry flags: the Prometheus endpoint and OpenTelemetry export, a flattened
//! group of their own (`args.rs` holds the rest of the command line).

use clap::Args;

/// Where `work` reports what it does, besides its log.
#[derive(Debug, Args)]
pub(crate) struct TelemetryArgs {
    /// Serve Prometheus metrics at http://HOST:PORT/metrics
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
    /// Export spans and metrics with OpenTelemetry over OTLP (http/protobuf), configured by the
    /// standard OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, …); needs
    /// mysqlq-cli's cargo feature `otel`
    #[arg(long)]
    pub(crate) otel: bool,
}
