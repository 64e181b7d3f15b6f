//! The grammar of `rate_limit = "10/s"`: `<count>/<period>`. It duplicates that of
//! `mysqlq::Rate`'s `FromStr` (`mysqlq/src/rate.rs`; the macro crate cannot depend on mysqlq),
//! check for check and in the same order, and the test tables below are the runtime's, so that
//! a string the macro accepts means the same rate at run time.
//!
//! - `count`: a whole number of handler starts, 1 to [`MAX_COUNT`].
//! - `period`: a bare unit meaning one of it, or `<number><unit>` parts that add up (`100ms`,
//!   `2s`, `1h30m`, `1h 30min`), with the units `ms`, `s` or `sec`, `m` or `min`, `h`, `d` (and
//!   `us`, only to say that durations count whole milliseconds); from [`MIN_PERIOD_MS`] to
//!   [`MAX_PERIOD_MS`] in whole milliseconds. No fractions: `1.5s` is written `1s500ms`.
//!
//! Whitespace around the text, around `/` and between a number and its unit is ignored.

/// Most starts per period.
pub(crate) const MAX_COUNT: u32 = 1_000_000;
/// Shortest period, in milliseconds.
pub(crate) const MIN_PERIOD_MS: u64 = 10;
/// Longest period, in milliseconds: one day.
pub(crate) const MAX_PERIOD_MS: u64 = 86_400_000;

/// A rate, checked: at most `count` starts per `period_ms` milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rate {
    pub(crate) count: u32,
    pub(crate) period_ms: u64,
}

/// Parses the value of `rate_limit` (`text`, the literal's value). The error is the whole
/// diagnostic.
pub(crate) fn parse(text: &str) -> Result<Rate, String> {
    let Some((count, period)) = text
        .trim()
        .split_once('/')
        .map(|(c, p)| (c.trim(), p.trim()))
        .filter(|(_, p)| !p.is_empty())
    else {
        return Err(format!(
            "`rate_limit = \"{text}\"` has no period: write \"<count>/<period>\", e.g. \"10/s\", \"600/min\", \"5/100ms\""
        ));
    };
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{count}` is not a whole number of starts"));
    }
    // All digits: the only failure left is a number beyond u32, which is out of range too.
    let count_error =
        || format!("the count must be 1 to {MAX_COUNT} starts per period, not `{count}`");
    let n = count.parse::<u32>().map_err(|_| count_error())?;
    let Some(micros) = period_micros(period) else {
        return Err(format!(
            "period `{period}`: unknown time unit; use ms, s, min, h or d, optionally with a number (`100ms`, `2s`)"
        ));
    };
    if !(1..=MAX_COUNT).contains(&n) {
        return Err(count_error());
    }
    if micros % 1_000 != 0 {
        return Err(format!(
            "period `{period}`: durations count whole milliseconds"
        ));
    }
    let period_ms = micros / 1_000;
    if period_ms < MIN_PERIOD_MS {
        return Err(format!(
            "period `{period}` is shorter than {MIN_PERIOD_MS}ms"
        ));
    }
    if period_ms > MAX_PERIOD_MS {
        return Err(format!("period `{period}` is longer than 1d"));
    }
    Ok(Rate {
        count: n,
        period_ms,
    })
}

/// A length beyond `u64` microseconds: far longer than a day, and a whole number of milliseconds
/// (so refused as too long, as the runtime does).
const TOO_LONG: u64 = u64::MAX / 1_000 * 1_000;

/// Microseconds in one of `unit`, for the units a period may name.
fn unit_micros(unit: &str) -> Option<u64> {
    Some(match unit {
        "us" => 1, // only to say "whole milliseconds" rather than "unknown unit"
        "ms" => 1_000,
        "s" | "sec" => 1_000_000,
        "m" | "min" => 60_000_000,
        "h" => 3_600_000_000,
        "d" => 86_400_000_000,
        _ => return None,
    })
}

/// A period's length in microseconds: a bare unit, or `<number><unit>` parts. `None` for a unit
/// that is missing or unknown; [`TOO_LONG`] for a length beyond `u64`.
fn period_micros(text: &str) -> Option<u64> {
    if let Some(us) = unit_micros(text) {
        return Some(us);
    }
    let mut rest = text;
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let (number, after) = rest.split_at(digits);
        let after = after.trim_start();
        let letters = after.len()
            - after
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let (unit, after) = after.split_at(letters);
        if number.is_empty() {
            return None;
        }
        let unit = unit_micros(unit)?;
        let Some(sum) = number
            .parse::<u64>()
            .ok()
            .and_then(|number| number.checked_mul(unit))
            .and_then(|part| total.checked_add(part))
        else {
            return Some(TOO_LONG);
        };
        total = sum;
        rest = after.trim_start();
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::{Rate, parse};

    /// Accepted strings and their `(count, period in ms)`: the runtime's table
    /// (`mysqlq/src/rate/tests.rs`, `parses_count_slash_period`), then the attribute's examples.
    const ACCEPTED: &[(&str, u32, u64)] = &[
        ("10/s", 10, 1_000),
        ("600/min", 600, 60_000),
        ("5/100ms", 5, 100),
        ("1/2s", 1, 2_000),
        (" 3 / h ", 3, 3_600_000),
        ("3/1h", 3, 3_600_000),
        ("1/90s", 1, 90_000),
        ("7/sec", 7, 1_000),
        ("7/m", 7, 60_000),
        ("7/d", 7, 86_400_000),
        ("2/10ms", 2, 10),
        ("1/1h30m", 1, 5_400_000),
        ("1/1h 30min", 1, 5_400_000),
        ("1/1s500ms", 1, 1_500),
        ("\t12/ 2 s\n", 12, 2_000),
        ("1/24h", 1, 86_400_000),
        ("1000000/d", 1_000_000, 86_400_000),
        ("010/s", 10, 1_000),
        ("1/10000us", 1, 10),
        // The attribute's own examples and the design's torture mix.
        ("1/s", 1, 1_000),
        ("1/min", 1, 60_000),
        ("1/h", 1, 3_600_000),
        ("4/300ms", 4, 300),
        ("3/1s", 3, 1_000),
        ("1000000/s", 1_000_000, 1_000),
    ];

    fn no_period(text: &str) -> String {
        format!(
            r#"`rate_limit = "{text}"` has no period: write "<count>/<period>", e.g. "10/s", "600/min", "5/100ms""#
        )
    }

    fn count(count: &str) -> String {
        format!("the count must be 1 to 1000000 starts per period, not `{count}`")
    }

    fn unit(period: &str) -> String {
        format!(
            "period `{period}`: unknown time unit; use ms, s, min, h or d, optionally with a number (`100ms`, `2s`)"
        )
    }

    /// Rejected strings and the whole message: the runtime's table
    /// (`refuses_bad_rates_saying_what_to_change`, whose messages have the prefix
    /// `invalid rate: ` and quote the text without `rate_limit = "…"`), then more.
    fn rejected_cases() -> Vec<(&'static str, String)> {
        vec![
            ("10", no_period("10")),
            (" 10 ", no_period(" 10 ")),
            ("10/", no_period("10/")),
            ("", no_period("")),
            ("0/s", count("0")),
            ("1000001/s", count("1000001")),
            ("99999999999/s", count("99999999999")),
            ("ten/s", "`ten` is not a whole number of starts".into()),
            ("-1/s", "`-1` is not a whole number of starts".into()),
            ("+1/s", "`+1` is not a whole number of starts".into()),
            ("1.5/s", "`1.5` is not a whole number of starts".into()),
            ("/s", "`` is not a whole number of starts".into()),
            ("10/fortnight", unit("fortnight")),
            ("10/5", unit("5")),
            ("10/1.5s", unit("1.5s")),
            ("10/S", unit("S")),
            ("10/s/2", unit("s/2")),
            ("10/5ms", "period `5ms` is shorter than 10ms".into()),
            ("10/0s", "period `0s` is shorter than 10ms".into()),
            ("10/2d", "period `2d` is longer than 1d".into()),
            ("10/24h1ms", "period `24h1ms` is longer than 1d".into()),
            (
                "10/99999999999999999999999d",
                "period `99999999999999999999999d` is longer than 1d".into(),
            ),
            (
                "10/1500us",
                "period `1500us`: durations count whole milliseconds".into(),
            ),
            (
                "10/us",
                "period `us`: durations count whole milliseconds".into(),
            ),
            // The design's examples (§8.4), and the order of the checks.
            ("10 per s", no_period("10 per s")),
            ("2000000/s", count("2000000")),
            (
                "1/1500us",
                "period `1500us`: durations count whole milliseconds".into(),
            ),
            ("10/hour", unit("hour")),
            ("10/-5s", unit("-5s")),
            ("10/ms", "period `ms` is shorter than 10ms".into()),
            (
                "ten/fortnight",
                "`ten` is not a whole number of starts".into(),
            ),
            ("0/fortnight", unit("fortnight")),
            ("99999999999/fortnight", count("99999999999")),
            ("0/5ms", count("0")),
            (
                "10/86400001us",
                "period `86400001us`: durations count whole milliseconds".into(),
            ),
        ]
    }

    #[test]
    fn accepted() {
        for &(text, count, period_ms) in ACCEPTED {
            assert_eq!(parse(text), Ok(Rate { count, period_ms }), "{text:?}");
        }
    }

    #[test]
    fn rejected() {
        for (text, message) in rejected_cases() {
            assert_eq!(parse(text), Err(message), "{text:?}");
        }
    }
}
