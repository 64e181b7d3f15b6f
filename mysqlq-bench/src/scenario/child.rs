//! Child processes of this binary (the hidden `bench-worker` and `bench-drain` subcommands):
//! the parent's handle on one ([`ChildProc`]: started, told to go, its progress read, stopped
//! with SIGTERM, its last line read), and the child's side of the protocol.
//!
//! On stdout a child prints `ready` once it can start, `progress N` whenever what it finished
//! changed, and at exit one line `counters {json}`. On stdin it reads `go` (start the measured
//! work); the end of stdin means the parent is gone, and stops it like SIGTERM does.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, ChildStdin};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::error::BenchError;

/// Longest wait for a child to print `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for a child to exit after SIGTERM (a worker's graceful shutdown waits up to
/// 30 s).
const EXIT_TIMEOUT: Duration = Duration::from_secs(60);

/// A running child of this binary.
pub(crate) struct ChildProc {
    child: Child,
    /// Held open: the child stops when it closes (the bench is gone).
    stdin: Option<ChildStdin>,
    ready: Option<oneshot::Receiver<()>>,
    /// The last `progress N` it printed.
    progress: Arc<AtomicU64>,
    /// The child's `counters` line, once it printed it.
    counters: JoinHandle<Option<String>>,
    /// Its stderr, shown if it fails.
    stderr: JoinHandle<String>,
}

impl ChildProc {
    /// Starts this binary with `args` (a hidden subcommand and its flags) on database `url`.
    pub(crate) fn spawn(url: &str, args: &[String]) -> Result<Self, BenchError> {
        let exe = std::env::current_exe().map_err(|e| {
            BenchError::new(
                format!("cannot find this program to start the worker processes: {e}"),
                "run the bench from a regular file",
            )
        })?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.args(args)
            .env("DATABASE_URL", url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| {
            BenchError::new(
                format!("cannot start a worker process: {e}"),
                "check the process limits",
            )
        })?;
        let no_pipe = || BenchError::new("a worker process has no stdout", "this is a bug");
        let stdout = child.stdout.take().ok_or_else(no_pipe)?;
        let stderr = child.stderr.take().ok_or_else(no_pipe)?;
        let (ready_tx, ready) = oneshot::channel();
        let progress = Arc::new(AtomicU64::new(0));
        let seen = progress.clone();
        let counters = tokio::spawn(async move {
            let mut ready_tx = Some(ready_tx);
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            let mut counters = None;
            while let Ok(Some(line)) = lines.next_line().await {
                if line == "ready" {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(());
                    }
                } else if let Some(n) = line.strip_prefix("progress ") {
                    if let Ok(n) = n.trim().parse() {
                        seen.store(n, Ordering::Relaxed);
                    }
                } else if let Some(rest) = line.strip_prefix("counters ") {
                    counters = Some(rest.to_owned());
                }
            }
            counters
        });
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = tokio::io::BufReader::new(stderr)
                .read_to_string(&mut text)
                .await;
            text
        });
        Ok(Self {
            stdin: child.stdin.take(),
            child,
            ready: Some(ready),
            progress,
            counters,
            stderr,
        })
    }

    /// Waits until the child printed `ready`.
    pub(crate) async fn ready(&mut self) -> Result<(), BenchError> {
        let Some(ready) = self.ready.take() else {
            return Ok(());
        };
        match tokio::time::timeout(READY_TIMEOUT, ready).await {
            Ok(Ok(())) => Ok(()),
            _ => {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                let err = (&mut self.stderr).await.unwrap_or_default();
                Err(BenchError::new(
                    format!(
                        "a worker process did not start: {}",
                        err.trim().replace('\n', " ")
                    ),
                    "see its error",
                ))
            }
        }
    }

    /// Tells the child to start its measured work.
    pub(crate) async fn go(&mut self) -> Result<(), BenchError> {
        let sent = match &mut self.stdin {
            Some(stdin) => stdin.write_all(b"go\n").await.is_ok() && stdin.flush().await.is_ok(),
            None => false,
        };
        if sent {
            Ok(())
        } else {
            Err(BenchError::new(
                "a worker process is gone before it was told to start",
                "see the errors above",
            ))
        }
    }

    /// What the child last said it finished (`progress N`).
    pub(crate) fn progress(&self) -> u64 {
        self.progress.load(Ordering::Relaxed)
    }

    /// Whether the child has exited already (before it was told to stop: it failed).
    pub(crate) fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Sends SIGTERM (the worker's graceful shutdown), by the child's process id.
    pub(crate) fn terminate(&self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Waits for the child's exit (after [`terminate`](Self::terminate)); its `counters` line.
    pub(crate) async fn finish(mut self) -> Result<Value, BenchError> {
        let status = match tokio::time::timeout(EXIT_TIMEOUT, self.child.wait()).await {
            Ok(s) => s.ok(),
            Err(_) => {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                None
            }
        };
        drop(self.stdin.take());
        let line = (&mut self.counters).await.ok().flatten();
        let err = (&mut self.stderr).await.unwrap_or_default();
        match (status, line) {
            (Some(s), Some(line)) if s.success() => serde_json::from_str(&line).map_err(|e| {
                BenchError::new(
                    format!("a worker process printed unreadable counters ({e}): {line}"),
                    "this is a bug in the bench",
                )
            }),
            (status, _) => Err(BenchError::new(
                format!(
                    "a worker process ended with {} without its counters: {}",
                    status.map_or_else(|| "no exit in time".to_owned(), |s| s.to_string()),
                    err.trim().replace('\n', " ")
                ),
                "see its error",
            )),
        }
    }
}

/// SIGTERM to every child at once, then each one's `counters` line, in order; the first error
/// once all were waited for.
pub(crate) async fn stop_all(procs: Vec<ChildProc>) -> Result<Vec<Value>, BenchError> {
    for p in &procs {
        p.terminate();
    }
    let mut out = Vec::with_capacity(procs.len());
    let mut first_err = None;
    for p in procs {
        match p.finish().await {
            Ok(v) => out.push(v),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The child's stdin, read on a thread of its own (not tokio's stdin: the runtime's shutdown
/// would wait for its blocking read, which only ends when the parent closes the pipe).
pub(crate) struct StdinWatch {
    /// Fires at the first `go` line.
    pub(crate) go: oneshot::Receiver<()>,
    /// Fires at the end of stdin (the parent is gone); `None` when no thread could be started.
    pub(crate) eof: Option<oneshot::Receiver<()>>,
}

impl StdinWatch {
    pub(crate) fn start() -> Self {
        let (go_tx, go) = oneshot::channel::<()>();
        let (eof_tx, eof) = oneshot::channel::<()>();
        let watching = std::thread::Builder::new()
            .name("stdin-watch".into())
            .spawn(move || {
                use std::io::BufRead as _;
                let mut go_tx = Some(go_tx);
                let mut line = String::new();
                let mut stdin = std::io::stdin().lock();
                while matches!(stdin.read_line(&mut line), Ok(n) if n > 0) {
                    if line.trim() == "go"
                        && let Some(tx) = go_tx.take()
                    {
                        let _ = tx.send(());
                    }
                    line.clear();
                }
                let _ = eof_tx.send(());
            })
            .is_ok();
        Self {
            go,
            eof: watching.then_some(eof),
        }
    }
}

/// SIGTERM, SIGINT, or `eof` (the end of stdin: the parent is gone).
pub(crate) async fn stop_signal(eof: Option<oneshot::Receiver<()>>) {
    let stdin_closed = async {
        match eof {
            Some(eof) => {
                let _ = eof.await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
                () = stdin_closed => {}
            }
            return;
        }
    }
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = stdin_closed => {}
    }
}

/// This process's CPU time (user + system), in seconds, from `/proc/self/stat` (`None`
/// elsewhere). Assumes 100 clock ticks per second, as on every Linux of the last decades.
pub(crate) fn cpu_seconds() -> Option<f64> {
    cpu_seconds_at("/proc/self/stat")
}

/// The CPU time (user + system), in seconds, of the process whose `/proc/<pid>/stat` is `stat`
/// (`None` when it cannot be read).
pub(crate) fn cpu_seconds_at(stat: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(stat).ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}
