//! The job search of the dashboard, `Admin::search` and bulk actions: a [`Plan`] (what a
//! `mysqlq::filter::Filter` asks for, resolved against the database clock) walked along an
//! index in that index's order, keyset-paged, with what the index cannot answer checked on a
//! bounded window. Plan in `docs/design/dashboard.md` §3.
//!
//! | states asked for | walk | order |
//! |---|---|---|
//! | waiting, ready, rate-limited, scheduled, retrying | [`Walk::Due`]: `idx_job_recover`, one range per status (`(status, NULL lease, available_at, id)`), merged | due first |
//! | completed, failed, cancelled | [`Walk::Finished`]: `idx_job_finished`, one range per status, merged | newest first |
//! | running | [`Walk::Ids`] on `idx_job_recover`'s `processing` range (sorted: running rows only) | newest id first |
//! | (before the states) a declared field's texts, no `id:` | [`Walk::Ids`] on the field's index, one `ref` per text, merged (`field.rs`) | newest id first |
//! | none, or a mix | [`Walk::Ids`] on `PRIMARY` | newest id first |
//! | any, with `id:` | [`Walk::Ids`]: primary-key lookups of the ids (at most 16) | newest id first |
//!
//! Filters the walk's entries hold (queue, kind, attempts, ids) read at most [`INDEX_CAP`]
//! entries a page; filters that read the row (payload, meta, worker, error, times, priority,
//! workflow, and the rate-limit check) at most [`ROW_CAP`] rows. A page that reached its cap
//! says so ([`SearchPage::window`]) and its cursor continues below the window: a page never
//! pretends to be complete, and never guesses a count.

mod sql;

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use self::sql::{Bind, Sql};
use crate::state::{JobState, OpState, Timestamp};
use crate::{Error, JobId};

/// Most index entries a page reads when filtering on what the index holds.
pub const INDEX_CAP: u64 = 100_000;
/// Most rows a page reads when filtering on what only the row holds.
pub const ROW_CAP: u64 = 10_000;
/// Most jobs on a page.
pub const MAX_PAGE: u32 = 500;

/// A time range: `from` included, `until` excluded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bounds {
    /// At this time or after.
    pub from: Option<Timestamp>,
    /// Before this time.
    pub until: Option<Timestamp>,
}

impl Bounds {
    fn of(range: Option<&crate::filter::TimeRange>, now: Timestamp) -> Self {
        let (from, until) = range.map_or((None, None), |r| r.resolve(now));
        Self { from, until }
    }
}

/// Where a field lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `payload` (`args.…`).
    Args,
    /// `meta` (`meta.…`).
    Meta,
}

/// One value test of a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldTest {
    /// The path exists.
    Exists,
    /// The scalar's text at the path equals this, byte for byte.
    Equals(String),
}

/// A payload or meta field test: any of `tests` matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldFilter {
    /// Payload or meta.
    pub source: Source,
    /// The path as searched (`args.order_id`): the name of a declared search field.
    pub qualifier: String,
    /// The JSON path (`$."order_id"`), bound, never formatted into SQL.
    pub path: String,
    /// ORed.
    pub tests: Vec<FieldTest>,
}

/// What a search asks for, every part ANDed; an empty list means "any".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Operator states (ORed).
    pub states: Vec<OpState>,
    /// Job ids.
    pub ids: Vec<u64>,
    /// Queues.
    pub queues: Vec<String>,
    /// Kinds.
    pub kinds: Vec<String>,
    /// Attempts, both ends included.
    pub attempts: Option<(i64, i64)>,
    /// Priority, both ends included.
    pub priority: Option<(i64, i64)>,
    /// `available_at`.
    pub due: Bounds,
    /// `finished_at`.
    pub finished: Bounds,
    /// `created_at`.
    pub created: Bounds,
    /// `locked_by`.
    pub workers: Vec<String>,
    /// `workflow_id`.
    pub workflows: Vec<u64>,
    /// Substrings of `last_error` (ORed).
    pub errors: Vec<String>,
    /// Payload and meta fields.
    pub fields: Vec<FieldFilter>,
}

impl Plan {
    /// What `filter` asks for at `now` (the database clock: relative times are resolved
    /// against it).
    pub fn of(filter: &crate::filter::Filter, now: Timestamp) -> Self {
        use crate::filter::{FieldValue, Source as S};
        Self {
            states: filter.states.clone(),
            ids: filter.ids.iter().map(|id| id.0).collect(),
            queues: filter.queues.clone(),
            kinds: filter.kinds.clone(),
            attempts: filter.attempts.map(|r| (r.min, r.max)),
            priority: filter.priority.map(|r| (r.min, r.max)),
            due: Bounds::of(filter.due.as_ref(), now),
            finished: Bounds::of(filter.finished.as_ref(), now),
            created: Bounds::of(filter.created.as_ref(), now),
            workers: filter.workers.clone(),
            workflows: filter.workflows.clone(),
            errors: filter.errors.clone(),
            fields: filter
                .fields
                .iter()
                .map(|f| FieldFilter {
                    source: match f.source {
                        S::Args => Source::Args,
                        S::Meta => Source::Meta,
                    },
                    qualifier: f.qualifier(),
                    path: f.json_path(),
                    tests: f
                        .values
                        .iter()
                        .map(|v| match v {
                            FieldValue::Exists => FieldTest::Exists,
                            FieldValue::Text(t) => FieldTest::Equals(t.clone()),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// The index a search walks, and so its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Walk {
    /// `idx_job_recover`: due time, then id, ascending.
    Due,
    /// `idx_job_finished`: finished time, then id, descending.
    Finished,
    /// Id descending: `PRIMARY`, the running range, or a declared search field's index.
    Ids,
}

impl Walk {
    fn tag(self) -> char {
        match self {
            Self::Due => 'd',
            Self::Finished => 'f',
            Self::Ids => 'i',
        }
    }

    fn time_column(self) -> Option<&'static str> {
        match self {
            Self::Due => Some("j.available_at"),
            Self::Finished => Some("j.finished_at"),
            Self::Ids => None,
        }
    }

    fn ascending(self) -> bool {
        self == Self::Due
    }
}

/// Where the next page starts: the last position read, exclusive (`<walk>.<µs>.<id>` in URLs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The walk it belongs to.
    pub walk: Walk,
    /// The walk's time column at the position, µs since the epoch (0 for [`Walk::Ids`]).
    pub at_us: i64,
    /// The id at the position.
    pub id: u64,
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.walk.tag(), self.at_us, self.id)
    }
}

impl FromStr for Cursor {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::invalid("page cursor", format!("`{s}` is not a page cursor"));
        let mut it = s.splitn(3, '.');
        let walk = match it.next() {
            Some("d") => Walk::Due,
            Some("f") => Walk::Finished,
            Some("i") => Walk::Ids,
            _ => return Err(bad()),
        };
        let at_us = it.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
        let id = it.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
        Ok(Self { walk, at_us, id })
    }
}

/// A job as a search lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SearchRow {
    /// Its id.
    pub id: JobId,
    /// Its operator state at the search's `now`.
    pub state: OpState,
    /// Its stored status.
    pub status: JobState,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: Option<String>,
    /// Attempts started.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Priority.
    pub priority: i16,
    /// Enqueued.
    pub created_at: Timestamp,
    /// Due.
    pub available_at: Timestamp,
    /// Finished.
    pub finished_at: Option<Timestamp>,
    /// When the current attempt was claimed.
    pub claimed_at: Option<Timestamp>,
    /// The worker (or relay) holding it.
    pub locked_by: Option<String>,
    /// Its rate key.
    pub rate_key: Option<String>,
    /// The first 300 bytes of its payload's text.
    pub payload_head: String,
}

/// How much of the walk a capped page read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Window {
    /// Entries (or rows) the page's window held.
    pub read: u64,
    /// `true` when the filters read rows (10,000 a page at most), `false` for index entries
    /// (100,000 a page at most).
    pub rows: bool,
}

/// One page of a search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SearchPage {
    /// The walk (and so the order) of the page.
    pub walk: Walk,
    /// The matching jobs, in the walk's order.
    pub rows: Vec<SearchRow>,
    /// Where the next page starts; `None` when the walk has ended.
    #[serde(serialize_with = "ser_cursor")]
    pub next: Option<Cursor>,
    /// `Some` when the page stopped at its cap: more may match below it.
    pub window: Option<Window>,
    /// The database clock the states were read at.
    pub now: Timestamp,
}

fn ser_cursor<S: serde::Serializer>(c: &Option<Cursor>, s: S) -> Result<S::Ok, S::Error> {
    match c {
        Some(c) => s.serialize_some(&c.to_string()),
        None => s.serialize_none(),
    }
}

/// One index range of a walk.
struct Part {
    index: String,
    range: Sql,
}

/// The walk a plan takes and its parts.
fn walk_of(plan: &Plan, now: Timestamp) -> (Walk, Vec<Part>) {
    use OpState as O;
    let s = &plan.states;
    let part = |index: &str, text: &str| {
        let mut range = Sql::default();
        range.push(text);
        Part {
            index: index.to_owned(),
            range,
        }
    };
    if !plan.ids.is_empty() {
        // At most 16 ids: primary-key lookups, whatever else the search asks (checked on the
        // rows), never a walk from the newest job down to them.
        let mut p = part("PRIMARY", "j.id IN (");
        for (i, id) in plan.ids.iter().enumerate() {
            if i > 0 {
                p.range.push(", ");
            }
            p.range.bind(Bind::U64(*id));
        }
        p.range.push(")");
        return (Walk::Ids, vec![p]);
    }
    let due_states = [
        O::Waiting,
        O::Ready,
        O::RateLimited,
        O::Scheduled,
        O::Retrying,
    ];
    if !s.is_empty() && s.iter().all(|st| due_states.contains(st)) {
        let mut parts = Vec::new();
        if s.contains(&O::Waiting) {
            parts.push(part(
                "idx_job_recover",
                "j.status = 'waiting' AND j.lease_expires_at IS NULL",
            ));
        }
        let pending: Vec<_> = s
            .iter()
            .filter(|st| st.status() == JobState::Pending)
            .collect();
        if !pending.is_empty() {
            let mut p = part(
                "idx_job_recover",
                "j.status = 'pending' AND j.lease_expires_at IS NULL",
            );
            if pending.iter().all(|st| **st == O::Ready) {
                p.range.push(" AND j.available_at <= ").bind(Bind::Ts(now));
            } else if pending
                .iter()
                .all(|st| matches!(st, O::Scheduled | O::Retrying))
            {
                p.range.push(" AND j.available_at > ").bind(Bind::Ts(now));
            }
            parts.push(p);
        }
        if s.contains(&O::Ready) {
            // Relayed rows: in a Redis stream, not taken yet (few; sorted).
            parts.push(part("idx_job_recover", "j.status = 'processing'"));
        }
        for p in &mut parts {
            sql::bounds(&mut p.range, "j.available_at", &plan.due);
        }
        return (Walk::Due, parts);
    }
    let finished = [O::Completed, O::Failed, O::Cancelled];
    if !s.is_empty() && s.iter().all(|st| finished.contains(st)) {
        let parts = finished
            .iter()
            .filter(|st| s.contains(st))
            .map(|st| {
                let mut p = part("idx_job_finished", "j.status = ");
                p.range.bind(Bind::Str(st.as_str().to_owned()));
                sql::bounds(&mut p.range, "j.finished_at", &plan.finished);
                p
            })
            .collect();
        return (Walk::Finished, parts);
    }
    if s == &[O::Running] {
        return (
            Walk::Ids,
            vec![part("idx_job_recover", "j.status = 'processing'")],
        );
    }
    (Walk::Ids, vec![part("PRIMARY", "TRUE")])
}

/// `(time, id)` of a position in a walk, the time in µs.
type Pos = (i64, u64);

fn ts_of_us(us: i64) -> Timestamp {
    chrono::DateTime::from_timestamp_micros(us).unwrap_or_default()
}

/// `AND` the keyset condition: strictly after `pos` in the walk's order.
fn after(s: &mut Sql, walk: Walk, pos: Pos) {
    keyset(s, walk, pos, true);
}

/// `AND` the floor: not past `pos` in the walk's order (inclusive).
fn not_past(s: &mut Sql, walk: Walk, pos: Pos) {
    keyset(s, walk, pos, false);
}

/// `AND` a position bound in the walk's order: strictly after `pos` (`after`), or up to and
/// including it. Spelled out (`t > ? OR (t = ? AND id > ?)`), not as a row constructor, which
/// MariaDB plans as a full range.
fn keyset(s: &mut Sql, walk: Walk, pos: Pos, after: bool) {
    // Ascending walks go up from a cursor and stop below a floor; descending ones the reverse.
    let up = walk.ascending() == after;
    let (lt, op) = match (up, after) {
        (true, true) => (">", ">"),
        (false, true) => ("<", "<"),
        (true, false) => (">", ">="),
        (false, false) => ("<", "<="),
    };
    match walk.time_column() {
        None => {
            s.push(&format!(" AND j.id {op} ")).bind(Bind::U64(pos.1));
        }
        Some(col) => {
            let t = ts_of_us(pos.0);
            s.push(&format!(" AND ({col} {lt} "))
                .bind(Bind::Ts(t))
                .push(&format!(" OR ({col} = "))
                .bind(Bind::Ts(t))
                .push(&format!(" AND j.id {op} "))
                .bind(Bind::U64(pos.1))
                .push("))");
        }
    }
}

/// The walk's order: on the columns inside a part (so the index gives it), on the selected
/// `t, id` when merging parts.
fn order(walk: Walk, merged: bool) -> String {
    let (t, id) = if merged {
        ("w.t", "w.id")
    } else {
        (walk.time_column().unwrap_or("j.id"), "j.id")
    };
    match walk {
        Walk::Due => format!("{t}, {id}"),
        Walk::Finished => format!("{t} DESC, {id} DESC"),
        Walk::Ids => format!("{id} DESC"),
    }
}

fn select_pos(walk: Walk) -> String {
    let t = walk.time_column().map_or_else(
        || "0".to_owned(),
        |c| format!("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {c})"),
    );
    format!("SELECT {t} AS t, j.id AS id")
}

mod act;
mod field;
mod run;

pub use act::{Action, Actor, BulkState, audit_bulk_state, job_act_chunk};

#[cfg(feature = "__internal-store")]
pub use run::search_explain;
pub use run::{count_matching, search};
