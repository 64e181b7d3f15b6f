//! A TCP proxy between workers and a database server that injects connection faults.
//!
//! Each worker gets a [`Link`] of its own (a listening port), so every fault is attributed to
//! one worker. On command a link
//! - cuts all its connections at once ([`Link::cut_all`]), or
//! - holds back the next statement whose text contains a pattern ([`Link::delay_statement`]):
//!   the client waits, as on a stalled server, for that statement alone — a timeout can then
//!   cut off the client at exactly that statement, or
//! - loses the reply of the next `COMMIT`s ([`Link::lose_commit_replies`]): the `COMMIT`
//!   (a `COM_QUERY` packet, command byte `0x03`, whose text is `COMMIT`) is forwarded, the
//!   server's reply is read — so the commit certainly happened — and dropped, and both sides of
//!   that connection are closed. The client sees its connection die with the outcome unknown.
//!
//! Every fault is logged with the time it happened ([`Link::events`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::jobs::now_micros;

/// A fault a [`Link`] injected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyEvent {
    /// A `COMMIT` was forwarded and executed; its reply was dropped and the connection closed.
    CommitReplyLost {
        /// When the reply was dropped (µs since the epoch).
        at: i64,
    },
    /// Every connection of the link was closed.
    CutAll {
        /// When (µs since the epoch).
        at: i64,
        /// How many connections were open.
        connections: usize,
    },
}

/// One listening port of the proxy, forwarding to the server at `upstream`.
pub struct Link {
    port: u16,
    upstream: String,
    commit_cuts: AtomicUsize,
    delays: Mutex<Vec<(String, std::time::Duration)>>,
    epoch: watch::Sender<u64>,
    open: AtomicUsize,
    upstream_ports: Mutex<Vec<u16>>,
    events: Mutex<Vec<ProxyEvent>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Link {
    /// Listens on a free port of 127.0.0.1 and forwards every connection to `upstream`
    /// (`host:port`).
    pub async fn start(upstream: &str) -> Arc<Self> {
        // Bound and served on the proxy's own runtime (see [`runtime`]); the caller only waits.
        let upstream = upstream.to_owned();
        runtime()
            .spawn(async move {
                let listener = TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind the fault proxy");
                let port = listener.local_addr().expect("proxy address").port();
                let link = Arc::new(Self {
                    port,
                    upstream,
                    commit_cuts: AtomicUsize::new(0),
                    delays: Mutex::new(Vec::new()),
                    epoch: watch::channel(0).0,
                    open: AtomicUsize::new(0),
                    upstream_ports: Mutex::new(Vec::new()),
                    events: Mutex::new(Vec::new()),
                    task: Mutex::new(None),
                });
                let accept = {
                    let link = link.clone();
                    tokio::spawn(async move {
                        while let Ok((client, _)) = listener.accept().await {
                            let link = link.clone();
                            tokio::spawn(async move { link.serve(client).await });
                        }
                    })
                };
                *lock(&link.task) = Some(accept);
                link
            })
            .await
            .expect("start the fault proxy")
    }

    /// The port workers connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `mysql://root@127.0.0.1:<port>/<database>` without TLS (the proxy reads the protocol).
    pub fn url(&self, database: &str) -> String {
        format!(
            "mysql://root@127.0.0.1:{}/{database}?ssl-mode=disabled",
            self.port
        )
    }

    /// The `HOST` column (`127.0.0.1:<port>`) of this link's server connections in
    /// `information_schema.PROCESSLIST`, for `KILL CONNECTION`.
    pub fn processlist_hosts(&self) -> Vec<String> {
        lock(&self.upstream_ports)
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect()
    }

    /// Loses the replies of the next `n` `COMMIT`s on this link.
    pub fn lose_commit_replies(&self, n: usize) {
        self.commit_cuts.fetch_add(n, Ordering::SeqCst);
    }

    /// Holds back the next statement (`COM_QUERY` or `COM_STMT_PREPARE`) whose text contains
    /// `pattern` for `delay` before forwarding it; what the client sends after it on that
    /// connection waits behind it. Not logged as a fault: the focused tests that use it know.
    pub fn delay_statement(&self, pattern: &str, delay: std::time::Duration) {
        lock(&self.delays).push((pattern.to_owned(), delay));
    }

    /// Statement delays armed but not yet met.
    pub fn delays_armed(&self) -> usize {
        lock(&self.delays).len()
    }

    /// Takes the armed delay whose pattern `payload` (a command packet) contains, if any.
    fn take_delay(&self, payload: &[u8]) -> Option<std::time::Duration> {
        if !matches!(payload.first(), Some(0x03 | 0x16)) {
            return None;
        }
        let text = String::from_utf8_lossy(&payload[1..]);
        let mut delays = lock(&self.delays);
        let i = delays.iter().position(|(p, _)| text.contains(p.as_str()))?;
        Some(delays.remove(i).1)
    }

    /// Connections open through this link now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// `COMMIT` reply losses armed but not yet happened.
    pub fn armed(&self) -> usize {
        self.commit_cuts.load(Ordering::SeqCst)
    }

    /// Closes every open connection of the link now.
    pub fn cut_all(&self) {
        let connections = self.open.load(Ordering::SeqCst);
        self.epoch.send_modify(|e| *e += 1);
        self.log(ProxyEvent::CutAll {
            at: now_micros(),
            connections,
        });
    }

    /// The faults injected so far.
    pub fn events(&self) -> Vec<ProxyEvent> {
        lock(&self.events).clone()
    }

    fn log(&self, e: ProxyEvent) {
        lock(&self.events).push(e);
    }

    /// Takes one armed `COMMIT` reply loss, if any.
    fn take_commit_cut(&self) -> bool {
        self.commit_cuts
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    async fn serve(self: Arc<Self>, client: TcpStream) {
        let Ok(server) = TcpStream::connect(&self.upstream).await else {
            return; // the client sees its connection closed, as with a server that is down
        };
        let local = server.local_addr().map(|a| a.port()).unwrap_or(0);
        lock(&self.upstream_ports).push(local);
        self.open.fetch_add(1, Ordering::SeqCst);
        let mut epoch = self.epoch.subscribe();
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        let swallow = Arc::new(AtomicBool::new(false));
        let to_client = {
            let swallow = swallow.clone();
            let link = self.clone();
            async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = sr.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    if swallow.load(Ordering::SeqCst) {
                        // The COMMIT's reply: the commit happened; the client never hears it.
                        link.log(ProxyEvent::CommitReplyLost { at: now_micros() });
                        return;
                    }
                    if cw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        };
        let to_server = {
            let link = self.clone();
            async move {
                loop {
                    let mut header = [0u8; 4];
                    if cr.read_exact(&mut header).await.is_err() {
                        return;
                    }
                    let len = usize::from(header[0])
                        | usize::from(header[1]) << 8
                        | usize::from(header[2]) << 16;
                    let mut payload = vec![0u8; len];
                    if cr.read_exact(&mut payload).await.is_err() {
                        return;
                    }
                    // Commands start a sequence (id 0); handshake packets never do.
                    if header[3] == 0
                        && let Some(delay) = link.take_delay(&payload)
                    {
                        tokio::time::sleep(delay).await;
                    }
                    if header[3] == 0 && is_commit(&payload) && link.take_commit_cut() {
                        swallow.store(true, Ordering::SeqCst);
                    }
                    if sw.write_all(&header).await.is_err() || sw.write_all(&payload).await.is_err()
                    {
                        return;
                    }
                    if swallow.load(Ordering::SeqCst) {
                        // Wait (in `to_client`) for the reply; send nothing more.
                        std::future::pending::<()>().await;
                    }
                }
            }
        };
        tokio::select! {
            () = to_client => {}
            () = to_server => {}
            _ = epoch.changed() => {}
        }
        self.open.fetch_sub(1, Ordering::SeqCst);
        lock(&self.upstream_ports).retain(|p| *p != local);
    }
}

impl Link {
    /// Stops accepting and closes every connection (without logging a fault).
    pub fn close(&self) {
        if let Some(t) = lock(&self.task).take() {
            t.abort();
        }
        self.epoch.send_modify(|e| *e += 1);
    }
}

/// The proxy's own runtime, shared by every link: the in-process workers' handlers block the
/// threads of the test's runtime on purpose (`act::BLOCK`, to show that the worker's services do
/// not share them). Served there, the proxy stopped forwarding while they blocked — every
/// in-process worker's heartbeats timed out at once with the server idle, a stall no real
/// network has (issue 26, a quiet tally run: two healthy workers' jobs stopped by their
/// watchdogs, one lease reaped, no fault to blame).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("fault-proxy")
            .enable_all()
            .build()
            .expect("the fault proxy's runtime")
    })
}

/// A `COM_QUERY` (0x03) whose text is `COMMIT` (any case, surrounding blanks or `;` allowed).
fn is_commit(payload: &[u8]) -> bool {
    payload.first() == Some(&0x03)
        && std::str::from_utf8(&payload[1..]).is_ok_and(|t| {
            t.trim()
                .trim_end_matches(';')
                .trim()
                .eq_ignore_ascii_case("COMMIT")
        })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A fault proxy in front of `db`'s server, and a pool of `size` connections through it.
pub async fn through_link(db: &crate::TestDb, size: u32) -> (Arc<Link>, sqlx::MySqlPool) {
    use sqlx::mysql::{MySqlPoolOptions, MySqlSslMode};
    let upstream = format!("{}:{}", db.options.get_host(), db.options.get_port());
    let link = Link::start(&upstream).await;
    let options = db
        .options
        .clone()
        .host("127.0.0.1")
        .port(link.port())
        .ssl_mode(MySqlSslMode::Disabled);
    let pool = MySqlPoolOptions::new()
        .max_connections(size)
        .connect_with(options)
        .await
        .expect("connect through the proxy link");
    (link, pool)
}

#[cfg(test)]
mod tests {
    use super::is_commit;

    #[test]
    fn recognises_commit_queries_only() {
        assert!(is_commit(b"\x03COMMIT"));
        assert!(is_commit(b"\x03 commit; "));
        assert!(!is_commit(b"\x03COMMIT AND CHAIN"));
        assert!(!is_commit(b"\x16COMMIT"));
        assert!(!is_commit(b"\x03SELECT 1"));
    }
}
