//! The web dashboard: `mysqlq-cli dashboard`, or [`router`] mounted in your own axum server.
//!
//! Pages: overview (per-queue counts and a chart of the last hour), jobs (filtered, keyset
//! pages; cancel), job detail (attempt history; cancel / delete, and retry / discard when
//! failed), failed jobs (retry / discard), queues (jobs by state, the last hour's throughput
//! and percentiles, pause / resume), a queue's page (depth and throughput charts, percentiles
//! per kind, limits) and workers (settings, leader, running jobs). Everything
//! reads through the typed operator API `mysqlq::admin` (indexed statements only), but the
//! database's clock of the pages whose statements do not return it (`SELECT UTC_TIMESTAMP(6)`).
//! The pages work without JavaScript; a small vendored script refreshes the numbers every few
//! seconds from `GET /api/overview`, keeps the times' "3 min ago" current on the database's
//! clock, copies the `mysqlq-cli` command shown under each action, and handles the keyboard
//! shortcuts (`?` lists them). Light and dark palettes follow `prefers-color-scheme`; payloads
//! are pretty-printed with their long parts folded (`docs/dashboard.md`, "Details").
//!
//! Safety: requests must name an allowed host (an IP address, `localhost`, or
//! [`DashboardOptions::allowed_host`]), which defeats DNS rebinding; [`DashboardOptions::token`]
//! guards every request (Bearer header, or `?token=` once, which sets a cookie); every POST
//! must come from the dashboard's own origin (`Origin`, `Sec-Fetch-Site`) and carry in a hidden
//! form field the CSRF token of its session — an HMAC of the access token, or without a token
//! of a random `SameSite=Strict` session cookie, issued only to callers that passed the token
//! check; [`DashboardOptions::read_only`] hides the actions and refuses them with 403. Cookies
//! are `Secure` behind a proxy that says `X-Forwarded-Proto: https`. Pages are compiled `maud`
//! templates, which escape every value.
//!
//! ```no_run
//! # async fn app(pool: sqlx::MySqlPool) {
//! use mysqlq_cli::dashboard::{DashboardOptions, router};
//! let admin = router(pool, DashboardOptions::new().base_path("/queue").read_only(true));
//! let app = axum::Router::new().nest("/queue", admin);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await.unwrap();
//! axum::serve(listener, app).await.unwrap();
//! # }
//! ```

mod actions;
mod bulk;
mod charts;
mod cli_cmd;
mod guard;
mod jobs;
mod json;
mod live;
mod pages;
mod queues;
#[cfg(feature = "redis")]
mod streams;
mod time;
mod view;
mod workers;
mod workflows;

#[cfg(feature = "cli")]
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use sqlx::MySqlPool;

#[cfg(feature = "cli")]
use crate::args::DashboardArgs;
#[cfg(feature = "cli")]
use crate::db::Target;
#[cfg(feature = "cli")]
use crate::error::{CliError, chain};

/// Names the operator of a request from your own authentication (a header your proxy sets
/// after checking the user, a session your app holds): see [`DashboardOptions::actor_from`].
pub type ActorFrom = Arc<dyn Fn(&axum::http::request::Parts) -> Option<String> + Send + Sync>;

/// [`ActorFrom`], printable.
#[derive(Clone)]
struct ActorHook(ActorFrom);

impl std::fmt::Debug for ActorHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ActorHook")
    }
}

/// How the dashboard behaves. Build with [`DashboardOptions::new`] and the setters.
#[derive(Debug, Clone, Default)]
pub struct DashboardOptions {
    read_only: bool,
    token: Option<String>,
    named_tokens: Vec<(String, String)>,
    actor_from: Option<ActorHook>,
    base_path: String,
    allowed_hosts: Vec<String>,
    any_host: bool,
    user: Option<String>,
    #[cfg(feature = "redis")]
    redis: Option<mysqlq::redis::Redis>,
}

impl DashboardOptions {
    /// The name the audit trail (and `cancelled_by`) records for actions taken in this
    /// dashboard, e.g. the user your own server authenticated. Default `dashboard`.
    #[must_use]
    pub fn user(mut self, name: impl Into<String>) -> Self {
        let name = name.into().trim().to_owned();
        self.user = (!name.is_empty()).then_some(name);
        self
    }

    /// Defaults: actions enabled, no token, mounted at the root.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hide retry / discard / cancel / delete / pause / resume and refuse their POSTs with 403.
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Require this token on every request: `Authorization: Bearer <token>`, or `?token=<token>`
    /// once (the dashboard then sets an HttpOnly cookie and redirects to the same page without
    /// it). An empty token means none.
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        let t = token.into();
        self.token = (!t.is_empty()).then_some(t);
        self
    }

    /// Also accept `secret` as an access token (as [`token`](Self::token) does), and name
    /// `name` in the audit trail (and `cancelled_by`) for the actions taken with it: one token
    /// per operator, so the trail says who acted. Repeatable; `name` is 1 to 128 characters.
    #[must_use]
    pub fn named_token(mut self, name: impl Into<String>, secret: impl Into<String>) -> Self {
        let (name, secret) = (name.into().trim().to_owned(), secret.into());
        if !name.is_empty() && !secret.is_empty() {
            self.named_tokens.push((name, secret));
        }
        self
    }

    /// Name the operator of each request with `f` (from the request's head: a header your
    /// authenticating proxy sets, your own session): its answer, when `Some`, is what the audit
    /// trail records for actions, ahead of a named token's name and [`user`](Self::user).
    /// Trust a header only when a proxy you run sets it and strips it from clients.
    #[must_use]
    pub fn actor_from(
        mut self,
        f: impl Fn(&axum::http::request::Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.actor_from = Some(ActorHook(Arc::new(f)));
        self
    }

    /// Also serve requests for host name `name` (the `Host` header, port ignored). By default
    /// only IP addresses and `localhost` are served: a page of another site whose DNS name is
    /// re-pointed at this address (DNS rebinding) is refused with 403. Add the names the
    /// dashboard is reached by, e.g. `admin.example.com`.
    #[must_use]
    pub fn allowed_host(mut self, name: impl Into<String>) -> Self {
        let name = name
            .into()
            .trim()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if !name.is_empty() {
            self.allowed_hosts.push(name);
        }
        self
    }

    /// Serve any host name: only for a dashboard behind a reverse proxy that checks the host
    /// itself.
    #[must_use]
    pub fn allow_any_host(mut self, any: bool) -> Self {
        self.any_host = any;
        self
    }

    /// Show the Redis streams of the transport (feature `redis`) on the overview page.
    #[cfg(feature = "redis")]
    #[must_use]
    pub fn redis(mut self, redis: mysqlq::redis::Redis) -> Self {
        self.redis = Some(redis);
        self
    }

    /// The path the router is nested at (e.g. `/admin/jobs`), used in links, form actions and
    /// cookie paths. Default: empty (mounted at `/`).
    #[must_use]
    pub fn base_path(mut self, base: impl Into<String>) -> Self {
        self.base_path = base.into().trim_end_matches('/').to_owned();
        self
    }
}

/// Shared by every handler.
#[derive(Debug)]
struct State {
    pool: MySqlPool,
    read_only: bool,
    /// Access tokens: `(name, secret)`; the name of [`DashboardOptions::token`]'s is `None`.
    tokens: Vec<(Option<String>, String)>,
    actor_from: Option<ActorHook>,
    /// Bulk actions running in this process: their audit id and stop flag.
    running: bulk::Running,
    /// Renderings shared by the live polls of a session's tabs.
    live: live::LiveCache,
    /// Confirmation tokens already used (each confirms one action once).
    used_confirms: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Host names served besides IP addresses and `localhost`; `None`: any.
    allowed_hosts: Option<Vec<String>>,
    /// The per-process key of the sessions' CSRF tokens.
    csrf_key: [u8; 32],
    base: String,
    /// Who the audit trail names for actions taken here.
    user: String,
    #[cfg(feature = "redis")]
    redis: Option<mysqlq::redis::Redis>,
}

impl State {
    /// `base` + `path`.
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

type Shared = Arc<State>;

/// The dashboard as an axum router, for `Router::nest` in your own server (set
/// [`DashboardOptions::base_path`] to the nesting path) or `axum::serve` alone.
pub fn router(pool: MySqlPool, options: DashboardOptions) -> Router {
    let state = Arc::new(State {
        pool,
        read_only: options.read_only,
        tokens: options
            .token
            .into_iter()
            .map(|t| (None, t))
            .chain(options.named_tokens.into_iter().map(|(n, t)| (Some(n), t)))
            .collect(),
        actor_from: options.actor_from,
        running: bulk::Running::default(),
        used_confirms: std::sync::Mutex::default(),
        live: live::LiveCache::default(),
        allowed_hosts: (!options.any_host).then_some(options.allowed_hosts),
        csrf_key: random_key(),
        base: options.base_path,
        user: options.user.unwrap_or_else(|| "dashboard".to_owned()),
        #[cfg(feature = "redis")]
        redis: options.redis,
    });
    Router::new()
        .route("/", get(pages::overview))
        .route("/jobs", get(jobs::jobs))
        .route("/jobs/{id}", get(pages::job))
        .route("/jobs/{id}/payload.json", get(json::payload))
        .route("/jobs/cancel", post(actions::jobs_cancel))
        .route("/jobs/delete", post(actions::jobs_delete))
        .route("/jobs/confirm", post(bulk::confirm))
        .route("/jobs/act", post(bulk::act))
        .route("/jobs/run-now", post(bulk::run_now))
        .route("/jobs/selected", post(bulk::selected))
        .route("/actions", get(bulk::list))
        .route("/actions/{id}", get(bulk::show))
        .route("/actions/{id}/stop", post(bulk::stop))
        .route("/failed", get(pages::failed))
        .route("/failed/retry", post(pages::failed_retry))
        .route("/failed/discard", post(pages::failed_discard))
        .route("/queues", get(queues::list))
        .route("/queues/{q}", get(queues::show))
        .route("/queues/{q}/limits", post(queues::set_limits))
        .route("/workers", get(workers::list))
        .route("/workflows", get(workflows::list))
        .route("/workflows/{id}", get(workflows::show))
        .route("/workflows/{id}/cancel", post(workflows::cancel))
        .route("/workflows/{id}/retry", post(workflows::retry))
        .route(
            "/queues/pause",
            post(queues::queue_pause).get(queues::show_named),
        )
        .route(
            "/queues/resume",
            post(queues::queue_resume).get(queues::show_named),
        )
        .route("/api/overview", get(pages::api_overview))
        .route("/static/dashboard.js", get(pages::script))
        .route("/static/dashboard.css", get(pages::stylesheet))
        .route("/static/live.js", get(pages::live_script))
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            live::live,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            guard::guard,
        ))
        .with_state(state)
}

/// 32 random bytes.
fn random_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    key
}

/// `mysqlq-cli dashboard`: serves [`router`] on `args.addr` until SIGINT/SIGTERM.
#[cfg(feature = "cli")]
pub(crate) async fn command(
    target: &Target,
    args: &DashboardArgs,
    conn_args: &crate::args::ConnArgs,
) -> Result<(), CliError> {
    let tokened = args.token.is_some() || !args.operator_token.is_empty();
    if !args.addr.ip().is_loopback() && !tokened && !args.read_only {
        return Err(CliError::usage(
            format!(
                "refusing to serve the dashboard on {} without --token: anyone who reaches it could retry, discard and pause",
                args.addr
            ),
            "pass --token TOKEN (or set MYSQLQ_DASHBOARD_TOKEN), add --read-only, or listen on 127.0.0.1",
        ));
    }
    let pool = target.pool(8).await?;
    let mut conn = crate::db::acquire(&pool).await?;
    mysqlq::check_schema(&mut conn)
        .await
        .map_err(|e| CliError::mysqlq("cannot start the dashboard", &e))?;
    drop(conn);
    let mut options = DashboardOptions::new()
        .read_only(args.read_only)
        .user(args.user.as_str());
    for (name, secret) in &args.operator_token {
        options = options.named_token(name.as_str(), secret.as_str());
    }
    if let Some(t) = &args.token {
        options = options.token(t.as_str());
    }
    for host in &args.allowed_host {
        options = options.allowed_host(host.as_str());
    }
    #[cfg(feature = "redis")]
    if let Some(redis) = conn_args.redis.connect().await? {
        options = options.redis(redis);
    }
    #[cfg(not(feature = "redis"))]
    let _ = conn_args;
    if !args.addr.ip().is_loopback() && !tokened {
        eprintln!(
            "warning: the dashboard listens on {} without --token: anyone who reaches it can read every job",
            args.addr
        );
    }
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|e| {
            CliError::new(
                format!("cannot listen on {}: {}", args.addr, chain(&e)),
                "choose another --addr (the port may be in use)",
            )
        })?;
    let local: SocketAddr = listener.local_addr().unwrap_or(args.addr);
    println!("dashboard listening on http://{local}/");
    let app = router(pool.clone(), options);
    let mut stop = crate::signals::Stop::new();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.recv().await })
        .await
        .map_err(|e| {
            CliError::new(
                format!("the dashboard server stopped: {}", chain(&e)),
                "check the address and try again",
            )
        })?;
    pool.close().await;
    Ok(())
}
