//! Output: aligned tables, human durations and sizes, progress bars on stderr.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A table printed with aligned columns. Columns whose header starts with `>` are right-aligned
/// (the `>` is not printed).
pub(crate) struct Table {
    headers: Vec<(String, bool)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(headers: &[&str]) -> Self {
        Self {
            headers: headers
                .iter()
                .map(|h| match h.strip_prefix('>') {
                    Some(rest) => (rest.to_owned(), true),
                    None => ((*h).to_owned(), false),
                })
                .collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; control characters in the cells are escaped ([`printable`]).
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(
            cells
                .into_iter()
                .map(|c| printable(&c, false).into_owned())
                .collect(),
        );
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub(crate) fn render(&self) -> String {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self
            .headers
            .iter()
            .map(|(h, _)| h.chars().count())
            .collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: Vec<&str>, out: &mut String| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                let pad = widths[i].saturating_sub(c.chars().count());
                let last = i + 1 == cells.len();
                if self.headers[i].1 {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                } else {
                    s.push_str(c);
                    if !last {
                        s.push_str(&" ".repeat(pad));
                    }
                }
                if !last {
                    s.push_str("  ");
                }
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(
            self.headers.iter().map(|(h, _)| h.as_str()).collect(),
            &mut out,
        );
        for r in &self.rows {
            line(r.iter().map(String::as_str).take(n).collect(), &mut out);
        }
        out
    }
}

/// `text` safe to print on a terminal: every control character (ESC and the CSI of escape
/// sequences, BEL, backspace, carriage return, C1 controls, …) is shown as `\u{1b}` instead of
/// being sent to the terminal. With `keep_newlines`, `\n` stays a line break. Values read from
/// the database (errors of remote services, keys, payloads) go through this before printing.
pub(crate) fn printable(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && !(keep_newlines && c == '\n');
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `3m 12s`; `-` for none.
pub(crate) fn age(secs: Option<i64>) -> String {
    match secs {
        None => "-".to_owned(),
        Some(s) if s < 0 => format!(
            "in {}",
            humantime::format_duration(Duration::from_secs(s.unsigned_abs()))
        ),
        Some(s) => humantime::format_duration(Duration::from_secs(s.unsigned_abs())).to_string(),
    }
}

/// Microseconds as `12.3ms`, `1.20s`.
pub(crate) fn micros(us: u64) -> String {
    let f = Duration::from_micros(us).as_secs_f64();
    if us < 1_000 {
        format!("{us}us")
    } else if us < 1_000_000 {
        format!("{:.1}ms", f * 1000.0)
    } else {
        format!("{f:.2}s")
    }
}

/// Bytes as `1.5 MiB`.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    #[allow(clippy::cast_precision_loss)]
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A progress bar on stderr, drawn only when stderr is a terminal (scripts and tests see none).
pub(crate) fn progress(len: Option<u64>, message: &str) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = match len {
        Some(n) => {
            let b = ProgressBar::with_draw_target(Some(n), target);
            b.set_style(
                ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({per_sec}, {eta})")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            b
        }
        None => {
            let b = ProgressBar::with_draw_target(None, target);
            b.set_style(
                ProgressStyle::with_template("{spinner} {msg}: {pos} ({per_sec})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b.enable_steady_tick(Duration::from_millis(120));
            b
        }
    };
    bar.set_message(message.to_owned());
    bar
}

/// Prints a warning line on stderr.
pub(crate) fn warn(text: &str) {
    crate::logging::eprint_line(&crate::program::rename(&format!("warning: {text}")));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let mut t = Table::new(&["QUEUE", ">READY"]);
        t.row(vec!["default".into(), "5".into()]);
        t.row(vec!["q".into(), "12345".into()]);
        assert_eq!(
            t.render(),
            "QUEUE    READY\ndefault      5\nq        12345\n"
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(printable("plain text", false), "plain text");
        assert_eq!(
            printable("a\x1b[2Jb\u{9b}c\rd\x07", false),
            "a\\u{1b}[2Jb\\u{9b}c\\u{d}d\\u{7}"
        );
        assert_eq!(printable("x\ny\tz", true), "x\ny\\u{9}z");
        assert_eq!(printable("x\ny", false), "x\\u{a}y");
        let mut t = Table::new(&["A"]);
        t.row(vec!["\x1b]0;owned\x07".into()]);
        assert!(!t.render().contains('\x1b'));
    }

    #[test]
    fn formats_sizes_and_times() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(micros(1500), "1.5ms");
        assert_eq!(age(Some(192)), "3m 12s");
        assert_eq!(age(None), "-");
    }
}
