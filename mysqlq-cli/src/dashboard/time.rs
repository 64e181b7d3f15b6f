//! Times as every page shows them:
//! `<time datetime="2026-12-05T10:00:01.123456Z" title="2026-12-05 10:00:01.123456 UTC">2026-12-05
//! 10:00:01 UTC · 3 min ago</time>`. The relative part is computed on the database's clock (a
//! page's `now`: the search's, the job row's, or [`db_now`]), never the host's, and future times
//! read "in 2 h" or "in 5,001 years". `data-now` carries that clock, so the page script can
//! refresh the relative parts every 15 s without trusting the browser's clock either.

use chrono::{Datelike, Timelike};
use maud::{Markup, html};
use mysqlq::admin::Timestamp;
use sqlx::MySqlPool;

/// `2026-12-05T10:00:01.123456Z`: the `datetime` attribute (RFC 3339, microseconds, UTC).
pub(super) fn iso(t: &Timestamp) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// `2026-12-05 10:00:01 UTC`: the time as the text shows it.
pub(super) fn shown(t: &Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// `2026-12-05 10:00:01.123456 UTC`: the exact time, in the `title`.
fn exact(t: &Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.6f UTC").to_string()
}

/// `5001` as `5,001`.
pub(super) fn grouped(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Whole calendar years from `a` to `b` (`a <= b`).
fn years_between(a: &Timestamp, b: &Timestamp) -> i64 {
    let key = |t: &Timestamp| {
        (
            t.month(),
            t.day(),
            t.num_seconds_from_midnight(),
            t.nanosecond(),
        )
    };
    let years = i64::from(b.year()) - i64::from(a.year());
    if key(b) < key(a) { years - 1 } else { years }
}

/// How far `t` is from `now`: `now` (under a second), `12 s ago`, `3 min ago`, `5 h ago`,
/// `12 days ago`, `2 years ago`, or the same with `in …` for a time to come. Whole units, cut
/// down (a job due in 59 s is due `in 59 s`, not `in 1 min`).
pub(super) fn relative(t: &Timestamp, now: &Timestamp) -> String {
    let (earlier, later, past) = if t <= now {
        (t, now, true)
    } else {
        (now, t, false)
    };
    let secs = (*later - *earlier).num_seconds();
    let span = if secs < 1 {
        return "now".to_owned();
    } else if secs < 60 {
        format!("{secs} s")
    } else if secs < 3600 {
        format!("{} min", secs / 60)
    } else if secs < 48 * 3600 {
        format!("{} h", secs / 3600)
    } else {
        match years_between(earlier, later) {
            0 => format!("{} days", secs / 86_400),
            1 => "1 year".to_owned(),
            y => format!("{} years", grouped(y)),
        }
    };
    if past {
        format!("{span} ago")
    } else {
        format!("in {span}")
    }
}

/// A time with its zone and its distance from `now` (the database's clock).
pub(super) fn time(t: &Timestamp, now: &Timestamp) -> Markup {
    html! {
        time datetime=(iso(t)) title=(exact(t)) data-now=(iso(now)) {
            (shown(t)) " · " (relative(t, now))
        }
    }
}

/// [`time`], or `–` for none.
pub(super) fn time_or_dash(t: Option<&Timestamp>, now: &Timestamp) -> Markup {
    match t {
        Some(t) => time(t, now),
        None => html! { "–" },
    }
}

/// The database's clock, for the pages whose statements do not read it (one
/// `SELECT UTC_TIMESTAMP(6)`).
pub(super) async fn db_now(pool: &MySqlPool) -> Result<Timestamp, mysqlq::Error> {
    Ok(
        sqlx::query_scalar("/* mysqlq:dashboard_now */ SELECT UTC_TIMESTAMP(6)")
            .fetch_one(pool)
            .await?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn relative_parts_past_and_future() {
        let now = at("2026-12-05T10:00:01.123456Z");
        for (t, want) in [
            ("2026-12-05T10:00:01.123456Z", "now"),
            ("2026-12-05T10:00:00.500000Z", "now"),
            ("2026-12-05T10:00:00.123456Z", "1 s ago"),
            ("2026-12-05T09:59:02Z", "59 s ago"),
            ("2026-12-05T09:57:01.123456Z", "3 min ago"),
            ("2026-12-05T09:00:01.123457Z", "59 min ago"),
            ("2026-12-05T09:00:01.123456Z", "1 h ago"),
            ("2026-12-03T10:00:01.123457Z", "47 h ago"),
            ("2026-12-03T10:00:01.123456Z", "2 days ago"),
            ("2025-12-05T10:00:01.123457Z", "364 days ago"),
            ("2025-12-05T10:00:01.123456Z", "1 year ago"),
            ("2020-02-29T00:00:00Z", "6 years ago"),
            ("2026-12-05T12:00:01.123456Z", "in 2 h"),
            ("2026-12-05T10:00:59Z", "in 57 s"),
            ("2026-12-05T10:30:00Z", "in 29 min"),
            ("2027-12-05T10:00:01.123455Z", "in 364 days"),
            ("7027-12-31T00:00:00Z", "in 5,001 years"),
            ("7027-01-01T00:00:00Z", "in 5,000 years"),
        ] {
            assert_eq!(relative(&at(t), &now), want, "{t}");
        }
    }

    #[test]
    fn the_element_has_the_zone_the_exact_time_and_the_clock() {
        let now = at("2026-12-05T10:03:01.123456Z");
        let t = at("2026-12-05T10:00:01.123456Z");
        assert_eq!(
            time(&t, &now).into_string(),
            "<time datetime=\"2026-12-05T10:00:01.123456Z\" title=\"2026-12-05 10:00:01.123456 UTC\" \
             data-now=\"2026-12-05T10:03:01.123456Z\">2026-12-05 10:00:01 UTC · 3 min ago</time>"
        );
        assert_eq!(time_or_dash(None, &now).into_string(), "–");
        assert_eq!(
            iso(&at("2026-12-05T10:00:01Z")),
            "2026-12-05T10:00:01.000000Z"
        );
    }

    #[test]
    fn thousands_are_grouped() {
        for (n, want) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (5001, "5,001"),
            (1_234_567, "1,234,567"),
            (-1000, "-1,000"),
        ] {
            assert_eq!(grouped(n), want);
        }
    }
}
