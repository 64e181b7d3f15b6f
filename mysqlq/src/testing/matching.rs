//! [`EnqueuedMatch`]: what an enqueued job should look like (its options, its arguments), and
//! how it says so in a failed assertion.

use std::fmt;
use std::time::Duration;

use crate::admin::{Job as JobRow, Timestamp};
use crate::{Job, Meta};

/// What an enqueued job should look like, for [`assert_enqueued_with`](super::assert_enqueued_with),
/// [`refute_enqueued_with`](super::refute_enqueued_with) and [`enqueued_with`](super::enqueued_with): every condition given must hold (none given:
/// any pending job). Times are compared on the database's clock.
///
/// ```no_run
/// # async fn demo(pool: sqlx::MySqlPool) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use mysqlq::testing::{EnqueuedMatch, assert_enqueued_with};
/// use mysqlq::EnqueueOptions;
///
/// #[mysqlq::job(queue = "emails")]
/// async fn remind(user_id: u64) -> Result<(), mysqlq::JobError> { Ok(()) }
///
/// let mut tx = pool.begin().await?;
/// let options = EnqueueOptions::new()
///     .delay(Duration::from_secs(24 * 3600))
///     .priority(5)
///     .meta("tenant", serde_json::json!("acme"));
/// Remind { user_id: 7 }.enqueue_with(&mut tx, &options).await?;
///
/// assert_enqueued_with(
///     &mut tx,
///     EnqueuedMatch::of::<Remind>()
///         .args(serde_json::json!({ "user_id": 7 }))
///         .queue("emails")
///         .priority(5)
///         .scheduled_in(Duration::from_secs(24 * 3600), Duration::from_secs(60))
///         .meta(serde_json::json!({ "tenant": "acme" })),
/// )
/// .await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct EnqueuedMatch {
    pub(super) kind: Option<String>,
    queue: Option<String>,
    priority: Option<i16>,
    max_attempts: Option<u32>,
    when: Option<When>,
    meta: Option<Meta>,
    args: Option<serde_json::Value>,
    dedupe_key: Option<String>,
    ordering_key: Option<String>,
}

/// When the job may run (`available_at`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum When {
    /// Now: `available_at` has passed.
    Ready,
    /// `available_at` within `tolerance` of the database's now plus `delay`.
    In {
        delay: Duration,
        tolerance: Duration,
    },
    /// `available_at` in `[from, to]`.
    Between { from: Timestamp, to: Timestamp },
}

impl EnqueuedMatch {
    /// Any pending job.
    pub fn new() -> Self {
        Self::default()
    }

    /// Pending jobs of type `J` (its kind name).
    pub fn of<J: Job>() -> Self {
        Self::new().kind(J::KIND)
    }

    /// Of this kind name.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// In this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// With this priority.
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }

    /// With this many attempts allowed.
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// Ready to run now (not scheduled for later).
    pub fn ready(mut self) -> Self {
        self.when = Some(When::Ready);
        self
    }

    /// Scheduled to run `delay` from now, give or take `tolerance` (an enqueue with
    /// [`EnqueueOptions::delay`](crate::EnqueueOptions::delay)).
    pub fn scheduled_in(mut self, delay: Duration, tolerance: Duration) -> Self {
        self.when = Some(When::In { delay, tolerance });
        self
    }

    /// Scheduled to run between `from` and `to`, both included (an enqueue with
    /// [`EnqueueOptions::run_at`](crate::EnqueueOptions::run_at)).
    pub fn scheduled_between(mut self, from: Timestamp, to: Timestamp) -> Self {
        self.when = Some(When::Between { from, to });
        self
    }

    /// Whose meta contains `meta` (a JSON object; nested objects are compared the same way,
    /// anything else must be equal). Other keys may be present.
    ///
    /// # Panics
    /// When `meta` is not a JSON object.
    pub fn meta(mut self, meta: serde_json::Value) -> Self {
        match meta {
            serde_json::Value::Object(m) => self.meta = Some(m),
            other => panic!("EnqueuedMatch::meta takes a JSON object, got `{other}`"),
        }
        self
    }

    /// Whose arguments (the payload) contain `args`: for an object, each key given with a value
    /// contained in the payload's (other fields may be present); anything else must be equal.
    pub fn args(mut self, args: serde_json::Value) -> Self {
        self.args = Some(args);
        self
    }

    /// With this dedupe key.
    pub fn dedupe_key(mut self, key: impl Into<String>) -> Self {
        self.dedupe_key = Some(key.into());
        self
    }

    /// With this ordering key.
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// `true` when the pending job `job` (as [`enqueued_with`](super::enqueued_with) returns it) fits.
    pub fn matches(&self, job: &JobRow) -> bool {
        let eq = |want: &Option<String>, got: Option<&str>| {
            want.as_deref().is_none_or(|w| got == Some(w))
        };
        eq(&self.kind, job.kind.as_deref())
            && eq(&self.queue, Some(&job.queue))
            && self.priority.is_none_or(|p| p == job.priority)
            && self.max_attempts.is_none_or(|m| m == job.max_attempts)
            && eq(&self.dedupe_key, job.dedupe_key.as_deref())
            && eq(&self.ordering_key, job.ordering_key.as_deref())
            && self.when.is_none_or(|w| when_fits(w, job))
            && self.meta.as_ref().is_none_or(|m| {
                let got = job.meta.clone().unwrap_or_else(|| Meta::new().into());
                contains(&got, &serde_json::Value::Object(m.clone()))
            })
            && self.args.as_ref().is_none_or(|a| {
                serde_json::from_str::<serde_json::Value>(&job.payload)
                    .is_ok_and(|got| contains(&got, a))
            })
    }
}

fn when_fits(when: When, job: &JobRow) -> bool {
    match when {
        When::Ready => job.available_at <= job.read_at,
        When::In { delay, tolerance } => {
            let (Ok(delay), Ok(tolerance)) = (
                chrono::Duration::from_std(delay),
                chrono::Duration::from_std(tolerance),
            ) else {
                return false;
            };
            let due = job.read_at + delay;
            job.available_at >= due - tolerance && job.available_at <= due + tolerance
        }
        When::Between { from, to } => job.available_at >= from && job.available_at <= to,
    }
}

/// `want` is contained in `got`: objects key by key, recursively; anything else equal.
fn contains(got: &serde_json::Value, want: &serde_json::Value) -> bool {
    match (got, want) {
        (serde_json::Value::Object(g), serde_json::Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| g.get(k).is_some_and(|gv| contains(gv, wv))),
        _ => got == want,
    }
}

impl fmt::Display for EnqueuedMatch {
    /// `kind = send_email, queue = emails, scheduled in 1h ± 1m`, or `any job`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        let fmt_d = crate::backoff::format_duration;
        if let Some(k) = &self.kind {
            parts.push(format!("kind = `{k}`"));
        }
        if let Some(q) = &self.queue {
            parts.push(format!("queue = `{q}`"));
        }
        if let Some(p) = self.priority {
            parts.push(format!("priority = {p}"));
        }
        if let Some(m) = self.max_attempts {
            parts.push(format!("max_attempts = {m}"));
        }
        if let Some(k) = &self.dedupe_key {
            parts.push(format!("dedupe_key = `{k}`"));
        }
        if let Some(k) = &self.ordering_key {
            parts.push(format!("ordering_key = `{k}`"));
        }
        match self.when {
            None => {}
            Some(When::Ready) => parts.push("ready now".to_owned()),
            Some(When::In { delay, tolerance }) => parts.push(format!(
                "scheduled in {} ± {}",
                fmt_d(delay),
                fmt_d(tolerance)
            )),
            Some(When::Between { from, to }) => {
                parts.push(format!("scheduled between {from} and {to}"));
            }
        }
        if let Some(m) = &self.meta {
            parts.push(format!("meta ⊇ {}", serde_json::Value::Object(m.clone())));
        }
        if let Some(a) = &self.args {
            parts.push(format!("args ⊇ {a}"));
        }
        if parts.is_empty() {
            f.write_str("any job")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containment_is_by_key_for_objects_and_equality_otherwise() {
        let got = json!({"a": 1, "b": {"c": 2, "d": [1, 2]}, "e": "x"});
        assert!(contains(&got, &json!({})));
        assert!(contains(&got, &json!({"a": 1})));
        assert!(contains(&got, &json!({"b": {"c": 2}})));
        assert!(contains(&got, &json!({"b": {"d": [1, 2]}})));
        assert!(!contains(&got, &json!({"b": {"d": [1]}})));
        assert!(!contains(&got, &json!({"a": 2})));
        assert!(!contains(&got, &json!({"z": null})));
        assert!(contains(&json!(5), &json!(5)));
    }

    #[test]
    fn a_match_describes_itself() {
        assert_eq!(EnqueuedMatch::new().to_string(), "any job");
        let m = EnqueuedMatch::new()
            .kind("send_email")
            .queue("emails")
            .priority(3)
            .scheduled_in(Duration::from_secs(3600), Duration::from_secs(60))
            .meta(json!({"tenant": "acme"}));
        assert_eq!(
            m.to_string(),
            "kind = `send_email`, queue = `emails`, priority = 3, scheduled in 1h ± 1m, \
             meta ⊇ {\"tenant\":\"acme\"}"
        );
    }
}
