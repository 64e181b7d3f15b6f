//! Duration strings of the attribute, in humantime's grammar — the one the CLI's flags use:
//! `250ms`, `30s`, `30sec`, `5m`, `1h30m`, `1h 30m`, `1.5s`, `2d`.

/// Milliseconds of a duration string, parsed by `humantime::parse_duration`. The error says
/// what is wrong, for a diagnostic.
pub(crate) fn parse_millis(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("it is empty".to_owned());
    }
    let d = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err("durations count whole milliseconds".to_owned());
    }
    u64::try_from(d.as_millis()).map_err(|_| "it is too long".to_owned())
}

#[cfg(test)]
mod tests {
    use super::parse_millis;

    #[test]
    fn units_and_compounds() {
        assert_eq!(parse_millis("250ms"), Ok(250));
        assert_eq!(parse_millis("30s"), Ok(30_000));
        assert_eq!(parse_millis("30sec"), Ok(30_000));
        assert_eq!(parse_millis("30 sec"), Ok(30_000));
        assert_eq!(parse_millis("5m"), Ok(300_000));
        assert_eq!(parse_millis("1h30m"), Ok(5_400_000));
        assert_eq!(parse_millis(" 1h 30m 15s "), Ok(5_415_000));
        assert_eq!(parse_millis("1.5s"), Ok(1_500));
        assert_eq!(parse_millis("2d"), Ok(172_800_000));
        assert_eq!(parse_millis("0s"), Ok(0));
    }

    #[test]
    fn rejects_nonsense() {
        assert_eq!(parse_millis(" "), Err("it is empty".to_owned()));
        for (text, says) in [
            ("30", "time unit needed"),
            ("30 parsecs", "unknown time unit"),
            ("s", "expected number"),
            ("-5s", "expected number"),
            ("99999999999999999999s", "number is too large"),
            ("1500us", "durations count whole milliseconds"),
        ] {
            let why = parse_millis(text).expect_err(text);
            assert!(why.starts_with(says), "{text}: {why}");
        }
    }
}
