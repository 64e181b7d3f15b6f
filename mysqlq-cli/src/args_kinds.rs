//! The command line of `enqueue` (`cmd_misc.rs`) and `kinds` (`cmd_kinds.rs`), the commands
//! that work by kind name, as clap derive types. Doc comments are the `--help` text.

use std::time::Duration;

use clap::Args;

/// `enqueue`.
#[derive(Debug, Args)]
pub(crate) struct EnqueueArgs {
    /// The job's kind name (as in `#[job(name = ...)]`, default the function's name)
    pub(crate) kind: String,
    /// The payload: a JSON object of the job's arguments, `@path` to read it from a file, or `-`
    /// to read it from standard input
    #[arg(long, value_name = "PAYLOAD", value_parser = parse_json)]
    pub(crate) json: serde_json::Value,
    /// Queue [default: the registered job's queue, else `default`]
    #[arg(long, value_parser = crate::args::parse_queue)]
    pub(crate) queue: Option<String>,
    /// Runnable after this delay (e.g. 30s, 5m)
    #[arg(long, value_parser = crate::args::parse_duration, value_name = "DUR")]
    pub(crate) delay: Option<Duration>,
    /// Claim priority, lower runs first [default: the registered job's, else 0]
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) priority: Option<i16>,
    /// Attempts in all [default: the registered job's, else 5]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_attempts: Option<u32>,
    /// At most one pending or processing job holds this key
    #[arg(long)]
    pub(crate) dedupe_key: Option<String>,
}

/// `kinds`.
#[derive(Debug, Args)]
pub(crate) struct KindsArgs {
    /// Print the catalogue as JSON: `{"kinds": [...]}`, sorted by kind, each with its payload's
    /// JSON Schema (`payload_schema`)
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--json`: the JSON itself, `@path` (a file's contents) or `-` (standard input), for payloads
/// too large or awkward for a command-line argument.
fn parse_json(s: &str) -> Result<serde_json::Value, String> {
    let (text, from) = if s == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| format!("cannot read the payload from standard input: {e}"))?;
        (text, "standard input".to_owned())
    } else if let Some(path) = s.strip_prefix('@') {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the payload file `{path}`: {e}"))?;
        (text, format!("`{path}`"))
    } else {
        return serde_json::from_str(s).map_err(|e| {
            format!(
                "invalid JSON ({e}); quote it for the shell, e.g. --json '{{\"n\": 1}}', or pass \
                 --json @file or --json - (standard input)"
            )
        });
    };
    serde_json::from_str(&text).map_err(|e| format!("invalid JSON in {from} ({e})"))
}
