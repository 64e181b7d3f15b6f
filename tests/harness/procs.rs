//! Worker processes for tests: the test application binary (`mysqlq-test-worker`, whose
//! `main` is `mysqlq_cli::main()` with the test jobs linked in).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{TestDb, signal};

/// A worker process on the test database, with test-friendly timings.
pub struct Proc {
    /// The process.
    pub child: Child,
    /// Its worker id.
    pub id: String,
    /// Where its stderr (its log) goes.
    pub log: std::path::PathBuf,
}

/// The timings [`Proc::start`] gives every worker: a 2 s lease and fast maintenance.
pub const FAST_TIMINGS: [&str; 8] = [
    "--lease",
    "2s",
    "--maintenance-interval",
    "200ms",
    "--leader-ttl",
    "1s",
    "--poll-ceiling",
    "100ms",
];

impl Proc {
    /// Starts `work` with `extra` arguments (`--queues …`, `--concurrency …`)
    /// with a 2 s lease and fast maintenance. The binary's path comes from the test's
    /// `CARGO_BIN_EXE_mysqlq-test-worker`, passed as `bin`.
    pub fn start(bin: &str, db: &TestDb, id: &str, extra: &[&str]) -> Self {
        let mut args = FAST_TIMINGS.to_vec();
        args.extend_from_slice(extra);
        Self::spawn(bin, &db.url(), &format!("{}-{id}", db.name), id, &args)
    }

    /// Starts `work --worker-id id` with exactly `args`, on `url` (`DATABASE_URL`, one host or
    /// several), logging at `warn` to a temp file named after `log_name`.
    pub fn spawn(bin: &str, url: &str, log_name: &str, id: &str, args: &[&str]) -> Self {
        let log = std::env::temp_dir().join(format!("{log_name}.log"));
        let child = Command::new(bin)
            .args(["work", "--worker-id", id])
            .args(args)
            .env("DATABASE_URL", url)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(&log)
                    .map(Stdio::from)
                    .unwrap_or(Stdio::null()),
            )
            .spawn()
            .expect("spawn the test worker binary");
        Self {
            child,
            id: id.to_owned(),
            log,
        }
    }

    /// What the worker logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, and wait.
    pub fn kill(&mut self) {
        assert!(signal(self.child.id(), "KILL"));
        let _ = self.child.wait();
    }

    /// SIGTERM, then the exit status within `limit`.
    pub fn terminate(&mut self, limit: Duration) -> std::process::ExitStatus {
        assert!(signal(self.child.id(), "TERM"));
        wait_within(&mut self.child, limit)
            .unwrap_or_else(|| panic!("worker {} did not stop within {limit:?}", self.id))
    }
}

/// The exit status of `child` if it ends within `limit`; otherwise the child is killed (so a
/// test never hangs on a process that ignores its signal) and `None` is returned.
pub fn wait_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child process") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = signal(self.child.id(), "KILL");
            let _ = self.child.wait();
        }
    }
}
