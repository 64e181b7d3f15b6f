//! Declared search fields (`mysqlq-cli search-index add|list|drop PATH`,
//! `docs/design/dashboard.md` §3.4): a payload or meta path searched often gets an indexed
//! VIRTUAL generated column on `job_queue`, recorded in `mysqlq_search_field`, and the search
//! walks that index instead of reading rows (`store/search/field.rs`).
//!
//! DDL cannot bind, so the path is validated to plain segments (`[A-Za-z0-9_-]+`) before it is
//! formatted into the column's expression, and the column's name is made of those segments
//! (`mq_sf_args__order_id`) or, past [`MAX_COLUMN`] characters or when another declared path
//! differs only in case (column names are case-insensitive), cut and suffixed with a hash of
//! the path. Every DDL waits at most [`LOCK_WAIT_SECONDS`] for the table's metadata lock, so a
//! long transaction makes the command fail instead of queueing every claim behind it.

use serde::Serialize;
use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use crate::Error;
use crate::filter::{FieldValue, Filter, Segment};
use crate::state::Timestamp;

/// The longest column name: `idx_` + it is the index's name, at most 64 characters.
pub const MAX_COLUMN: usize = 60;
/// The longest wait for `job_queue`'s metadata lock before a DDL gives up.
pub const LOCK_WAIT_SECONDS: u32 = 10;
/// The prefix of every declared field's column.
pub const COLUMN_PREFIX: &str = "mq_sf_";

/// A declared search field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SearchField {
    /// The path as searched: `args.order_id`, `meta.tenant`.
    pub path: String,
    /// Its generated column on `job_queue`.
    pub column: String,
    /// Its index (`idx_` + the column).
    pub index: String,
    /// When it was declared.
    pub created_at: Timestamp,
    /// Whether the column exists now.
    pub column_exists: bool,
    /// Whether the index exists now.
    pub index_exists: bool,
}

/// A declared path, checked: its canonical form, its JSON column and JSON path, and the
/// column name its segments make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    /// Canonical: `args.order_id`.
    pub path: String,
    /// `payload` or `meta`.
    pub source_column: &'static str,
    /// `$."order_id"`: plain segments only, safe to format into DDL.
    pub json_path: String,
    /// `mq_sf_args__order_id` (before any hash suffix).
    pub column: String,
}

fn refuse(path: &str, why: impl std::fmt::Display) -> Error {
    Error::invalid("search field", format!("`{path}`: {why}"))
}

/// Checks `path` (`args.order_id`, `meta.tenant`, `args.items.0.sku`) as a declared field:
/// an `args.`/`meta.` path of plain segments.
pub fn field_path(path: &str) -> Result<FieldPath, Error> {
    let fix = "write args.<path> or meta.<path> with segments of A-Z a-z 0-9 _ - joined by \
               dots, e.g. args.order_id";
    if path.is_empty() || path.contains(':') || path.trim() != path {
        return Err(refuse(path, format!("not a field path; {fix}")));
    }
    let filter = Filter::parse(&format!("{path}:*"))
        .map_err(|e| refuse(path, format!("not a field path ({e}); {fix}")))?;
    let mut rest = filter.clone();
    rest.fields.clear();
    let [term] = filter.fields.as_slice() else {
        return Err(refuse(path, format!("not a field path; {fix}")));
    };
    if !rest.is_empty() || term.values != [FieldValue::Exists] {
        return Err(refuse(path, format!("not a field path; {fix}")));
    }
    let mut column = format!("{COLUMN_PREFIX}{}", term.source.as_str());
    for seg in &term.path {
        let text = match seg {
            Segment::Key(k) => k.clone(),
            Segment::Index(i) => i.to_string(),
        };
        let plain = !text.is_empty()
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !plain {
            return Err(refuse(
                path,
                format!(
                    "segment `{text}` has characters other than A-Z a-z 0-9 _ - (a path is \
                     written into the column's definition, which cannot take a bound value); {fix}"
                ),
            ));
        }
        column.push_str("__");
        column.push_str(&text);
    }
    let canonical = term.qualifier();
    if canonical != path {
        return Err(refuse(
            path,
            format!("write it as `{canonical}` (no quotes); {fix}"),
        ));
    }
    Ok(FieldPath {
        path: canonical,
        source_column: term.source.column(),
        json_path: term.json_path(),
        column,
    })
}

/// FNV-1a, 64 bits: a stable hash for column names (not for security).
fn fnv1a(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The column of `field`: its plain name when it fits and `taken` (the columns of other
/// declared paths) holds no name equal to it ignoring case; else cut to fit a `_` and 16 hex
/// digits of the path's hash.
pub fn column_name(field: &FieldPath, taken: &[String]) -> String {
    let plain = &field.column;
    let clash = taken.iter().any(|t| t.eq_ignore_ascii_case(plain));
    if plain.len() <= MAX_COLUMN && !clash {
        return plain.clone();
    }
    let head: String = plain.chars().take(MAX_COLUMN - 17).collect();
    format!("{head}_{:016x}", fnv1a(&field.path))
}

/// A column name read back from `mysqlq_search_field`, fit to be formatted into SQL.
pub(crate) fn safe_column(name: &str) -> bool {
    name.starts_with(COLUMN_PREFIX)
        && name.len() <= MAX_COLUMN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `search_field_declared`: `(path, column)` of every declared field whose column name is safe
/// (the search's planner reads this per search: one primary-key scan of a small table).
pub async fn search_field_declared(
    conn: &mut MySqlConnection,
) -> Result<Vec<(String, String)>, Error> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "/* mysqlq:search_field_declared */ SELECT CAST(path AS CHAR), CAST(column_name AS CHAR) \
         FROM mysqlq_search_field ORDER BY path",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().filter(|(_, c)| safe_column(c)).collect())
}

/// The columns and indexes of `job_queue` whose names start with [`COLUMN_PREFIX`] /
/// `idx_` + it.
async fn existing(conn: &mut MySqlConnection) -> Result<(Vec<String>, Vec<String>), Error> {
    let columns: Vec<String> = sqlx::query_scalar(
        "/* mysqlq:search_field_columns */ SELECT CAST(column_name AS CHAR) \
         FROM information_schema.columns WHERE table_schema = DATABASE() \
         AND table_name = 'job_queue' AND column_name LIKE 'mq!_sf!_%' ESCAPE '!'",
    )
    .fetch_all(&mut *conn)
    .await?;
    let indexes: Vec<String> = sqlx::query_scalar(
        "/* mysqlq:search_field_indexes */ SELECT DISTINCT CAST(index_name AS CHAR) \
         FROM information_schema.statistics WHERE table_schema = DATABASE() \
         AND table_name = 'job_queue' AND index_name LIKE 'idx!_mq!_sf!_%' ESCAPE '!'",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok((columns, indexes))
}

/// `search_field_list`: every declared field, by path, with whether its column and index
/// exist.
pub async fn search_field_list(conn: &mut MySqlConnection) -> Result<Vec<SearchField>, Error> {
    let rows = sqlx::query(
        "/* mysqlq:search_field_list */ SELECT CAST(path AS CHAR) AS path, \
         CAST(column_name AS CHAR) AS column_name, created_at FROM mysqlq_search_field \
         ORDER BY path",
    )
    .fetch_all(&mut *conn)
    .await?;
    let (columns, indexes) = existing(conn).await?;
    let has = |list: &[String], name: &str| list.iter().any(|c| c.eq_ignore_ascii_case(name));
    rows.iter()
        .map(|r| {
            let column: String = r.try_get("column_name")?;
            let index = format!("idx_{column}");
            Ok(SearchField {
                path: r.try_get("path")?,
                column_exists: has(&columns, &column),
                index_exists: has(&indexes, &index),
                index,
                column,
                created_at: r.try_get("created_at")?,
            })
        })
        .collect()
}

/// Runs a DDL statement with `tail` (an `ALGORITHM`/`LOCK` clause) and, if the server refuses
/// that clause (1845, 1846: not supported for this change), without it.
async fn ddl(conn: &mut MySqlConnection, stmt: &str, tail: &str) -> Result<(), Error> {
    let first = sqlx::query(AssertSqlSafe(format!("{stmt}{tail}")))
        .execute(&mut *conn)
        .await;
    match first {
        Ok(_) => Ok(()),
        Err(e) if matches!(crate::store::sqlx_error_number(&e), Some(1845 | 1846)) => {
            sqlx::query(AssertSqlSafe(stmt.to_owned()))
                .execute(&mut *conn)
                .await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

async fn bounded_lock_wait(conn: &mut MySqlConnection) -> Result<(), Error> {
    sqlx::query(AssertSqlSafe(format!(
        "/* mysqlq:search_field_lock_wait */ SET SESSION lock_wait_timeout = {LOCK_WAIT_SECONDS}"
    )))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// What [`Admin::add_search_field`](crate::admin::Admin::add_search_field) did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SearchFieldAdded {
    /// The field, as declared now.
    pub field: SearchField,
    /// The column was created (it did not exist).
    pub created_column: bool,
    /// The index was created (it did not exist).
    pub created_index: bool,
    /// The path was declared already (its row existed).
    pub was_declared: bool,
}

/// `search_field_add`: declares `path`: creates its VIRTUAL column (`ALGORITHM=INSTANT` where
/// the server can), its index (`ALGORITHM=INPLACE, LOCK=NONE` where it can), then records it.
/// Re-running it completes a declaration a failure left half done; the search uses the field
/// once it is recorded, so never before its index exists.
pub async fn search_field_add(
    conn: &mut MySqlConnection,
    path: &str,
) -> Result<SearchFieldAdded, Error> {
    let field = field_path(path)?;
    let declared = search_field_declared(conn).await?;
    let was = declared.iter().find(|(p, _)| *p == field.path).cloned();
    let column = match &was {
        Some((_, c)) => c.clone(),
        None => {
            let taken: Vec<String> = declared.iter().map(|(_, c)| c.clone()).collect();
            column_name(&field, &taken)
        }
    };
    let index = format!("idx_{column}");
    let (columns, indexes) = existing(conn).await?;
    let has = |list: &[String], name: &str| list.iter().any(|c| c.eq_ignore_ascii_case(name));
    bounded_lock_wait(conn).await?;
    let created_column = !has(&columns, &column);
    if created_column {
        // Plain segments only (field_path): the JSON path is safe in the text.
        let stmt = format!(
            "/* mysqlq:search_field_add_column */ ALTER TABLE job_queue ADD COLUMN `{column}` \
             VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin AS \
             (LEFT(JSON_UNQUOTE(JSON_EXTRACT({}, '{}')), 191)) VIRTUAL",
            field.source_column, field.json_path
        );
        ddl(conn, &stmt, ", ALGORITHM = INSTANT").await?;
    }
    let created_index = !has(&indexes, &index);
    if created_index {
        let stmt = format!(
            "/* mysqlq:search_field_add_index */ ALTER TABLE job_queue ADD KEY `{index}` (`{column}`)"
        );
        if let Err(e) = ddl(conn, &stmt, ", ALGORITHM = INPLACE, LOCK = NONE").await {
            if created_column {
                // Leave nothing half made by this run (best effort: the error is what counts).
                let _ = ddl(
                    conn,
                    &format!(
                        "/* mysqlq:search_field_drop_column */ ALTER TABLE job_queue DROP COLUMN `{column}`"
                    ),
                    "",
                )
                .await;
            }
            return Err(e);
        }
    }
    sqlx::query(
        "/* mysqlq:search_field_insert */ INSERT INTO mysqlq_search_field \
         (path, column_name, created_at) VALUES (?, ?, UTC_TIMESTAMP(6)) \
         ON DUPLICATE KEY UPDATE column_name = VALUES(column_name)",
    )
    .bind(&field.path)
    .bind(&column)
    .execute(&mut *conn)
    .await?;
    let field = search_field_list(conn)
        .await?
        .into_iter()
        .find(|f| f.path == field.path)
        .ok_or_else(|| refuse(path, "was recorded, then not found; run it again"))?;
    Ok(SearchFieldAdded {
        field,
        created_column,
        created_index,
        was_declared: was.is_some(),
    })
}

/// `search_field_drop`: forgets `path` first (searches stop using it), then drops its index
/// and column (those that exist). `None` when `path` is not declared.
pub async fn search_field_drop(
    conn: &mut MySqlConnection,
    path: &str,
) -> Result<Option<SearchField>, Error> {
    let field = field_path(path)?;
    let Some(found) = search_field_list(conn)
        .await?
        .into_iter()
        .find(|f| f.path == field.path)
    else {
        return Ok(None);
    };
    if !safe_column(&found.column) {
        return Err(refuse(
            path,
            format!(
                "its recorded column `{}` is not a name mysqlq makes; drop it by hand",
                found.column
            ),
        ));
    }
    sqlx::query("/* mysqlq:search_field_delete */ DELETE FROM mysqlq_search_field WHERE path = ?")
        .bind(&found.path)
        .execute(&mut *conn)
        .await?;
    bounded_lock_wait(conn).await?;
    if found.index_exists {
        ddl(
            conn,
            &format!(
                "/* mysqlq:search_field_drop_index */ ALTER TABLE job_queue DROP KEY `{}`",
                found.index
            ),
            ", ALGORITHM = INPLACE, LOCK = NONE",
        )
        .await?;
    }
    if found.column_exists {
        ddl(
            conn,
            &format!(
                "/* mysqlq:search_field_drop_column */ ALTER TABLE job_queue DROP COLUMN `{}`",
                found.column
            ),
            ", ALGORITHM = INSTANT",
        )
        .await?;
    }
    Ok(Some(found))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_plain_segments_and_name_their_column() {
        let f = field_path("args.order_id").unwrap();
        assert_eq!(f.column, "mq_sf_args__order_id");
        assert_eq!(f.json_path, "$.\"order_id\"");
        assert_eq!(f.source_column, "payload");
        let f = field_path("meta.tenant-id.0").unwrap();
        assert_eq!(f.column, "mq_sf_meta__tenant-id__0");
        assert_eq!(f.json_path, "$.\"tenant-id\"[0]");
        for bad in [
            "order_id",
            "args",
            "args.",
            "args..x",
            "args.\"a b\"",
            "args.\"x'y\"",
            "kind",
            "state:ready",
            " args.x",
            "args.x kind:y",
            "args.x:1",
        ] {
            let e = field_path(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("`{bad}`")), "{bad}: {e}");
            assert!(e.contains("e.g. args.order_id"), "{bad}: {e}");
        }
    }

    #[test]
    fn long_or_clashing_columns_get_a_hash_suffix() {
        let long = format!("args.{}", "segment_".repeat(8));
        let f = field_path(long.trim_end_matches('_')).unwrap();
        let c = column_name(&f, &[]);
        assert_eq!(c.len(), MAX_COLUMN);
        assert!(c.starts_with("mq_sf_args__segment_segment_"), "{c}");
        assert!(safe_column(&c));
        let other = field_path(&format!("{}x", long.trim_end_matches('_'))).unwrap();
        assert_ne!(column_name(&other, &[]), c);
        let upper = field_path("args.Order_Id").unwrap();
        assert_eq!(column_name(&upper, &[]), "mq_sf_args__Order_Id");
        let clash = column_name(&upper, &["mq_sf_args__order_id".to_owned()]);
        assert!(
            clash.starts_with("mq_sf_args__Order_Id_") && clash.len() == 37,
            "{clash}"
        );
        assert!(!safe_column("mq_sf_x`; DROP TABLE job_queue"));
        assert!(!safe_column("payload"));
    }
}
