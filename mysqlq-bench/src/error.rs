//! One-line errors: `error: <problem>; <how to fix>`, with an exit code.

use std::error::Error as StdError;

/// Exit code of a usage error (bad arguments).
pub(crate) const EXIT_USAGE: u8 = 2;

/// Why the bench stopped: what went wrong and how to fix it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    /// Bad arguments or database URL (exit 2).
    #[error("{problem}; {fix}")]
    Usage {
        /// What is wrong.
        problem: String,
        /// How to fix it.
        fix: String,
    },
    /// The server, the schema or a run failed (exit 1).
    #[error("{problem}; {fix}")]
    Failed {
        /// What is wrong.
        problem: String,
        /// How to fix it.
        fix: String,
    },
}

impl BenchError {
    /// A failure (exit 1).
    pub(crate) fn new(problem: impl Into<String>, fix: impl Into<String>) -> Self {
        Self::Failed {
            problem: problem.into(),
            fix: fix.into(),
        }
    }

    /// A usage error (exit 2).
    pub(crate) fn usage(problem: impl Into<String>, fix: impl Into<String>) -> Self {
        Self::Usage {
            problem: problem.into(),
            fix: fix.into(),
        }
    }

    /// The process's exit code.
    pub(crate) fn code(&self) -> u8 {
        match self {
            Self::Usage { .. } => EXIT_USAGE,
            Self::Failed { .. } => 1,
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
