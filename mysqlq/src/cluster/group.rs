//! A failover group: the pools made from one multi-host URL, all pointed at one writer.
//!
//! sqlx's pool opens connections with one set of connect options, which
//! [`MySqlPool::set_connect_options`] replaces; it re-reads them on every attempt to connect.
//! So the group:
//!
//! - **vets every new connection** (`after_connect`): a node that is read-only, or on Galera not
//!   ready, not `Synced` or outside the primary component, is left at once: the hosts are
//!   scanned in order and the connection is replaced by one to the first host that is fit;
//! - **retires connections from before a switch** (`before_acquire`): a connection opened
//!   before the writer changed is closed when it is next acquired (no query: its age says it);
//! - **watches the writer** (a supervisor task, every `check_interval`): when the writer stops
//!   being fit the hosts are scanned (the current writer first, then in the order written) and
//!   every pool of the group is pointed at the first fit one. On Galera, where every Synced
//!   node in the primary component holds the same data, the group goes back to an earlier host
//!   of the list once it has been fit for `failback_after`, so that workers started at
//!   different times end up on the same node (single writer). With asynchronous replication it
//!   never goes back by itself: an old primary that comes back writable holds transactions the
//!   new one never saw.
//!
//! The supervisor holds the group's pools until they are closed ([`MySqlPool::close`]); it ends
//! when every pool of the group is closed.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{ConnectOptions, Connection, MySqlConnection, MySqlPool};

use super::url::Host;
use crate::store::server::{NodeState, node_state};

/// Session set-up run on every connection of a pool after it was vetted (the worker's lock
/// wait timeout).
pub(crate) type Setup = Arc<
    dyn for<'c> Fn(&'c mut MySqlConnection) -> BoxFuture<'c, Result<(), sqlx::Error>> + Send + Sync,
>;

/// How a group watches its hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) check_interval: Duration,
    pub(crate) failback_after: Duration,
    pub(crate) probe_timeout: Duration,
}

/// What the group knows.
#[derive(Debug)]
struct State {
    /// The host the pools' connect options point at.
    target: usize,
    /// `target` was found fit by the last look.
    confirmed: bool,
    /// When `target` last changed: connections opened before are retired.
    switched_at: Option<Instant>,
    switches: u64,
    /// Why each host was last found unfit (`None`: fit, or not looked at).
    problems: Vec<Option<String>>,
    /// When the last scan ended.
    scanned_at: Option<Instant>,
}

pub(crate) struct Group {
    hosts: Vec<Host>,
    settings: Settings,
    state: Mutex<State>,
    scanning: tokio::sync::Mutex<()>,
    pools: Mutex<Pools>,
}

struct Pools {
    list: Vec<MySqlPool>,
    supervised: bool,
}

/// Every live group, so that the worker finds the group of the pool it is given.
static GROUPS: Mutex<Vec<Weak<Group>>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A snapshot of a group, for logs, tests and the doctor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatus {
    /// The host new connections go to (`host:port`), and whether the last look found it fit.
    pub writer: String,
    /// `true` when the last look at `writer` found it up and writable.
    pub writer_confirmed: bool,
    /// How often the writer changed.
    pub switches: u64,
    /// Every host in the URL's order, with why it was last found unfit (`None`: fit, or not
    /// looked at since it was).
    pub hosts: Vec<(String, Option<String>)>,
}

impl Group {
    pub(crate) fn new(hosts: Vec<Host>, settings: Settings) -> Arc<Self> {
        let n = hosts.len();
        let group = Arc::new(Self {
            hosts,
            settings,
            state: Mutex::new(State {
                target: 0,
                confirmed: false,
                switched_at: None,
                switches: 0,
                problems: vec![None; n],
                scanned_at: None,
            }),
            scanning: tokio::sync::Mutex::new(()),
            pools: Mutex::new(Pools {
                list: Vec::new(),
                supervised: false,
            }),
        });
        let mut groups = lock(&GROUPS);
        groups.retain(|g| g.strong_count() > 0);
        groups.push(Arc::downgrade(&group));
        group
    }

    /// The group `pool` belongs to, if it was made by one.
    pub(crate) fn of(pool: &MySqlPool) -> Option<Arc<Self>> {
        let groups = lock(&GROUPS);
        groups.iter().filter_map(Weak::upgrade).find(|g| {
            lock(&g.pools)
                .list
                .iter()
                .any(|p| std::ptr::eq(p.options(), pool.options()))
        })
    }

    pub(crate) fn status(&self) -> ClusterStatus {
        let st = lock(&self.state);
        ClusterStatus {
            writer: self.hosts[st.target].label(),
            writer_confirmed: st.confirmed,
            switches: st.switches,
            hosts: self
                .hosts
                .iter()
                .zip(&st.problems)
                .map(|(h, p)| (h.label(), p.clone()))
                .collect(),
        }
    }

    /// A pool of this group: lazily connected, every connection vetted, then `setup`.
    /// `options`' own `after_connect` and `before_acquire` are replaced.
    pub(crate) fn add_pool(
        self: &Arc<Self>,
        options: MySqlPoolOptions,
        setup: Option<Setup>,
    ) -> MySqlPool {
        let vetting = self.clone();
        let ageing = self.clone();
        let target = self.target_options();
        let pool = options
            .after_connect(move |conn, _| {
                let group = vetting.clone();
                let setup = setup.clone();
                Box::pin(async move {
                    group.vet(conn).await?;
                    if let Some(setup) = &setup {
                        setup(conn).await?;
                    }
                    Ok(())
                })
            })
            .before_acquire(move |_, meta| {
                let fresh = !ageing.is_stale(meta.age);
                Box::pin(async move { Ok(fresh) })
            })
            .connect_lazy_with(target);
        let mut pools = lock(&self.pools);
        pools.list.push(pool.clone());
        if !pools.supervised {
            pools.supervised = true;
            tokio::spawn(supervise(self.clone()));
        }
        pool
    }

    fn target_options(&self) -> sqlx::mysql::MySqlConnectOptions {
        self.hosts[lock(&self.state).target].options.clone()
    }

    /// `true` for a connection opened before the writer last changed.
    fn is_stale(&self, age: Duration) -> bool {
        let Some(switched) = lock(&self.state).switched_at else {
            return false;
        };
        Instant::now()
            .checked_sub(age)
            .is_none_or(|opened| opened < switched)
    }

    /// After connect: keeps `conn` if its node is fit, else replaces it by a connection to the
    /// first fit host.
    async fn vet(&self, conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
        let began = Instant::now();
        let why = match self.timed(node_state(conn)).await {
            Ok(state) => match state.writable() {
                Ok(()) => return Ok(()),
                Err(why) => why,
            },
            Err(why) => why,
        };
        tracing::info!(problem = %why, "a new database connection reached a node that does not take writes; looking for one that does");
        let mut prober = Prober::new(self.hosts.len());
        let Some(writer) = self.rescan(&mut prober, Some(began)).await else {
            return Err(sqlx::Error::Protocol(self.no_writer()));
        };
        let fresh = match prober.take(writer) {
            Some(c) => c,
            None => self.probe(writer).await.map_err(sqlx::Error::Protocol)?.0,
        };
        let old = std::mem::replace(conn, fresh);
        let _ = old.close().await;
        Ok(())
    }

    /// One line naming every host and why it does not take writes.
    pub(crate) fn no_writer(&self) -> String {
        let st = lock(&self.state);
        let hosts: Vec<String> = self
            .hosts
            .iter()
            .zip(&st.problems)
            .map(|(h, p)| format!("{} ({})", h.label(), p.as_deref().unwrap_or("not checked")))
            .collect();
        format!(
            "no host of the database URL takes writes: {}",
            hosts.join(", ")
        )
    }

    async fn timed<T>(
        &self,
        f: impl Future<Output = Result<T, crate::Error>>,
    ) -> Result<T, String> {
        timed(self.settings.probe_timeout, f).await
    }

    /// A new connection to host `i` and its state, if it is fit.
    async fn probe(&self, i: usize) -> Result<(MySqlConnection, NodeState), String> {
        let (conn, state) = look(&self.hosts[i], self.settings.probe_timeout).await?;
        match state.writable() {
            Ok(()) => Ok((conn, state)),
            Err(why) => {
                let _ = conn.close().await;
                Err(why)
            }
        }
    }

    fn note(&self, i: usize, problem: Option<String>) {
        let mut st = lock(&self.state);
        if st.target == i {
            st.confirmed = problem.is_none();
        }
        st.problems[i] = problem;
    }

    /// Looks for a fit host now (before any pool exists); `false` when none is.
    pub(crate) async fn scan(&self) -> bool {
        self.rescan(&mut Prober::new(self.hosts.len()), None)
            .await
            .is_some()
    }

    /// Finds the first fit host — the current writer first, then the others in the URL's
    /// order — and points the group at it. `None` when no host is fit (the group stays where it
    /// was). A scan that ended after `since` (another connection looked while this one waited)
    /// is taken as the answer.
    async fn rescan(&self, prober: &mut Prober, since: Option<Instant>) -> Option<usize> {
        let _one_at_a_time = self.scanning.lock().await;
        {
            let st = lock(&self.state);
            if let (Some(since), Some(scanned)) = (since, st.scanned_at)
                && scanned > since
            {
                return st.confirmed.then_some(st.target);
            }
        }
        let current = lock(&self.state).target;
        let order = std::iter::once(current).chain((0..self.hosts.len()).filter(|&i| i != current));
        let mut found = None;
        for i in order {
            match prober.check(self, i).await {
                Ok(_) => {
                    found = Some(i);
                    break;
                }
                Err(why) => self.note(i, Some(why)),
            }
        }
        if let Some(i) = found {
            self.switch_to(i);
        }
        lock(&self.state).scanned_at = Some(Instant::now());
        found
    }

    /// Points every pool of the group at host `i`.
    fn switch_to(&self, i: usize) {
        let was = {
            let mut st = lock(&self.state);
            st.problems[i] = None;
            let was = st.target;
            st.target = i;
            st.confirmed = true;
            if was == i {
                return;
            }
            st.switched_at = Some(Instant::now());
            st.switches += 1;
            was
        };
        for pool in &lock(&self.pools).list {
            pool.set_connect_options(self.hosts[i].options.clone());
        }
        tracing::warn!(
            writer = %self.hosts[i].label(),
            was = %self.hosts[was].label(),
            "the database writer changed: new connections go to it, older ones are closed as they come back"
        );
        // Idle claim loops of this process try again at once instead of after their backoff.
        crate::wake::wake_local();
    }

    /// Drops closed pools; `false` (and the supervisor ends) when none is left.
    fn keep_supervising(&self) -> bool {
        let mut pools = lock(&self.pools);
        pools.list.retain(|p| !p.is_closed());
        if pools.list.is_empty() {
            pools.supervised = false;
            return false;
        }
        true
    }
}

/// `f`, or why it failed, or that it did not answer within `limit`.
async fn timed<T>(
    limit: Duration,
    f: impl Future<Output = Result<T, crate::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(problem(&e)),
        Err(_) => Err(format!(
            "no answer within {}",
            crate::backoff::format_duration(limit)
        )),
    }
}

/// A new connection to `host` and the state of its node, each step within `limit`.
pub(crate) async fn look(
    host: &Host,
    limit: Duration,
) -> Result<(MySqlConnection, NodeState), String> {
    let connect = async { host.options.connect().await.map_err(crate::Error::from) };
    let mut conn = timed(limit, connect).await?;
    let state = timed(limit, node_state(&mut conn)).await?;
    Ok((conn, state))
}

/// A short text for why a host could not be used: the server's error number and message, or
/// the I/O error.
fn problem(e: &crate::Error) -> String {
    match e {
        crate::Error::Database(sqlx::Error::Database(db)) => match e.server_code() {
            Some(n) => format!("error {n}: {}", db.message()),
            None => db.message().to_owned(),
        },
        crate::Error::Database(sqlx::Error::Io(io)) => io.to_string(),
        crate::Error::Database(other) => other.to_string(),
        other => other.to_string(),
    }
}

/// Connections the supervisor keeps to the hosts it looks at every round.
struct Prober {
    conns: Vec<Option<MySqlConnection>>,
}

impl Prober {
    fn new(n: usize) -> Self {
        Self {
            conns: (0..n).map(|_| None).collect(),
        }
    }

    fn take(&mut self, i: usize) -> Option<MySqlConnection> {
        self.conns[i].take()
    }

    /// The state of host `i` if it is fit (reusing the connection kept from last time), or why
    /// it is not.
    async fn check(&mut self, group: &Group, i: usize) -> Result<NodeState, String> {
        // A kept connection that broke is replaced by a new one below.
        if let Some(mut conn) = self.conns[i].take()
            && let Ok(state) = group.timed(node_state(&mut conn)).await
        {
            state.writable()?;
            self.conns[i] = Some(conn);
            group.note(i, None);
            return Ok(state);
        }
        let (conn, state) = group.probe(i).await?;
        self.conns[i] = Some(conn);
        group.note(i, None);
        Ok(state)
    }
}

/// Every `check_interval`: is the writer still fit? If not, scan. On
/// Galera, go back to an earlier host of the list once it has been fit for `failback_after`.
async fn supervise(group: Arc<Group>) {
    let n = group.hosts.len();
    let mut prober = Prober::new(n);
    let mut fit_since: Vec<Option<Instant>> = vec![None; n];
    while group.keep_supervising() {
        let target = lock(&group.state).target;
        match prober.check(&group, target).await {
            Err(why) => {
                tracing::warn!(host = %group.hosts[target].label(), problem = %why, "the database writer does not take writes any more; looking for one that does");
                group.note(target, Some(why));
                if group.rescan(&mut prober, None).await.is_none() {
                    tracing::warn!("{}; trying again", group.no_writer());
                }
                fit_since.fill(None);
            }
            Ok(_) => {
                let now = Instant::now();
                for j in 0..target {
                    match prober.check(&group, j).await {
                        Ok(state) if state.galera.is_some() => {
                            let since = *fit_since[j].get_or_insert(now);
                            if now.duration_since(since) >= group.settings.failback_after {
                                group.switch_to(j);
                                fit_since.fill(None);
                                break;
                            }
                        }
                        Ok(_) => fit_since[j] = None,
                        Err(why) => {
                            group.note(j, Some(why));
                            fit_since[j] = None;
                        }
                    }
                }
            }
        }
        tokio::time::sleep(group.settings.check_interval).await;
    }
}
