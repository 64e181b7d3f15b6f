//! Text and binds of the search statements ([`super`]): every value is bound, JSON paths too;
//! only fixed fragments and placeholders are formatted into the text.

use sqlx::{AssertSqlSafe, MySql, mysql::MySqlArguments, query::Query};

use super::{Bounds, FieldTest, Plan, Source, Walk};
use crate::state::{OpState, Timestamp};

/// A bound value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Bind {
    U64(u64),
    I64(i64),
    Str(String),
    Ts(Timestamp),
}

/// A statement under construction: its text and its binds, in order.
#[derive(Debug, Clone, Default)]
pub(super) struct Sql {
    pub(super) text: String,
    pub(super) binds: Vec<Bind>,
}

impl Sql {
    pub(super) fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    pub(super) fn bind(&mut self, b: Bind) -> &mut Self {
        self.text.push('?');
        self.binds.push(b);
        self
    }

    pub(super) fn append(&mut self, other: Sql) -> &mut Self {
        self.text.push_str(&other.text);
        self.binds.extend(other.binds);
        self
    }

    /// `(?, ?, …)` of strings.
    pub(super) fn list(&mut self, values: &[String]) -> &mut Self {
        self.push("(");
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.bind(Bind::Str(v.clone()));
        }
        self.push(")")
    }

    pub(super) fn query(&self) -> Query<'_, MySql, MySqlArguments> {
        let mut q = sqlx::query(AssertSqlSafe(self.text.clone()));
        for b in &self.binds {
            q = match b {
                Bind::U64(v) => q.bind(*v),
                Bind::I64(v) => q.bind(*v),
                Bind::Str(v) => q.bind(v.as_str()),
                Bind::Ts(v) => q.bind(*v),
            };
        }
        q
    }
}

/// `1` when a pending row is held back by a limit, as [`OpState::RateLimited`] defines it: a
/// live 429 hold names the job; or it is due and its queue is closed (`closed` lists the
/// queues held, at their rate or at their global limit, read before), or its key's bucket is
/// closed or the key is held.
pub(super) fn limited(now: Timestamp, closed: &[String]) -> Sql {
    let mut s = Sql::default();
    s.push(
        "(EXISTS (SELECT 1 FROM mysqlq_rate_hold h WHERE h.queue_name = j.queue_name \
              AND h.job_id = j.id AND h.held_until > ",
    )
    .bind(Bind::Ts(now))
    .push(") OR (j.available_at <= ")
    .bind(Bind::Ts(now))
    .push(" AND (");
    if closed.is_empty() {
        s.push("FALSE");
    } else {
        s.push("j.queue_name IN ").list(closed);
    }
    s.push(
        " OR (j.rate_key IS NOT NULL AND (EXISTS (SELECT 1 FROM mysqlq_rate_bucket b \
              WHERE b.queue_name = j.queue_name AND b.rate_key = j.rate_key AND b.open_at > ",
    )
    .bind(Bind::Ts(now))
    .push(
        ") OR EXISTS (SELECT 1 FROM mysqlq_rate_hold k WHERE k.queue_name = j.queue_name \
              AND k.rate_key = j.rate_key AND k.held_until > ",
    )
    .bind(Bind::Ts(now))
    .push("))))))");
    s
}

/// The condition of one pending state on a row (`limited` is [`limited`]'s text).
fn pending_state(st: OpState, now: Timestamp, lim: &Sql) -> Sql {
    let mut s = Sql::default();
    match st {
        OpState::RateLimited => {
            s.append(lim.clone());
        }
        OpState::Ready => {
            s.push("(j.available_at <= ")
                .bind(Bind::Ts(now))
                .push(" AND NOT ");
            s.append(lim.clone()).push(")");
        }
        OpState::Retrying | OpState::Scheduled => {
            let a = if st == OpState::Retrying {
                "> 0"
            } else {
                "= 0"
            };
            s.push("(j.available_at > ")
                .bind(Bind::Ts(now))
                .push(&format!(" AND j.attempts {a} AND NOT "));
            s.append(lim.clone()).push(")");
        }
        _ => {
            s.push("FALSE");
        }
    }
    s
}

/// A row's membership in the state set (`states` non-empty), for any status.
pub(super) fn states_predicate(states: &[OpState], now: Timestamp, closed: &[String]) -> Sql {
    let lim = limited(now, closed);
    let mut parts: Vec<Sql> = Vec::new();
    let pending: Vec<OpState> = states
        .iter()
        .copied()
        .filter(|s| s.status() == crate::state::JobState::Pending)
        .collect();
    if !pending.is_empty() {
        let mut s = Sql::default();
        s.push("(j.status = 'pending'");
        if pending.len() < 4 {
            s.push(" AND (");
            for (i, st) in pending.iter().enumerate() {
                if i > 0 {
                    s.push(" OR ");
                }
                s.append(pending_state(*st, now, &lim));
            }
            s.push(")");
        }
        s.push(")");
        parts.push(s);
    }
    let relay = crate::store::relay::RELAY_PREFIX;
    for st in states {
        let mut s = Sql::default();
        match st {
            OpState::Waiting => s.push("j.status = 'waiting'"),
            OpState::Completed => s.push("j.status = 'completed'"),
            OpState::Failed => s.push("j.status = 'failed'"),
            OpState::Cancelled => s.push("j.status = 'cancelled'"),
            OpState::Running => s
                .push("(j.status = 'processing' AND (j.locked_by IS NULL OR j.locked_by NOT LIKE ")
                .bind(Bind::Str(format!("{relay}%")))
                .push("))"),
            OpState::Ready => s
                .push("(j.status = 'processing' AND j.locked_by LIKE ")
                .bind(Bind::Str(format!("{relay}%")))
                .push(")"),
            _ => continue,
        };
        parts.push(s);
    }
    let mut out = Sql::default();
    out.push("(");
    for (i, p) in parts.into_iter().enumerate() {
        if i > 0 {
            out.push(" OR ");
        }
        out.append(p);
    }
    out.push(")");
    out
}

pub(super) fn bounds(s: &mut Sql, col: &str, b: &Bounds) {
    if let Some(lo) = b.from {
        s.push(&format!(" AND {col} >= ")).bind(Bind::Ts(lo));
    }
    if let Some(hi) = b.until {
        s.push(&format!(" AND {col} < ")).bind(Bind::Ts(hi));
    }
}

/// Filters the walk's index entries hold: queue, kind, attempts, id.
pub(super) fn entry_filters(plan: &Plan) -> Sql {
    let mut s = Sql::default();
    if !plan.ids.is_empty() {
        s.push(" AND j.id IN (");
        for (i, id) in plan.ids.iter().enumerate() {
            if i > 0 {
                s.push(", ");
            }
            s.bind(Bind::U64(*id));
        }
        s.push(")");
    }
    if !plan.queues.is_empty() {
        s.push(" AND j.queue_name IN ").list(&plan.queues);
    }
    if !plan.kinds.is_empty() {
        s.push(" AND j.kind IN ").list(&plan.kinds);
    }
    if let Some((lo, hi)) = plan.attempts {
        s.push(" AND j.attempts BETWEEN ")
            .bind(Bind::I64(lo))
            .push(" AND ")
            .bind(Bind::I64(hi));
    }
    s
}

/// Filters that read the row: payload and meta fields, worker, error, workflow, priority and
/// the time columns other than the walk's own (that one bounds the walk's ranges).
pub(super) fn row_filters(plan: &Plan, walk: Walk) -> Sql {
    let mut s = Sql::default();
    bounds(&mut s, "j.created_at", &plan.created);
    if walk != Walk::Due {
        bounds(&mut s, "j.available_at", &plan.due);
    }
    if walk != Walk::Finished {
        bounds(&mut s, "j.finished_at", &plan.finished);
    }
    if let Some((lo, hi)) = plan.priority {
        s.push(" AND j.priority BETWEEN ")
            .bind(Bind::I64(lo))
            .push(" AND ")
            .bind(Bind::I64(hi));
    }
    if !plan.workers.is_empty() {
        s.push(" AND j.locked_by IN ").list(&plan.workers);
    }
    if !plan.workflows.is_empty() {
        s.push(" AND j.workflow_id IN (");
        for (i, w) in plan.workflows.iter().enumerate() {
            if i > 0 {
                s.push(", ");
            }
            s.bind(Bind::U64(*w));
        }
        s.push(")");
    }
    if !plan.errors.is_empty() {
        s.push(" AND (");
        for (i, e) in plan.errors.iter().enumerate() {
            if i > 0 {
                s.push(" OR ");
            }
            s.push("j.last_error LIKE ")
                .bind(Bind::Str(crate::filter::like_substring(e)))
                .push(" ESCAPE '!'");
        }
        s.push(")");
    }
    for f in &plan.fields {
        let col = match f.source {
            Source::Args => "j.payload",
            Source::Meta => "j.meta",
        };
        s.push(" AND (");
        for (i, t) in f.tests.iter().enumerate() {
            if i > 0 {
                s.push(" OR ");
            }
            match t {
                FieldTest::Exists => {
                    s.push(&format!("JSON_CONTAINS_PATH({col}, 'one', "))
                        .bind(Bind::Str(f.path.clone()))
                        .push(")");
                }
                FieldTest::Equals(v) => {
                    s.push(&format!("JSON_UNQUOTE(JSON_EXTRACT({col}, "))
                        .bind(Bind::Str(f.path.clone()))
                        .push(")) = CONVERT(")
                        .bind(Bind::Str(v.clone()))
                        .push(" USING utf8mb4) COLLATE utf8mb4_bin");
                }
            }
        }
        s.push(")");
    }
    s
}
