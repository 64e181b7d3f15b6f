//! The fenced blocks of README.md and docs/*.md, so that tests compare the samples of command
//! output there with what the binaries print (issue 28, item 11).
//!
//! A block is found by the start of its first line (`block("docs/cli.md", "$ mysqlq-cli stats")`).
//! [`normalise`] makes a sample and a real output comparable: it keeps the words and replaces
//! only what no two runs share — ages and durations, timestamps, sizes, row estimates and the
//! server's version — and collapses the spaces that align columns.

use std::path::{Path, PathBuf};

/// One fenced block (```` ```lang ````) of a Markdown file.
#[derive(Debug, Clone)]
pub struct Block {
    /// The file, relative to the repository root (`docs/cli.md`).
    pub doc: String,
    /// The 1-based line number of the opening fence.
    pub line: usize,
    /// What follows the opening fence (`console`, `text`, `rust,ignore`).
    pub lang: String,
    /// The lines between the fences.
    pub lines: Vec<String>,
}

impl Block {
    /// `docs/cli.md:123`, for messages.
    pub fn place(&self) -> String {
        format!("{}:{}", self.doc, self.line)
    }
}

/// The repository's root directory.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the repository")
        .to_path_buf()
}

/// README.md and every docs/*.md, relative to the root, sorted.
pub fn docs() -> Vec<String> {
    let mut docs = vec!["README.md".to_owned()];
    let mut pages: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("read docs/")
        .map(|e| {
            e.expect("a docs/ entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    pages.sort();
    docs.extend(pages);
    docs
}

/// Every fenced block of `doc` (relative to the root), outside the part of it generated from the
/// binary (docs/cli.md's reference, checked by `mysqlq-cli`'s own test).
pub fn blocks(doc: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(root().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    let mut generated = false;
    for (i, line) in text.lines().enumerate() {
        if open.is_none() && line.starts_with("<!-- BEGIN generated") {
            generated = true;
        } else if open.is_none() && line.starts_with("<!-- END generated") {
            generated = false;
        } else if let Some(fence) = line.strip_prefix("```") {
            match open.take() {
                Some(b) => {
                    if !generated {
                        out.push(b);
                    }
                }
                None => {
                    open = Some(Block {
                        doc: doc.to_owned(),
                        line: i + 1,
                        lang: fence.trim().to_owned(),
                        lines: Vec::new(),
                    });
                }
            }
        } else if let Some(b) = open.as_mut() {
            b.lines.push(line.to_owned());
        }
    }
    assert!(open.is_none(), "{doc}: a fenced block is never closed");
    out
}

/// The one block of `doc` whose first line starts with `first`.
pub fn block(doc: &str, first: &str) -> Block {
    let found: Vec<Block> = blocks(doc)
        .into_iter()
        .filter(|b| b.lines.first().is_some_and(|l| l.starts_with(first)))
        .collect();
    match <[Block; 1]>::try_from(found) {
        Ok([b]) => b,
        Err(found) => panic!(
            "{doc} has {} blocks starting with `{first}`, want one (a sample was moved, reworded \
             or removed: update the test that checks it)",
            found.len()
        ),
    }
}

/// `text` with what differs from run to run replaced by placeholders, line by line, the spaces
/// between words collapsed to one:
///
/// - durations and ages as humantime prints them (`4m 2s`, `7days 2h 1s`, `212.4ms`) → `<d>`;
/// - timestamps (`2024-05-01 10:02:11`) → `<time>`;
/// - sizes (`17.5 MiB`) → `<size>`, row estimates (`~199155`) → `~<n>`;
/// - the server's version (`MariaDB 10.11.19`) → `MariaDB <version>`.
pub fn normalise(text: &str) -> String {
    text.lines()
        .map(normalise_line)
        .collect::<Vec<_>>()
        .join("\n")
}

fn normalise_line(line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let (core, tail) = split_punctuation(words[i]);
        if is_duration(core) {
            // A run of duration words is one duration (`7days 2h 1s`).
            let mut end = (i, tail);
            while let Some(next) = words.get(end.0 + 1)
                && end.1.is_empty()
            {
                let (c, t) = split_punctuation(next);
                if !is_duration(c) {
                    break;
                }
                end = (end.0 + 1, t);
            }
            out.push(format!("<d>{}", end.1));
            i = end.0 + 1;
        } else if is_date(core)
            && words
                .get(i + 1)
                .is_some_and(|w| is_time(split_punctuation(w).0))
        {
            out.push(format!("<time>{}", split_punctuation(words[i + 1]).1));
            i += 2;
        } else if is_number(core)
            && let Some(unit) = words.get(i + 1)
            && ["B", "KiB", "MiB", "GiB", "TiB"].contains(&split_punctuation(unit).0)
        {
            out.push(format!("<size>{}", split_punctuation(unit).1));
            i += 2;
        } else if core.len() > 1 && core.starts_with('~') && is_number(&core[1..]) {
            out.push(format!("~<n>{tail}"));
            i += 1;
        } else if (core == "MariaDB" || core == "MySQL")
            && words.get(i + 1).is_some_and(|w| is_version(w))
        {
            out.push(format!("{core} <version>"));
            i += 2;
        } else {
            out.push(words[i].to_owned());
            i += 1;
        }
    }
    out.join(" ")
}

/// `word` without its trailing `,;:)`, and those characters.
fn split_punctuation(word: &str) -> (&str, &str) {
    let core = word.trim_end_matches([',', ';', ':', ')']);
    (core, &word[core.len()..])
}

fn is_number(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_digit() || c == '.')
        && s.starts_with(|c: char| c.is_ascii_digit())
}

/// One word of a humantime duration: `4m`, `12days`, `212.4ms`, `3.10s`.
fn is_duration(s: &str) -> bool {
    const UNITS: [&str; 14] = [
        "years", "year", "months", "month", "days", "day", "h", "m", "s", "ms", "us", "ns", "min",
        "sec",
    ];
    let digits = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    digits > 0 && is_number(&s[..digits]) && UNITS.contains(&&s[digits..])
}

fn is_date(s: &str) -> bool {
    s.len() == 10
        && s.chars().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                c == '-'
            } else {
                c.is_ascii_digit()
            }
        })
}

fn is_time(s: &str) -> bool {
    let s = s.split('.').next().unwrap_or(s);
    s.len() == 8
        && s.chars().enumerate().all(|(i, c)| {
            if i == 2 || i == 5 {
                c == ':'
            } else {
                c.is_ascii_digit()
            }
        })
}

fn is_version(s: &str) -> bool {
    s.split('.').count() >= 2
        && s.split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}
