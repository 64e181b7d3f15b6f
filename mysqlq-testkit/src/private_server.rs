//! A private, throwaway database server, for tests that kill, pause or restart it and for
//! examples run where no server answers.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::host::{free_port, which};

/// How long a started server has to answer on its port.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a private server could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// Neither `mariadbd` nor `mysqld` is installed.
    #[error("no mariadbd or mysqld on PATH or in /usr/sbin: install mariadb-server")]
    NoServerBinary,
    /// `redis-server` is not installed.
    #[error("no redis-server on PATH or in /usr/bin: install redis-server")]
    NoRedisBinary,
    /// A file-system or process step failed.
    #[error("cannot {what}")]
    Io {
        /// The step, e.g. `create /tmp/…`.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The data-directory initialiser failed.
    #[error("initialising the private server's data directory failed: {stderr}")]
    Initialise {
        /// What the initialiser wrote to stderr.
        stderr: String,
    },
    /// The server exited before it answered.
    #[error("the private server exited ({status}); log:\n{log}")]
    Exited {
        /// Its exit status.
        status: ExitStatus,
        /// Its log.
        log: String,
    },
    /// The server did not answer in time.
    #[error("the private server did not answer in time; log:\n{log}")]
    NotReady {
        /// Its log.
        log: String,
    },
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StartError {
    let what = what.into();
    move |source| StartError::Io { what, source }
}

/// A `mariadbd` (or `mysqld`) from PATH or `/usr/sbin`, with its own data directory in a temp
/// dir and its own port. Killed and deleted on drop.
#[derive(Debug)]
pub struct PrivateServer {
    dir: PathBuf,
    port: u16,
    binary: PathBuf,
    extra_args: Vec<String>,
    child: Option<Child>,
}

impl PrivateServer {
    /// Initialises a data directory and starts the server; panics with a clear message if no
    /// server binary is installed or the server does not start.
    #[must_use]
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Like [`start`](Self::start), with extra server options (e.g. `--log-bin`,
    /// `--binlog-format=STATEMENT`).
    #[must_use]
    pub fn start_with(extra: &[&str]) -> Self {
        Self::try_start_with(extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`start`](Self::start), returning the error instead of panicking.
    ///
    /// # Errors
    ///
    /// See [`StartError`].
    pub fn try_start() -> Result<Self, StartError> {
        Self::try_start_with(&[])
    }

    /// Like [`start_with`](Self::start_with), returning the error instead of panicking.
    ///
    /// # Errors
    ///
    /// See [`StartError`].
    pub fn try_start_with(extra: &[&str]) -> Result<Self, StartError> {
        let binary = which(&["mariadbd", "mysqld"]).ok_or(StartError::NoServerBinary)?;
        let dir = unique_dir("mysqlq-private");
        std::fs::create_dir_all(dir.join("tmp"))
            .map_err(io(format!("create {}", dir.display())))?;
        // From here on, dropping `server` deletes the directory.
        let mut server = Self {
            dir,
            port: free_port(),
            binary,
            extra_args: extra.iter().map(|s| (*s).to_owned()).collect(),
            child: None,
        };
        let template = template(&server.binary)?;
        let data = server.dir.join("data");
        copy_dir(&template, &data).map_err(io(format!(
            "copy the initialised data directory to {}",
            data.display()
        )))?;
        server.launch()?;
        Ok(server)
    }

    fn launch(&mut self) -> Result<(), StartError> {
        let data = self.dir.join("data");
        let log_path = self.dir.join("server.log");
        let log = std::fs::File::create(&log_path).map_or(Stdio::null(), Stdio::from);
        let child = Command::new(&self.binary)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--port={}", self.port))
            .arg(format!("--socket={}", self.dir.join("sock").display()))
            .arg(format!("--tmpdir={}", self.dir.join("tmp").display()))
            .arg(format!("--pid-file={}", self.dir.join("pid").display()))
            .args([
                "--bind-address=127.0.0.1",
                "--user=root",
                "--innodb-buffer-pool-size=64M",
            ])
            .args(["--skip-name-resolve", "--max-connections=300"])
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(io(format!("start {}", self.binary.display())))?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), StartError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                return Err(StartError::Exited {
                    status,
                    log: self.log(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(StartError::NotReady { log: self.log() })
    }

    /// The server's log so far.
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// `mysql://root@127.0.0.1:<port>`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }

    /// The port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temp directory holding the data directory, socket and log.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server binary.
    #[must_use]
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    fn signal(&self, sig: &str) {
        if let Some(child) = &self.child {
            assert!(signal(child.id(), sig), "kill -{sig} {} failed", child.id());
        }
    }

    /// SIGKILL: the server dies without flushing anything (InnoDB recovers on restart).
    pub fn kill(&mut self) {
        self.signal("KILL");
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and data; panics if it does not come back.
    pub fn restart(&mut self) {
        self.kill();
        self.launch().unwrap_or_else(|e| panic!("{e}"));
    }

    /// SIGSTOP: the server stops answering (a network stall) until [`resume`](Self::resume).
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal("CONT");
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            let _ = signal(child.id(), "CONT");
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends `sig` (a name such as `KILL`) to `pid` with kill(1); `true` on success.
#[must_use]
pub fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn unique_dir(prefix: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "{prefix}-{}-{:08x}",
        std::process::id(),
        fastrand::u32(..)
    ))
}

/// A data directory initialised once per process and copied for each private server: faster
/// than initialising each, and initialisers running side by side trip over each other.
static TEMPLATE: Mutex<Option<PathBuf>> = Mutex::new(None);

pub(crate) fn template(binary: &Path) -> Result<PathBuf, StartError> {
    let mut template = TEMPLATE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(dir) = template.as_ref() {
        return Ok(dir.clone());
    }
    let dir = init_datadir(binary)?;
    *template = Some(dir.clone());
    Ok(dir)
}

/// Deletes this process's template data directory, for a process that starts no more private
/// servers (an example's run). Otherwise it stays until the process ends, and the next process
/// that starts a private server removes it. The next start in this process initialises a new one.
pub fn remove_template() {
    let mut template = TEMPLATE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(data) = template.take()
        && let Some(dir) = data.parent()
    {
        let _ = std::fs::remove_dir_all(dir);
    }
}

pub(crate) fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// Removes template and server directories left by processes that are gone (a killed test run,
/// or a template, which lives as long as its process).
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name
            .strip_prefix("mysqlq-template-")
            .or_else(|| name.strip_prefix("mysqlq-private-"))
        else {
            continue;
        };
        let Some(pid) = rest.split('-').next() else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn init_datadir(binary: &Path) -> Result<PathBuf, StartError> {
    remove_stale_dirs();
    let dir = unique_dir("mysqlq-template");
    std::fs::create_dir_all(dir.join("tmp")).map_err(io(format!("create {}", dir.display())))?;
    let data = dir.join("data");
    let is_mariadb = binary.file_name().is_some_and(|n| n == "mariadbd");
    let mut init = match which(&["mariadb-install-db", "mysql_install_db"]) {
        Some(tool) if is_mariadb => {
            let mut c = Command::new(tool);
            c.args([
                "--no-defaults",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .arg(format!("--tmpdir={}", dir.join("tmp").display()));
            c
        }
        _ => {
            let mut c = Command::new(binary);
            c.args(["--no-defaults", "--initialize-insecure", "--user=root"]);
            c
        }
    };
    let out = init
        .arg(format!("--datadir={}", data.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(io("run the server's data-directory initialiser"))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(StartError::Initialise {
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(data)
}
