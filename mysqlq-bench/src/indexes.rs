//! Secondary index entries of `job_queue` changed per job, computed from the schema.
//!
//! No server counter shows them: `Handler_update` and `Innodb_rows_updated` count rows, and
//! the performance schema's `table_io_waits_summary_by_index_usage` files a write under the
//! index the statement *read* by (inserts under none), not under the indexes it maintained. So
//! the bench counts them from what each side's statements write to a job's row
//! ([`RowWrite`], declared beside each side) and the indexes of the scratch database's
//! `job_queue`, read from `information_schema` at run time (so they follow the migrations):
//!
//! - an UPDATE changes one entry of every secondary index that has a column it assigns, or a
//!   column the server writes on every update (`ON UPDATE CURRENT_TIMESTAMP`) — in InnoDB the
//!   old entry is delete-marked and a new one inserted (purged later); the clustered record
//!   (the primary key) is not counted. Every column the drain's statements assign changes value
//!   (`status` moves on, the lease, token and times are written from NULL or anew), so none is
//!   counted for an unchanged value.
//! - a DELETE removes the row's entry from every secondary index; an INSERT adds one to each.
//! - a generated key part (`dedupe_active` of `uq_job_dedupe`) is not counted as changed by an
//!   UPDATE: it reads `status`, but it is NULL in every state of a job without a dedupe key, as
//!   the bench's are, and InnoDB leaves an entry whose value did not change alone.

use serde_json::{Value, json};

use crate::sql::BenchIndexPart;

/// What one statement does to a job's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// An UPDATE assigning these columns.
    Update(&'static [&'static str]),
    /// A DELETE of the row (a side that keeps no history of completed jobs; the drain then
    /// checks that no row is left instead of every row `completed`).
    Delete,
}

/// One statement's write to a job's row, once per job of a drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowWrite {
    /// What it is (`claim UPDATE`, `completion UPDATE`, `completion DELETE`).
    pub(crate) statement: &'static str,
    pub(crate) change: Change,
}

/// `job_queue`'s secondary indexes and the columns the server writes by itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JobQueueIndexes {
    /// Each secondary index with its key columns (expressions left out), in name order.
    indexes: Vec<(String, Vec<String>)>,
    /// Columns written on every UPDATE of the row (`ON UPDATE CURRENT_TIMESTAMP`).
    on_update: Vec<String>,
    /// Generated columns.
    generated: Vec<String>,
}

impl JobQueueIndexes {
    /// From `information_schema`: the indexes' key parts and every column with its `EXTRA`.
    pub(crate) fn new(parts: &[BenchIndexPart], columns: &[(String, String)]) -> Self {
        let mut indexes: Vec<(String, Vec<String>)> = Vec::new();
        for p in parts {
            if indexes.last().is_none_or(|(name, _)| *name != p.index) {
                indexes.push((p.index.clone(), Vec::new()));
            }
            if let (Some((_, cols)), Some(c)) = (indexes.last_mut(), &p.column) {
                cols.push(c.to_lowercase());
            }
        }
        let with = |word: &str| {
            columns
                .iter()
                .filter(|(_, extra)| extra.contains(word))
                .map(|(c, _)| c.to_lowercase())
                .collect()
        };
        Self {
            indexes,
            on_update: with("on update"),
            generated: with("generated"),
        }
    }

    /// The secondary indexes `w` changes an entry of.
    pub(crate) fn touched(&self, w: &RowWrite) -> Vec<&str> {
        let changed: Vec<String> = match w.change {
            Change::Delete => {
                return self.indexes.iter().map(|(n, _)| n.as_str()).collect();
            }
            Change::Update(cols) => cols
                .iter()
                .map(|c| c.to_lowercase())
                .chain(self.on_update.iter().cloned())
                .filter(|c| !self.generated.contains(c))
                .collect(),
        };
        self.indexes
            .iter()
            .filter(|(_, cols)| cols.iter().any(|c| changed.contains(c)))
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// Entries changed per job by `writes`: the total and, per statement, its columns and the
    /// indexes it changes.
    pub(crate) fn per_job(&self, writes: &[RowWrite]) -> Value {
        let statements: Vec<Value> = writes
            .iter()
            .map(|w| {
                json!({
                    "statement": w.statement,
                    "columns": match w.change {
                        Change::Update(c) => json!(c),
                        Change::Delete => json!("the row"),
                    },
                    "indexes": self.touched(w),
                })
            })
            .collect();
        let total: usize = writes.iter().map(|w| self.touched(w).len()).sum();
        json!({
            "entries_per_job": total,
            "secondary_indexes": self.indexes.len(),
            "statements": statements,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(index: &str, column: &str) -> BenchIndexPart {
        BenchIndexPart {
            index: index.to_owned(),
            column: Some(column.to_owned()),
        }
    }

    #[test]
    fn an_update_changes_the_indexes_of_its_columns_and_a_delete_all() {
        let s = JobQueueIndexes::new(
            &[
                part("idx_claim", "queue_name"),
                part("idx_claim", "status"),
                part("idx_finished", "status"),
                part("idx_finished", "finished_at"),
                part("idx_seen", "updated_at"),
                part("uq_dedupe", "dedupe_active"),
                part("idx_ordering", "ordering_key"),
            ],
            &[
                ("status".into(), String::new()),
                ("updated_at".into(), "on update current_timestamp(6)".into()),
                ("dedupe_active".into(), "stored generated".into()),
            ],
        );
        let claim = RowWrite {
            statement: "claim UPDATE",
            change: Change::Update(&["status", "locked_by"]),
        };
        // `updated_at` changes with every update; the generated key part does not count.
        assert_eq!(s.touched(&claim), ["idx_claim", "idx_finished", "idx_seen"]);
        let lease = RowWrite {
            statement: "lease UPDATE",
            change: Change::Update(&["lease_expires_at"]),
        };
        assert_eq!(s.touched(&lease), ["idx_seen"]);
        let delete = RowWrite {
            statement: "completion DELETE",
            change: Change::Delete,
        };
        assert_eq!(s.touched(&delete).len(), 5);
        assert_eq!(s.per_job(&[claim, delete])["entries_per_job"], 8);
    }
}
