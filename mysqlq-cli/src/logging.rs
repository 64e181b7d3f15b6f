//! Logging to stderr that never takes the process down: a closed or broken stderr (`work 2>&1 |
//! head -1`) silently drops log lines instead of panicking, colours only on a terminal, and
//! `--log-format json` for log collectors.

use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Args, ValueEnum};

/// `--log-format`, global to every command.
#[derive(Debug, Clone, Args)]
pub(crate) struct LogArgs {
    /// Log lines on stderr: `text` (coloured on a terminal) or `json` (one object per line:
    /// timestamp, level, target, fields, span, spans)
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, value_name = "FORMAT")]
    pub(crate) log_format: LogFormat,
}

/// How log lines are written (no doc comments on the variants: `--help` lists them in one line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

/// Set once a write to stderr failed: later lines are dropped without trying.
static STDERR_GONE: AtomicBool = AtomicBool::new(false);

/// Installs the global subscriber: `RUST_LOG`, else `default`, as the filter.
pub(crate) fn init(format: LogFormat, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| Stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
}

/// Stderr whose failures are swallowed: logging must never stop the worker.
pub(crate) struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !STDERR_GONE.load(Ordering::Relaxed) && io::stderr().write_all(buf).is_err() {
            STDERR_GONE.store(true, Ordering::Relaxed);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// Prints one line on stderr, like `eprintln!` but without panicking when stderr is closed.
pub(crate) fn eprint_line(line: &str) {
    let _ = writeln!(Stderr, "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_report_success_even_when_stderr_fails() {
        STDERR_GONE.store(true, Ordering::Relaxed);
        assert_eq!(Stderr.write(b"dropped\n").unwrap(), 8);
        STDERR_GONE.store(false, Ordering::Relaxed);
    }
}
