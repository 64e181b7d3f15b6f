//! Who acts (the audit trail's name for the command's actions) and the confirmation bulk
//! destructive commands ask for: on a terminal they say how many jobs they would change and ask;
//! `--yes` skips the question; without a terminal and without `--yes` they refuse; `--dry-run`
//! says what would happen and changes nothing.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use mysqlq::admin::Admin;

use crate::args::{Acting, Confirm};
use crate::error::CliError;

/// The name recorded when `--by` is not given: `cli:<login name>` (`USER`, `LOGNAME` or
/// `USERNAME`), or `cli` when none is set.
pub(crate) fn default_by() -> String {
    ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.trim().is_empty()))
        .map_or_else(|| "cli".to_owned(), |user| format!("cli:{user}"))
}

/// An [`Admin`] whose actions the audit trail records under `--by` (or [`default_by`]) and
/// `--reason`.
pub(crate) fn admin(pool: sqlx::MySqlPool, acting: &Acting) -> Admin {
    let admin = Admin::new(pool).by(acting.by.clone().unwrap_or_else(default_by));
    match &acting.reason {
        Some(reason) => admin.because(reason.clone()),
        None => admin,
    }
}

/// Whether to go ahead with `action` ("delete 12 failed jobs"), which would change `jobs`
/// jobs: `Ok(false)` for `--dry-run` (it has said what would happen), an error when the operator
/// said no or could not be asked. Only a bulk command (`ask`) asks; nothing to change needs no
/// question.
pub(crate) fn go_ahead(c: &Confirm, ask: bool, jobs: u64, action: &str) -> Result<bool, CliError> {
    if c.dry_run {
        println!("dry run: would {action}; nothing changed");
        return Ok(false);
    }
    if !ask || c.yes || jobs == 0 {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Err(CliError::usage(
            format!("refusing to {action} without confirmation"),
            "add --yes to go ahead (or --dry-run to see what it would change)",
        ));
    }
    eprint!("{action}? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| CliError::new(format!("cannot read the answer: {e}"), "add --yes"))?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(true)
    } else {
        Err(CliError::new(
            "not confirmed: nothing changed",
            "answer y to go ahead, or pass --yes",
        ))
    }
}

/// `N job(s)`.
pub(crate) fn jobs(n: u64) -> String {
    counted(n, "job")
}

/// `1 <what> job`, `N <what> jobs` (`what` may be empty).
pub(crate) fn counted(n: u64, what: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    if what.ends_with("job") {
        format!("{n} {what}{s}")
    } else {
        format!("{n} {what} job{s}")
    }
}
