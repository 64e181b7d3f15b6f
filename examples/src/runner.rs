//! The `main` the examples share: the common flag, logging, finding the server, one round under
//! Ctrl-C, then either `--once` (shut down, print the summary last) or keep running until Ctrl-C.

use std::fmt;
use std::process::ExitCode;

use crate::server::Server;

/// A round that ran, as [`run`] drives it after printing its summary.
pub trait Finished<O> {
    /// The one-line summary, printed last with `--once`.
    fn summary(&self) -> String;

    /// `true` when every invariant held (the exit code).
    fn ok(&self) -> bool;

    /// Without `--once`: the line printed after the summary, saying what keeps running.
    fn still_running(&self, options: &O) -> String;

    /// The database the round ran in (its own, see [`crate::server::unique_database`]):
    /// dropped once the run ends.
    fn database(options: &O) -> &str;
    /// Shuts down gracefully what the round left running.
    fn shutdown(self) -> impl Future<Output = Result<(), String>>;

    /// Stops what the round left running: at once with `--once` (`stop` is `None`), else once
    /// `stop` (Ctrl-C) completes. The round's `url` and `options` are passed along. By default,
    /// waits for `stop` and calls [`shutdown`](Self::shutdown).
    fn finish(
        self,
        _url: &str,
        _options: &O,
        stop: Option<impl Future<Output = ()>>,
    ) -> impl Future<Output = Result<(), String>>
    where
        Self: Sized,
    {
        async move {
            if let Some(stop) = stop {
                stop.await;
            }
            self.shutdown().await
        }
    }
}

/// Writes `OK`, or `FAILED: ` and the broken invariants: the end of every summary line.
///
/// # Errors
///
/// When `f` fails.
pub fn verdict(f: &mut fmt::Formatter<'_>, violations: &[String]) -> fmt::Result {
    if violations.is_empty() {
        f.write_str("OK")
    } else {
        write!(f, "FAILED: {}", violations.join("; "))
    }
}

/// The flag every example has, flattened into its clap arguments.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct Common {
    /// One round, then check the invariants, print a one-line summary and exit (0 if every
    /// invariant held); without it the workers keep running until Ctrl-C
    #[arg(long)]
    pub once: bool,
}

/// What every example's `--help` ends with.
pub const ENV_HELP: &str = "DATABASE_URL names the server (any database in it is left alone: each \
run uses a database of its own, `mysqlq_example_<name>_<pid>_<random>`, dropped when it ends). \
Without it, 127.0.0.1:3306 is used if it answers, else a private throwaway mariadbd/mysqld is \
started in a temp dir and removed at exit (MYSQLQ_EXAMPLES_PRIVATE_SERVER=1 forces that). \
RUST_LOG filters mysqlq's logs (default: warn).";

/// An example's `main`, after clap parsed its arguments (an argument error exits with 2, `--help`
/// with 0): `name` prefixes its messages; `round(url, options)` runs one round against the
/// server found; with `common.once` the run ends after it. A failure, or Ctrl-C during the round,
/// exits with 1, as does a summary reporting broken invariants.
pub async fn run<O, R>(
    name: &str,
    common: Common,
    options: O,
    round: impl AsyncFnOnce(&str, &O) -> Result<R, String>,
) -> ExitCode
where
    R: Finished<O>,
{
    let once = common.once;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    // The server (and a private one's temp dir) lives until the end of main, Ctrl-C included.
    let server = match Server::locate().await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{name}: using {}", server.describe());

    let round = tokio::select! {
        r = round(server.url(), &options) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
    };
    let round = match round {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{name}: {e}");
            let _ = crate::server::drop_database(server.url(), R::database(&options)).await;
            return ExitCode::FAILURE;
        }
    };
    let summary = round.summary();
    let ok = round.ok();
    let stop = (!once).then(|| {
        println!("{summary}");
        println!("{}", round.still_running(&options));
        async {
            let _ = tokio::signal::ctrl_c().await;
            println!("Ctrl-C: shutting down gracefully");
        }
    });
    let finished = round.finish(server.url(), &options, stop).await;
    let dropped = crate::server::drop_database(server.url(), R::database(&options)).await;
    if let Err(e) = finished.and(dropped) {
        eprintln!("{name}: {e}");
        return ExitCode::FAILURE;
    }
    if once {
        // The summary is the last line.
        println!("{summary}");
    } else {
        println!("stopped");
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
