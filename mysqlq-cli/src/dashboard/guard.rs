//! The layer in front of every route: token, read-only, CSRF, and security headers.

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::Shared;

/// Name of the cookie holding the access token.
const TOKEN_COOKIE: &str = "mysqlq_token";
/// Name of the cookie (and form field) holding the CSRF token.
pub(super) const CSRF_FIELD: &str = "mysqlq_csrf";
/// Largest form body accepted.
const MAX_FORM_BYTES: usize = 256 * 1024;

/// `a == b` in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The value of cookie `name` in the request.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn plain(status: StatusCode, text: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{text}\n"),
    )
        .into_response()
}

/// Token check: `Ok(None)` passes, `Ok(Some(response))` answers now (refusal or the redirect
/// that trades `?token=` for a cookie).
fn check_token(state: &Shared, req: &Request) -> Option<Response> {
    let want = state.token.as_deref()?;
    let headers = req.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer.is_some_and(|t| same(t.trim(), want))
        || cookie(headers, TOKEN_COOKIE).is_some_and(|t| same(t, want))
    {
        return None;
    }
    let query = req.uri().query().unwrap_or("");
    let from_query = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned());
    if let Some(t) = from_query
        && same(&t, want)
        && req.method() == Method::GET
    {
        let rest: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .filter(|(k, _)| k != "token")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let mut location = format!("{}{}", state.base, req.uri().path());
        if !rest.is_empty() {
            location.push('?');
            location.push_str(
                &form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(rest)
                    .finish(),
            );
        }
        let cookie = format!(
            "{TOKEN_COOKIE}={want}; Path={}; HttpOnly; SameSite=Strict",
            cookie_path(state)
        );
        let mut resp = (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response();
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
        return Some(resp);
    }
    Some(plain(
        StatusCode::UNAUTHORIZED,
        "unauthorized: this dashboard needs its token; open it once with ?token=<token> or send `Authorization: Bearer <token>`",
    ))
}

fn cookie_path(state: &Shared) -> &str {
    if state.base.is_empty() {
        "/"
    } else {
        &state.base
    }
}

/// CSRF check of a POST: the form field and the cookie must both carry the process's token.
fn csrf_ok(state: &Shared, headers: &HeaderMap, body: &[u8]) -> bool {
    let field = form_urlencoded::parse(body)
        .find(|(k, _)| k == CSRF_FIELD)
        .map(|(_, v)| v.into_owned());
    let cookie_ok = cookie(headers, CSRF_FIELD).is_some_and(|c| same(c, &state.csrf));
    cookie_ok && field.is_some_and(|f| same(&f, &state.csrf))
}

/// The middleware: token, then for writes read-only and CSRF, then the security headers and
/// the CSRF cookie on every answer.
pub(super) async fn guard(State(state): State<Shared>, req: Request, next: Next) -> Response {
    if let Some(resp) = check_token(&state, &req) {
        return with_headers(&state, resp);
    }
    let req = if matches!(*req.method(), Method::GET | Method::HEAD) {
        req
    } else {
        if state.read_only {
            return with_headers(
                &state,
                plain(
                    StatusCode::FORBIDDEN,
                    "forbidden: the dashboard is read-only (started with --read-only)",
                ),
            );
        }
        let (parts, body) = req.into_parts();
        let Ok(bytes) = to_bytes(body, MAX_FORM_BYTES).await else {
            return with_headers(
                &state,
                plain(StatusCode::PAYLOAD_TOO_LARGE, "form too large"),
            );
        };
        if !csrf_ok(&state, &parts.headers, &bytes) {
            return with_headers(
                &state,
                plain(
                    StatusCode::FORBIDDEN,
                    "forbidden: missing or wrong CSRF token; reload the page and submit the form again",
                ),
            );
        }
        Request::from_parts(parts, Body::from(bytes))
    };
    let resp = next.run(req).await;
    with_headers(&state, resp)
}

fn with_headers(state: &Shared, mut resp: Response) -> Response {
    let h = resp.headers_mut();
    let fixed = [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (k, v) in fixed {
        h.insert(k, HeaderValue::from_static(v));
    }
    let csrf = format!(
        "{CSRF_FIELD}={}; Path={}; HttpOnly; SameSite=Strict",
        state.csrf,
        cookie_path(state)
    );
    if let Ok(v) = HeaderValue::from_str(&csrf) {
        h.append(header::SET_COOKIE, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparison_and_cookies() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "abcd"));
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; mysqlq_csrf=xyz"),
        );
        assert_eq!(cookie(&h, CSRF_FIELD), Some("xyz"));
        assert_eq!(cookie(&h, TOKEN_COOKIE), None);
    }
}
