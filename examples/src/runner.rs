//! The `main` the examples share: argument parsing, logging, finding the server, one round under
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

/// Parses the number after `flag`, with the examples' error messages.
///
/// # Errors
///
/// `{flag} needs a number` when there is none, `{flag}: `{n}` is not a number` when it does not
/// parse.
pub fn number<T: std::str::FromStr>(flag: &str, value: Option<String>) -> Result<T, String> {
    let n = value.ok_or(format!("{flag} needs a number"))?;
    n.parse()
        .map_err(|_| format!("{flag}: `{n}` is not a number"))
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

/// `--once` (or not) and the example's options, or the message for an argument error (empty for
/// `--help`).
fn parse_args<O: Default>(
    flag: impl Fn(&str, &mut dyn Iterator<Item = String>, &mut O) -> Result<bool, String>,
) -> Result<(bool, O), String> {
    let mut once = false;
    let mut options = O::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--once" => once = true,
            "-h" | "--help" => return Err(String::new()),
            other => {
                if !flag(other, &mut args, &mut options)? {
                    return Err(format!("unknown argument `{other}`"));
                }
            }
        }
    }
    Ok((once, options))
}

/// An example's `main`: `name` prefixes its messages, `usage` is printed for `--help` and after
/// an argument error (exit code 2). Besides `--once` and `--help`, `flag(arg, rest, options)`
/// takes the example's own flags (reading their values from `rest`), returning `Ok(false)` for
/// an unknown one. `round(url, options)` runs one round against the server found; a failure, or
/// Ctrl-C during the round, exits with 1, as does a summary reporting broken invariants.
pub async fn run<O, R>(
    name: &str,
    usage: &str,
    flag: impl Fn(&str, &mut dyn Iterator<Item = String>, &mut O) -> Result<bool, String>,
    round: impl AsyncFnOnce(&str, &O) -> Result<R, String>,
) -> ExitCode
where
    O: Default,
    R: Finished<O>,
{
    let (once, options) = match parse_args(flag) {
        Ok(parsed) => parsed,
        Err(e) if e.is_empty() => {
            println!("{usage}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{name}: {e}\n\n{usage}");
            return ExitCode::from(2);
        }
    };
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
