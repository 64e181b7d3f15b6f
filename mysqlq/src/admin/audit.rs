//! Who did what: the audit trail of operator actions (who, when, what, on which queue or jobs,
//! why), and the counts a confirmation shows before a bulk action.

use std::time::Duration;

use sqlx::MySqlConnection;

use super::{Admin, JobState, Selection};
use crate::store::admin::{self as sql, AuditEntry, AuditQuery, AuditRecord};
use crate::{Error, JobId};

/// Longest actor name, in characters.
const MAX_ACTOR: usize = 128;
/// Longest reason, in characters.
const MAX_REASON: usize = 1024;
/// Ids named in an action's `detail` before it says "and N more".
const DETAIL_IDS: usize = 50;

impl Admin {
    /// Who the audit trail names for actions of an [`Admin`] no [`by`](Self::by) renamed.
    pub const DEFAULT_ACTOR: &'static str = "api";

    /// Records this handle's actions as taken by `actor` (a user name, `cli:alice`,
    /// `dashboard:bob`): 1 to 128 characters, checked when an action is taken.
    #[must_use]
    pub fn by(mut self, actor: impl Into<String>) -> Self {
        self.actor = actor.into().trim().to_owned();
        self
    }

    /// Records `reason` as why this handle's actions are taken (a cancel's own reason wins for
    /// that cancel). At most 1024 characters, checked when an action is taken.
    #[must_use]
    pub fn because(mut self, reason: impl Into<String>) -> Self {
        let reason = reason.into().trim().to_owned();
        self.reason = (!reason.is_empty()).then_some(reason);
        self
    }

    /// Who this handle's actions are recorded as taken by.
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// Recorded operator actions, newest first: all of them, those aimed at one queue, or
    /// those that changed one job ([`AuditQuery`]). Kept as long as failed jobs are (the
    /// workers' failed retention).
    pub async fn audit(&self, query: &AuditQuery<'_>) -> Result<Vec<AuditRecord>, Error> {
        let mut conn = self.pool.acquire().await?;
        sql::audit_list(&mut conn, query).await
    }

    /// How many jobs [`purge`](Self::purge) would delete now.
    pub async fn purge_count(&self, state: JobState, older_than: Duration) -> Result<u64, Error> {
        let status = super::prune_status(state)?;
        let mut conn = self.pool.acquire().await?;
        crate::store::job_prunable_count(&mut conn, status, older_than).await
    }

    /// Records that a bulk action on failed jobs begins; returns its id for the statements.
    pub(super) async fn record(
        &self,
        conn: &mut MySqlConnection,
        action: &str,
        which: &Selection<'_>,
    ) -> Result<Option<u64>, Error> {
        let (queue, detail) = match which {
            Selection::Ids(ids) => (None, name_ids(ids)),
            Selection::All { queue } => (
                *queue,
                "every job that was failed when the action began".to_owned(),
            ),
        };
        self.record_entry(conn, action, queue, None, Some(&detail))
            .await
    }

    /// Records that an action begins; returns its id for the statements.
    pub(super) async fn record_entry(
        &self,
        conn: &mut MySqlConnection,
        action: &str,
        queue: Option<&str>,
        kind: Option<&str>,
        detail: Option<&str>,
    ) -> Result<Option<u64>, Error> {
        self.record_as(
            conn,
            &AuditEntry {
                actor: &self.actor,
                action,
                queue,
                kind,
                reason: self.reason.as_deref(),
                detail,
            },
        )
        .await
    }

    /// Records `entry` (its actor and reason checked).
    pub(super) async fn record_as(
        &self,
        conn: &mut MySqlConnection,
        entry: &AuditEntry<'_>,
    ) -> Result<Option<u64>, Error> {
        check_actor(entry.actor)?;
        if entry.reason.is_some_and(|r| r.chars().count() > MAX_REASON) {
            return Err(Error::invalid(
                "reason",
                format!("is longer than {MAX_REASON} characters; shorten it"),
            ));
        }
        Ok(Some(sql::audit_insert(conn, entry).await?))
    }
}

/// Checks a name given for the audit trail (and `cancelled_by`).
pub(super) fn check_actor(actor: &str) -> Result<(), Error> {
    if actor.is_empty() || actor.chars().count() > MAX_ACTOR {
        return Err(Error::invalid(
            "acting operator",
            format!("name who acts in 1 to {MAX_ACTOR} characters (e.g. a user name)"),
        ));
    }
    Ok(())
}

/// `ids 1, 2, 3` (the first [`DETAIL_IDS`], then how many more).
pub(super) fn name_ids(ids: &[JobId]) -> String {
    let ids = unique(ids);
    let mut s = format!("ids {}", join(&ids[..ids.len().min(DETAIL_IDS)]));
    if ids.len() > DETAIL_IDS {
        s.push_str(&format!(" and {} more", ids.len() - DETAIL_IDS));
    }
    s
}

fn join(ids: &[JobId]) -> String {
    ids.iter()
        .map(|id| id.0.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn unique(ids: &[JobId]) -> Vec<JobId> {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    ids.iter().copied().filter(|id| seen.insert(id.0)).collect()
}
