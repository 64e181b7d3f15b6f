//! `Admin::act`: run now, retry, cancel or delete jobs by id or every job a search matched,
//! never more than the count the operator confirmed, each change linked to the audit trail in
//! the transaction that makes it.

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use super::{Admin, Counted};
use crate::filter::Filter;
use crate::store::admin::BULK_CHUNK;
use crate::store::search::{self as sql, Action, Actor, BulkState};
use crate::{Error, JobId};

/// The jobs [`Admin::act`] acts on.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// These ids (those the action does not apply to are left and counted).
    Ids(&'a [JobId]),
    /// Every job `filter` matches, as [`Admin::count_matching`] counted them: at most
    /// `confirmed.count` jobs change, none with an id above `confirmed.horizon`, and each
    /// still matches the search and the action's guard when it changes.
    Matching {
        /// The search.
        filter: &'a Filter,
        /// The count the operator confirmed.
        confirmed: Counted,
    },
}

/// What [`Admin::act`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ActReport {
    /// The action's audit record (`mysqlq_audit.id`).
    pub audit: u64,
    /// Jobs changed.
    pub changed: u64,
    /// Jobs looked at but left: they no longer matched the search or the action's guard
    /// (claimed, finished, retried by someone else), or the confirmed count was reached.
    pub left: u64,
    /// Stopped by the stop flag before the end.
    pub stopped: bool,
    /// For a search: how many jobs match it now (after the action), among all ids: jobs that
    /// entered the search after the count, or that it left; `None` for ids.
    pub match_now: Option<u64>,
}

impl Admin {
    /// Runs `action` on `target`, in chunks of 500, each in its own transaction, recorded in
    /// the audit trail (this handle's actor and reason, the confirmed count as `expected`, the
    /// state `running` → `done`, `stopped` or `failed`). `stop` is checked between chunks;
    /// `progress` gets the report so far once the audit record exists (its id in
    /// [`ActReport::audit`], nothing changed yet) and after each chunk.
    pub async fn act(
        &self,
        action: Action,
        target: Target<'_>,
        stop: Option<&AtomicBool>,
        mut progress: impl FnMut(&ActReport),
    ) -> Result<ActReport, Error> {
        let mut conn = self.pool.acquire().await?;
        let (detail, expected) = match target {
            Target::Ids(ids) => {
                let mut unique = ids.to_vec();
                unique.sort_unstable_by_key(|id| id.0);
                unique.dedup();
                (super::audit::name_ids(ids), unique.len() as u64)
            }
            Target::Matching { filter, confirmed } => (
                format!(
                    "search `{filter}`; {} counted with ids up to {}",
                    confirmed.count, confirmed.horizon
                ),
                confirmed.count,
            ),
        };
        let audit = self
            .record_entry(&mut conn, action.as_str(), None, None, Some(&detail))
            .await?
            .expect("the trail records every action");
        sql::audit_bulk_state(&mut conn, audit, Some(expected), BulkState::Running).await?;
        let who = Actor {
            audit,
            by: self.actor(),
            reason: self.reason.as_deref(),
        };
        let mut report = ActReport {
            audit,
            ..ActReport::default()
        };
        progress(&report);
        let walked = self
            .walk(
                &mut conn,
                action,
                target,
                expected,
                &who,
                stop,
                &mut report,
                &mut progress,
            )
            .await;
        let state = match &walked {
            Err(_) => BulkState::Failed,
            Ok(()) if report.stopped => BulkState::Stopped,
            Ok(()) => BulkState::Done,
        };
        sql::audit_bulk_state(&mut conn, audit, None, state).await?;
        walked?;
        if let Target::Matching { filter, .. } = target {
            let (now, _) =
                sql::count_matching(&mut conn, filter, super::COUNT_TIMEOUT_SECONDS).await?;
            report.match_now = Some(now);
        }
        Ok(report)
    }

    #[allow(clippy::too_many_arguments)]
    async fn walk(
        &self,
        conn: &mut sqlx::MySqlConnection,
        action: Action,
        target: Target<'_>,
        expected: u64,
        who: &Actor<'_>,
        stop: Option<&AtomicBool>,
        report: &mut ActReport,
        progress: &mut impl FnMut(&ActReport),
    ) -> Result<(), Error> {
        let stopped = || stop.is_some_and(|s| s.load(Ordering::SeqCst));
        match target {
            Target::Ids(ids) => {
                for chunk in ids.chunks(BULK_CHUNK) {
                    if stopped() {
                        report.stopped = true;
                        break;
                    }
                    let budget = expected - report.changed;
                    let c = sql::job_act_chunk(conn, action, None, chunk, u64::MAX, budget, who)
                        .await?;
                    report.changed += c.changed.len() as u64;
                    report.left += c.left;
                    progress(report);
                }
            }
            Target::Matching { filter, confirmed } => {
                let mut cursor = None;
                loop {
                    if stopped() {
                        report.stopped = true;
                        break;
                    }
                    let page = sql::search(conn, filter, cursor, sql::MAX_PAGE).await?;
                    let candidates: Vec<JobId> = page
                        .rows
                        .iter()
                        .map(|r| r.id)
                        .filter(|id| id.0 <= confirmed.horizon)
                        .collect();
                    let budget = expected - report.changed;
                    let c = sql::job_act_chunk(
                        conn,
                        action,
                        Some(filter),
                        &candidates,
                        confirmed.horizon,
                        budget,
                        who,
                    )
                    .await?;
                    report.changed += c.changed.len() as u64;
                    report.left += c.left;
                    progress(report);
                    match page.next {
                        Some(next) if report.changed < expected => cursor = Some(next),
                        _ => break,
                    }
                }
            }
        }
        Ok(())
    }
}
