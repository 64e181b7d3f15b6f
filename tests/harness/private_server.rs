//! A private, throwaway database server for tests that kill, pause or restart it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::host::{free_port, which as find_binary};

/// A `mariadbd` (or `mysqld`) from PATH or `/usr/sbin`, with its own data directory in a temp
/// dir and its own port. Killed and deleted on drop.
pub struct PrivateServer {
    dir: PathBuf,
    port: u16,
    binary: PathBuf,
    extra_args: Vec<String>,
    child: Option<Child>,
}

impl PrivateServer {
    /// Initialises a data directory and starts the server; panics with a clear message if no
    /// server binary is installed.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Like [`start`](Self::start), with extra server options (e.g. `--log-bin`,
    /// `--binlog-format=STATEMENT`).
    pub fn start_with(extra: &[&str]) -> Self {
        let binary = find_binary(&["mariadbd", "mysqld"])
            .expect("no mariadbd or mysqld on PATH or in /usr/sbin: install mariadb-server to run these tests");
        let dir = unique_dir("mysqlq-private");
        std::fs::create_dir_all(dir.join("tmp")).expect("create the private server's directory");
        let template = TEMPLATE.get_or_init(|| init_datadir(&binary));
        copy_dir(template, &dir.join("data")).expect("copy the initialised data directory");
        let mut server = Self {
            dir,
            port: free_port(),
            binary,
            extra_args: extra.iter().map(|s| (*s).to_owned()).collect(),
            child: None,
        };
        server.launch();
        server
    }
}

fn unique_dir(prefix: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "{prefix}-{}-{:08x}",
        std::process::id(),
        fastrand::u32(..)
    ))
}

/// A data directory initialised once per test process and copied for each private server:
/// faster than initialising each, and initialisers running side by side trip over each other.
static TEMPLATE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
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

/// Removes template and server directories left by test processes that are gone (a killed
/// test run, or a template, which lives as long as its process).
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

fn init_datadir(binary: &Path) -> PathBuf {
    remove_stale_dirs();
    let dir = unique_dir("mysqlq-template");
    std::fs::create_dir_all(dir.join("tmp")).expect("create the template directory");
    let data = dir.join("data");
    let install = find_binary(&["mariadb-install-db", "mysql_install_db"]);
    let init = match install {
        Some(tool) if binary.file_name().is_some_and(|n| n == "mariadbd") => Command::new(tool)
            .args([
                "--no-defaults",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output(),
        _ => Command::new(binary)
            .args(["--no-defaults", "--initialize-insecure", "--user=root"])
            .arg(format!("--datadir={}", data.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output(),
    }
    .expect("run the server's data-directory initialiser");
    assert!(
        init.status.success(),
        "initialising the private server failed: {}",
        String::from_utf8_lossy(&init.stderr)
    );
    data
}

impl PrivateServer {
    fn launch(&mut self) {
        let data = self.dir.join("data");
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
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(self.dir.join("server.log"))
                    .map(Stdio::from)
                    .unwrap_or(Stdio::null()),
            )
            .spawn()
            .expect("start the private server");
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("the private server exited ({status}); log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "the private server did not answer within 60 s; log:\n{}",
            self.log()
        );
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// `mysql://root@127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
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

    /// Starts the server again on the same port and data.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
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

/// Sends `sig` (a name such as `KILL`) to `pid` with kill(1); `true` on success.
pub fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
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
