//! The search syntax of the dashboard and `mysqlq-cli jobs …`: [`Filter::parse`] turns
//! `state:retrying kind:send_email args.order_id:42 finished:<2h` into a typed [`Filter`], and
//! [`Filter`]'s `Display` writes it back in a canonical form (URLs, audit details, CLI
//! commands). Pure: no database access; `store/search` plans the statements from a `Filter`.
//!
//! `docs/design/dashboard.md` §3.1 is the specification. Terms are separated by whitespace and
//! ANDed (at most [`MAX_TERMS`]); a term is `qualifier:values`, or a bare number (`id:<n>`).
//! Values are separated by `,` and ORed (at most [`MAX_VALUES`], each at most
//! [`MAX_VALUE_CHARS`] characters); a value is bare or quoted (`"New York"`, with `\"` and `\\`).
//! Inside one term values keep the order written, repeats dropped.
//!
//! | qualifier | values |
//! |---|---|
//! | `id`, `workflow` | numbers (`job_queue.id`, `workflow_id`) |
//! | `state` | the [`OpState`] names and the aliases `pending`, `processing` |
//! | `queue`, `kind`, `worker` | names, matched exactly (`worker` is `locked_by`) |
//! | `error` | a substring of `last_error` |
//! | `priority`, `attempts` | one [`NumRange`]: `3`, `>3`, `>=3`, `<3`, `<=3`, `1..5` (inclusive) |
//! | `created`, `due`, `finished` | one [`TimeRange`]: `>2h` (after now − 2h), `<=`, `a..b`, … |
//! | `args.<path>`, `meta.<path>` | a [`FieldTerm`]: the scalar's text at the path, or `*` |

use std::fmt::{self, Write as _};
use std::ops::Range;
use std::str::FromStr;
use std::time::Duration;

use chrono::{NaiveTime, SecondsFormat, SubsecRound, TimeDelta, Utc};

use crate::Error;
use crate::job_id::JobId;
use crate::state::{OpState, Timestamp};

mod parse;
#[cfg(test)]
mod tests;

/// The most terms a search ANDs.
pub const MAX_TERMS: usize = 8;
/// The most values one term ORs.
pub const MAX_VALUES: usize = 16;
/// The longest value, in characters (an indexed `VARCHAR(191)` holds it).
pub const MAX_VALUE_CHARS: usize = 191;
/// The most segments of an `args.`/`meta.` path.
pub const MAX_SEGMENTS: usize = 8;
/// The qualifiers, in canonical order (also the order of the terms `Display` writes).
const QUALIFIERS: [&str; 12] = [
    "id", "state", "queue", "kind", "worker", "priority", "attempts", "workflow", "error",
    "created", "due", "finished",
];

/// A parsed search: every non-empty part must match (AND), and a job matches a part when it
/// matches one of its values (OR). The default filter is empty and matches every job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    /// `id:`, or bare numbers: the jobs' ids.
    pub ids: Vec<JobId>,
    /// `state:`: aliases expanded (`pending` is ready, rate-limited, scheduled, retrying).
    pub states: Vec<OpState>,
    /// `queue:`: `queue_name`, exactly.
    pub queues: Vec<String>,
    /// `kind:`: `kind`, exactly.
    pub kinds: Vec<String>,
    /// `worker:`: `locked_by`, exactly.
    pub workers: Vec<String>,
    /// `priority:`.
    pub priority: Option<NumRange>,
    /// `attempts:`.
    pub attempts: Option<NumRange>,
    /// `workflow:`: `workflow_id` (a `WorkflowId`'s number).
    pub workflows: Vec<u64>,
    /// `error:`: substrings of `last_error` (see [`like_substring`]).
    pub errors: Vec<String>,
    /// `created:`: `created_at`.
    pub created: Option<TimeRange>,
    /// `due:`: `available_at`.
    pub due: Option<TimeRange>,
    /// `finished:`: `finished_at`.
    pub finished: Option<TimeRange>,
    /// `args.<path>:` and `meta.<path>:` terms, in the order written.
    pub fields: Vec<FieldTerm>,
}

/// An inclusive range of integers: `3` is `3..3`, `>3` is `4..=i64::MAX`, `<=3` is
/// `i64::MIN..=3`, `1..5` is 1 to 5 with both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NumRange {
    /// The smallest number matched (`i64::MIN`: no lower bound).
    pub min: i64,
    /// The largest number matched (`i64::MAX`: no upper bound).
    pub max: i64,
}

/// A time a [`TimeRange`] compares with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeBound {
    /// `2h`: this long before the `now` given to [`TimeRange::resolve`] (whole seconds).
    Relative(Duration),
    /// `2026-12-05T10:00:00Z`: an instant (parsed to whole microseconds).
    Absolute(Timestamp),
}

/// A range of times, as written; [`resolve`](Self::resolve) turns it into bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeRange {
    /// `>x`: after `x`.
    After(TimeBound),
    /// `>=x`: at `x` or after.
    AtOrAfter(TimeBound),
    /// `<x`: before `x`.
    Before(TimeBound),
    /// `<=x`: at `x` or before.
    AtOrBefore(TimeBound),
    /// `a..b`: from `a` (included) to `b` (excluded), so `2026-12-01..2026-12-02` is one day.
    Between(TimeBound, TimeBound),
}

/// An `args.<path>:values` or `meta.<path>:values` term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldTerm {
    /// The JSON column searched.
    pub source: Source,
    /// The path into it: 1 to [`MAX_SEGMENTS`] segments.
    pub path: Vec<Segment>,
    /// The values, ORed.
    pub values: Vec<FieldValue>,
}

/// The JSON column an `args.`/`meta.` term reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// `args.`: the job's arguments, `job_queue.payload`.
    Args,
    /// `meta.`: the job's meta, `job_queue.meta`.
    Meta,
}

/// One step of a JSON path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// An object member: a bare `[A-Za-z0-9_-]+` that is not all digits, or any quoted text.
    Key(String),
    /// An array element: a bare segment of digits.
    Index(u32),
}

/// A value of a [`FieldTerm`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FieldValue {
    /// A bare `*`: the path exists (a quoted `"*"` is the text `*`).
    Exists,
    /// The scalar's text at the path equals this, case-sensitive (a string unquoted, a number
    /// as the server writes it).
    Text(String),
}

/// Why a search was refused: the message (as `Display`), and the token at fault with its byte
/// span in the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    span: Range<usize>,
    token: String,
    message: String,
}

impl Filter {
    /// Parses a search (see the module's documentation); blank input is the empty filter.
    ///
    /// # Errors
    ///
    /// [`FilterError`] naming the first token at fault and what to write instead.
    pub fn parse(input: &str) -> Result<Self, FilterError> {
        parse::parse(input)
    }

    /// `true` when nothing is filtered: every job matches.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// `true` when a part needs the row, not only an index entry (§3.3's row filters:
    /// `args.`, `meta.`, `worker`, `error`, `created`, `priority`, `workflow`). `state` is a row
    /// filter on the `PRIMARY` walk only, so it is left to the planner.
    pub fn has_row_filters(&self) -> bool {
        !(self.fields.is_empty() && self.workers.is_empty() && self.errors.is_empty())
            || self.created.is_some()
            || self.priority.is_some()
            || !self.workflows.is_empty()
    }
}

impl FromStr for Filter {
    type Err = FilterError;

    fn from_str(s: &str) -> Result<Self, FilterError> {
        Self::parse(s)
    }
}

impl NumRange {
    /// The bounds, `None` for an open end: `(Some(4), None)` for `>3`.
    pub fn bounds(&self) -> (Option<i64>, Option<i64>) {
        let open = |n: i64, end: i64| (n != end).then_some(n);
        (open(self.min, i64::MIN), open(self.max, i64::MAX))
    }

    /// Whether `n` is in the range.
    pub fn contains(&self, n: i64) -> bool {
        (self.min..=self.max).contains(&n)
    }
}

impl TimeBound {
    /// The instant at `now`, rounded down to the microsecond (the columns' precision).
    pub fn at(&self, now: Timestamp) -> Timestamp {
        match *self {
            Self::Relative(d) => TimeDelta::from_std(d)
                .ok()
                .and_then(|d| now.checked_sub_signed(d))
                .unwrap_or(chrono::DateTime::<Utc>::MIN_UTC),
            Self::Absolute(t) => t,
        }
        .trunc_subsecs(6)
    }
}

impl TimeRange {
    /// The bounds at `now` (the database's clock): a time `t` matches when `lo <= t` (if `lo`
    /// is given) and `t < hi` (if `hi` is given). `>x` becomes `lo = x + 1 µs` and `<=x`
    /// becomes `hi = x + 1 µs`, exact for the columns' microseconds.
    pub fn resolve(&self, now: Timestamp) -> (Option<Timestamp>, Option<Timestamp>) {
        let next = |b: &TimeBound| b.at(now) + TimeDelta::microseconds(1);
        match self {
            Self::After(b) => (Some(next(b)), None),
            Self::AtOrAfter(b) => (Some(b.at(now)), None),
            Self::Before(b) => (None, Some(b.at(now))),
            Self::AtOrBefore(b) => (None, Some(next(b))),
            Self::Between(a, b) => (Some(a.at(now)), Some(b.at(now))),
        }
    }
}

impl Source {
    /// `args` or `meta`, as written in a search.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Args => "args",
            Self::Meta => "meta",
        }
    }

    /// The `job_queue` column: `payload` or `meta`.
    pub fn column(self) -> &'static str {
        match self {
            Self::Args => "payload",
            Self::Meta => "meta",
        }
    }
}

impl FieldTerm {
    /// The MySQL/MariaDB JSON path of [`path`](Self::path): `$."order_id"[0]."sku"`, every key
    /// quoted with `"`, `\` and control characters escaped. **Always bind it as a parameter**
    /// (`JSON_EXTRACT(payload, ?)`), never format it into SQL.
    pub fn json_path(&self) -> String {
        let mut out = String::from("$");
        for seg in &self.path {
            match seg {
                Segment::Key(k) => {
                    out.push_str(".\"");
                    for c in k.chars() {
                        if c.is_control() {
                            let _ = write!(out, "\\u{:04x}", u32::from(c));
                            continue;
                        }
                        if c == '"' || c == '\\' {
                            out.push('\\');
                        }
                        out.push(c);
                    }
                    out.push('"');
                }
                Segment::Index(i) => {
                    let _ = write!(out, "[{i}]");
                }
            }
        }
        out
    }

    /// The term's qualifier in canonical form (`args.order_id`, `meta."a b".0`): the name of
    /// a declared search field (`mysqlq_search_field.path`).
    pub fn qualifier(&self) -> String {
        let mut out = self.source.as_str().to_owned();
        for seg in &self.path {
            out.push('.');
            match seg {
                Segment::Key(k) if is_plain(k) && !k.bytes().all(|b| b.is_ascii_digit()) => {
                    out.push_str(k)
                }
                Segment::Key(k) => push_quoted(&mut out, k),
                Segment::Index(i) => {
                    let _ = write!(out, "{i}");
                }
            }
        }
        out
    }

    /// `true` when a value is `*`: the term matches every job whose path exists.
    pub fn tests_existence(&self) -> bool {
        self.values.contains(&FieldValue::Exists)
    }

    /// The texts compared with the scalar at the path.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.values.iter().filter_map(|v| match v {
            FieldValue::Text(t) => Some(t.as_str()),
            FieldValue::Exists => None,
        })
    }
}

/// `%text%` for `last_error LIKE ? ESCAPE '!'`, with `!`, `%` and `_` escaped by `!` (not `\`,
/// whose meaning in a literal depends on `NO_BACKSLASH_ESCAPES`). Bound, never formatted.
pub fn like_substring(text: &str) -> String {
    let mut out = String::from("%");
    for c in text.chars() {
        if matches!(c, '!' | '%' | '_') {
            out.push('!');
        }
        out.push(c);
    }
    out.push('%');
    out
}

impl FilterError {
    /// The byte range of [`token`](Self::token) in the input.
    pub fn span(&self) -> Range<usize> {
        self.span.clone()
    }

    /// The text at fault: a qualifier, a value, a term.
    pub fn token(&self) -> &str {
        &self.token
    }
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FilterError {}

impl From<FilterError> for Error {
    fn from(e: FilterError) -> Self {
        Self::invalid("search", e.message)
    }
}

impl fmt::Display for Filter {
    /// The canonical form: qualifiers in a fixed order (`id`, `state`, …, `finished`, then the
    /// `args.`/`meta.` terms as written), values quoted only when needed; parsing it gives back
    /// the same `Filter`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let texts = |v: &[String]| v.iter().map(|s| quote(s, false)).collect::<Vec<_>>();
        let one = |v: Option<String>| v.into_iter().collect::<Vec<_>>();
        let pending = OpState::named("pending").unwrap_or_default();
        let mut states = Vec::new();
        let mut rest = &self.states[..];
        while let Some((first, tail)) = rest.split_first() {
            if !pending.is_empty() && rest.starts_with(&pending) {
                states.push("pending".to_owned());
                rest = &rest[pending.len()..];
            } else {
                states.push(first.as_str().to_owned());
                rest = tail;
            }
        }
        let terms: [(&str, Vec<String>); 12] = [
            ("id", self.ids.iter().map(JobId::to_string).collect()),
            ("state", states),
            ("queue", texts(&self.queues)),
            ("kind", texts(&self.kinds)),
            ("worker", texts(&self.workers)),
            ("priority", one(self.priority.map(|r| r.to_string()))),
            ("attempts", one(self.attempts.map(|r| r.to_string()))),
            (
                "workflow",
                self.workflows.iter().map(u64::to_string).collect(),
            ),
            ("error", texts(&self.errors)),
            ("created", one(self.created.map(|r| r.to_string()))),
            ("due", one(self.due.map(|r| r.to_string()))),
            ("finished", one(self.finished.map(|r| r.to_string()))),
        ];
        let fields = self.fields.iter().map(|t| {
            let values = t.values.iter().map(|v| match v {
                FieldValue::Exists => "*".to_owned(),
                FieldValue::Text(s) => quote(s, true),
            });
            (t.qualifier(), values.collect::<Vec<_>>())
        });
        let terms = terms
            .into_iter()
            .map(|(q, v)| (q.to_owned(), v))
            .chain(fields);
        let mut sep = "";
        for (q, values) in terms.filter(|(_, v)| !v.is_empty()) {
            write!(f, "{sep}{q}:{}", values.join(","))?;
            sep = " ";
        }
        Ok(())
    }
}

impl fmt::Display for NumRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.min, self.max) {
            (a, b) if a == b => write!(f, "{a}"),
            (i64::MIN, b) => write!(f, "<={b}"),
            (a, i64::MAX) => write!(f, ">={a}"),
            (a, b) => write!(f, "{a}..{b}"),
        }
    }
}

impl fmt::Display for TimeBound {
    /// A duration in its largest whole unit (`90m` is `90m`, `120m` is `2h`); an instant as a
    /// date at midnight, else RFC 3339 in UTC.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Relative(d) => {
                let s = d.as_secs();
                let units = [(86_400, 'd'), (3600, 'h'), (60, 'm')];
                let unit = units.into_iter().find(|&(n, _)| s > 0 && s % n == 0);
                let (n, u) = unit.map_or((s, 's'), |(n, u)| (s / n, u));
                write!(f, "{n}{u}")
            }
            Self::Absolute(t) if t.time() == NaiveTime::MIN => {
                write!(f, "{}", t.format("%Y-%m-%d"))
            }
            Self::Absolute(t) => f.write_str(&t.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
        }
    }
}

impl fmt::Display for TimeRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::After(b) => write!(f, ">{b}"),
            Self::AtOrAfter(b) => write!(f, ">={b}"),
            Self::Before(b) => write!(f, "<{b}"),
            Self::AtOrBefore(b) => write!(f, "<={b}"),
            Self::Between(a, b) => write!(f, "{a}..{b}"),
        }
    }
}

/// `[A-Za-z0-9_-]+`.
fn is_plain(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `s` as a value: quoted when it is empty, holds whitespace, `,` or `"`, or (`star`) is `*`.
fn quote(s: &str, star: bool) -> String {
    let special = |c: char| c.is_whitespace() || c == ',' || c == '"';
    if s.is_empty() || (star && s == "*") || s.chars().any(special) {
        let mut out = String::new();
        push_quoted(&mut out, s);
        out
    } else {
        s.to_owned()
    }
}

/// `s` in quotes, `"` and `\` escaped.
fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}
