//! Items used by the code that `#[job]` generates. Not a public API: names and shapes change
//! without notice.

pub use futures_util::future::BoxFuture;
pub use inventory;
pub use schemars;
pub use serde;
pub use serde_json::Value;
pub use sqlx;

pub use crate::payload_schema::{
    Argument, Probe, ViaAnyType, ViaAnyValue, ViaDeserialize, ViaJsonSchema, object_schema,
};
pub use crate::registry::JobRegistration;
pub use crate::{
    Backoff, Classify, EnqueueOptions, Enqueued, Error, ErrorClass, Job, JobContext, JobError,
    RetryPolicy,
};

pub use std::boxed::Box;
pub use std::future::Future;
pub use std::marker::{Send, Sync};
pub use std::option::Option;
pub use std::result::Result;
pub use std::string::{String, ToString};
pub use std::time::Duration;
pub use std::{file, line};

/// Compile-time check generated for every job argument, spanned on its type: the argument is
/// stored as JSON in the job's payload and read back by a worker, possibly on another thread.
pub const fn assert_job_argument<T>()
where
    T: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
}

/// Wraps a handler's error for autoref-specialised conversion into [`JobError`]:
/// `(&&&Wrap(e)).__mysqlq_into_job_error()` picks, most specific first,
/// `JobError` itself, then `anyhow::Error` or `Box<dyn Error + Send + Sync>`, then an error
/// implementing [`Classify`], then any `std::error::Error` (retried).
pub struct Wrap<E>(pub std::cell::Cell<Option<E>>);

impl<E> Wrap<E> {
    /// Wraps `e`.
    pub fn new(e: E) -> Self {
        Self(std::cell::Cell::new(Some(e)))
    }

    fn take(&self) -> E {
        self.0.take().expect("a handler error is converted once")
    }
}

/// Level 1: the framework's own error.
pub trait ViaJobError {
    /// Converts.
    fn __mysqlq_into_job_error(&self) -> JobError;
}
impl ViaJobError for &&&Wrap<JobError> {
    fn __mysqlq_into_job_error(&self) -> JobError {
        self.take()
    }
}

/// Level 2: `anyhow::Error` (retried, unless it wraps a `JobError`).
pub trait ViaAnyhow {
    /// Converts.
    fn __mysqlq_into_job_error(&self) -> JobError;
}
impl ViaAnyhow for &&Wrap<anyhow::Error> {
    fn __mysqlq_into_job_error(&self) -> JobError {
        let e = self.take();
        match e.downcast::<JobError>() {
            Ok(job_error) => job_error,
            Err(e) => JobError::retry(Box::<dyn std::error::Error + Send + Sync>::from(e)),
        }
    }
}

/// Level 2, too: a boxed `dyn Error` (retried).
pub trait ViaBoxError {
    /// Converts.
    fn __mysqlq_into_job_error(&self) -> JobError;
}
impl ViaBoxError for &&Wrap<Box<dyn std::error::Error + Send + Sync + 'static>> {
    fn __mysqlq_into_job_error(&self) -> JobError {
        JobError::retry(self.take())
    }
}

/// Level 3: an error type that chose its class.
pub trait ViaClassify {
    /// Converts.
    fn __mysqlq_into_job_error(&self) -> JobError;
}
impl<E: Classify + std::error::Error + Send + Sync + 'static> ViaClassify for &Wrap<E> {
    fn __mysqlq_into_job_error(&self) -> JobError {
        let e = self.take();
        JobError::new(e.class(), e)
    }
}

/// Level 4: any error: retried.
pub trait ViaStdError {
    /// Converts.
    fn __mysqlq_into_job_error(&self) -> JobError;
}
impl<E: std::error::Error + Send + Sync + 'static> ViaStdError for Wrap<E> {
    fn __mysqlq_into_job_error(&self) -> JobError {
        JobError::retry(self.take())
    }
}

/// Parses a `Duration` literal the macro already validated (kept for generated code).
pub const fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}
