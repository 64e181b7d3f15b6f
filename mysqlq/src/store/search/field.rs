//! The walk of a declared search field (`store/search_fields.rs`, `docs/design/dashboard.md`
//! §3.4): when a search has an `args.`/`meta.` term on a declared path whose values are texts
//! (not `*`) and no `id:` term, it walks that field's index instead of the states' walk, one
//! `ref` range per text (`j.<column> = ?`), each in id order, merged newest id first. The term
//! is then exact on the index; every other filter is checked on the row (capped at
//! [`ROW_CAP`](super::ROW_CAP) a page, as on `PRIMARY`).
//!
//! The declared fields are read per search ([`declared`]: one scan of `mysqlq_search_field`,
//! a handful of rows, only for searches with such a term), so a field is used from the next
//! search after `search-index add` and not after `search-index drop`, in every process.

use sqlx::MySqlConnection;

use super::sql::{Bind, Sql};
use super::{FieldFilter, FieldTest, Part, Plan};
use crate::Error;
use crate::filter::MAX_VALUE_CHARS;

/// Whether the index of a declared field answers `f` exactly: texts only, each shorter than
/// the column's 191 characters (a text of 191 would also match a longer value's first 191).
fn walkable(f: &FieldFilter) -> bool {
    !f.tests.is_empty()
        && f.tests.iter().all(|t| match t {
            FieldTest::Equals(v) => v.chars().count() < MAX_VALUE_CHARS,
            FieldTest::Exists => false,
        })
}

/// The declared fields, `(path, column)`, when `plan` could walk one (no `id:` term, a
/// walkable field term); else none, without a statement.
pub(super) async fn declared(
    conn: &mut MySqlConnection,
    plan: &Plan,
) -> Result<Vec<(String, String)>, Error> {
    if !plan.ids.is_empty() || !plan.fields.iter().any(walkable) {
        return Ok(Vec::new());
    }
    crate::store::search_fields::search_field_declared(conn).await
}

/// The parts of the walk on a declared field's index, and the plan without that term (what is
/// left to check on the row); `None` when no term of `plan` is on a declared field. Of several,
/// the term with the fewest values is walked.
pub(super) fn walk(plan: &Plan, declared: &[(String, String)]) -> Option<(Vec<Part>, Plan)> {
    if !plan.ids.is_empty() {
        return None;
    }
    let (at, column) = plan
        .fields
        .iter()
        .enumerate()
        .filter(|(_, f)| walkable(f))
        .filter_map(|(i, f)| {
            declared
                .iter()
                .find(|(p, _)| *p == f.qualifier)
                .map(|(_, c)| (i, c))
        })
        .min_by_key(|(i, _)| plan.fields[*i].tests.len())?;
    let parts = plan.fields[at]
        .tests
        .iter()
        .filter_map(|t| match t {
            FieldTest::Equals(v) => {
                let mut range = Sql::default();
                // `column` is checked by `safe_column` when read; quoted besides.
                range
                    .push(&format!("j.`{column}` = CONVERT("))
                    .bind(Bind::Str(v.clone()))
                    .push(" USING utf8mb4) COLLATE utf8mb4_bin");
                Some(Part {
                    index: format!("`idx_{column}`"),
                    range,
                })
            }
            FieldTest::Exists => None,
        })
        .collect();
    let mut rest = plan.clone();
    rest.fields.remove(at);
    Some((parts, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::Filter;

    fn plan(q: &str) -> Plan {
        Plan::of(&Filter::parse(q).unwrap(), chrono::Utc::now())
    }

    #[test]
    fn a_declared_text_term_is_walked_and_leaves_the_plan() {
        let declared = vec![
            (
                "args.order_id".to_owned(),
                "mq_sf_args__order_id".to_owned(),
            ),
            ("meta.tenant".to_owned(), "mq_sf_meta__tenant".to_owned()),
        ];
        let p = plan("state:failed args.order_id:1,2 meta.tenant:acme kind:k");
        let (parts, rest) = walk(&p, &declared).unwrap();
        // The term with the fewest values.
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].index, "`idx_mq_sf_meta__tenant`");
        assert!(
            parts[0]
                .range
                .text
                .starts_with("j.`mq_sf_meta__tenant` = CONVERT(?")
        );
        assert_eq!(rest.fields.len(), 1);
        assert_eq!(rest.fields[0].qualifier, "args.order_id");
        assert_eq!(rest.states, p.states);
        assert_eq!(rest.kinds, p.kinds);
        let (parts, _) = walk(&plan("args.order_id:1,2,3"), &declared).unwrap();
        assert_eq!(parts.len(), 3);
        for q in [
            "args.order_id:*",
            "args.order_id:1,*",
            "args.other:1",
            "id:5 args.order_id:1",
            "state:ready",
        ] {
            assert!(walk(&plan(q), &declared).is_none(), "{q}");
        }
        let long = format!("args.order_id:{}", "x".repeat(MAX_VALUE_CHARS));
        assert!(walk(&plan(&long), &declared).is_none());
        assert!(walk(&plan("args.order_id:1"), &[]).is_none());
    }
}
