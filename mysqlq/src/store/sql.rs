//! Helpers for building and binding statements: `IN` lists padded to a power of two, durations
//! in microseconds, absolute times as `DATETIME(6)` text, error text bounded to the column.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Datelike as _};

use crate::{Error, JobId};

/// Longest `last_error` stored, in bytes (longer messages are cut at a character boundary).
pub(super) const MAX_ERROR_BYTES: usize = 4096;

/// Cuts an error message to [`MAX_ERROR_BYTES`] at a character boundary.
pub(super) fn truncate_error(s: &str) -> &str {
    if s.len() <= MAX_ERROR_BYTES {
        return s;
    }
    let mut end = MAX_ERROR_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

pub(crate) fn padded_len(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

pub(crate) fn placeholders(n: usize) -> String {
    let mut s = String::with_capacity(n * 3);
    for i in 0..n {
        s.push_str(if i == 0 { "?" } else { ", ?" });
    }
    s
}

pub(crate) fn bind_ids<'q>(
    mut q: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    ids: &[JobId],
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    let n = padded_len(ids.len());
    for i in 0..n {
        q = q.bind(ids[i.min(ids.len() - 1)].0);
    }
    q
}

/// A duration in whole microseconds for `INTERVAL ? MICROSECOND`, saturating.
pub fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// `YYYY-MM-DD HH:MM:SS.ffffff` in UTC, for binding absolute times to `DATETIME(6)`.
pub fn datetime_utc(t: SystemTime) -> Result<String, Error> {
    let since = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| Error::invalid("run_at", "times before 1970 are not supported"))?;
    let too_late = || Error::invalid("run_at", "must be before the year 10000");
    let secs = i64::try_from(since.as_secs()).map_err(|_| too_late())?;
    let at = DateTime::from_timestamp(secs, since.subsec_micros() * 1000).ok_or_else(too_late)?;
    if at.year() > 9999 {
        return Err(too_late());
    }
    Ok(at.format("%Y-%m-%d %H:%M:%S%.6f").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_datetimes() {
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(datetime_utc(t).unwrap(), "2023-11-14 22:13:20.123456");
        assert_eq!(
            datetime_utc(UNIX_EPOCH).unwrap(),
            "1970-01-01 00:00:00.000000"
        );
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(&datetime_utc(leap).unwrap()[..10], "2000-02-29");
        let nanos = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_999);
        assert_eq!(datetime_utc(nanos).unwrap(), "2023-11-14 22:13:20.123456");
        let last = UNIX_EPOCH + Duration::from_secs(253_402_300_799); // 9999-12-31 23:59:59
        assert_eq!(datetime_utc(last).unwrap(), "9999-12-31 23:59:59.000000");
        let year_10000 = last + Duration::from_secs(1);
        assert!(datetime_utc(year_10000).is_err());
        let far = UNIX_EPOCH.checked_add(Duration::from_secs(u64::MAX / 2));
        assert!(far.is_none_or(|far| datetime_utc(far).is_err()));
        assert!(datetime_utc(UNIX_EPOCH - Duration::from_secs(1)).is_err());
    }

    #[test]
    fn pads_id_lists_to_powers_of_two() {
        assert_eq!(padded_len(0), 1);
        assert_eq!(padded_len(3), 4);
        assert_eq!(padded_len(100), 128);
        assert_eq!(placeholders(3), "?, ?, ?");
    }

    #[test]
    fn truncates_errors_at_char_boundaries() {
        let long = "é".repeat(MAX_ERROR_BYTES);
        let cut = truncate_error(&long);
        assert!(cut.len() <= MAX_ERROR_BYTES && cut.chars().all(|c| c == 'é'));
        assert_eq!(truncate_error("short"), "short");
    }
}
