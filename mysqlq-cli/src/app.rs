//! [`Cli`]: the command line as a builder, for binaries that hand state to their jobs.

use std::ffi::OsString;
use std::fmt;
use std::process::ExitCode;

use crate::program::Caller;

/// Applies one `state(...)` value to the worker builder.
type Configure = Box<dyn FnOnce(mysqlq::WorkerBuilder) -> mysqlq::WorkerBuilder + Send>;

/// The whole command line (`work`, `migrate`, `stats`, …) of an application's worker binary,
/// with the values its jobs read through [`mysqlq::JobContext::state`].
///
/// `mysqlq_cli::main()` is `Cli::new().run()`. Use the builder when handlers need an HTTP
/// client, a configuration or a pool of their own:
///
/// ```no_run
/// // src/bin/worker.rs
/// #[derive(Clone)]
/// struct Mailer {
///     endpoint: String,
/// }
///
/// fn main() {
///     let mailer = Mailer {
///         endpoint: std::env::var("MAIL_ENDPOINT").unwrap_or_default(),
///     };
///     mysqlq_cli::Cli::new().state(mailer).run()
/// }
///
/// // and in a job (in the library crate):
/// // let mailer = ctx.state::<Mailer>().expect("the worker binary provides a Mailer");
/// ```
///
/// Each value is looked up by its type; a second value of the same type replaces the first.
/// State that needs async set-up (a pool of its own) is built on your own runtime, then passed
/// to [`Cli::run_from`].
#[must_use = "a Cli does nothing until `run()` or `run_from(..)`"]
pub struct Cli {
    pub(crate) configure: Vec<Configure>,
    pub(crate) caller: Option<Caller>,
}

impl Cli {
    /// A command line with no state.
    #[track_caller]
    pub fn new() -> Self {
        Self {
            configure: Vec::new(),
            caller: Some(Caller {
                file: std::panic::Location::caller().file(),
            }),
        }
    }

    /// A value every job run by `work` can read with [`mysqlq::JobContext::state`].
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.configure.push(Box::new(move |b| b.state(value)));
        self
    }

    /// The whole program: builds a tokio runtime, parses `std::env::args`, runs the command and
    /// exits the process with its code (0 ok, 1 error, 2 usage error, 3 failed `doctor` check).
    ///
    /// Logs go to stderr, filtered by `RUST_LOG` (default `info` for `work`, `warn` otherwise),
    /// as text (coloured only on a terminal) or, with `--log-format json`, one JSON object per
    /// line. A closed stderr never stops the program.
    pub fn run(self) -> ! {
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                crate::logging::eprint_line(&format!(
                    "error: cannot start the tokio runtime: {e}; check the process limits (threads, memory)"
                ));
                std::process::exit(i32::from(crate::error::EXIT_ERROR));
            }
        };
        let code = runtime.block_on(crate::run_inner(self, std::env::args_os(), true));
        // Background tasks (pool reapers, metrics server) must not hold the exit.
        runtime.shutdown_timeout(std::time::Duration::from_secs(1));
        std::process::exit(i32::from(code));
    }

    /// Runs the command line `args` (the program name first, as in `std::env::args_os()`) on
    /// the caller's tokio runtime (multi-threaded, with I/O and time enabled) and returns the
    /// exit code. Does not install a `tracing` subscriber: the application keeps its own.
    pub async fn run_from<I, T>(self, args: I) -> ExitCode
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        ExitCode::from(crate::run_inner(self, args, false).await)
    }

    /// Hands the state to a worker builder.
    pub(crate) fn configure(
        configure: Vec<Configure>,
        mut builder: mysqlq::WorkerBuilder,
    ) -> mysqlq::WorkerBuilder {
        for f in configure {
            builder = f(builder);
        }
        builder
    }
}

impl Default for Cli {
    #[track_caller]
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Cli {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cli")
            .field("state_values", &self.configure.len())
            .finish_non_exhaustive()
    }
}
