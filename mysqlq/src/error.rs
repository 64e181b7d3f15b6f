//! The crate's error type, and the error a job handler returns.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// Errors returned by mysqlq's own operations (enqueue, migrate, worker start-up, admin calls).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database returned an error. The message carries the server's error number and text
    /// and, for the usual set-up mistakes (tables missing, unknown database, access denied,
    /// read-only server, unreachable server), what to do.
    #[error("{}", database_message(.0))]
    Database(#[from] sqlx::Error),
    /// A job's payload could not be serialised to JSON.
    #[error("cannot serialise the payload of job `{kind}` to JSON")]
    Serialize {
        /// The job's kind name.
        kind: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// A job's payload is larger than the limit.
    #[error(
        "payload of job `{kind}` is {size} bytes, over the limit of {limit} bytes; store large data in \
         your own table and enqueue its id"
    )]
    PayloadTooLarge {
        /// The job's kind name.
        kind: String,
        /// Size of the serialised payload in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// An argument is outside what the queue accepts (queue name, key length, attempts, …).
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was invalid, e.g. "queue name".
        what: &'static str,
        /// Why, and how to fix it.
        reason: String,
    },
    /// The server does not support what mysqlq needs.
    #[error("unsupported server {version}: {reason}")]
    UnsupportedServer {
        /// The server's version string.
        version: String,
        /// Why, and what to use instead.
        reason: String,
    },
    /// The database schema is older or newer than this build of mysqlq.
    #[error(
        "schema version {found} found, this mysqlq needs {expected}; run the migrations: \
         `mysqlq::migrate(&pool)`, or `migrate` of your worker binary (`mysqlq-cli migrate`)"
    )]
    SchemaVersion {
        /// Version found in the database (0 when mysqlq's tables are missing).
        found: u32,
        /// Version this build expects.
        expected: u32,
    },
    /// Two job types were registered under one kind name.
    #[error(
        "job kind `{kind}` is registered twice: at {first} and at {second}; give one of them a \
         different `name = \"...\"`"
    )]
    DuplicateKind {
        /// The kind name.
        kind: String,
        /// Where the first registration was made.
        first: String,
        /// Where the second registration was made.
        second: String,
    },
    /// No host of a multi-host database URL is up and takes writes (each is named with its
    /// problem). Transient: during a failover the next try may find the new writer.
    #[error("{0}; start a writer, or promote a replica (and set read_only=OFF on it)")]
    NoWriter(String),
    /// Worker settings do not fit together.
    #[error("invalid worker configuration: {0}")]
    Config(String),
    /// A job that [`mysqlq::testing`](crate::testing) ran with
    /// [`with_safety(false)`](crate::testing::WorkOptions::with_safety) returned an error or
    /// timed out (its outcome was recorded first, as a worker records it).
    #[error("job {id} (`{kind}`) attempt {attempt} of {max_attempts} failed: {error}")]
    JobFailed {
        /// The job.
        id: crate::JobId,
        /// Its kind name.
        kind: String,
        /// The attempt that failed.
        attempt: u32,
        /// Attempts allowed.
        max_attempts: u32,
        /// The error as recorded (`last_error`).
        error: String,
    },
    /// A workflow or batch was refused ([`crate::workflow`]): nothing was enqueued.
    #[error("{0}")]
    Workflow(#[from] WorkflowError),
    /// Redis (the Redis Streams transport, feature `redis`) refused a command or could not be
    /// reached.
    #[cfg(feature = "redis")]
    #[error("redis error: {}", redis_message(.0))]
    Redis(#[from] redis::RedisError),
}

#[cfg(feature = "redis")]
fn redis_message(e: &redis::RedisError) -> String {
    if e.is_io_error() || e.is_connection_refusal() || e.is_timeout() || e.is_connection_dropped() {
        format!("{e}; check that Redis is running and reachable at the URL (MYSQLQ_REDIS_URL)")
    } else {
        e.to_string()
    }
}

/// `database error <number>: <server message>; <what to do>`, or for errors that are not the
/// server's (I/O, pool) `database error: <what happened>; <what to do>`.
fn database_message(e: &sqlx::Error) -> String {
    use sqlx::mysql::MySqlDatabaseError;
    let (head, hint) = match e {
        sqlx::Error::Database(db) => {
            let number = db
                .try_downcast_ref::<MySqlDatabaseError>()
                .map(MySqlDatabaseError::number);
            let hint = match number {
                Some(1146) => Some(
                    "the tables are missing: run the migrations (`mysqlq::migrate(&pool)`, or \
                     `migrate` of your worker binary)",
                ),
                Some(1049) => Some("create the database, or fix the database name in the URL"),
                Some(1044 | 1045) => Some("check the user, the password and the user's grants"),
                Some(1142 | 1227) => Some("grant the user the privilege, or use one that has it"),
                Some(1290 | 1836) => Some("the server is read-only: connect to the writer"),
                _ => None,
            };
            let head = match number {
                Some(n) => format!("database error {n}: {}", db.message()),
                None => format!("database error: {}", db.message()),
            };
            (head, hint)
        }
        sqlx::Error::PoolTimedOut => (
            "database error: no connection of the pool became free in time".to_owned(),
            Some("give the pool more connections, or hold them for less time"),
        ),
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) => (
            format!("database error: {e}"),
            Some("check that the server is running and reachable at the URL"),
        ),
        other => (format!("database error: {other}"), None),
    };
    match hint {
        Some(h) => format!("{head}; {h}"),
        None => head,
    }
}

impl Error {
    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid {
            what,
            reason: reason.into(),
        }
    }

    /// The server's error number (`1146`, `1213`, …) when the server refused a statement.
    pub fn server_code(&self) -> Option<u16> {
        match self {
            Self::Database(e) => sqlx_error_number(e),
            _ => None,
        }
    }

    /// `true` when trying again later may succeed: the connection broke or timed out, the
    /// server is restarting or read-only during a failover, a Galera node is not ready, or a
    /// deadlock / lock wait timeout rolled the transaction back.
    ///
    /// In numbers: no host of a multi-host URL takes writes ([`Error::NoWriter`]), I/O, a closed or timed-out pool, server gone (2006, 2013), can't connect
    /// (2002, 2003), Galera node not ready (1047), server shutdown in progress (1053), read-only
    /// during failover (1290, 1836), deadlock (1213), lock wait timeout (1205).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::NoWriter(_) => true,
            #[cfg(feature = "redis")]
            Self::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_refusal()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_unrecoverable_error()
            }
            Self::Database(
                sqlx::Error::Io(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed
                | sqlx::Error::Protocol(_)
                | sqlx::Error::Tls(_),
            ) => true,
            _ => matches!(
                self.server_code(),
                Some(1047 | 1053 | 1205 | 1213 | 1290 | 1836 | 2002 | 2003 | 2006 | 2013)
            ),
        }
    }
}

/// The server's error number, when `e` is a server error.
pub(crate) fn sqlx_error_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(sqlx::mysql::MySqlDatabaseError::number),
        _ => None,
    }
}

/// What the worker does with a job whose handler returned an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorClass {
    /// Transient: run again after the job's backoff, until `max_attempts` is reached.
    Retry,
    /// Permanent (bad input, permissions): move to `failed` now, whatever attempts are left.
    Fail,
    /// Not a failure: run again after the given delay without consuming an attempt.
    Snooze(Duration),
    /// Stop for good without counting as a failure: the job moves to `cancelled`.
    Cancel,
    /// The service the job calls said "too many requests": the job's rate key (its queue, for
    /// a job without one) takes no new job for the given time, and the job runs again after
    /// it without consuming an attempt.
    RateLimited(Duration),
}

/// Lets an error type choose how the worker treats it.
///
/// Errors that do not implement this trait are retried. Implement it to fail permanently,
/// snooze or cancel instead:
///
/// ```
/// use mysqlq::{Classify, ErrorClass};
///
/// #[derive(Debug, thiserror::Error)]
/// enum EmailError {
///     #[error("address rejected")]
///     BadAddress,
///     #[error("server busy")]
///     Busy,
/// }
///
/// impl Classify for EmailError {
///     fn class(&self) -> ErrorClass {
///         match self {
///             EmailError::BadAddress => ErrorClass::Fail,
///             EmailError::Busy => ErrorClass::Retry,
///         }
///     }
/// }
/// ```
pub trait Classify {
    /// The class of this error.
    fn class(&self) -> ErrorClass;
}

/// The error a job handler returns: a cause and what to do about it.
///
/// Any `std::error::Error + Send + Sync + 'static` converts into a `JobError` of class
/// [`ErrorClass::Retry`], so `?` works in handlers that return `Result<(), JobError>`.
pub struct JobError {
    class: ErrorClass,
    source: Box<dyn StdError + Send + Sync + 'static>,
}

impl JobError {
    /// A transient error: the job is retried after its backoff.
    pub fn retry(source: impl Into<Box<dyn StdError + Send + Sync + 'static>>) -> Self {
        Self::new(ErrorClass::Retry, source)
    }

    /// A permanent error: the job is marked `failed` now.
    pub fn fail(source: impl Into<Box<dyn StdError + Send + Sync + 'static>>) -> Self {
        Self::new(ErrorClass::Fail, source)
    }

    /// Run the job again after `delay` without consuming an attempt.
    pub fn snooze(delay: Duration) -> Self {
        Self::new(
            ErrorClass::Snooze(delay),
            format!("snoozed for {}", crate::backoff::format_duration(delay)),
        )
    }

    /// The service the job calls is rate limiting it (an HTTP 429 with `Retry-After`): no job
    /// of this job's rate key — of its queue, for a job without one — starts on any worker for
    /// `retry_after`, and this job runs again after it, its attempt given back.
    pub fn rate_limited(retry_after: Duration) -> Self {
        Self::new(
            ErrorClass::RateLimited(retry_after),
            format!(
                "rate limited by the service; held for {}",
                crate::backoff::format_duration(retry_after)
            ),
        )
    }

    /// Stop the job for good (state `cancelled`), recording `reason`.
    pub fn cancel(reason: impl Into<Box<dyn StdError + Send + Sync + 'static>>) -> Self {
        Self::new(ErrorClass::Cancel, reason)
    }

    /// An error of the given class.
    pub fn new(
        class: ErrorClass,
        source: impl Into<Box<dyn StdError + Send + Sync + 'static>>,
    ) -> Self {
        Self {
            class,
            source: source.into(),
        }
    }

    /// What the worker will do.
    pub fn class(&self) -> ErrorClass {
        self.class
    }

    /// The underlying error.
    pub fn source_error(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.source
    }
}

impl<E: StdError + Send + Sync + 'static> From<E> for JobError {
    fn from(source: E) -> Self {
        Self::retry(source)
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("class", &self.class)
            .field("source", &self.source)
            .finish()
    }
}

impl fmt::Display for JobError {
    /// The error and its whole chain of causes, joined by `: `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source)?;
        let mut cause = self.source.source();
        while let Some(err) = cause {
            write!(f, ": {err}")?;
            cause = err.source();
        }
        Ok(())
    }
}

/// What is wrong with a workflow ([`crate::workflow`]), found when it is built or enqueued. Nothing is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkflowError {
    /// Two steps share a name.
    #[error(
        "step `{step}` is declared twice in workflow `{workflow}`; give each step its own name"
    )]
    DuplicateName {
        /// The workflow.
        workflow: String,
        /// The name.
        step: String,
    },
    /// A dependency names no step declared before.
    #[error(
        "step `{step}` depends on `{dep}`, which is not declared before it in workflow \
         `{workflow}`; declare dependencies first (known: {known})"
    )]
    UnknownDep {
        /// The workflow.
        workflow: String,
        /// The dependent step.
        step: String,
        /// The unknown name.
        dep: String,
        /// The names declared so far.
        known: String,
    },
    /// A step depends on itself (dependencies must be declared first, so this is the only cycle
    /// that can be written).
    #[error(
        "step `{step}` depends on itself: a cycle; a step can only depend on steps declared before it"
    )]
    Cycle {
        /// The step.
        step: String,
    },
    /// No step at all.
    #[error("workflow `{workflow}` has no steps; add one with `step`")]
    NoSteps {
        /// The workflow.
        workflow: String,
    },
    /// A name is empty, too long, or holds `#`.
    #[error(
        "invalid name `{name}`: 1 to {max} characters, without `#` (used for fan-outs: `resize#3`)"
    )]
    BadName {
        /// The name.
        name: String,
        /// The longest name allowed, in characters.
        max: usize,
    },
    /// More than [`crate::workflow::MAX_STEPS`] steps.
    #[error("workflow `{workflow}` has {steps} steps, over the limit of {limit}; split it")]
    TooManySteps {
        /// The workflow.
        workflow: String,
        /// How many.
        steps: usize,
        /// The limit.
        limit: usize,
    },
    /// `dedupe_replace` on a step.
    #[error(
        "step `{step}` uses `dedupe_replace`, which a workflow step cannot: a step is never rewritten"
    )]
    DedupeReplace {
        /// The step.
        step: String,
    },
    /// A step's dedupe key is held by another job: nothing was enqueued.
    #[error("step `{step}`'s dedupe key is held by job {holder}: the workflow was not enqueued")]
    Duplicate {
        /// The step.
        step: String,
        /// The job holding the key.
        holder: crate::JobId,
    },
}
