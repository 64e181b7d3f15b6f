//! What both fake APIs are built on: an axum server on `127.0.0.1:<free port>` that hands each
//! request to a handler deciding the answer, and a hyper client that sends one request and reads
//! the status and body of the answer.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{self, HeaderMap, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;

/// How long a client waits for an answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest request body the fake servers read.
const MAX_BODY: usize = 1024 * 1024;

/// Sends `method path` with `headers` and `body` to `addr`; returns the status and the trimmed
/// body of the answer. `who` names the server in the timeout error (5 s).
pub(crate) async fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: String,
    who: &str,
) -> std::io::Result<(u16, String)> {
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body)))
        .map_err(std::io::Error::other)?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(std::io::Error::other)?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(std::io::Error::other)?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).trim().to_owned()))
    };
    tokio::time::timeout(CLIENT_TIMEOUT, exchange)
        .await
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{who} did not answer in 5 s"),
            )
        })?
}

/// One request the fake server received.
#[derive(Debug)]
pub(crate) struct Request {
    /// `GET`, `POST`, …
    pub(crate) method: String,
    /// The path, e.g. `/send`.
    pub(crate) path: String,
    /// The headers.
    headers: HeaderMap,
    /// The body.
    pub(crate) body: Vec<u8>,
}

impl Request {
    /// The value of the header called `name` (case-insensitive), trimmed.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    }
}

/// A fake API on `127.0.0.1:<free port>` whose handler answers every request and records what it
/// saw in an `S`. Stops when dropped.
#[derive(Debug)]
pub(crate) struct FakeServer<S> {
    addr: SocketAddr,
    stats: Arc<Mutex<S>>,
    task: tokio::task::JoinHandle<()>,
}

impl<S: Default + Clone + Send + 'static> FakeServer<S> {
    /// Starts the server; `handle` turns a request (and the shared stats) into a status and body.
    pub(crate) async fn start<H, F>(handle: H) -> std::io::Result<Self>
    where
        H: Fn(Request, Arc<Mutex<S>>) -> F + Send + Sync + 'static,
        F: Future<Output = (u16, String)> + Send + 'static,
    {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(Mutex::new(S::default()));
        let shared = stats.clone();
        let handle = Arc::new(handle);
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let (handle, stats) = (handle.clone(), shared.clone());
            async move {
                let (parts, body) = request.into_parts();
                let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
                    return (StatusCode::PAYLOAD_TOO_LARGE, "body too large".to_owned());
                };
                let request = Request {
                    method: parts.method.to_string(),
                    path: parts.uri.path().to_owned(),
                    headers: parts.headers,
                    body: body.to_vec(),
                };
                let (status, text) = handle(request, stats).await;
                let status =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                (status, text)
            }
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, stats, task })
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A copy of what it saw so far.
    pub(crate) fn stats(&self) -> S {
        lock(&self.stats).clone()
    }
}

impl<S> Drop for FakeServer<S> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Locks `m`, even if a panicking holder poisoned it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
