//! One-line errors: `error: <problem>; <how to fix>`, with an exit code.

use std::fmt;

/// Exit code of an operational error.
pub(crate) const EXIT_ERROR: u8 = 1;
/// Exit code of a usage error (bad arguments).
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit code of `doctor` when a check failed.
pub(crate) const EXIT_CHECK_FAILED: u8 = 3;

/// A problem, how to fix it, and the exit code.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) problem: String,
    pub(crate) fix: String,
    pub(crate) code: u8,
}

impl CliError {
    /// An operational error (exit 1).
    pub(crate) fn new(problem: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            problem: problem.into(),
            fix: fix.into(),
            code: EXIT_ERROR,
        }
    }

    /// A usage error (exit 2).
    pub(crate) fn usage(problem: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            code: EXIT_USAGE,
            ..Self::new(problem, fix)
        }
    }

    /// An error of `mysqlq` while doing `what`.
    pub(crate) fn mysqlq(what: &str, e: &mysqlq::Error) -> Self {
        match e {
            mysqlq::Error::Database(_) => {
                let number = e.server_code();
                let fix = match number {
                    Some(1146) => "the mysqlq tables are missing: run `mysqlq-cli migrate`",
                    Some(1049) => {
                        "the database does not exist: create it, or fix the database in DATABASE_URL"
                    }
                    Some(1045 | 1044) => {
                        "check the user and password in DATABASE_URL and the user's grants"
                    }
                    Some(1698) => {
                        "the server has no password login for this user (MariaDB's root often \
                         logs in by unix_socket only): use a user with a password in DATABASE_URL"
                    }
                    Some(1142 | 1227) => "grant the user the privilege, or use a user that has it",
                    Some(1290 | 1836) => {
                        "the server is read-only: point DATABASE_URL at the writer"
                    }
                    _ if e.is_transient() => {
                        "check that the server is running and reachable, then try again"
                    }
                    _ => "see the server's message; `mysqlq-cli doctor` checks the setup",
                };
                // The server's number and text (mysqlq's message adds a fix of its own, and a
                // server message may itself contain "; "); the fix is the CLI's.
                let problem = match e {
                    mysqlq::Error::Database(sqlx::Error::Database(db)) => match number {
                        Some(n) => format!("database error {n}: {}", db.message()),
                        None => format!("database error: {}", db.message()),
                    },
                    mysqlq::Error::Database(inner) => format!("database error: {}", chain(inner)),
                    _ => chain(e),
                };
                Self::new(format!("{what}: {problem}"), fix)
            }
            mysqlq::Error::Invalid { .. } => {
                Self::usage(format!("{what}: {e}"), "fix the argument")
            }
            mysqlq::Error::SchemaVersion { .. } | mysqlq::Error::UnsupportedServer { .. } => {
                // Their messages say what to do already.
                let text = e.to_string();
                match text.split_once("; ") {
                    Some((problem, fix)) => Self::new(format!("{what}: {problem}"), fix),
                    None => Self::new(format!("{what}: {text}"), "see `mysqlq-cli doctor`"),
                }
            }
            // A setting out of its range: the message names it and the range.
            mysqlq::Error::Config(msg) => Self::usage(
                format!("{what}: {msg}"),
                "change that setting (`mysqlq-cli work --help` describes each)",
            ),
            _ => Self::new(format!("{what}: {}", chain(e)), "see `mysqlq-cli doctor`"),
        }
    }

    /// The one line printed on stderr, with `secret` (a password) scrubbed and command hints
    /// naming this binary.
    pub(crate) fn line(&self, scrub: &dyn Fn(&str) -> String) -> String {
        let text = crate::program::rename(&format!("error: {}; {}", self.problem, self.fix));
        scrub(&text).replace(['\n', '\r'], " ")
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; {}", self.problem, self.fix)
    }
}

pub(crate) use mysqlq::error_chain as chain;
