//! Live pages: `static/live.js` polls the page's own URL with `X-Mysqlq-Live: 1` every 750 ms
//! while the tab is visible, and swaps the page's `data-live` regions when they changed. This
//! layer answers those polls: `304 Not Modified` when the page is what the tab has (its
//! `ETag`), else the page; and it shares one rendering per session and page between tabs, kept
//! for `clamp(4 × render time, 250 ms, 10 s)`, so a view's database work is at most a fifth
//! of one connection however many tabs of it are open (the render holds the session's CSRF
//! token, so it is never shared across sessions). Without JavaScript, `?refresh=N` (5–300)
//! adds an HTTP `Refresh: N` header. Plan in `docs/design/dashboard.md` §4.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::Shared;
use super::guard::current_csrf;

/// The header of a poll.
pub(super) const LIVE_HEADER: &str = "x-mysqlq-live";
/// Shortest and longest time a rendering is shared.
const TTL_MIN: Duration = Duration::from_millis(250);
const TTL_MAX: Duration = Duration::from_secs(10);
/// Renderings kept at most (least recently used go first).
const ENTRIES: usize = 256;
/// Largest page kept.
const MAX_PAGE_BYTES: usize = 4 * 1024 * 1024;

/// One rendering of a page for a session.
#[derive(Debug)]
struct Entry {
    /// The page and its ETag, once rendered.
    page: Option<(Arc<Vec<u8>>, String)>,
    /// When the rendering finished, and how long it took.
    at: Instant,
    took: Duration,
    used: Instant,
}

impl Entry {
    fn fresh(&self) -> bool {
        self.page.is_some() && self.at.elapsed() < ttl(self.took)
    }
}

/// How long a rendering that took `took` is shared.
fn ttl(took: Duration) -> Duration {
    (took * 4).clamp(TTL_MIN, TTL_MAX)
}

/// The renderings, by session and page; each behind its own lock, so tabs of one view wait
/// for one rendering.
#[derive(Debug, Default)]
pub(super) struct LiveCache(Mutex<HashMap<String, Arc<tokio::sync::Mutex<Entry>>>>);

impl LiveCache {
    fn slot(&self, key: &str) -> Arc<tokio::sync::Mutex<Entry>> {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= ENTRIES && !map.contains_key(key) {
            let oldest = map
                .iter()
                .filter_map(|(k, v)| v.try_lock().ok().map(|e| (k.clone(), e.used)))
                .min_by_key(|(_, used)| *used)
                .map(|(k, _)| k);
            if let Some(k) = oldest {
                map.remove(&k);
            }
        }
        Arc::clone(map.entry(key.to_owned()).or_insert_with(|| {
            Arc::new(tokio::sync::Mutex::new(Entry {
                page: None,
                at: Instant::now(),
                took: Duration::ZERO,
                used: Instant::now(),
            }))
        }))
    }
}

fn etag_of(body: &[u8]) -> String {
    let digest = Sha256::digest(body);
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// `?refresh=N` of a page, when 5 ≤ N ≤ 300.
fn refresh_of(req: &Request) -> Option<u32> {
    let q = req.uri().query()?;
    form_urlencoded::parse(q.as_bytes())
        .find(|(k, _)| k == "refresh")
        .and_then(|(_, v)| v.parse::<u32>().ok())
        .filter(|n| (5..=300).contains(n))
}

/// The layer: polls get the shared rendering or `304`; other GETs pass, with `Refresh` when
/// asked for.
pub(super) async fn live(State(state): State<Shared>, req: Request, next: Next) -> Response {
    if req.method() != Method::GET {
        return next.run(req).await;
    }
    if req.headers().get(LIVE_HEADER).is_none() {
        let refresh = refresh_of(&req);
        let mut resp = next.run(req).await;
        if let Some(n) = refresh
            && resp.status() == StatusCode::OK
            && let Ok(v) = HeaderValue::from_str(&n.to_string())
        {
            resp.headers_mut().insert(header::REFRESH, v);
        }
        return resp;
    }
    let known = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let key = format!("{}\n{}", current_csrf(), req.uri());
    let slot = state.live.slot(&key);
    let mut entry = slot.lock().await;
    if !entry.fresh() {
        let began = Instant::now();
        let resp = next.run(req).await;
        if resp.status() != StatusCode::OK {
            entry.page = None;
            return resp;
        }
        let Ok(body) = to_bytes(resp.into_body(), MAX_PAGE_BYTES).await else {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "page too large to refresh",
            )
                .into_response();
        };
        let etag = etag_of(&body);
        entry.page = Some((Arc::new(body.to_vec()), etag));
        entry.took = began.elapsed();
        entry.at = Instant::now();
    }
    entry.used = Instant::now();
    let Some((body, etag)) = entry.page.clone() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    drop(entry);
    let etag_value = HeaderValue::from_str(&etag).unwrap_or(HeaderValue::from_static("\"\""));
    if known.as_deref() == Some(etag.as_str()) {
        let mut resp = StatusCode::NOT_MODIFIED.into_response();
        resp.headers_mut().insert(header::ETAG, etag_value);
        return resp;
    }
    let mut resp = Response::new(Body::from(body.as_ref().clone()));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::ETAG, etag_value);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renderings_are_shared_for_four_times_their_cost_within_bounds() {
        assert_eq!(ttl(Duration::from_millis(10)), TTL_MIN);
        assert_eq!(ttl(Duration::from_millis(100)), Duration::from_millis(400));
        assert_eq!(ttl(Duration::from_secs(5)), TTL_MAX);
        assert_ne!(etag_of(b"a"), etag_of(b"b"));
    }
}
