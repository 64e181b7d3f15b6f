//! The `mysqlq-cli` command that does what a dashboard button does, shown under the job's and
//! the workflow's actions to copy: `mysqlq-cli failed retry 42 --by alice`. Arguments are
//! quoted for a POSIX shell; a command never holds a token or a URL (`DATABASE_URL` comes from
//! the environment of whoever runs it). Only commands `mysqlq-cli` has today (`docs/cli.md`).

use maud::{Markup, html};
use mysqlq::JobId;
use mysqlq::admin::JobState;

use super::actions::cancellable;

/// `arg` for a POSIX shell: as is when every character is one no shell treats specially,
/// otherwise in single quotes, a `'` inside written `'\''`.
pub(super) fn quote(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        return arg.to_owned();
    }
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// One command to copy: the button it stands for and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Cmd {
    /// Its element's id is `cli-<key>`.
    pub(super) key: &'static str,
    /// What it does, for the copy button's label.
    pub(super) what: &'static str,
    /// The command line.
    pub(super) line: String,
}

impl Cmd {
    fn new(key: &'static str, what: &'static str, args: &[&str]) -> Self {
        let line = std::iter::once("mysqlq-cli")
            .chain(args.iter().copied())
            .map(quote)
            .collect::<Vec<_>>()
            .join(" ");
        Self { key, what, line }
    }
}

/// The commands of the buttons the page of job `id` in `state` shows, acting as `by`.
pub(super) fn job(id: JobId, state: JobState, by: &str) -> Vec<Cmd> {
    let id = id.0.to_string();
    let mut out = Vec::new();
    if cancellable(state) {
        out.push(Cmd::new("cancel", "cancel", &["cancel", &id, "--by", by]));
    }
    if state == JobState::Failed {
        out.push(Cmd::new(
            "retry",
            "retry",
            &["failed", "retry", &id, "--by", by],
        ));
        out.push(Cmd::new(
            "discard",
            "discard",
            &["failed", "discard", &id, "--by", by],
        ));
    }
    if state != JobState::Processing {
        out.push(Cmd::new("delete", "delete", &["delete", &id, "--by", by]));
    }
    out
}

/// The commands of a workflow's buttons: cancel its `open` steps, retry its `failed` ones.
pub(super) fn workflow(id: u64, open: u64, failed: u64, by: &str) -> Vec<Cmd> {
    let id = id.to_string();
    let mut out = Vec::new();
    if open > 0 {
        out.push(Cmd::new(
            "cancel",
            "cancel",
            &["workflow", "cancel", &id, "--by", by],
        ));
    }
    if failed > 0 {
        out.push(Cmd::new(
            "retry",
            "retry",
            &["workflow", "retry", &id, "--by", by],
        ));
    }
    out
}

/// The commands as selectable `<code>` blocks, each with a copy button the page script shows
/// (without JavaScript the text is there to select).
pub(super) fn block(cmds: &[Cmd]) -> Markup {
    html! {
        @if !cmds.is_empty() {
            section.cli aria-labelledby="cli-heading" {
                h2 #cli-heading { "From the command line" }
                p.muted { "The same actions with " code { "mysqlq-cli" } " (the database URL comes from " code { "DATABASE_URL" } "):" }
                @for c in cmds {
                    div.cmd {
                        pre { code #(format!("cli-{}", c.key)) { (c.line) } }
                        button.copy type="button" hidden data-copy=(format!("cli-{}", c.key))
                            aria-label=(format!("Copy the {} command", c.what)) { "Copy" }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posix_quoting() {
        for (arg, want) in [
            ("42", "42"),
            ("alice", "alice"),
            ("cli:bob@example.com", "cli:bob@example.com"),
            ("", "''"),
            ("a b", "'a b'"),
            ("it's", r"'it'\''s'"),
            ("$(rm -rf /)", "'$(rm -rf /)'"),
            ("`x`;y|z&", "'`x`;y|z&'"),
            ("*", "'*'"),
            ("née", "'née'"),
            ("new\nline", "'new\nline'"),
        ] {
            assert_eq!(quote(arg), want, "{arg:?}");
        }
    }

    #[test]
    fn commands_and_their_block() {
        let cmds = workflow(7, 3, 0, "ops team");
        assert_eq!(
            cmds,
            [Cmd {
                key: "cancel",
                what: "cancel",
                line: "mysqlq-cli workflow cancel 7 --by 'ops team'".to_owned()
            }]
        );
        let html = block(&cmds).into_string();
        assert!(
            html.contains(
                "<code id=\"cli-cancel\">mysqlq-cli workflow cancel 7 --by 'ops team'</code>"
            ),
            "{html}"
        );
        assert!(html.contains("aria-label=\"Copy the cancel command\""));
        assert_eq!(block(&[]).into_string(), "");
    }

    /// Splits a line `quote` wrote back into its arguments.
    #[cfg(feature = "cli")]
    fn unquote(line: &str) -> Vec<String> {
        let mut args = Vec::new();
        let mut cur = String::new();
        let mut started = false;
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                ' ' => {
                    if started {
                        args.push(std::mem::take(&mut cur));
                    }
                    started = false;
                }
                '\'' => {
                    started = true;
                    for q in chars.by_ref() {
                        if q == '\'' {
                            break;
                        }
                        cur.push(q);
                    }
                }
                '\\' => {
                    cur.extend(chars.next());
                }
                c => {
                    started = true;
                    cur.push(c);
                }
            }
        }
        if started {
            args.push(cur);
        }
        args
    }

    /// Every command shown parses as the command line it names, its arguments intact.
    #[cfg(feature = "cli")]
    #[test]
    fn every_command_is_one_the_cli_has() {
        use clap::Parser;
        let by = "it's me; $USER";
        let mut lines: Vec<String> = workflow(7, 1, 1, by).into_iter().map(|c| c.line).collect();
        for state in [JobState::Failed, JobState::Pending, JobState::Processing] {
            lines.extend(job(JobId(42), state, by).into_iter().map(|c| c.line));
        }
        assert_eq!(lines.len(), 2 + 3 + 2 + 1, "{lines:?}");
        for line in &lines {
            let args = unquote(line);
            assert_eq!(args[0], "mysqlq-cli");
            assert_eq!(args[args.len() - 1], by, "{line}");
            let parsed = crate::args::Cli::try_parse_from(&args);
            assert!(
                parsed.is_ok(),
                "{line}: {}",
                parsed.err().map(|e| e.to_string()).unwrap_or_default()
            );
            assert!(!line.contains("://") && !line.contains("token"), "{line}");
        }
    }
}
