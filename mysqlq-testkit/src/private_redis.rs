//! A private, throwaway `redis-server` without persistence, for tests that kill it, restart it
//! empty or flush it — never the shared one at 127.0.0.1:6379.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::host::{free_port, which};
use crate::private_server::{StartError, signal};

/// A `redis-server --port <free> --save '' --appendonly no` in a temp dir: it keeps nothing on
/// disk, so a restart comes back empty. Killed and deleted on drop.
#[derive(Debug)]
pub struct PrivateRedis {
    dir: PathBuf,
    port: u16,
    binary: PathBuf,
    child: Option<Child>,
}

impl PrivateRedis {
    /// Starts one; panics with a clear message if `redis-server` is missing or does not start.
    #[must_use]
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts one.
    ///
    /// # Errors
    ///
    /// When `redis-server` is not installed, or does not answer within 20 s.
    pub fn try_start() -> Result<Self, StartError> {
        let binary = which(&["redis-server"]).ok_or(StartError::NoRedisBinary)?;
        let dir = std::env::temp_dir().join(format!(
            "mysqlq-redis-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        std::fs::create_dir_all(&dir).map_err(|source| StartError::Io {
            what: format!("create {}", dir.display()),
            source,
        })?;
        let mut me = Self {
            dir,
            port: free_port(),
            binary,
            child: None,
        };
        me.launch()?;
        Ok(me)
    }

    fn launch(&mut self) -> Result<(), StartError> {
        let log =
            std::fs::File::create(self.dir.join("redis.log")).map_err(|source| StartError::Io {
                what: "create redis.log".into(),
                source,
            })?;
        let child = Command::new(&self.binary)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--dir")
            .arg(&self.dir)
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| StartError::Io {
                what: "start redis-server".into(),
                source,
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self
                .command(&["PING"])
                .is_ok_and(|r| r.starts_with("+PONG"))
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(StartError::NotReady { log: self.log() })
    }

    /// `redis://127.0.0.1:<port>`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// What it logged.
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// SIGKILL: it dies at once; everything it held is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = signal(child.id(), "KILL");
            let _ = child.wait();
        }
    }

    /// Kills it and starts it again on the same port, empty (no persistence).
    ///
    /// # Panics
    ///
    /// When it does not come back.
    pub fn restart_empty(&mut self) {
        self.kill();
        self.launch().unwrap_or_else(|e| panic!("{e}"));
    }

    /// Starts it again after [`kill`](Self::kill), on the same port, empty.
    ///
    /// # Panics
    ///
    /// When it does not come back.
    pub fn start_again(&mut self) {
        self.launch().unwrap_or_else(|e| panic!("{e}"));
    }

    /// `FLUSHALL`.
    ///
    /// # Panics
    ///
    /// When the server does not say `+OK`.
    pub fn flushall(&self) {
        let r = self.command(&["FLUSHALL"]).expect("FLUSHALL");
        assert!(r.starts_with("+OK"), "FLUSHALL answered {r}");
    }

    /// Sends one command (RESP, over a fresh connection) and returns the first reply's raw text.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached.
    pub fn command(&self, args: &[&str]) -> std::io::Result<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(req.as_bytes())?;
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
