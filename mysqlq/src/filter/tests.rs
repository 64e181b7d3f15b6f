//! Tests of `filter`: the error table of `docs/design/dashboard.md` §3.1 and more refusals (each
//! naming its token, at the right span), every qualifier's happy path, quoting, limits, time
//! forms and their resolution, the canonical form, and seeded round trips
//! (`parse(display(f)) == f`) and garbage that must never panic.

use std::time::Duration;

use chrono::{NaiveTime, TimeDelta, TimeZone, Utc};

use super::parse::MAX_DURATION_SECS;
use super::{
    FieldTerm, FieldValue, Filter, FilterError, MAX_SEGMENTS, MAX_TERMS, MAX_VALUE_CHARS, NumRange,
    Segment, Source, TimeBound, TimeRange, like_substring,
};
use crate::state::{OpState, Timestamp};
use crate::{Error, JobId};

fn ok(input: &str) -> Filter {
    Filter::parse(input).unwrap_or_else(|e| panic!("{input:?} was refused: {e}"))
}

fn refusal(input: &str) -> FilterError {
    match Filter::parse(input) {
        Ok(f) => panic!("{input:?} was accepted as {f:?}"),
        Err(e) => spans_its_token(input, e),
    }
}

/// `e`, after checking that its span holds its token.
fn spans_its_token(input: &str, e: FilterError) -> FilterError {
    assert_eq!(input.get(e.span()), Some(e.token()), "{input:?}: {e:?}");
    e
}

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> Timestamp {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

fn canonical(input: &str) -> String {
    ok(input).to_string()
}

/// The table of `docs/design/dashboard.md` §3.1, one case a line: `input ⇒ token ⇒ message`.
const DESIGN_TABLE: &str = r#"
tenant:acme ⇒ tenant ⇒ unknown qualifier `tenant` in `tenant:acme`; did you mean `meta.tenant:acme`? qualifiers: id, state, queue, kind, worker, priority, attempts, workflow, error, created, due, finished, args.…, meta.…
state:done ⇒ done ⇒ unknown state `done` in `state:done`; states: ready, scheduled, retrying, running, waiting, rate-limited, completed, failed, cancelled (aliases: pending, processing)
id:abc ⇒ abc ⇒ `abc` in `id:abc` is not a job id
args.city:"New York ⇒ "New York ⇒ unterminated quote in `args.city:"New York`: close it with `"`
finished:>2x ⇒ 2x ⇒ `2x` in `finished:>2x` is neither a duration (30s, 15m, 2h, 7d) nor a time (2026-12-05T10:00:00Z)
args..id:1 ⇒ args..id ⇒ empty path segment in `args..id:1`
kind:a kind:b ⇒ kind ⇒ `kind` is given twice; write one term with both values: `kind:a,b`
invoice ⇒ invoice ⇒ bare words are not searched (that would read every payload); write `kind:invoice`, `args.<path>:invoice` or `error:invoice`
"#;

/// More refusals, one a line: `input ⇒ token ⇒ a part of the message`.
const REFUSALS: &str = r#"
status:failed ⇒ status ⇒ did you mean `state:failed`?
Kind:x ⇒ Kind ⇒ did you mean `kind:x`?
prio:1 ⇒ prio ⇒ did you mean `priority:1`?
arg.order_id:1 ⇒ arg.order_id ⇒ did you mean `args.order_id:1`?
payload.x:1 ⇒ payload.x ⇒ did you mean `args.x:1`?
argsy:1 ⇒ argsy ⇒ did you mean `meta.argsy:1`?
a$b:1 ⇒ a$b ⇒ unknown qualifier `a$b` in `a$b:1`; qualifiers: id,
:x ⇒ :x ⇒ no qualifier before `:` in `:x`; qualifiers:
args:1 ⇒ args ⇒ `args` needs a path in `args:1`
meta.:1 ⇒ meta. ⇒ empty path segment in `meta.:1`
args."".x:1 ⇒ args."".x ⇒ empty path segment
args.a.b.c.d.e.f.g.h.i:1 ⇒ args.a.b.c.d.e.f.g.h.i ⇒ has 9 path segments; at most 8
args.a$b:1 ⇒ a$b ⇒ `a$b` in `args.a$b:1` is not a path segment: use letters, digits, `_` and `-`, or quote it: `"a$b"`
args.99999999999:1 ⇒ 99999999999 ⇒ array index `99999999999` in `args.99999999999:1` is too large
args."city:x ⇒ "city:x ⇒ unterminated quote in `args."city:x`
kind:foo"bar" ⇒ foo"bar" ⇒ has a quote inside; quote the whole value: `"foo\"bar\""`
kind:"a"b ⇒ "a"b ⇒ goes on after its closing quote; separate values with `,`
kind:"a\nb" ⇒ \n ⇒ unknown escape `\n` in `kind:"a\nb"`; inside quotes write `\"` or `\\`
kind: ⇒ kind: ⇒ empty value in `kind:`
kind:a,,b ⇒ kind:a,,b ⇒ empty value in `kind:a,,b`
kind:a, ⇒ kind:a, ⇒ empty value
99999999999999999999 ⇒ 99999999999999999999 ⇒ is not a job id
id:1,-2 ⇒ -2 ⇒ `-2` in `id:1,-2` is not a job id
workflow:x ⇒ x ⇒ `x` in `workflow:x` is not a workflow id
state:Ready ⇒ Ready ⇒ unknown state `Ready` in `state:Ready`; states:
state:ready,bogus ⇒ bogus ⇒ unknown state `bogus` in `state:ready,bogus`
priority:abc ⇒ abc ⇒ `abc` in `priority:abc` is not a number or a range (3, >3, >=3, <3, <=3, 1..5)
priority:1.. ⇒ 1.. ⇒ is not a number or a range
attempts:> ⇒ > ⇒ is not a number or a range
attempts:5..1 ⇒ 5..1 ⇒ `5..1` in `attempts:5..1` is an empty range; write the smaller number first
priority:>9223372036854775807 ⇒ >9223372036854775807 ⇒ matches no number
priority:<-9223372036854775808 ⇒ <-9223372036854775808 ⇒ matches no number
attempts:1,3 ⇒ 3 ⇒ `attempts:1,3` has 2 values; `attempts` takes one: n, >n, >=n, <n, <=n or a..b
due:>1h,<2h ⇒ <2h ⇒ `due` takes one: >2h
created:2h ⇒ 2h ⇒ `2h` in `created:2h` needs a comparison (`>2h` after, `<2h` before, `>=`, `<=`) or a range `a..b`
created:2026-12-05 ⇒ 2026-12-05 ⇒ needs a comparison
created:1d..7d ⇒ 1d..7d ⇒ `1d..7d` in `created:1d..7d` is an empty range; write the earlier time first
created:2026-12-05..2026-12-01 ⇒ 2026-12-05..2026-12-01 ⇒ is an empty range
created:2026-12-05..2026-12-05 ⇒ 2026-12-05..2026-12-05 ⇒ is an empty range
created:>= ⇒ >= ⇒ `>=` in `created:>=` has neither a duration
created:">x" ⇒ ">x" ⇒ `>x` in `created:">x"` has neither a duration
due:>2026-02-30 ⇒ 2026-02-30 ⇒ is neither a duration
due:<2026-12-05T25:00 ⇒ 2026-12-05T25:00 ⇒ is neither a duration
due:<2026-12-5 ⇒ 2026-12-5 ⇒ is neither a duration
due:>99999999d ⇒ 99999999d ⇒ is neither a duration
due:>5 ⇒ 5 ⇒ is neither a duration
due:>1w ⇒ 1w ⇒ is neither a duration
due:>-1h ⇒ -1h ⇒ is neither a duration
due:>1h😀 ⇒ 1h😀 ⇒ is neither a duration
due:2026-12-01..x ⇒ x ⇒ `x` in `due:2026-12-01..x` is neither
finished:>1h finished:<2h ⇒ finished ⇒ `finished` is given twice; it takes one comparison or range: `finished:>2h`, `finished:7d..1d`
attempts:>1 attempts:<5 ⇒ attempts ⇒ `attempts` is given twice; it takes one value or range: `attempts:1..5`
12 13 ⇒ 13 ⇒ `id` is given twice; write one term with both values: `id:12,13`
id:1 2 ⇒ 2 ⇒ `id` is given twice; write one term with both values: `id:1,2`
args.x:1 args."x":2 ⇒ args."x" ⇒ `args.x` is given twice; write one term with both values: `args."x":1,2`
"invoice" ⇒ "invoice" ⇒ bare words are not searched
-5 ⇒ -5 ⇒ write `kind:-5`
"#;

/// The cases of a table: `(input, token, message)`.
fn cases(table: &str) -> Vec<[&str; 3]> {
    table.lines().filter(|l| !l.is_empty()).map(case).collect()
}

fn case(line: &str) -> [&str; 3] {
    let parts: Vec<&str> = line.split(" ⇒ ").collect();
    <[&str; 3]>::try_from(parts).unwrap_or_else(|p| panic!("not a case: {p:?}"))
}

#[test]
fn the_design_error_table() {
    for [input, token, message] in cases(DESIGN_TABLE) {
        let e = refusal(input);
        assert_eq!(e.to_string(), message, "{input}");
        assert_eq!(e.token(), token, "{input}");
    }
    assert_eq!(refusal("kind:a kind:b").span(), 7..11);
    assert_eq!(refusal("state:ready  id:abc").span(), 16..19);
    assert_eq!(refusal("queue:q args.city:\"New York").span(), 18..27);
}

#[test]
fn more_refusals_name_their_token() {
    let table = cases(REFUSALS);
    assert!(
        table.len() + 8 >= 40,
        "the design asks for at least 40 cases"
    );
    for [input, token, message] in table {
        let e = refusal(input);
        assert_eq!(e.token(), token, "{input}: {e}");
        assert!(e.to_string().contains(message), "{input}: {e}");
    }
    // Different paths are not a repeat, and neither are args and meta.
    assert_eq!(ok("args.x:1 args.y:2 meta.x:3").fields.len(), 3);
}

#[test]
fn limits_terms_values_and_lengths() {
    let eight = "id:1 state:ready queue:q kind:k worker:w priority:1 attempts:1 workflow:1";
    assert_eq!(ok(eight).to_string(), eight);
    let e = refusal(&format!("{eight} error:x"));
    assert_eq!(e.token(), "error:x");
    let msg = e.to_string();
    assert!(msg.starts_with("more than 8 terms at `error:x`"), "{msg}");

    let values = |n: usize| {
        (0..n)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    assert_eq!(ok(&format!("kind:{}", values(16))).kinds.len(), 16);
    let e = refusal(&format!("kind:{}", values(17)));
    assert_eq!(e.token(), "k16");
    assert!(e.to_string().contains("has more than 16 values"), "{e}");

    assert_eq!(ok(&format!("kind:{}", "a".repeat(191))).kinds[0].len(), 191);
    let e = refusal(&format!("kind:x,{}", "a".repeat(192)));
    assert_eq!(e.token(), "a".repeat(192));
    let msg = e.to_string();
    assert!(msg.contains("is 192 characters; at most 191"), "{msg}");
    // Characters, not bytes; quotes and escapes do not count.
    let accented = ok(&format!("args.city:{}", "é".repeat(191)));
    assert_eq!(accented.fields[0].texts().count(), 1);
    ok(&format!("kind:\"{}\\\"\"", "a".repeat(190)));
    assert!(Filter::parse(&format!("kind:\"{}\\\"\"", "a".repeat(191))).is_err());

    assert_eq!(ok("args.a.b.c.d.e.f.g.h:1").fields[0].path.len(), 8);
}

#[test]
fn each_qualifier() {
    use OpState as S;
    assert_eq!(ok("id:3,1,3").ids, [JobId(3), JobId(1)]);
    assert_eq!(ok("42").ids, [JobId(42)]);
    let finished = ok("state:failed,cancelled").states;
    assert_eq!(finished, [S::Failed, S::Cancelled]);
    assert_eq!(ok("state:processing").states, [S::Running]);
    let pending = [S::Ready, S::RateLimited, S::Scheduled, S::Retrying];
    assert_eq!(ok("state:ready,pending").states, pending);
    let held = ok("state:rate-limited,waiting").states;
    assert_eq!(held, [S::RateLimited, S::Waiting]);
    let queues = ok("queue:emails,\"billing:eu\"").queues;
    assert_eq!(queues, ["emails", "billing:eu"]);
    assert_eq!(ok("kind:send_email").kinds, ["send_email"]);
    assert_eq!(ok("worker:host-1:4242:ab").workers, ["host-1:4242:ab"]);
    assert_eq!(ok("workflow:7,9").workflows, [7, 9]);
    let errors = ok("error:\"connection refused\",timeout").errors;
    assert_eq!(errors, ["connection refused", "timeout"]);
    let (min, max) = (i64::MIN, i64::MAX);
    let numbers = [
        ("priority:-10", -10, -10),
        ("priority:-10..-1", -10, -1),
        ("priority:<0", min, -1),
        ("priority:<=0", min, 0),
        ("attempts:>0", 1, max),
        ("attempts:>=2", 2, max),
        ("attempts:1..3", 1, 3),
        ("attempts:3..3", 3, 3),
    ];
    for (input, min, max) in numbers {
        let f = ok(input);
        let want = Some(NumRange { min, max });
        assert_eq!(f.priority.or(f.attempts), want, "{input}");
    }
    let r = ok("attempts:1..3").attempts.unwrap();
    assert!(r.contains(1) && r.contains(3) && !r.contains(4) && !r.contains(0));
    assert_eq!(r.bounds(), (Some(1), Some(3)));
    let bounds = |input| ok(input).attempts.unwrap().bounds();
    assert_eq!(
        (bounds("attempts:>3"), bounds("attempts:<=3")),
        ((Some(4), None), (None, Some(3)))
    );
    let rel = |s| TimeBound::Relative(Duration::from_secs(s));
    let times = [
        ("created:>2h", TimeRange::After(rel(7200))),
        ("due:<=30s", TimeRange::AtOrBefore(rel(30))),
        ("finished:>=15m", TimeRange::AtOrAfter(rel(900))),
        ("finished:<7d", TimeRange::Before(rel(7 * 86_400))),
        (
            "created:7d..1d",
            TimeRange::Between(rel(604_800), rel(86_400)),
        ),
    ];
    for (input, want) in times {
        let f = ok(input);
        assert_eq!(f.created.or(f.due).or(f.finished), Some(want), "{input}");
    }

    let f = ok("args.order_id:42 meta.tenant:acme,beta args.items.0.sku:* args.x:\"*\"");
    let key = |k: &str| Segment::Key(k.to_owned());
    let text = |t: &str| FieldValue::Text(t.to_owned());
    let sources: Vec<_> = f.fields.iter().map(|t| t.source).collect();
    let (args, meta) = (Source::Args, Source::Meta);
    assert_eq!(sources, [args, meta, args, args]);
    assert_eq!(f.fields[0].path, [key("order_id")]);
    assert_eq!(f.fields[0].values, [text("42")]);
    assert_eq!(f.fields[1].values, [text("acme"), text("beta")]);
    let items = [key("items"), Segment::Index(0), key("sku")];
    assert_eq!(f.fields[2].path, items);
    assert_eq!(f.fields[2].values, [FieldValue::Exists]);
    assert_eq!(f.fields[3].values, [text("*")]);
    assert!(f.fields[2].tests_existence() && !f.fields[3].tests_existence());
    assert_eq!(f.fields[1].texts().collect::<Vec<_>>(), ["acme", "beta"]);
    assert_eq!(f.fields[1].source.column(), "meta");
    assert_eq!(f.fields[0].source.column(), "payload");
}

#[test]
fn quoting_and_escapes() {
    let f = ok(r#"args."order id"."0".1:"New York","a,b"  kind:"say \"hi\" \\o/""#);
    assert_eq!(f.kinds, [r#"say "hi" \o/"#]);
    let field = &f.fields[0];
    let key = |k: &str| Segment::Key(k.to_owned());
    assert_eq!(field.path, [key("order id"), key("0"), Segment::Index(1)]);
    assert_eq!(field.texts().collect::<Vec<_>>(), ["New York", "a,b"]);
    assert_eq!(
        f.to_string(),
        r#"kind:"say \"hi\" \\o/" args."order id"."0".1:"New York","a,b""#
    );
    // Quoted text is literal: colons, dots, commas and spaces inside quotes.
    assert_eq!(ok(r#"meta."a.b:c":"x y""#).fields[0].path, [key("a.b:c")]);
    assert_eq!(ok("kind:\"\"").kinds, [""]);
    assert_eq!(canonical("kind:\"\""), "kind:\"\"");
    // A bare backslash is literal; tabs and other whitespace separate terms.
    assert_eq!(ok("kind:a\\b\tqueue:q").kinds, ["a\\b"]);
    assert_eq!(canonical("kind:a\\b"), "kind:a\\b");
    assert_eq!(canonical("kind:\"a\\\\b\""), "kind:a\\b");
    assert_eq!(canonical("kind:\"send_email\""), "kind:send_email");
    assert_eq!(canonical("kind:*"), "kind:*");
    assert_eq!(canonical("args.x:\"*\",*"), "args.x:\"*\",*");
    assert_eq!(canonical("meta.\"tenant\":acme"), "meta.tenant:acme");
    assert_eq!(canonical("args.007:x"), "args.7:x");
    assert_eq!(canonical("args.\"007\":x"), "args.\"007\":x");
    assert_eq!(canonical("kind:\"é ü\""), "kind:\"é ü\"");
}

/// Searches and their canonical form, one a line: `input ⇒ canonical`.
const CANONICAL: &str = r#"
finished:<2h args.order_id:42 kind:send_email state:retrying ⇒ state:retrying kind:send_email finished:<2h args.order_id:42
42 ⇒ id:42
workflow:3 id:1,2 ⇒ id:1,2 workflow:3
attempts:>0 ⇒ attempts:>=1
priority:<0 ⇒ priority:<=-1
priority:>=-9223372036854775808 ⇒ priority:<=9223372036854775807
state:ready,rate-limited,scheduled,retrying ⇒ state:pending
state:failed,pending ⇒ state:failed,pending
state:scheduled,pending ⇒ state:scheduled,ready,rate-limited,retrying
state:processing ⇒ state:running
created:>120m ⇒ created:>2h
created:>90m ⇒ created:>90m
created:>3600s ⇒ created:>1h
created:>0s ⇒ created:>0s
created:>48h ⇒ created:>2d
due:>=2026-12-05T00:00:00Z ⇒ due:>=2026-12-05
due:<2026-12-05T10:30 ⇒ due:<2026-12-05T10:30:00Z
due:<2026-12-05T10:30:15 ⇒ due:<2026-12-05T10:30:15Z
due:<2026-12-05T11:00:00+01:00 ⇒ due:<2026-12-05T10:00:00Z
due:<2026-12-05T10:00:00.1234567Z ⇒ due:<2026-12-05T10:00:00.123456Z
due:<2026-12-05T10:00:00.5Z ⇒ due:<2026-12-05T10:00:00.500Z
due:2026-12-01..2026-12-05T12:00 ⇒ due:2026-12-01..2026-12-05T12:00:00Z
created:7d..2026-12-01 ⇒ created:7d..2026-12-01
"#;

#[test]
fn canonical_form() {
    for line in CANONICAL.lines().filter(|l| !l.is_empty()) {
        let (input, want) = line.split_once(" ⇒ ").unwrap();
        assert_eq!(canonical(input), want, "{input:?}");
        assert_eq!(canonical(want), want, "{want:?} is not stable");
    }
    assert_eq!(canonical("   "), "");
    assert_eq!(canonical("  error:x\n\nqueue:a,b  "), "queue:a,b error:x");
}

#[test]
fn time_ranges_resolve_against_now() {
    let now = utc(2026, 12, 5, 10, 0, 0) + TimeDelta::nanoseconds(1_234_567);
    let now_us = utc(2026, 12, 5, 10, 0, 0) + TimeDelta::microseconds(1234);
    let us = TimeDelta::microseconds(1);
    let two_h = TimeDelta::hours(2);
    let resolve = |input: &str| ok(input).created.unwrap().resolve(now);
    assert_eq!(resolve("created:>2h"), (Some(now_us - two_h + us), None));
    assert_eq!(resolve("created:>=2h"), (Some(now_us - two_h), None));
    assert_eq!(resolve("created:<2h"), (None, Some(now_us - two_h)));
    assert_eq!(resolve("created:<=2h"), (None, Some(now_us - two_h + us)));
    let day = |d| utc(2026, 12, d, 0, 0, 0);
    assert_eq!(resolve("created:<=2026-12-05"), (None, Some(day(5) + us)));
    assert_eq!(resolve("created:>2026-12-05"), (Some(day(5) + us), None));
    let dec1 = resolve("created:2026-12-01..2026-12-02");
    assert_eq!(dec1, (Some(day(1)), Some(day(2))));
    let ago = |d: TimeDelta| Some(now_us - d);
    let (d7, d1, h1) = (TimeDelta::days(7), TimeDelta::days(1), TimeDelta::hours(1));
    assert_eq!(resolve("created:7d..1d"), (ago(d7), ago(d1)));
    let nine = Some(utc(2026, 12, 5, 9, 0, 0));
    assert_eq!(resolve("created:2026-12-05T09:00..1h"), (nine, ago(h1)));
    // Instants are kept to the microsecond (the columns' precision) when parsed.
    let t = ok("due:>=2026-12-05T10:00:00.0000019Z").due.unwrap();
    let ten = utc(2026, 12, 5, 10, 0, 0);
    assert_eq!(t.resolve(now), (Some(ten + us), None));
    // The longest duration, 36,500 days, resolves without overflow.
    assert!(ok("due:>36500d").due.unwrap().resolve(now).0.is_some());
    assert!(Filter::parse("due:>36501d").is_err());
    let far = TimeBound::Relative(Duration::from_secs(u64::MAX));
    assert_eq!(far.at(now), chrono::DateTime::<Utc>::MIN_UTC);
}

#[test]
fn json_paths_are_quoted_and_escaped() {
    let path = |input: &str| ok(input).fields[0].json_path();
    assert_eq!(path("args.order_id.0.sku:1"), r#"$."order_id"[0]."sku""#);
    assert_eq!(path(r#"meta."a\"b\\c"."0":1"#), r#"$."a\"b\\c"."0""#);
    assert_eq!(path("args.7:1"), "$[7]");
    let term = FieldTerm {
        source: Source::Args,
        path: vec![Segment::Key("a\u{1}b".to_owned())],
        values: vec![FieldValue::Exists],
    };
    assert_eq!(term.json_path(), r#"$."a\u0001b""#);
    let f = ok(r#"args."order id".0."x\"y":*"#);
    assert_eq!(f.fields[0].qualifier(), r#"args."order id".0."x\"y""#);
    assert_eq!(ok("args.order_id:1").fields[0].qualifier(), "args.order_id");
}

#[test]
fn helpers_for_the_planner() {
    assert!(Filter::default().is_empty() && ok("  ").is_empty());
    assert_eq!(Filter::default().to_string(), "");
    assert!(!ok("42").is_empty());
    let rows = "args.x:1 meta.x:* worker:w error:e created:>1h priority:1 workflow:1";
    for input in rows.split(' ') {
        assert!(ok(input).has_row_filters(), "{input}");
    }
    let entries = "queue:q kind:k attempts:>1 due:<1h finished:>1d id:4 state:failed";
    assert!(!ok(entries).has_row_filters() && !ok("").has_row_filters());
    assert_eq!(like_substring("50%_off!"), "%50!%!_off!!%");
    assert_eq!(like_substring("a\\b"), "%a\\b%");
    let f: Filter = "kind:x".parse().unwrap();
    assert_eq!(f.kinds, ["x"]);
    let e: Error = refusal("tenant:acme").into();
    assert!(matches!(e, Error::Invalid { what: "search", .. }));
    let text = e.to_string();
    assert!(
        text.starts_with("invalid search: unknown qualifier `tenant`"),
        "{text}"
    );
    let e: Box<dyn std::error::Error> = Box::new(refusal("x"));
    assert!(e.to_string().starts_with("bare words"));
}

/// xorshift64*: a small seeded generator, so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(n).unwrap()).unwrap()
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }

    fn num(&mut self) -> i64 {
        let small = i64::try_from(self.below(2001)).unwrap() - 1000;
        let any = i64::from_ne_bytes(self.next().to_ne_bytes());
        [small, small, i64::MIN, i64::MAX, any][self.below(5)]
    }

    /// Text that needs every kind of quoting now and then.
    fn text(&mut self, min: usize) -> String {
        let alphabet = [
            "a", "Z", "0", "7", "_", "-", ".", ":", ",", " ", "\"", "\\", "*", ">", "é", "😀",
            "\t", "..", "args.", "\u{1}",
        ];
        let n = min + self.below(10);
        let mut s: String = (0..n).map(|_| self.pick(&alphabet)).collect();
        while s.chars().count() > MAX_VALUE_CHARS {
            s.pop();
        }
        s
    }

    fn texts(&mut self) -> Vec<String> {
        let mut v = Vec::new();
        for _ in 0..1 + self.below(4) {
            let t = self.text(0);
            if !v.contains(&t) {
                v.push(t);
            }
        }
        v
    }

    fn range(&mut self) -> NumRange {
        let (a, b) = (self.num(), self.num());
        let (min, max) = (a.min(b), a.max(b));
        [
            NumRange { min, max },
            NumRange { min, max: min },
            NumRange { min: i64::MIN, max },
            NumRange { min, max: i64::MAX },
        ][self.below(4)]
    }

    fn bound(&mut self) -> TimeBound {
        let secs = self.next() % (MAX_DURATION_SECS + 1);
        let secs = [secs, secs / 86_400 * 86_400, secs / 60 * 60, 0][self.below(4)];
        let us = i64::try_from(self.next() % 253_402_300_800_000_000).unwrap(); // before 10000
        let t = chrono::DateTime::from_timestamp_micros(us).unwrap();
        let t = [t, t.date_naive().and_time(NaiveTime::MIN).and_utc()][self.below(2)];
        let rel = TimeBound::Relative(Duration::from_secs(secs));
        [rel, TimeBound::Absolute(t)][self.below(2)]
    }

    fn time(&mut self) -> TimeRange {
        let b = self.bound();
        match self.below(5) {
            0 => TimeRange::After(b),
            1 => TimeRange::AtOrAfter(b),
            2 => TimeRange::Before(b),
            3 => TimeRange::AtOrBefore(b),
            _ => loop {
                let (a, b) = (self.bound(), self.bound());
                match (a, b) {
                    (TimeBound::Relative(x), TimeBound::Relative(y)) if x <= y => continue,
                    (TimeBound::Absolute(x), TimeBound::Absolute(y)) if x >= y => continue,
                    _ => break TimeRange::Between(a, b),
                }
            },
        }
    }

    fn field(&mut self) -> FieldTerm {
        let path = (0..1 + self.below(MAX_SEGMENTS))
            .map(|_| match self.below(3) {
                0 => Segment::Index(u32::try_from(self.next() >> 40).unwrap()),
                _ => Segment::Key(self.text(1)),
            })
            .collect();
        let mut values = Vec::new();
        for _ in 0..1 + self.below(4) {
            let v = [FieldValue::Exists, FieldValue::Text(self.text(0))][self.below(2)].clone();
            if !values.contains(&v) {
                values.push(v);
            }
        }
        let source = [Source::Args, Source::Meta][self.below(2)];
        FieldTerm {
            source,
            path,
            values,
        }
    }

    /// A filter as `parse` makes them: at most 8 terms, values unique within a term.
    fn filter(&mut self) -> Filter {
        let mut f = Filter::default();
        for _ in 0..self.below(MAX_TERMS + 1) {
            match self.below(15) {
                0 => f.ids = (0..1 + self.below(3)).map(|_| JobId(self.next())).collect(),
                1 => {
                    f.states.clear();
                    for _ in 0..1 + self.below(6) {
                        let s = self.pick(&OpState::ALL);
                        if !f.states.contains(&s) {
                            f.states.push(s);
                        }
                    }
                }
                2 => f.queues = self.texts(),
                3 => f.kinds = self.texts(),
                4 => f.workers = self.texts(),
                5 => f.priority = Some(self.range()),
                6 => f.attempts = Some(self.range()),
                7 => f.workflows = vec![self.next(), self.next() >> 32],
                8 => f.errors = self.texts(),
                9 => f.created = Some(self.time()),
                10 => f.due = Some(self.time()),
                11 => f.finished = Some(self.time()),
                _ => {
                    let field = self.field();
                    if f.fields.iter().all(|t| t.qualifier() != field.qualifier()) {
                        f.fields.push(field);
                    }
                }
            }
        }
        f
    }
}

#[test]
fn display_then_parse_gives_the_filter_back() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..20_000 {
        let f = rng.filter();
        let text = f.to_string();
        let back = Filter::parse(&text).unwrap_or_else(|e| panic!("#{i} {text:?}: {e}"));
        assert_eq!(back, f, "#{i} {text:?}");
        assert_eq!(back.to_string(), text, "#{i}");
    }
}

#[test]
fn garbage_is_refused_with_a_true_span_or_round_trips() {
    let pieces = "a|7|:|,|\"|\\| |.|..|>|<=|*|é|😀|-|args.|meta.|state:|id:|created:|due:>|kind:|\
                  priority:|2h|2026-12-05|T10:00|ready|pending";
    let pieces: Vec<&str> = pieces.split('|').collect();
    let mut rng = Rng(42);
    let (mut accepted, mut refused) = (0, 0);
    for i in 0..30_000 {
        let input: String = (0..rng.below(12)).map(|_| rng.pick(&pieces)).collect();
        match Filter::parse(&input) {
            Ok(f) => {
                accepted += 1;
                let text = f.to_string();
                let back = Filter::parse(&text);
                assert_eq!(back.as_ref(), Ok(&f), "#{i} {input:?} → {text:?}");
            }
            Err(e) => {
                refused += 1;
                assert!(!spans_its_token(&input, e).to_string().is_empty());
            }
        }
    }
    let counts = format!("{accepted} accepted, {refused} refused");
    assert!(accepted > 1000 && refused > 1000, "{counts}");
}
