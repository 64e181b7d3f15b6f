//! A private Galera cluster on loopback: `n` MariaDB nodes with the `galera-4` provider,
//! bootstrapped from the first, for tests that kill, stop and rejoin nodes.
//!
//! Nodes run as the `mysql` user (the rsync state transfer a joining node receives runs as the
//! server's user and fails as root), from a lab directory that user owns, with
//! `--wsrep-sst-method=rsync`, `binlog_format=ROW` and `innodb_autoinc_lock_mode=2` (what
//! Galera requires). A node needs about 150 MB on disk; a 3-node cluster comes up in about 10 s.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::client;
use crate::host::{free_port, which};
use crate::private_server::{StartError, copy_dir, io, signal, template, unique_dir};

/// Where Debian's `galera-4` package puts the provider.
const PROVIDERS: [&str; 3] = [
    "/usr/lib/galera/libgalera_smm.so",
    "/usr/lib/libgalera_smm.so",
    "/usr/lib64/galera-4/libgalera_smm.so",
];

/// How long a node has to come up and reach `Synced`.
const SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// One node of a [`GaleraCluster`].
#[derive(Debug)]
struct Node {
    dir: PathBuf,
    port: u16,
    gcomm: u16,
    ist: u16,
    sst: u16,
    child: Option<Child>,
}

/// A private Galera cluster. Killed and deleted on drop.
#[derive(Debug)]
pub struct GaleraCluster {
    dir: PathBuf,
    binary: PathBuf,
    provider: PathBuf,
    nodes: Vec<Node>,
    extra: Vec<String>,
}

impl GaleraCluster {
    /// Starts an `n`-node cluster and waits until every node is `Synced`; panics with the
    /// reason (no galera-4, no rsync, a node that does not come up).
    #[must_use]
    pub fn start(n: usize) -> Self {
        Self::try_start(n, &[]).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start`](Self::start) with extra server options for every node, returning the
    /// error instead of panicking.
    ///
    /// # Errors
    ///
    /// See [`StartError`].
    pub fn try_start(n: usize, extra: &[&str]) -> Result<Self, StartError> {
        let binary = which(&["mariadbd"]).ok_or(StartError::NoServerBinary)?;
        let provider = PROVIDERS
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .ok_or_else(|| missing("the Galera provider (apt-get install galera-4)"))?;
        if which(&["rsync"]).is_none() {
            return Err(missing(
                "rsync, which the state transfer uses (apt-get install rsync)",
            ));
        }
        let dir = unique_dir("mysqlq-private");
        std::fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
        let mut cluster = Self {
            dir,
            binary,
            provider,
            nodes: Vec::new(),
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
        };
        let template = template(&cluster.binary)?;
        for i in 0..n.max(1) {
            let node = cluster.dir.join(format!("node{i}"));
            std::fs::create_dir_all(node.join("tmp"))
                .map_err(io(format!("create {}", node.display())))?;
            copy_dir(&template, &node.join("data")).map_err(io(format!(
                "copy the initialised data directory to {}",
                node.display()
            )))?;
            cluster.nodes.push(Node {
                dir: node,
                port: free_port(),
                gcomm: free_port(),
                ist: free_port(),
                sst: free_port(),
                child: None,
            });
        }
        chown_mysql(&cluster.dir)?;
        cluster.launch(0, true)?;
        cluster.wait_synced(0)?;
        for i in 1..cluster.nodes.len() {
            cluster.launch(i, false)?;
        }
        for i in 1..cluster.nodes.len() {
            cluster.wait_synced(i)?;
        }
        Ok(cluster)
    }

    fn launch(&mut self, i: usize, bootstrap: bool) -> Result<(), StartError> {
        let addresses: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.gcomm))
            .collect();
        let node = &self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(node.dir.join("server.log"))
            .map_or(Stdio::null(), Stdio::from);
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", node.dir.join("data").display()))
            .arg(format!("--port={}", node.port))
            .arg(format!("--socket={}", node.dir.join("sock").display()))
            .arg(format!("--tmpdir={}", node.dir.join("tmp").display()))
            .arg(format!("--pid-file={}", node.dir.join("pid").display()))
            .args([
                "--user=mysql",
                "--bind-address=127.0.0.1",
                "--innodb-buffer-pool-size=64M",
                "--skip-name-resolve",
                "--max-connections=300",
                "--binlog-format=ROW",
                "--innodb-autoinc-lock-mode=2",
                "--wsrep-on=ON",
                "--wsrep-cluster-name=mysqlq-test",
                "--wsrep-sst-method=rsync",
            ])
            .arg(format!("--wsrep-provider={}", self.provider.display()))
            .arg(format!("--wsrep-cluster-address=gcomm://{}", addresses.join(",")))
            .arg(format!("--wsrep-node-name=node{i}"))
            .arg(format!("--wsrep-node-address=127.0.0.1:{}", node.gcomm))
            .arg(format!("--wsrep-sst-receive-address=127.0.0.1:{}", node.sst))
            .arg(format!(
                "--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{};ist.recv_addr=127.0.0.1:{};gcache.size=64M",
                node.gcomm, node.ist
            ))
            .args(&self.extra);
        if bootstrap {
            cmd.arg("--wsrep-new-cluster");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(io(format!("start {}", self.binary.display())))?;
        self.nodes[i].child = Some(child);
        Ok(())
    }

    fn wait_synced(&mut self, i: usize) -> Result<Duration, StartError> {
        let began = Instant::now();
        let deadline = began + SYNC_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(state) = client::status(
                self.nodes[i].port,
                "wsrep_local_state_comment",
                Duration::from_secs(5),
            ) && state == "Synced"
            {
                return Ok(began.elapsed());
            }
            if let Some(Ok(Some(status))) = self.nodes[i].child.as_mut().map(Child::try_wait) {
                return Err(StartError::Exited {
                    status,
                    log: self.log(i),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(StartError::NotReady { log: self.log(i) })
    }

    /// Number of nodes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Never: a cluster has at least one node.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// `mysql://root@127.0.0.1:<port0>,127.0.0.1:<port1>,…` — every node, in order.
    #[must_use]
    pub fn url(&self) -> String {
        let hosts: Vec<String> = (0..self.nodes.len()).map(|i| self.host(i)).collect();
        format!("mysql://root@{}", hosts.join(","))
    }

    /// `mysql://root@127.0.0.1:<port of node i>`.
    #[must_use]
    pub fn node_url(&self, i: usize) -> String {
        format!("mysql://root@{}", self.host(i))
    }

    /// `127.0.0.1:<port of node i>`.
    #[must_use]
    pub fn host(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.nodes[i].port)
    }

    /// The client port of node `i`.
    #[must_use]
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// Node `i`'s log so far.
    #[must_use]
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.nodes[i].dir.join("server.log")).unwrap_or_default()
    }

    /// The lab directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `true` while node `i`'s process runs.
    pub fn is_running(&mut self, i: usize) -> bool {
        self.nodes[i]
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILL of node `i`: the others notice only after `evs.suspect_timeout` (5 s), and
    /// their commits wait until then.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = signal(child.id(), "CONT");
            let _ = signal(child.id(), "KILL");
            let _ = child.wait();
        }
    }

    /// SIGTERM of node `i`, waiting for it to exit: a clean leave, which the others see at once.
    pub fn stop(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = signal(child.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(60);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = signal(child.id(), "KILL");
            let _ = child.wait();
        }
    }

    /// SIGSTOP of node `i` (it stops answering, like a network partition), until
    /// [`resume`](Self::resume).
    pub fn pause(&self, i: usize) {
        if let Some(child) = &self.nodes[i].child {
            let _ = signal(child.id(), "STOP");
        }
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self, i: usize) {
        if let Some(child) = &self.nodes[i].child {
            let _ = signal(child.id(), "CONT");
        }
    }

    /// Starts node `i` again (after [`kill`](Self::kill) or [`stop`](Self::stop)): it rejoins
    /// through the others (an incremental or full state transfer). Returns how long it took to
    /// be `Synced`; panics if it does not get there.
    pub fn rejoin(&mut self, i: usize) -> Duration {
        self.kill(i);
        self.launch(i, false)
            .and_then(|()| self.wait_synced(i))
            .unwrap_or_else(|e| panic!("node {i} did not rejoin: {e}"))
    }

    /// Runs `sql` as root on node `i` (see [`client::sql`]).
    ///
    /// # Errors
    ///
    /// The client's error, or no answer within `limit`.
    pub fn sql(&self, i: usize, sql: &str, limit: Duration) -> Result<String, String> {
        client::sql(self.nodes[i].port, sql, limit)
    }

    /// Status variable `name` of node `i`.
    ///
    /// # Errors
    ///
    /// As [`sql`](Self::sql).
    pub fn status(&self, i: usize, name: &str) -> Result<String, String> {
        client::status(self.nodes[i].port, name, Duration::from_secs(10))
    }
}

impl Drop for GaleraCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn missing(what: &str) -> StartError {
    StartError::Io {
        what: format!("find {what}"),
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    }
}

/// `chown -R mysql:mysql dir`: the nodes run as `mysql` and write there.
fn chown_mysql(dir: &Path) -> Result<(), StartError> {
    let out = Command::new("chown")
        .args(["-R", "mysql:mysql"])
        .arg(dir)
        .output()
        .map_err(io("run chown"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(StartError::Io {
            what: format!(
                "give {} to the mysql user: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        })
    }
}
