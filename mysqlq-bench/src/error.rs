//! One-line errors: `error: <problem>; <how to fix>`, with an exit code.

use std::error::Error as StdError;
use std::fmt;

/// Exit code of an operational error.
pub(crate) const EXIT_ERROR: u8 = 1;
/// Exit code of a usage error (bad arguments).
pub(crate) const EXIT_USAGE: u8 = 2;

/// What went wrong, how to fix it, and the exit code.
#[derive(Debug)]
pub(crate) struct BenchError {
    pub(crate) problem: String,
    pub(crate) fix: String,
    pub(crate) code: u8,
}

impl BenchError {
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

    /// A database error of the bench's own statements while doing `what`.
    pub(crate) fn db(what: &str, e: &sqlx::Error) -> Self {
        let fix = match crate::db::error_number(e) {
            Some(1045 | 1044) => {
                "check the user and password in DATABASE_URL and the user's grants"
            }
            Some(1142 | 1227) => "grant the user the privilege, or use a user that has it",
            Some(1290 | 1836) => "the server is read-only: point DATABASE_URL at the writer",
            _ => "see the server's message; `mysqlq-cli doctor` checks the setup",
        };
        Self::new(format!("{what}: {}", chain(e)), fix)
    }

    /// An error of `mysqlq` while doing `what`.
    pub(crate) fn mysqlq(what: &str, e: &mysqlq::Error) -> Self {
        match e {
            mysqlq::Error::Database(inner) => Self::db(what, inner),
            mysqlq::Error::Invalid { .. } => {
                Self::usage(format!("{what}: {e}"), "fix the argument")
            }
            _ => {
                // mysqlq's messages say what to do already.
                let text = e.to_string();
                match text.split_once("; ") {
                    Some((problem, fix)) => Self::new(format!("{what}: {problem}"), fix),
                    None => Self::new(format!("{what}: {text}"), "see `mysqlq-cli doctor`"),
                }
            }
        }
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; {}", self.problem, self.fix)
    }
}

/// An error and its causes joined by `: `, skipping messages repeated by a wrapper.
pub(crate) fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = cur {
        let s = err.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = err.source();
    }
    parts.join(": ")
}

/// `e` while doing `what`, as a closure for `map_err`.
pub(crate) fn q_err(what: &str) -> impl Fn(mysqlq::Error) -> BenchError + '_ {
    move |e| BenchError::mysqlq(what, &e)
}

/// `e` of the bench's own SQL while doing `what`, as a closure for `map_err`.
pub(crate) fn db_err(what: &str) -> impl Fn(sqlx::Error) -> BenchError + '_ {
    move |e| BenchError::db(what, &e)
}
