//! The layer in front of every route: allowed hosts, token, read-only, same-origin POSTs, CSRF,
//! and security headers.

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::Shared;

/// Name of the cookie holding the access token.
const TOKEN_COOKIE: &str = "mysqlq_token";
/// Name of the session cookie of a dashboard without a token (the CSRF token is bound to it).
pub(super) const SESSION_COOKIE: &str = "mysqlq_session";
/// Name of the form field holding the CSRF token.
pub(super) const CSRF_FIELD: &str = "mysqlq_csrf";
/// Largest form body accepted.
const MAX_FORM_BYTES: usize = 256 * 1024;

tokio::task_local! {
    /// The CSRF token of the request being answered, for the forms the handlers render.
    static CSRF: String;
    /// Who the audit trail names for the request being answered.
    static ACTOR: Option<String>;
}

/// The CSRF token of the request being answered (empty outside the guard).
pub(super) fn current_csrf() -> String {
    CSRF.try_with(Clone::clone).unwrap_or_default()
}

/// The operator of the request being answered, if the hook or a named token says (else the
/// dashboard's user).
pub(super) fn current_actor() -> Option<String> {
    ACTOR.try_with(Clone::clone).ok().flatten()
}

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

/// The host name of a `Host` / `Origin` authority (`name[:port]`, `[v6][:port]`), lowercased.
fn host_name(authority: &str) -> String {
    let a = authority.trim();
    let name = if let Some(rest) = a.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        a.rsplit_once(':')
            .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
            .map_or(a, |(name, _)| name)
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// `true` when `host` may be served: an IP address (a DNS rebinding attack needs a name),
/// `localhost`, or a name of [`super::DashboardOptions::allowed_host`].
fn host_allowed(state: &Shared, host: &str) -> bool {
    let Some(allowed) = &state.allowed_hosts else {
        return true;
    };
    host.parse::<std::net::IpAddr>().is_ok()
        || host == "localhost"
        || allowed.iter().any(|a| a == host)
}

/// The `Host` check against DNS rebinding: a page of another site whose name was re-pointed
/// to this address sends its own name as `Host`.
fn check_host(state: &Shared, req: &Request) -> Option<Response> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(ToString::to_string));
    let name = host.as_deref().map(host_name).unwrap_or_default();
    if !name.is_empty() && host_allowed(state, &name) {
        return None;
    }
    Some(plain(
        StatusCode::FORBIDDEN,
        "forbidden: this host name is not allowed (DNS rebinding protection); open the dashboard \
         by IP address or localhost, or start it with --allowed-host NAME",
    ))
}

/// POSTs must come from the dashboard's own pages. `Sec-Fetch-Site`, set by the browser and
/// not by scripts, decides when present: `same-origin` or `none`. Otherwise `Origin` (when
/// sent) must be the request's own host — its `Host`, the `X-Forwarded-Host` of a proxy that
/// rewrote `Host`, or a configured name; `null` is refused. (Chromium sends `Origin: null` on
/// same-origin form posts under `Referrer-Policy: no-referrer`, hence the `same-origin` policy
/// below.)
fn same_origin(state: &Shared, headers: &HeaderMap) -> bool {
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        return matches!(site, "same-origin" | "none");
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    let Some((_, authority)) = origin.split_once("://") else {
        return false; // `null` and other opaque origins
    };
    let authority = authority.trim_end_matches('/');
    let name = host_name(authority);
    let forwarded = text(header::HeaderName::from_static("x-forwarded-host"))
        .and_then(|v| v.split(',').next())
        .map(str::trim);
    let own = [text(header::HOST), forwarded]
        .into_iter()
        .flatten()
        .any(|h| authority.eq_ignore_ascii_case(h));
    let configured = state
        .allowed_hosts
        .as_ref()
        .is_some_and(|names| names.contains(&name));
    (own && host_allowed(state, &name)) || configured
}

/// Who is asking: the access token presented (token mode), else the session cookie.
enum Caller {
    /// Authenticated with this token (its secret, and its name if it has one).
    Token(String, Option<String>),
    /// No token configured: this session cookie, if the browser sent one.
    Session(Option<String>),
}

/// Token check: `Ok(caller)` passes, `Err(response)` answers now (refusal or the redirect that
/// trades `?token=` for a cookie).
fn check_token(state: &Shared, req: &Request) -> Result<Caller, Box<Response>> {
    let headers = req.headers();
    if state.tokens.is_empty() {
        let session = cookie(headers, SESSION_COOKIE)
            .filter(|s| {
                (16..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric())
            })
            .map(str::to_owned);
        return Ok(Caller::Session(session));
    }
    // Every token is compared, so the time taken does not tell which one matched.
    let matching = |given: &str| {
        state.tokens.iter().fold(None, |found, (name, secret)| {
            if same(given, secret) {
                Some((secret.clone(), name.clone()))
            } else {
                found
            }
        })
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if let Some((secret, name)) = bearer
        .and_then(|t| matching(t.trim()))
        .or_else(|| cookie(headers, TOKEN_COOKIE).and_then(matching))
    {
        return Ok(Caller::Token(secret, name));
    }
    let query = req.uri().query().unwrap_or("");
    let from_query = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned());
    if let Some((want, _)) = from_query.as_deref().and_then(matching)
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
            "{TOKEN_COOKIE}={want}; Path={}; HttpOnly; SameSite=Strict{}",
            cookie_path(state),
            secure_attr(headers)
        );
        let mut resp = (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response();
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
        return Err(Box::new(resp));
    }
    Err(Box::new(plain(
        StatusCode::UNAUTHORIZED,
        "unauthorized: this dashboard needs its token; open it once with ?token=<token> or send `Authorization: Bearer <token>`",
    )))
}

fn cookie_path(state: &Shared) -> &str {
    if state.base.is_empty() {
        "/"
    } else {
        &state.base
    }
}

/// `; Secure` when the request came over TLS: an `https` URI, or a proxy saying so in
/// `X-Forwarded-Proto` / `Forwarded: proto=https`. (Adding `Secure` only ever restricts where
/// the browser sends the cookie, so trusting the header is safe.)
fn secure_attr(headers: &HeaderMap) -> &'static str {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase)
            .unwrap_or_default()
    };
    let forwarded_proto = text("x-forwarded-proto");
    let forwarded = text("forwarded");
    if forwarded_proto.split(',').next().map(str::trim) == Some("https")
        || forwarded.contains("proto=https")
    {
        "; Secure"
    } else {
        ""
    }
}

/// The CSRF token of a caller: an HMAC of its token or session under the process's key, so it
/// differs per session, is issued only to authenticated callers, and cannot be forged.
fn csrf_of(state: &Shared, caller: &str) -> String {
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(&state.csrf_key) else {
        return String::new();
    };
    mac.update(b"mysqlq-dashboard-csrf:");
    mac.update(caller.as_bytes());
    let bytes = mac.finalize().into_bytes();
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        s.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        s.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
        s
    })
}

/// CSRF check of a POST: the form field must carry the caller's CSRF token.
fn csrf_ok(expected: Option<&str>, body: &[u8]) -> bool {
    let field = form_urlencoded::parse(body)
        .find(|(k, _)| k == CSRF_FIELD)
        .map(|(_, v)| v.into_owned());
    match (expected, field) {
        (Some(want), Some(got)) => !want.is_empty() && same(&got, want),
        _ => false,
    }
}

/// The middleware: host, token, then for writes read-only, origin and CSRF, then the
/// security headers (and, for a new session, its cookie).
pub(super) async fn guard(State(state): State<Shared>, req: Request, next: Next) -> Response {
    if let Some(resp) = check_host(&state, &req) {
        return with_headers(resp);
    }
    let caller = match check_token(&state, &req) {
        Ok(caller) => caller,
        Err(resp) => return with_headers(*resp),
    };
    let secure = secure_attr(req.headers());
    let actor = actor_of(&state, &caller, req);
    let (req, actor) = actor;
    let (csrf, new_session) = match &caller {
        Caller::Token(t, _) => (Some(csrf_of(&state, &format!("token:{t}"))), None),
        Caller::Session(Some(s)) => (Some(csrf_of(&state, &format!("session:{s}"))), None),
        Caller::Session(None) => {
            let s = uuid::Uuid::new_v4().simple().to_string();
            (None, Some(s))
        }
    };
    let req = if matches!(*req.method(), Method::GET | Method::HEAD) {
        req
    } else {
        if state.read_only {
            return with_headers(plain(
                StatusCode::FORBIDDEN,
                "forbidden: the dashboard is read-only (started with --read-only)",
            ));
        }
        if !same_origin(&state, req.headers()) {
            return with_headers(plain(
                StatusCode::FORBIDDEN,
                "forbidden: the form was not sent from this dashboard's own page (Origin / Sec-Fetch-Site); open the dashboard and submit it there",
            ));
        }
        let (parts, body) = req.into_parts();
        let Ok(bytes) = to_bytes(body, MAX_FORM_BYTES).await else {
            return with_headers(plain(StatusCode::PAYLOAD_TOO_LARGE, "form too large"));
        };
        if !csrf_ok(csrf.as_deref(), &bytes) {
            return with_headers(plain(
                StatusCode::FORBIDDEN,
                "forbidden: missing or wrong CSRF token; reload the page and submit the form again",
            ));
        }
        Request::from_parts(parts, Body::from(bytes))
    };
    let csrf = match (&csrf, &new_session) {
        (Some(c), _) => c.clone(),
        (None, Some(s)) => csrf_of(&state, &format!("session:{s}")),
        (None, None) => String::new(),
    };
    let mut resp = with_headers(CSRF.scope(csrf, ACTOR.scope(actor, next.run(req))).await);
    if let Some(s) = new_session {
        let c = format!(
            "{SESSION_COOKIE}={s}; Path={}; HttpOnly; SameSite=Strict{secure}",
            cookie_path(&state)
        );
        if let Ok(v) = HeaderValue::from_str(&c) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    resp
}

/// The operator of a request: [`super::DashboardOptions::actor_from`]'s answer, else the
/// name of its token; `None` leaves the dashboard's user.
fn actor_of(state: &Shared, caller: &Caller, req: Request) -> (Request, Option<String>) {
    let (parts, body) = req.into_parts();
    let hooked = state.actor_from.as_ref().and_then(|h| (h.0)(&parts));
    let named = match caller {
        Caller::Token(_, name) => name.clone(),
        Caller::Session(_) => None,
    };
    let actor = hooked
        .map(|a| a.trim().to_owned())
        .filter(|a| !a.is_empty())
        .or(named);
    (Request::from_parts(parts, body), actor)
}

fn with_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    let fixed = [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (k, v) in fixed {
        h.insert(k, HeaderValue::from_static(v));
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
            HeaderValue::from_static("a=1; mysqlq_session=xyz"),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("xyz"));
        assert_eq!(cookie(&h, TOKEN_COOKIE), None);
    }

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("127.0.0.1:8080"), "127.0.0.1");
        assert_eq!(host_name("[::1]:8080"), "::1");
        assert_eq!(host_name("Admin.Example.com."), "admin.example.com");
        assert_eq!(host_name("localhost"), "localhost");
    }
}
