//! Requests in tests: built once, sent in-process to a router with `tower::ServiceExt::oneshot`
//! or over a socket with hyper's client.

use std::net::SocketAddr;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response};
use http_body_util::BodyExt as _;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tower::ServiceExt as _;

/// A response, read whole.
#[derive(Debug)]
pub struct Resp {
    /// The status code.
    pub status: u16,
    /// The headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body as text.
    pub body: String,
}

impl Resp {
    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every Set-Cookie header.
    pub fn set_cookies(&self) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// `name=value` of a Set-Cookie.
    pub fn cookie(&self, name: &str) -> Option<String> {
        self.set_cookies()
            .into_iter()
            .filter_map(|c| c.split(';').next())
            .find(|kv| kv.starts_with(&format!("{name}=")))
            .map(str::to_owned)
    }
}

/// A request to the server at `addr`: `Host` is `addr` unless `headers` name one; `body` is
/// (content type, text).
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<(&str, &str)>,
) -> Request<Body> {
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req = req.header("Host", addr.to_string());
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let body = match body {
        Some((ctype, b)) => {
            req = req.header("Content-Type", ctype);
            Body::from(b.to_owned())
        }
        None => Body::empty(),
    };
    req.body(body).expect("a valid request")
}

/// A response with its body read whole.
pub async fn read(r: Response<Body>) -> Resp {
    let (parts, body) = r.into_parts();
    let bytes = body.collect().await.expect("read the body").to_bytes();
    Resp {
        status: parts.status.as_u16(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// A request to `app`, in-process.
pub async fn send(app: &Router, req: Request<Body>) -> Resp {
    let r = app
        .clone()
        .oneshot(req)
        .await
        .unwrap_or_else(|e| match e {});
    read(r).await
}

/// A request over a socket, to the server its URI names.
pub async fn http(req: Request<Body>) -> Resp {
    let what = format!("{} {}", req.method(), req.uri());
    let client = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let r = client
        .request(req)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    read(r.map(Body::new)).await
}
