//! [`Check`] and [`Level`]: one health check's outcome, as `Admin::doctor` returns it.

use serde::Serialize;

/// How a check came out, from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Fine.
    Ok,
    /// Worth knowing, nothing to do.
    Info,
    /// Works, but something should be fixed.
    Warn,
    /// Claims are unsafe or impossible until it is fixed.
    Fail,
}

/// One health check of the server and the schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// How it came out.
    pub level: Level,
    /// What was checked (`server`, `binlog`, `writer`, `schema`, `claim plan`, …).
    pub name: &'static str,
    /// What was found.
    pub detail: String,
    /// How to fix it, when there is something to fix. Commands are written as `mysqlq-cli …`;
    /// a binary of its own shows its own name.
    pub fix: Option<String>,
}

pub(super) fn check(
    level: Level,
    name: &'static str,
    detail: impl Into<String>,
    fix: Option<&str>,
) -> Check {
    Check {
        level,
        name,
        detail: detail.into(),
        fix: fix.map(str::to_owned),
    }
}
