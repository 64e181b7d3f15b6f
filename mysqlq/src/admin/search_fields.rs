//! Declared search fields: `Admin::add_search_field`, `search_fields`, `drop_search_field`
//! (`mysqlq-cli search-index`; statements in `store/search_fields.rs`). Adding and dropping
//! are recorded in the audit trail.

use super::Admin;
use crate::Error;
use crate::store::search_fields as sql;

pub use crate::store::search_fields::{SearchField, SearchFieldAdded};

impl Admin {
    /// Declares `path` (`args.order_id`, `meta.tenant`: plain segments of `A-Z a-z 0-9 _ -`)
    /// a search field: adds a VIRTUAL generated column holding the first 191 characters of
    /// the path's text (`ALGORITHM=INSTANT` where the server can) and an index on it (online,
    /// `ALGORITHM=INPLACE, LOCK=NONE`, where it can), then records it, after which
    /// [`search`](Self::search) and [`count_matching`](Self::count_matching) walk that index
    /// for a term on the path. Each field costs an index update on every insert and delete of
    /// a job. Running it again completes a declaration that failed half way. Each DDL waits at
    /// most 10 s for the table's metadata lock (a long transaction on `job_queue` holds it).
    pub async fn add_search_field(&self, path: &str) -> Result<SearchFieldAdded, Error> {
        // The trail's name is checked before the table changes, not after.
        super::audit::check_actor(self.actor())?;
        let mut conn = self.pool.acquire().await?;
        let added = sql::search_field_add(&mut conn, path).await?;
        if added.created_column || added.created_index || !added.was_declared {
            let detail = format!(
                "search field `{}`: column {}, index {}",
                added.field.path, added.field.column, added.field.index
            );
            self.record_entry(&mut conn, "search_index_add", None, None, Some(&detail))
                .await?;
        }
        Ok(added)
    }

    /// The declared search fields, by path, with whether each one's column and index exist.
    pub async fn search_fields(&self) -> Result<Vec<SearchField>, Error> {
        let mut conn = self.pool.acquire().await?;
        sql::search_field_list(&mut conn).await
    }

    /// Forgets the declared search field `path` (searches stop using it at once), then drops
    /// its index and column. An error naming the declared fields when `path` is not one.
    pub async fn drop_search_field(&self, path: &str) -> Result<SearchField, Error> {
        super::audit::check_actor(self.actor())?;
        let mut conn = self.pool.acquire().await?;
        let Some(dropped) = sql::search_field_drop(&mut conn, path).await? else {
            let known: Vec<String> = sql::search_field_list(&mut conn)
                .await?
                .into_iter()
                .map(|f| f.path)
                .collect();
            let known = if known.is_empty() {
                "none is declared".to_owned()
            } else {
                format!("declared: {}", known.join(", "))
            };
            return Err(Error::invalid(
                "search field",
                format!("`{path}` is not a declared search field ({known})"),
            ));
        };
        let detail = format!(
            "search field `{}`: column {}, index {}",
            dropped.path, dropped.column, dropped.index
        );
        self.record_entry(&mut conn, "search_index_drop", None, None, Some(&detail))
            .await?;
        Ok(dropped)
    }
}
