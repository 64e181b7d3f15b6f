//! Duration strings of the attribute: `250ms`, `30s`, `5m`, `1h30m`, `2d`.

/// Milliseconds of a duration string: whole numbers each followed by a unit (`ms`, `s`, `m`,
/// `h`, `d`), optionally separated by spaces. The error says what is wrong, for a diagnostic.
pub(crate) fn parse_millis(text: &str) -> Result<u64, String> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err("it is empty".to_owned());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("expected a number at `{rest}`"));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("`{}` is too large", &rest[..digits]))?;
        let after = &rest[digits..];
        if after.starts_with(['.', ',']) && after[1..].starts_with(|c: char| c.is_ascii_digit()) {
            return Err(
                "fractions are not supported; combine whole units, e.g. `1s500ms`".to_owned(),
            );
        }
        let letters = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let factor: u64 = match &after[..letters] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => return Err(format!("`{number}` has no unit")),
            unit => return Err(format!("unknown unit `{unit}`")),
        };
        total = number
            .checked_mul(factor)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| "it is too long".to_owned())?;
        rest = after[letters..].trim_start();
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::parse_millis;

    #[test]
    fn units_and_compounds() {
        assert_eq!(parse_millis("250ms"), Ok(250));
        assert_eq!(parse_millis("30s"), Ok(30_000));
        assert_eq!(parse_millis("5m"), Ok(300_000));
        assert_eq!(parse_millis("1h30m"), Ok(5_400_000));
        assert_eq!(parse_millis(" 1h 30m 15s "), Ok(5_415_000));
        assert_eq!(parse_millis("2d"), Ok(172_800_000));
        assert_eq!(parse_millis("0s"), Ok(0));
    }

    #[test]
    fn rejects_nonsense() {
        assert_eq!(parse_millis(""), Err("it is empty".to_owned()));
        assert_eq!(parse_millis("30"), Err("`30` has no unit".to_owned()));
        assert_eq!(parse_millis("30sec"), Err("unknown unit `sec`".to_owned()));
        assert!(parse_millis("1.5s").unwrap_err().starts_with("fractions"));
        assert_eq!(
            parse_millis("s"),
            Err("expected a number at `s`".to_owned())
        );
        assert_eq!(
            parse_millis("-5s"),
            Err("expected a number at `-5s`".to_owned())
        );
        assert_eq!(
            parse_millis("99999999999999999999s"),
            Err("`99999999999999999999` is too large".to_owned())
        );
        assert_eq!(
            parse_millis("999999999999999d"),
            Err("it is too long".to_owned())
        );
    }
}
