//! A job's id, and what an enqueue returns: the id of the new job or of the job that already
//! holds the dedupe key.

use std::fmt;

/// The id of a job: `job_queue.id`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// The result of an enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// A new job row was written.
    Inserted(JobId),
    /// A job holding the same dedupe key already exists; nothing was written.
    Duplicate(JobId),
    /// The dedupe key's holder was still pending and was updated instead (the "replace" mode,
    /// [`EnqueueOptions::dedupe_replace`](crate::EnqueueOptions::dedupe_replace)): its payload,
    /// run time and priority are the new job's.
    Replaced(JobId),
}

impl Enqueued {
    /// The id of the new job, or of the job that already holds the dedupe key (replaced or not).
    pub fn id(self) -> JobId {
        match self {
            Self::Inserted(id) | Self::Duplicate(id) | Self::Replaced(id) => id,
        }
    }

    /// `true` when the dedupe key was already taken.
    pub fn is_duplicate(self) -> bool {
        matches!(self, Self::Duplicate(_))
    }
}
