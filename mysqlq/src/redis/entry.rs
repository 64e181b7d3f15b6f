//! What one stream entry carries, and the two scripts the relay runs: adding entries without
//! ever passing the stream's cap, and finding which of its entries Redis no longer has.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionLike;

use crate::store::{ClaimedJob, Owned};
use crate::{Error, JobId};

/// A stream entry id, `<milliseconds>-<sequence>`, ordered as Redis orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct EntryId(pub(crate) u64, pub(crate) u64);

impl EntryId {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        let (ms, seq) = s.split_once('-')?;
        Some(Self(ms.parse().ok()?, seq.parse().ok()?))
    }
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

/// One relayed job as it travels in a stream: everything a consumer needs to take and run it
/// without reading the row first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The job id.
    pub(crate) job: JobId,
    /// The relay's claim token: the consumer's take is guarded by it.
    pub(crate) token: String,
    /// The attempt the take starts.
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    pub(crate) kind: Option<String>,
    pub(crate) payload: String,
    pub(crate) meta: Option<String>,
    /// How long the job had been ready when the relay claimed it (database clock).
    pub(crate) waited_us: u64,
    /// When the relay added it (the relay host's clock, µs since 1970): pickup latency only.
    pub(crate) relayed_at_us: u64,
    /// The job's workflow, when it is a step: its completion then settles its dependents.
    /// (Absent in entries of relays before it was carried: such a step is settled by the
    /// sweep.)
    pub(crate) workflow: Option<u64>,
}

/// Field names, in the order they are written.
const FIELDS: [&str; 10] = [
    "job", "token", "attempt", "max", "kind", "payload", "meta", "waited", "at", "wf",
];

pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

impl Entry {
    pub(crate) fn from_claimed(job: &ClaimedJob, token: &str) -> Self {
        Self {
            job: job.id,
            token: token.to_owned(),
            attempt: job.attempt,
            max_attempts: job.max_attempts,
            kind: job.kind.clone(),
            payload: job.payload.clone(),
            meta: job.meta.clone(),
            waited_us: u64::try_from(job.waited.as_micros()).unwrap_or(u64::MAX),
            relayed_at_us: now_us(),
            workflow: job.workflow,
        }
    }

    pub(crate) fn owned(&self) -> Owned {
        Owned {
            id: self.job,
            token: self.token.clone(),
        }
    }

    /// The job to hand to the executor once taken, `waited` including the time in the stream.
    pub(crate) fn claimed(&self) -> ClaimedJob {
        let in_stream = now_us().saturating_sub(self.relayed_at_us);
        ClaimedJob {
            id: self.job,
            kind: self.kind.clone(),
            payload: self.payload.clone(),
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            meta: self.meta.clone(),
            waited: Duration::from_micros(self.waited_us.saturating_add(in_stream)),
            lease_sent: None,
            workflow: self.workflow,
            rate_slack: None,
        }
    }

    /// The field/value pairs of `XADD`, as [`FIELDS`] orders them (an absent kind or meta is
    /// an empty value).
    fn values(&self) -> [String; 10] {
        [
            self.job.0.to_string(),
            self.token.clone(),
            self.attempt.to_string(),
            self.max_attempts.to_string(),
            self.kind.clone().unwrap_or_default(),
            self.payload.clone(),
            self.meta.clone().unwrap_or_default(),
            self.waited_us.to_string(),
            self.relayed_at_us.to_string(),
            self.workflow.map(|w| w.to_string()).unwrap_or_default(),
        ]
    }

    /// Reads an entry's fields; `Err` names what is wrong (the entry is then dropped, and its
    /// job, if its id could be read, comes back through MySQL).
    pub(crate) fn parse(
        map: &std::collections::HashMap<String, redis::Value>,
    ) -> Result<Self, String> {
        let text = |name: &str| -> Result<String, String> {
            match map.get(name) {
                Some(v) => redis::from_redis_value_ref::<String>(v)
                    .map_err(|e| format!("field `{name}`: {e}")),
                None => Err(format!("field `{name}` missing")),
            }
        };
        let number = |name: &str| -> Result<u64, String> {
            text(name)?
                .parse::<u64>()
                .map_err(|e| format!("field `{name}`: {e}"))
        };
        let opt = |s: String| (!s.is_empty()).then_some(s);
        Ok(Self {
            job: JobId(number("job")?),
            token: text("token")?,
            attempt: u32::try_from(number("attempt")?).map_err(|e| e.to_string())?,
            max_attempts: u32::try_from(number("max")?).map_err(|e| e.to_string())?,
            kind: opt(text("kind")?),
            payload: text("payload")?,
            meta: opt(text("meta")?),
            waited_us: number("waited")?,
            relayed_at_us: number("at")?,
            workflow: match map.get("wf") {
                None => None,
                Some(_) => opt(text("wf")?)
                    .map(|w| w.parse::<u64>().map_err(|e| format!("field `wf`: {e}")))
                    .transpose()?,
            },
        })
    }
}

/// Adds entries in order while the stream holds fewer than `cap`; returns the ids of those
/// added (a prefix of the list). One script: the check and the adds are atomic, so any number
/// of relays together never pass the cap, in one round trip like a pipeline.
const ADD_CAPPED: &str = r"
local cap = tonumber(ARGV[1])
local nf = tonumber(ARGV[2])
local len = redis.call('XLEN', KEYS[1])
local ids = {}
local i = 3
while i + 2 * nf - 1 <= #ARGV and len < cap do
  local args = {}
  for j = 0, 2 * nf - 1 do args[#args + 1] = ARGV[i + j] end
  ids[#ids + 1] = redis.call('XADD', KEYS[1], '*', unpack(args))
  len = len + 1
  i = i + 2 * nf
end
return ids
";

/// The ids among ARGV that the stream no longer holds.
const MISSING: &str = r"
local missing = {}
for i = 1, #ARGV do
  if #redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i]) == 0 then
    missing[#missing + 1] = ARGV[i]
  end
end
return missing
";

/// `XADD`s `entries` to `stream` in order while it holds fewer than `cap` entries; the ids of
/// the first ones, those added.
pub(crate) async fn add_capped<C: ConnectionLike + Send>(
    conn: &mut C,
    stream: &str,
    cap: u64,
    entries: &[Entry],
) -> Result<Vec<EntryId>, Error> {
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    let script = redis::Script::new(ADD_CAPPED);
    let mut inv = script.key(stream);
    inv.arg(cap).arg(FIELDS.len());
    for e in entries {
        for (name, value) in FIELDS.iter().zip(e.values()) {
            inv.arg(*name).arg(value);
        }
    }
    let ids: Vec<String> = inv.invoke_async(conn).await?;
    ids.iter()
        .map(|s| {
            EntryId::parse(s)
                .ok_or_else(|| Error::invalid("stream entry id", format!("`{s}` from XADD")))
        })
        .collect()
}

/// Which of `ids` `stream` no longer holds.
pub(crate) async fn missing<C: ConnectionLike + Send>(
    conn: &mut C,
    stream: &str,
    ids: &[EntryId],
) -> Result<Vec<EntryId>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let script = redis::Script::new(MISSING);
    let mut inv = script.key(stream);
    for id in ids {
        inv.arg(id.to_string());
    }
    let gone: Vec<String> = inv.invoke_async(conn).await?;
    Ok(gone.iter().filter_map(|s| EntryId::parse(s)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_what_was_written() {
        let e = Entry {
            job: JobId(42),
            token: "t".into(),
            attempt: 2,
            max_attempts: 5,
            kind: None,
            payload: "{\"a\":1}".into(),
            meta: Some("{}".into()),
            waited_us: 7,
            relayed_at_us: 9,
            workflow: Some(3),
        };
        let map = FIELDS
            .iter()
            .zip(e.values())
            .map(|(k, v)| ((*k).to_owned(), redis::Value::BulkString(v.into_bytes())))
            .collect();
        assert_eq!(Entry::parse(&map), Ok(e.clone()));
        // An entry of a relay that did not carry the workflow: not a step, for this consumer.
        let mut old = map.clone();
        old.remove("wf");
        assert_eq!(Entry::parse(&old).map(|o| o.workflow), Ok(None));
        let mut broken = map.clone();
        broken.remove("token");
        assert_eq!(Entry::parse(&broken), Err("field `token` missing".into()));
    }

    #[test]
    fn entry_ids_order_as_redis_does() {
        let a = EntryId::parse("1700000000000-9").unwrap();
        let b = EntryId::parse("1700000000001-0").unwrap();
        assert!(a < b);
        assert_eq!(a.to_string(), "1700000000000-9");
        assert_eq!(EntryId::parse("x-1"), None);
    }
}
