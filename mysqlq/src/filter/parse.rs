//! The parser of [`Filter::parse`]: terms, values, quotes and paths, each error naming its
//! token.

use std::ops::Range;
use std::time::Duration;

use chrono::{NaiveDate, SubsecRound, TimeZone, Utc};

use super::{
    FieldTerm, FieldValue, Filter, FilterError, MAX_SEGMENTS, MAX_TERMS, MAX_VALUE_CHARS,
    MAX_VALUES, NumRange, QUALIFIERS, Segment, Source, TimeBound, TimeRange, is_plain, push_quoted,
};
use crate::Error;
use crate::job_id::JobId;
use crate::state::OpState;

/// The longest duration, in seconds (36,500 days).
pub(super) const MAX_DURATION_SECS: u64 = 36_500 * 86_400;

/// Parses a search; see [`Filter::parse`].
pub(super) fn parse(input: &str) -> Result<Filter, FilterError> {
    let mut f = Filter::default();
    let mut seen: Vec<(String, String)> = Vec::new();
    for (n, (at, term)) in split_unquoted(input, None).into_iter().enumerate() {
        let cx = Cx { input, term, at };
        if n == MAX_TERMS {
            let msg = format!(
                "more than {MAX_TERMS} terms at `{term}`; give one qualifier several values \
                 instead: `kind:a,b`"
            );
            return Err(cx.err(0..term.len(), msg));
        }
        if let Some(open) = open_quote(term) {
            let msg = format!("unterminated quote in `{term}`: close it with `\"`");
            return Err(cx.err(open..term.len(), msg));
        }
        let (q, values) = match find_unquoted(term, b':') {
            Some(c) => (&term[..c], c + 1),
            None if term.bytes().all(|b| b.is_ascii_digit()) => ("id", 0),
            None => return Err(cx.err(0..term.len(), bare_word(term))),
        };
        let field = if q.starts_with("args") || q.starts_with("meta") {
            let (source, path) = cx.path(q)?;
            Some(FieldTerm {
                source,
                path,
                values: Vec::new(),
            })
        } else if !QUALIFIERS.contains(&q) {
            return Err(cx.unknown(q, &term[values..]));
        } else {
            None
        };
        let key = field
            .as_ref()
            .map_or_else(|| q.to_owned(), FieldTerm::qualifier);
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
            let fix = match q {
                "priority" | "attempts" => format!("it takes one value or range: `{q}:1..5`"),
                "created" | "due" | "finished" => {
                    format!("it takes one comparison or range: `{q}:>2h`, `{q}:7d..1d`")
                }
                _ => format!(
                    "write one term with both values: `{q}:{first},{}`",
                    &term[values..]
                ),
            };
            let span = if values == 0 {
                0..term.len()
            } else {
                0..q.len()
            };
            return Err(cx.err(span, format!("`{key}` is given twice; {fix}")));
        }
        seen.push((key, term[values..].to_owned()));
        let vals = cx.values(values)?;
        let one = || match &vals[..] {
            [v] => Ok(v),
            _ => {
                let forms = match q {
                    "priority" | "attempts" => "n, >n, >=n, <n, <=n or a..b",
                    _ => ">2h, >=2h, <2h, <=2h (or a time) or a..b",
                };
                let n = vals.len();
                let msg = format!("`{term}` has {n} values; `{q}` takes one: {forms}");
                Err(cx.err(vals[1].1.clone(), msg))
            }
        };
        match q {
            "id" => cx.each(&vals, &mut f.ids, |v| v.parse().ok().map(JobId), "a job id")?,
            "workflow" => cx.each(&vals, &mut f.workflows, |v| v.parse().ok(), "a workflow id")?,
            "state" => {
                for (v, span) in &vals {
                    for s in OpState::named(v)
                        .map_err(|e| cx.err(span.clone(), state_message(e, v, term)))?
                    {
                        push_unique(&mut f.states, s);
                    }
                }
            }
            "queue" => cx.each(&vals, &mut f.queues, |v| Some(v.to_owned()), "")?,
            "kind" => cx.each(&vals, &mut f.kinds, |v| Some(v.to_owned()), "")?,
            "worker" => cx.each(&vals, &mut f.workers, |v| Some(v.to_owned()), "")?,
            "error" => cx.each(&vals, &mut f.errors, |v| Some(v.to_owned()), "")?,
            "priority" => f.priority = Some(cx.num_range(one()?)?),
            "attempts" => f.attempts = Some(cx.num_range(one()?)?),
            "created" => f.created = Some(cx.time_range(one()?)?),
            "due" => f.due = Some(cx.time_range(one()?)?),
            "finished" => f.finished = Some(cx.time_range(one()?)?),
            _ => {
                let Some(mut field) = field else { continue };
                for (v, span) in &vals {
                    let star = v == "*" && !term[span.clone()].starts_with('"');
                    push_unique(
                        &mut field.values,
                        if star {
                            FieldValue::Exists
                        } else {
                            FieldValue::Text(v.clone())
                        },
                    );
                }
                f.fields.push(field);
            }
        }
    }
    Ok(f)
}

/// The term being parsed: its text and its byte offset in the input.
struct Cx<'a> {
    input: &'a str,
    term: &'a str,
    at: usize,
}

/// A value, unquoted, with its span in the term.
type Val = (String, Range<usize>);

impl Cx<'_> {
    /// An error at `span` of the term.
    fn err(&self, span: Range<usize>, message: String) -> FilterError {
        let span = self.at + span.start..self.at + span.end;
        FilterError {
            token: self.input[span.clone()].to_owned(),
            span,
            message,
        }
    }

    /// `q` is no qualifier: say so, with a guess and the list.
    fn unknown(&self, q: &str, values: &str) -> FilterError {
        let list = format!("qualifiers: {}, args.…, meta.…", QUALIFIERS.join(", "));
        if q.is_empty() {
            let msg = format!("no qualifier before `:` in `{}`; {list}", self.term);
            return self.err(0..self.term.len(), msg);
        }
        let lower = q.to_ascii_lowercase();
        let close = |k: &&&str| {
            distance(&lower, k) <= k.len().max(lower.len()).min(6) / 3
                || (lower.len() >= 3 && k.starts_with(&lower))
        };
        let fix = match q.split_once('.') {
            Some((head, tail)) => {
                let head = head.to_ascii_lowercase();
                let args = head == "payload" || distance(&head, "args") <= 1;
                let meta = distance(&head, "meta") <= 1;
                (args || meta).then(|| format!("{}.{tail}", if args { "args" } else { "meta" }))
            }
            None => QUALIFIERS.iter().find(close).map(|k| (*k).to_owned()),
        };
        let fix = fix.or_else(|| is_plain(q).then(|| format!("meta.{q}")));
        let fix = fix.map_or_else(String::new, |s| format!(" did you mean `{s}:{values}`?"));
        let msg = format!("unknown qualifier `{q}` in `{}`;{fix} {list}", self.term);
        self.err(0..q.len(), msg)
    }

    /// The path of an `args.`/`meta.` qualifier.
    fn path(&self, q: &str) -> Result<(Source, Vec<Segment>), FilterError> {
        let parts = split_unquoted(q, Some(b'.'));
        let source = match parts.first().map(|p| p.1) {
            Some("args") => Source::Args,
            Some("meta") => Source::Meta,
            _ => return Err(self.unknown(q, &self.term[q.len() + 1..])),
        };
        if parts.len() == 1 {
            return Err(self.err(
                0..q.len(),
                format!(
                    "`{q}` needs a path in `{}`: `{q}.order_id`, `{q}.items.0.sku`",
                    self.term
                ),
            ));
        }
        if parts.len() > MAX_SEGMENTS + 1 {
            return Err(self.err(
                0..q.len(),
                format!(
                    "`{q}` has {} path segments; at most {MAX_SEGMENTS}",
                    parts.len() - 1
                ),
            ));
        }
        let mut path = Vec::new();
        for &(at, raw) in &parts[1..] {
            let text = self.atom(at..at + raw.len())?;
            if text.is_empty() {
                let msg = format!("empty path segment in `{}`", self.term);
                return Err(self.err(0..q.len(), msg));
            }
            let term = self.term;
            path.push(if raw.starts_with('"') {
                Segment::Key(text)
            } else if !is_plain(raw) {
                let mut fix = String::new();
                push_quoted(&mut fix, raw);
                let msg = format!(
                    "`{raw}` in `{term}` is not a path segment: use letters, digits, `_` and \
                     `-`, or quote it: `{fix}`"
                );
                return Err(self.err(at..at + raw.len(), msg));
            } else if raw.bytes().all(|b| b.is_ascii_digit()) {
                let msg = format!("array index `{raw}` in `{term}` is too large");
                Segment::Index(raw.parse().map_err(|_| self.err(at..at + raw.len(), msg))?)
            } else {
                Segment::Key(text)
            });
        }
        Ok((source, path))
    }

    /// The values from byte `from` of the term (after its `:`).
    fn values(&self, from: usize) -> Result<Vec<Val>, FilterError> {
        let mut out = Vec::new();
        for (at, raw) in split_unquoted(&self.term[from..], Some(b',')) {
            let span = from + at..from + at + raw.len();
            if raw.is_empty() {
                let msg = format!(
                    "empty value in `{}`; write a value after `:` and each `,` (`\"\"` is the \
                     empty text)",
                    self.term
                );
                return Err(self.err(0..self.term.len(), msg));
            }
            if out.len() == MAX_VALUES {
                return Err(self.err(
                    span,
                    format!(
                        "`{}` has more than {MAX_VALUES} values; a term ORs at most {MAX_VALUES}",
                        self.term
                    ),
                ));
            }
            let text = self.atom(span.clone())?;
            let chars = text.chars().count();
            if chars > MAX_VALUE_CHARS {
                return Err(self.err(
                    span,
                    format!(
                        "a value of `{}` is {chars} characters; at most {MAX_VALUE_CHARS}",
                        self.term
                    ),
                ));
            }
            out.push((text, span));
        }
        Ok(out)
    }

    /// The text of a bare or quoted atom at `span` of the term.
    fn atom(&self, span: Range<usize>) -> Result<String, FilterError> {
        let raw = &self.term[span.clone()];
        let Some(body) = raw.strip_prefix('"') else {
            if raw.contains('"') {
                let mut fix = String::new();
                push_quoted(&mut fix, raw);
                return Err(self.err(
                    span,
                    format!(
                        "`{raw}` in `{}` has a quote inside; quote the whole value: `{fix}`",
                        self.term
                    ),
                ));
            }
            return Ok(raw.to_owned());
        };
        let (mut out, mut chars) = (String::new(), body.char_indices());
        while let Some((i, c)) = chars.next() {
            match c {
                '"' if i + 2 == raw.len() => return Ok(out),
                '"' => return Err(self.err(
                    span,
                    format!(
                        "`{raw}` in `{}` goes on after its closing quote; separate values with `,`",
                        self.term
                    ),
                )),
                '\\' => match chars.next() {
                    Some((_, e @ ('"' | '\\'))) => out.push(e),
                    e => {
                        let end = span.start + 1 + i + e.map_or(1, |(_, e)| 1 + e.len_utf8());
                        let at = span.start + 1 + i;
                        let msg = format!(
                            "unknown escape `{}` in `{}`; inside quotes write `\\\"` or `\\\\`",
                            &self.term[at..end],
                            self.term
                        );
                        return Err(self.err(at..end, msg));
                    }
                },
                c => out.push(c),
            }
        }
        Err(self.err(
            span.start..self.term.len(),
            format!("unterminated quote in `{}`: close it with `\"`", self.term),
        ))
    }

    /// Each value through `parse`, kept once; `what` names what a value must be.
    fn each<T: PartialEq>(
        &self,
        vals: &[Val],
        into: &mut Vec<T>,
        parse: impl Fn(&str) -> Option<T>,
        what: &str,
    ) -> Result<(), FilterError> {
        for (v, span) in vals {
            let t = parse(v).ok_or_else(|| {
                self.err(
                    span.clone(),
                    format!("`{v}` in `{}` is not {what}", self.term),
                )
            })?;
            push_unique(into, t);
        }
        Ok(())
    }

    /// `3`, `>3`, `>=3`, `<3`, `<=3` or `1..5`.
    fn num_range(&self, (v, span): &Val) -> Result<NumRange, FilterError> {
        let bad = |why: &str| self.err(span.clone(), format!("`{v}` in `{}` {why}", self.term));
        let num = |s: &str| {
            let why = "is not a number or a range (3, >3, >=3, <3, <=3, 1..5)";
            s.parse::<i64>().map_err(|_| bad(why))
        };
        let (min, max) = match v.split_once("..") {
            Some((a, b)) => (num(a)?, num(b)?),
            None => match split_op(v) {
                (">=", n) => (num(n)?, i64::MAX),
                (">", n) => (
                    num(n)?
                        .checked_add(1)
                        .ok_or_else(|| bad("matches no number"))?,
                    i64::MAX,
                ),
                ("<=", n) => (i64::MIN, num(n)?),
                ("<", n) => (
                    i64::MIN,
                    num(n)?
                        .checked_sub(1)
                        .ok_or_else(|| bad("matches no number"))?,
                ),
                (_, n) => (num(n)?, num(n)?),
            },
        };
        if min > max {
            return Err(bad("is an empty range; write the smaller number first"));
        }
        Ok(NumRange { min, max })
    }

    /// `>x`, `>=x`, `<x`, `<=x` or `a..b`, each `x` a duration or an instant.
    fn time_range(&self, (v, span): &Val) -> Result<TimeRange, FilterError> {
        let quoted = self.term[span.clone()].starts_with('"');
        let bound = |s: &str, at: usize| {
            time_bound(s).ok_or_else(|| {
                let what = "a duration (30s, 15m, 2h, 7d) nor a time (2026-12-05T10:00:00Z)";
                let at = span.start + at;
                let term = self.term;
                if s.is_empty() || quoted {
                    self.err(
                        span.clone(),
                        format!("`{v}` in `{term}` has neither {what}"),
                    )
                } else {
                    self.err(
                        at..at + s.len(),
                        format!("`{s}` in `{term}` is neither {what}"),
                    )
                }
            })
        };
        let r = match v.split_once("..") {
            Some((a, b)) => TimeRange::Between(bound(a, 0)?, bound(b, a.len() + 2)?),
            None => match split_op(v) {
                (">", s) => TimeRange::After(bound(s, 1)?),
                (">=", s) => TimeRange::AtOrAfter(bound(s, 2)?),
                ("<", s) => TimeRange::Before(bound(s, 1)?),
                ("<=", s) => TimeRange::AtOrBefore(bound(s, 2)?),
                (_, s) => {
                    bound(s, 0)?;
                    let msg = format!(
                        "`{v}` in `{}` needs a comparison (`>{v}` after, `<{v}` before, `>=`, \
                         `<=`) or a range `a..b`",
                        self.term
                    );
                    return Err(self.err(span.clone(), msg));
                }
            },
        };
        let empty = match r {
            TimeRange::Between(TimeBound::Relative(a), TimeBound::Relative(b)) => a <= b,
            TimeRange::Between(TimeBound::Absolute(a), TimeBound::Absolute(b)) => a >= b,
            _ => false,
        };
        if empty {
            let term = self.term;
            let msg = format!("`{v}` in `{term}` is an empty range; write the earlier time first");
            return Err(self.err(span.clone(), msg));
        }
        Ok(r)
    }
}

/// A comparison's operator (`>=`, `<=`, `>`, `<` or none) and the rest.
fn split_op(v: &str) -> (&str, &str) {
    [">=", "<=", ">", "<"]
        .into_iter()
        .find_map(|op| Some((op, v.strip_prefix(op)?)))
        .unwrap_or(("", v))
}

/// `30s`, `15m`, `2h`, `7d`; RFC 3339; or `YYYY-MM-DD[THH:MM[:SS]]` in UTC.
fn time_bound(s: &str) -> Option<TimeBound> {
    let unit = match s.as_bytes().last() {
        Some(b's') => 1,
        Some(b'm') => 60,
        Some(b'h') => 3600,
        Some(b'd') => 86_400,
        _ => 0,
    };
    // The unit is one ASCII byte, so cutting it off leaves whole characters.
    let digits = if unit > 0 { &s[..s.len() - 1] } else { "" };
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        let secs = digits.parse::<u64>().ok().and_then(|n| n.checked_mul(unit));
        return secs
            .filter(|&n| n <= MAX_DURATION_SECS)
            .map(|n| TimeBound::Relative(Duration::from_secs(n)));
    }
    let t = chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            let b = s.as_bytes();
            let shape = |i: usize, sep: u8| b.get(i) == Some(&sep);
            let ok = matches!(b.len(), 10 | 16 | 19)
                && shape(4, b'-')
                && shape(7, b'-')
                && (b.len() == 10 || shape(10, b'T') && shape(13, b':'))
                && (b.len() < 19 || shape(16, b':'));
            let num = |r: Range<usize>| {
                s.get(r)
                    .filter(|d| d.bytes().all(|c| c.is_ascii_digit()))
                    .and_then(|d| d.parse::<u32>().ok())
            };
            let n = |r: Range<usize>, absent: bool| if absent { Some(0) } else { num(r) };
            let date =
                NaiveDate::from_ymd_opt(i32::try_from(num(0..4)?).ok()?, num(5..7)?, num(8..10)?)?;
            let t = date.and_hms_opt(
                n(11..13, b.len() == 10)?,
                n(14..16, b.len() == 10)?,
                n(17..19, b.len() < 19)?,
            )?;
            ok.then(|| Utc.from_utc_datetime(&t))
        })?;
    Some(TimeBound::Absolute(t.trunc_subsecs(6)))
}

/// The refusal of a bare word.
fn bare_word(w: &str) -> String {
    format!(
        "bare words are not searched (that would read every payload); write `kind:{w}`, \
         `args.<path>:{w}` or `error:{w}`"
    )
}

/// The error of `state:<name>`: [`OpState::named`]'s message, naming the term.
fn state_message(e: Error, name: &str, term: &str) -> String {
    let reason = match e {
        Error::Invalid { reason, .. } => reason,
        e => e.to_string(),
    };
    let head = format!("unknown state `{name}`");
    match reason.strip_prefix(&head) {
        Some(rest) => format!("{head} in `{term}`{rest}"),
        None => format!("{reason} (in `{term}`)"),
    }
}

/// The pieces of `s` between separators outside quotes (`sep = None`: whitespace, empty pieces
/// dropped), with their byte offsets. An unclosed quote runs to the end.
fn split_unquoted(s: &str, sep: Option<u8>) -> Vec<(usize, &str)> {
    let (mut out, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in s.char_indices().chain([(s.len(), ' ')]) {
        if quoted && i < s.len() {
            (escaped, quoted) = (!escaped && c == '\\', quoted && (escaped || c != '"'));
        } else if c == '"' {
            quoted = true;
        } else if sep.map_or(c.is_whitespace(), |b| c == char::from(b)) || i == s.len() {
            if sep.is_some() || i > start {
                out.push((start, &s[start..i]));
            }
            start = i + c.len_utf8();
        }
    }
    out
}

/// The byte offset of a quote left open at the end of `s`.
fn open_quote(s: &str) -> Option<usize> {
    let (mut open, mut escaped) = (None, false);
    for (i, c) in s.char_indices() {
        match open {
            Some(_) if escaped => escaped = false,
            Some(_) if c == '\\' => escaped = true,
            Some(_) if c == '"' => open = None,
            None if c == '"' => open = Some(i),
            _ => {}
        }
    }
    open
}

/// The byte offset of the first `b` outside quotes.
fn find_unquoted(s: &str, b: u8) -> Option<usize> {
    let first = split_unquoted(s, Some(b)).into_iter().next()?;
    (first.1.len() < s.len()).then_some(first.1.len())
}

fn push_unique<T: PartialEq>(v: &mut Vec<T>, t: T) {
    if !v.contains(&t) {
        v.push(t);
    }
}

/// Levenshtein distance, for "did you mean".
fn distance(a: &str, b: &str) -> usize {
    let mut row: Vec<usize> = (0..=b.chars().count()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = std::mem::replace(&mut row[0], i + 1);
        for (j, cb) in b.chars().enumerate() {
            let next = (prev + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            prev = std::mem::replace(&mut row[j + 1], next);
        }
    }
    row[row.len() - 1]
}
