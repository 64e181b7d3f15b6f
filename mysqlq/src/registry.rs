//! The job registry: every job type a worker can run, by kind name.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::{Error, Job, JobContext, JobError, RetryPolicy};

/// Runs a job from its JSON payload: decode, then the handler's future.
pub(crate) type RunFn =
    fn(JobContext, &str) -> Result<BoxFuture<'static, Result<(), JobError>>, serde_json::Error>;

/// One registered job type, with the source location that registered it.
///
/// `#[job]` submits one of these to [`inventory`] for every job; [`Registry::from_inventory`]
/// collects them.
#[derive(Clone, Copy)]
pub struct JobRegistration {
    kind: &'static str,
    queue: &'static str,
    priority: i16,
    cron: Option<&'static str>,
    file: &'static str,
    line: u32,
    run: RunFn,
    check: fn(&str) -> Result<(), PayloadError>,
    retry_policy: fn() -> RetryPolicy,
    timeout: fn() -> Option<Duration>,
    fields: Option<&'static [(&'static str, &'static str)]>,
    rate_limit: Option<crate::Rate>,
    payload_schema: fn() -> Option<serde_json::Value>,
    ordering_key_argument: Option<&'static str>,
    rate_key_argument: Option<&'static str>,
}

fn run_erased<J: Job>(
    ctx: JobContext,
    payload: &str,
) -> Result<BoxFuture<'static, Result<(), JobError>>, serde_json::Error> {
    let job: J = serde_json::from_str(payload)?;
    Ok(Box::pin(job.run(ctx)))
}

/// Decodes `payload` as `J`, as a worker does; an error says at which field it stopped.
fn check_erased<J: Job>(payload: &str) -> Result<(), PayloadError> {
    let mut de = serde_json::Deserializer::from_str(payload);
    serde_path_to_error::deserialize::<_, J>(&mut de)
        .map(drop)
        .map_err(|e| {
            let field = e.path().to_string();
            let source = e.into_inner();
            // `.`: the payload as a whole (a missing field, whose error names it).
            if field == "." {
                PayloadError::Decode(source)
            } else {
                PayloadError::Field {
                    field,
                    error: source,
                }
            }
        })
}

impl JobRegistration {
    /// The registration of `J`, made at `file:line`.
    pub const fn of<J: Job>(file: &'static str, line: u32) -> Self {
        Self {
            kind: J::KIND,
            queue: J::QUEUE,
            priority: J::PRIORITY,
            cron: J::CRON,
            file,
            line,
            run: run_erased::<J>,
            check: check_erased::<J>,
            retry_policy: J::retry_policy,
            timeout: J::timeout,
            fields: J::FIELDS,
            rate_limit: J::RATE_LIMIT,
            payload_schema: J::payload_schema,
            ordering_key_argument: J::ORDERING_KEY_ARGUMENT,
            rate_key_argument: J::RATE_KEY_ARGUMENT,
        }
    }

    /// The kind name.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The default queue.
    pub fn queue(&self) -> &'static str {
        self.queue
    }

    /// The default priority.
    pub fn priority(&self) -> i16 {
        self.priority
    }

    /// The cron schedule, for periodic jobs.
    pub fn cron(&self) -> Option<&'static str> {
        self.cron
    }

    /// `file:line` of the registration.
    pub fn location(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    /// The retry policy.
    pub fn retry_policy(&self) -> RetryPolicy {
        (self.retry_policy)()
    }

    /// The job's arguments as `(name, type)`, in order (`None` for a hand-written [`Job`] that
    /// does not list them).
    pub fn fields(&self) -> Option<&'static [(&'static str, &'static str)]> {
        self.fields
    }

    /// `order_id: u64, to: String`: the arguments as a tool shows them.
    pub fn fields_text(&self) -> Option<String> {
        self.fields.map(|f| {
            f.iter()
                .map(|(name, ty)| format!("{name}: {ty}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
    }

    /// The rate limit the job declares (`#[job(rate_limit = "10/s")]`), if any.
    pub fn rate_limit(&self) -> Option<crate::Rate> {
        self.rate_limit
    }

    /// The argument whose value orders the job's runs (`#[job(ordering_key = …)]`), if any.
    pub fn ordering_key_argument(&self) -> Option<&'static str> {
        self.ordering_key_argument
    }

    /// The argument whose value partitions the job's rate limit (`#[job(rate_key = …)]`), if
    /// any.
    pub fn rate_key_argument(&self) -> Option<&'static str> {
        self.rate_key_argument
    }

    /// The per-attempt timeout, if the job sets one.
    pub fn timeout(&self) -> Option<Duration> {
        (self.timeout)()
    }

    /// Checks that `payload` (JSON text) decodes as this job's arguments, as a worker would
    /// decode it, without running the job: for tools that enqueue by kind name. The payload
    /// must be a JSON object (a worker's decoding would also take an array of the arguments in
    /// order, which mysqlq never writes).
    /// A field the job does not have is refused when the job lists its fields (every `#[job]`
    /// does): a misspelt optional argument would otherwise become `None` silently. Workers stay
    /// lenient: they ignore extra fields, so a payload written for a newer build still runs.
    pub fn check_payload(&self, payload: &str) -> Result<(), PayloadError> {
        let value: serde_json::Value =
            serde_json::from_str(payload).map_err(PayloadError::Decode)?;
        let Some(object) = value.as_object() else {
            return Err(PayloadError::NotAnObject);
        };
        if let Some(fields) = self.fields
            && let Some(unknown) = object
                .keys()
                .find(|k| !fields.iter().any(|(name, _)| name == k))
        {
            return Err(PayloadError::UnknownField(unknown.clone()));
        }
        (self.check)(payload)
    }

    /// The JSON Schema (draft 2020-12) of the payloads [`check_payload`](Self::check_payload)
    /// accepts, from [`Job::payload_schema`] (`None` for a hand-written job without one). When
    /// the job lists its fields, the schema says `"additionalProperties": false`, as the check
    /// refuses other fields. The worker's decoding stays the final word on what the schema
    /// cannot say (serde's `u64` refuses `1.0`, which JSON Schema counts as an integer).
    pub fn payload_schema(&self) -> Option<serde_json::Value> {
        let mut schema = (self.payload_schema)()?;
        if self.fields.is_some()
            && let Some(object) = schema.as_object_mut()
        {
            object.insert("additionalProperties".into(), false.into());
        }
        Some(schema)
    }

    pub(crate) fn runner(&self) -> RunFn {
        self.run
    }
}

impl fmt::Debug for JobRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobRegistration")
            .field("kind", &self.kind)
            .field("queue", &self.queue)
            .field("location", &self.location())
            .finish_non_exhaustive()
    }
}

inventory::collect!(JobRegistration);

/// Why [`JobRegistration::check_payload`] refused a payload.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// The payload is JSON but not an object of the job's arguments.
    #[error("the payload must be a JSON object of the job's arguments")]
    NotAnObject,
    /// The payload is not JSON, or does not decode as the job's arguments (a field missing,
    /// …).
    #[error("{}", without_position(.0))]
    Decode(serde_json::Error),
    /// A field of the payload does not decode as its argument's type (`field` is its path:
    /// `to`, `address.city`, `tags[2]`).
    #[error("field `{field}`: {}", without_position(error))]
    Field {
        /// The path of the field in the payload.
        field: String,
        /// What decoding it said (the type it expected).
        error: serde_json::Error,
    },
    /// The payload has a field the job does not have (a misspelling?).
    #[error("the job has no field `{0}`")]
    UnknownField(String),
}

/// What decoding said, without serde_json's ` at line 1 column 12` when the JSON was valid:
/// the payload checked is rarely the text the user wrote (a tool re-serialises it), and the
/// field's name says where. A syntax error keeps its position.
fn without_position(error: &serde_json::Error) -> String {
    let text = error.to_string();
    if error.classify() != serde_json::error::Category::Data {
        return text;
    }
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    text.strip_suffix(&suffix).unwrap_or(&text).to_owned()
}

/// The jobs a worker can run, sorted by kind name.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    jobs: BTreeMap<&'static str, JobRegistration>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every job registered with `#[job]` in this binary. Two jobs with one kind name are an
    /// error naming both source locations.
    pub fn from_inventory() -> Result<Self, Error> {
        let mut all: Vec<JobRegistration> = inventory::iter::<JobRegistration>
            .into_iter()
            .copied()
            .collect();
        all.sort_by_key(|r| (r.kind, r.file, r.line));
        let mut registry = Self::new();
        for r in all {
            registry.add(r)?;
        }
        Ok(registry)
    }

    /// Adds a job type by hand (for hand-written `Job` impls).
    pub fn register<J: Job>(mut self) -> Result<Self, Error> {
        self.add(JobRegistration::of::<J>("<registered by hand>", 0))?;
        Ok(self)
    }

    /// Adds one registration.
    pub fn add(&mut self, r: JobRegistration) -> Result<(), Error> {
        if let Some(first) = self.jobs.get(r.kind) {
            return Err(Error::DuplicateKind {
                kind: r.kind.to_owned(),
                first: first.location(),
                second: r.location(),
            });
        }
        self.jobs.insert(r.kind, r);
        Ok(())
    }

    /// The registration of `kind`.
    pub fn get(&self, kind: &str) -> Option<&JobRegistration> {
        self.jobs.get(kind)
    }

    /// The only job registered for `queue`, if exactly one is (used for rows inserted by plain
    /// SQL without a `kind`).
    pub fn sole_job_of_queue(&self, queue: &str) -> Option<&JobRegistration> {
        let mut it = self.jobs.values().filter(|r| r.queue == queue);
        let first = it.next()?;
        it.next().is_none().then_some(first)
    }

    /// All registrations, sorted by kind.
    pub fn iter(&self) -> impl Iterator<Item = &JobRegistration> {
        self.jobs.values()
    }

    /// The distinct default queues of the registered jobs, sorted.
    pub fn queues(&self) -> Vec<&'static str> {
        let mut q: Vec<&'static str> = self.jobs.values().map(|r| r.queue).collect();
        q.sort_unstable();
        q.dedup();
        q
    }

    /// The periodic jobs declared with `#[job(cron = "...")]`.
    pub fn periodic(&self) -> Result<Vec<crate::Periodic>, Error> {
        self.jobs
            .values()
            .filter_map(|r| {
                r.cron.map(|expr| {
                    crate::Periodic::without_arguments(
                        r.kind(),
                        r.queue(),
                        r.retry_policy().max_attempts,
                        expr,
                    )
                })
            })
            .collect()
    }

    /// Number of registered jobs.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// `true` when no job is registered.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}
