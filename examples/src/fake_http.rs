//! The hand-written HTTP/1.1 both fake APIs are built on (one request per connection): a server
//! on `127.0.0.1:<free port>` that parses each request and answers what a handler decides, and a
//! client that sends one request and reads the status and body of the answer.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Sends `request` (a whole HTTP/1.1 request with `Connection: close`) to `addr`; returns the
/// status and the trimmed body of the answer. `who` names the server in the timeout error (5 s).
pub(crate) async fn exchange(
    addr: SocketAddr,
    request: &str,
    who: &str,
) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        let text = String::from_utf8_lossy(&raw);
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| std::io::Error::other(format!("malformed HTTP response: {text:.80}")))?;
        let body = text
            .split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .trim()
            .to_owned();
        Ok((status, body))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
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
    /// The request target, e.g. `/send`.
    pub(crate) path: String,
    /// The headers, in order.
    headers: Vec<(String, String)>,
    /// The body (`Content-Length` bytes, or fewer if the client closed early).
    pub(crate) body: Vec<u8>,
}

impl Request {
    /// The value of the last header called `name` (case-insensitive), trimmed.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
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
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let stats = shared.clone();
                let handle = handle.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, |request| handle(request, stats)).await;
                });
            }
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

/// Reads one request, answers what `handle` decides, closes.
async fn serve<F>(mut stream: TcpStream, handle: impl FnOnce(Request) -> F) -> std::io::Result<()>
where
    F: Future<Output = (u16, String)>,
{
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if raw.len() > 64 * 1024 {
            return respond(&mut stream, 431, "request head too large").await;
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.lines();
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or_default().to_owned(),
        parts.next().unwrap_or_default().to_owned(),
    );
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_owned(), value.trim().to_owned()))
        .collect();
    let length = headers
        .iter()
        .rev()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, value)| value.parse().unwrap_or(0));
    if length > 1024 * 1024 {
        return respond(&mut stream, 413, "body too large").await;
    }
    while raw.len() < head_end + length {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let body = raw[head_end..raw.len().min(head_end + length)].to_vec();
    let request = Request {
        method,
        path,
        headers,
        body,
    };
    let (status, text) = handle(request).await;
    respond(&mut stream, status, &text).await
}

async fn respond(stream: &mut TcpStream, status: u16, body: &str) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
