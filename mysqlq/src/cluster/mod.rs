//! More than one database host: Galera clusters and primary → replica failover.
//!
//! A database URL may list several hosts, `mysql://user:pw@db1:3306,db2:3306,db3:3306/app`,
//! with the semantics of libpq's `target_session_attrs=read-write` and MySQL Connector/J's
//! failover URLs: connections go to the **first host that is up and takes writes** —
//! `read_only`, `super_read_only` and `innodb_read_only` off and, on a Galera node,
//! `wsrep_ready=ON`, `wsrep_local_state_comment=Synced`, `wsrep_cluster_status=Primary` and
//! `wsrep_reject_queries=NONE` — and move on when it stops being so.
//!
//! ```no_run
//! # async fn f() -> Result<(), mysqlq::Error> {
//! use sqlx::mysql::MySqlPoolOptions;
//!
//! let url = mysqlq::ClusterUrl::parse("mysql://app:secret@db1:3306,db2:3306,db3:3306/app")?;
//! let pool = url.connect(MySqlPoolOptions::new().max_connections(17)).await?;
//! let worker = mysqlq::Worker::builder(pool.clone()).start().await?; // follows the same writer
//! # let _ = worker; Ok(()) }
//! ```
//!
//! Everything of one pool — and the worker's own pool, which follows the pool the worker was
//! given — talks to **one writer at a time**: claims, completions, heartbeats and maintenance
//! never spread over several Galera nodes (where they would fight: two nodes taking writes
//! abort each other's claims with certification conflicts, error 1213). How the pool moves:
//!
//! - a new connection that reaches a node that does not take writes is replaced by one to the
//!   first host that does;
//! - every `check_interval` (1 s) the writer is looked at; when it stopped taking writes (down,
//!   read-only, left the primary component, desynced as an SST donor) the hosts are scanned,
//!   the current one first, then in the URL's order, and new connections go to the first fit
//!   one. Connections opened before the switch are closed when they are next acquired; one in
//!   use finishes its statement (it fails if its node is gone, and mysqlq retries it);
//! - on Galera, once an earlier host of the list has been fit for `failback_after` (10 s), the
//!   pool goes back to it, so that processes started at different times end up on the same
//!   node. With asynchronous replication it never goes back by itself: a restarted old primary
//!   holds transactions the new one never saw. Configure every replica, and every server's
//!   restart, with `read_only=ON`, and turn it off only on the promoted writer.
//!
//! A URL with one host gives a plain sqlx pool: nothing is watched.
//!
//! `docs/clusters.md` has the measured numbers (commit stall on node loss, rejoin time,
//! conflicts with one and with several writers, the loss window of asynchronous failover).

mod group;
mod url;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use sqlx::MySqlPool;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};

pub use group::ClusterStatus;
pub(crate) use group::Setup;
use group::{Group, Settings};
use url::{Host, Parsed};

use crate::Error;

/// A parsed database URL with one host or several (see the [module docs](self)).
///
/// Its `Debug` output shows the hosts and the database, never the password.
#[derive(Clone)]
pub struct ClusterUrl {
    parsed: Parsed,
    hosts: Vec<Host>,
    settings: Settings,
}

impl ClusterUrl {
    /// How often a multi-host pool looks at its writer.
    pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(1);
    /// How long an earlier Galera node of the list must be fit before the pool goes back to it.
    pub const DEFAULT_FAILBACK_AFTER: Duration = Duration::from_secs(10);
    /// How long a host has to accept a connection and answer, before it counts as down.
    pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

    /// Parses `mysql://user:password@host1:port1,host2:port2/database?parameters` (one host or
    /// several; a host without a port uses 3306). User, password, database and parameters are
    /// sqlx's and apply to every host.
    pub fn parse(url: &str) -> Result<Self, Error> {
        let parsed = Parsed::new(url)?;
        Ok(Self {
            hosts: parsed.hosts()?,
            parsed,
            settings: Settings {
                check_interval: Self::DEFAULT_CHECK_INTERVAL,
                failback_after: Self::DEFAULT_FAILBACK_AFTER,
                probe_timeout: Self::DEFAULT_PROBE_TIMEOUT,
            },
        })
    }

    /// The hosts, as `host:port`, in the URL's order.
    pub fn hosts(&self) -> Vec<String> {
        self.hosts.iter().map(Host::label).collect()
    }

    /// `true` when the URL lists more than one host.
    pub fn is_multi_host(&self) -> bool {
        self.hosts.len() > 1
    }

    /// The database the URL names.
    pub fn database(&self) -> Option<&str> {
        self.hosts[0].options.get_database()
    }

    /// The same hosts and credentials, on database `name`.
    #[must_use]
    pub fn with_database(mut self, name: &str) -> Self {
        for h in &mut self.hosts {
            h.options = h.options.clone().database(name);
        }
        self
    }

    /// The same hosts and credentials without a database (to create or drop one).
    #[must_use]
    pub fn without_database(&self) -> Self {
        let parsed = self.parsed.without_database();
        Self {
            hosts: parsed.hosts().unwrap_or_else(|_| self.hosts.clone()),
            parsed,
            settings: self.settings,
        }
    }

    /// The connect options of each host, in the URL's order.
    pub fn connect_options(&self) -> Vec<MySqlConnectOptions> {
        self.hosts.iter().map(|h| h.options.clone()).collect()
    }

    /// How often a multi-host pool looks at its writer (default
    /// [`DEFAULT_CHECK_INTERVAL`](Self::DEFAULT_CHECK_INTERVAL)).
    #[must_use]
    pub fn check_interval(mut self, every: Duration) -> Self {
        self.settings.check_interval = every.max(Duration::from_millis(10));
        self
    }

    /// How long an earlier Galera node must be fit before the pool goes back to it (default
    /// [`DEFAULT_FAILBACK_AFTER`](Self::DEFAULT_FAILBACK_AFTER)).
    #[must_use]
    pub fn failback_after(mut self, after: Duration) -> Self {
        self.settings.failback_after = after;
        self
    }

    /// How long a host has to connect and answer before it counts as down (default
    /// [`DEFAULT_PROBE_TIMEOUT`](Self::DEFAULT_PROBE_TIMEOUT)).
    #[must_use]
    pub fn probe_timeout(mut self, timeout: Duration) -> Self {
        self.settings.probe_timeout = timeout.max(Duration::from_millis(10));
        self
    }

    /// A pool on the URL that connects on first use. With several hosts it follows the writer
    /// (the [module docs](self)); `options`' `after_connect` and `before_acquire` are then
    /// replaced by the ones that do it. Close it with [`MySqlPool::close`] when done: until then
    /// a task keeps watching the hosts.
    pub fn connect_lazy(&self, options: MySqlPoolOptions) -> MySqlPool {
        if self.is_multi_host() {
            Group::new(self.hosts.clone(), self.settings).add_pool(options, None)
        } else {
            options.connect_lazy_with(self.hosts[0].options.clone())
        }
    }

    /// Like [`connect_lazy`](Self::connect_lazy), and opens one connection now, so that a URL
    /// whose hosts are all down or read-only is reported at once, each host with its problem.
    pub async fn connect(&self, options: MySqlPoolOptions) -> Result<MySqlPool, Error> {
        if !self.is_multi_host() {
            return Ok(options.connect_with(self.hosts[0].options.clone()).await?);
        }
        let group = Group::new(self.hosts.clone(), self.settings);
        if !group.scan().await {
            return Err(Error::NoWriter(group.no_writer()));
        }
        let pool = group.add_pool(options, None);
        match pool.acquire().await {
            Ok(conn) => {
                drop(conn);
                Ok(pool)
            }
            Err(e) => {
                pool.close().await;
                Err(e.into())
            }
        }
    }
}

/// What [`ClusterUrl::check_hosts`] found on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCheck {
    /// `host:port`.
    pub host: String,
    /// `Ok` when the host is up and takes writes; otherwise why not (down, `read_only ON`,
    /// `wsrep_local_state_comment=Donor/Desynced`, …).
    pub writable: Result<(), String>,
    /// On a Galera node, its state (`Synced`, …) and the size of its component.
    pub galera: Option<(String, u32)>,
}

impl ClusterUrl {
    /// Connects to every host, one after the other, and says which take writes (what a pool
    /// of this URL would choose from), for the CLI's `doctor`.
    pub async fn check_hosts(&self) -> Vec<HostCheck> {
        let mut out = Vec::with_capacity(self.hosts.len());
        for h in &self.hosts {
            let (writable, galera) = match group::look(h, self.settings.probe_timeout).await {
                Ok((conn, state)) => {
                    let _ = sqlx::Connection::close(conn).await;
                    (
                        state.writable(),
                        state
                            .galera
                            .as_ref()
                            .map(|g| (g.local_state.clone(), g.cluster_size)),
                    )
                }
                Err(why) => (Err(why), None),
            };
            out.push(HostCheck {
                host: h.label(),
                writable,
                galera,
            });
        }
        out
    }
}

impl FromStr for ClusterUrl {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Self::parse(s)
    }
}

impl fmt::Debug for ClusterUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterUrl")
            .field("hosts", &self.hosts())
            .field("database", &self.database())
            .finish_non_exhaustive()
    }
}

/// Connects a pool to `url` (one host, or several: see the [module docs](self)) with sqlx's
/// default pool options, opening one connection now.
pub async fn connect(url: &str) -> Result<MySqlPool, Error> {
    ClusterUrl::parse(url)?
        .connect(MySqlPoolOptions::new())
        .await
}

/// Where a multi-host pool (or a pool that follows one, such as a worker's own) sends its
/// connections now, and what it last saw of each host. `None` for a pool of one host.
pub fn status(pool: &MySqlPool) -> Option<ClusterStatus> {
    Group::of(pool).map(|g| g.status())
}

/// A pool for the worker's own services: of `app`'s group when `app` is a multi-host pool (so
/// that both always talk to the same writer), else on `app`'s connect options. Every connection
/// runs `setup` once.
pub(crate) fn follow(app: &MySqlPool, options: MySqlPoolOptions, setup: Setup) -> MySqlPool {
    match Group::of(app) {
        Some(group) => group.add_pool(options, Some(setup)),
        None => options
            .after_connect(move |conn, _| setup(conn))
            .connect_lazy_with((*app.connect_options()).clone()),
    }
}
