//! `GET /metrics` (Prometheus text format), served with axum.

use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

/// Produces the metrics text on each scrape.
pub(crate) type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// The content type of the exposition `mysqlq::Metrics::render_prometheus` writes.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves `render()` at `/metrics` on `listener` until the task is aborted.
pub(crate) async fn serve(listener: TcpListener, render: Render) {
    let app = Router::new()
        .route(
            "/metrics",
            get(move || async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], render()) }),
        )
        .fallback(not_found);
    if let Err(e) = axum::serve(listener, app).await {
        tracing::warn!(error = %mysqlq::error_chain(&e), "the metrics server stopped");
    }
}

async fn not_found() -> impl IntoResponse {
    (StatusCode::NOT_FOUND, "not found; try /metrics\n")
}
