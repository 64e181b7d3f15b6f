//! Enqueue statements: one job (and its dedupe key), and many jobs in multi-row INSERTs cut by
//! rows and by bytes.

use std::time::Duration;

use sqlx::{AssertSqlSafe, Connection, MySqlConnection};

use super::{is_duplicate_key, is_lock_error, sqlx_error_number};
use crate::{Enqueued, Error, JobId};

/// Most rows per multi-row INSERT of [`crate::enqueue_many`].
pub const INSERT_CHUNK_ROWS: usize = 500;
/// Bytes a row adds to a statement besides its values: the placeholders of the SQL text and
/// the length prefixes and type codes of the bound values.
const ROW_OVERHEAD_BYTES: usize = 160;
/// Smallest statement budget, for servers reporting a tiny `max_allowed_packet`.
const MIN_STATEMENT_BYTES: usize = 64 * 1024;

/// A job row to insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsertRow {
    /// `queue_name`.
    pub queue: String,
    /// `kind`.
    pub kind: String,
    /// `payload`, serialised JSON.
    pub payload: String,
    /// `priority`.
    pub priority: i16,
    /// `max_attempts`.
    pub max_attempts: u32,
    /// Delay from the database's now, in microseconds.
    pub delay_us: i64,
    /// Absolute run time (UTC, `YYYY-MM-DD HH:MM:SS.ffffff`), overriding the delay.
    pub run_at: Option<String>,
    /// `dedupe_key`.
    pub dedupe_key: Option<String>,
    /// `dedupe_until = 'started'` (else `'finished'`).
    pub dedupe_until_started: bool,
    /// `ordering_key`.
    pub ordering_key: Option<String>,
    /// `concurrency_key`.
    pub concurrency_key: Option<String>,
    /// `concurrency_limit`.
    pub concurrency_limit: Option<u16>,
    /// `meta`, serialised JSON (an object), `None` when empty.
    pub meta: Option<String>,
    /// `dedupe_window_us`: how long the dedupe key stays taken after completion.
    pub dedupe_window_us: Option<u64>,
    /// On a taken dedupe key, update the holder when it is still `pending` (same kind) instead
    /// of refusing: its payload, run time, priority and (when given) meta.
    pub dedupe_replace: bool,
    /// `rate_key`, `rate_limit`, `rate_period_us`: the key's limit, starts per period (µs).
    pub rate: Option<(String, u32, u64)>,
}

macro_rules! insert_columns {
    () => {
        "INSERT INTO job_queue (queue_name, kind, payload, priority, max_attempts, available_at, \
         dedupe_key, dedupe_until, ordering_key, concurrency_key, concurrency_limit, status, created_at) VALUES "
    };
}
macro_rules! insert_values {
    () => {
        "(?, ?, ?, ?, ?, IFNULL(?, UTC_TIMESTAMP(6) + INTERVAL LEAST(?, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), '9999-12-31 23:59:59')) MICROSECOND), ?, ?, ?, ?, ?, 'pending', \
         UTC_TIMESTAMP(6))"
    };
}
const INSERT_COLUMNS: &str = insert_columns!();
macro_rules! insert_narrow_columns {
    () => {
        "INSERT INTO job_queue (queue_name, kind, payload, priority, max_attempts, available_at, status, created_at) VALUES "
    };
}
macro_rules! insert_narrow_values {
    () => {
        "(?, ?, ?, ?, ?, UTC_TIMESTAMP(6), 'pending', UTC_TIMESTAMP(6))"
    };
}
const INSERT_NARROW_COLUMNS: &str = insert_narrow_columns!();
const INSERT_NARROW_VALUES: &str = insert_narrow_values!();
const INSERT_VALUES: &str = insert_values!();
const INSERT_ONE_SQL: &str = concat!(
    "/* mysqlq:job_insert */ ",
    insert_columns!(),
    insert_values!()
);
/// A row with no options (see [`InsertRow::is_plain`]): five values and no expression to
/// evaluate, the shape of the bulk enqueue's narrow statement.
const INSERT_ONE_NARROW_SQL: &str = concat!(
    "/* mysqlq:job_insert */ ",
    insert_narrow_columns!(),
    insert_narrow_values!()
);
// Rows with meta or a dedupe window (migration 5) name those columns too; other rows leave them
// out, so an application whose database is not migrated yet keeps enqueueing what it did.
// Rows with a rate key (migration 9) name the rate columns as well.
macro_rules! insert_meta_columns {
    ($($rate:literal)?) => {
        concat!("INSERT INTO job_queue (queue_name, kind, payload, priority, max_attempts, available_at, \
         dedupe_key, dedupe_until, ordering_key, concurrency_key, concurrency_limit, meta, dedupe_window_us, ",
         $($rate,)? "status, created_at) VALUES ")
    };
}
macro_rules! insert_meta_values {
    ($($rate:literal)?) => {
        concat!("(?, ?, ?, ?, ?, IFNULL(?, UTC_TIMESTAMP(6) + INTERVAL LEAST(?, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), '9999-12-31 23:59:59')) MICROSECOND), ?, ?, ?, ?, ?, ?, ?, ",
         $($rate,)? "'pending', UTC_TIMESTAMP(6))")
    };
}
const INSERT_META_COLUMNS: &str = insert_meta_columns!();
const INSERT_META_VALUES: &str = insert_meta_values!();
const INSERT_RATE_COLUMNS: &str = insert_meta_columns!("rate_key, rate_limit, rate_period_us, ");
const INSERT_RATE_VALUES: &str = insert_meta_values!("?, ?, ?, ");
const INSERT_ONE_META_SQL: &str = concat!(
    "/* mysqlq:job_insert */ ",
    insert_meta_columns!(),
    insert_meta_values!()
);
const INSERT_ONE_RATE_SQL: &str = concat!(
    "/* mysqlq:job_insert */ ",
    insert_meta_columns!("rate_key, rate_limit, rate_period_us, "),
    insert_meta_values!("?, ?, ?, ")
);

/// The five values of the narrow statements (a row with no options).
fn bind_narrow_row<'q>(
    q: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    r: &'q InsertRow,
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    q.bind(&r.queue)
        .bind(&r.kind)
        .bind(&r.payload)
        .bind(r.priority)
        .bind(r.max_attempts)
}

fn bind_row<'q>(
    q: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    r: &'q InsertRow,
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    bind_narrow_row(q, r)
        .bind(r.run_at.as_deref())
        .bind(r.delay_us)
        .bind(r.dedupe_key.as_deref())
        .bind(if r.dedupe_until_started {
            "started"
        } else {
            "finished"
        })
        .bind(r.ordering_key.as_deref())
        .bind(r.concurrency_key.as_deref())
        .bind(r.concurrency_limit)
}

/// [`bind_row`] and the migration-5 columns.
fn bind_meta_row<'q>(
    q: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    r: &'q InsertRow,
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    bind_row(q, r)
        .bind(r.meta.as_deref())
        .bind(r.dedupe_window_us)
}

/// [`bind_meta_row`] and the migration-9 columns.
fn bind_rate_row<'q>(
    q: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    r: &'q InsertRow,
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    let rate = r.rate.as_ref();
    bind_meta_row(q, r)
        .bind(rate.map(|(k, _, _)| k.as_str()))
        .bind(rate.map(|(_, n, _)| *n))
        .bind(rate.map(|(_, _, p)| *p))
}

/// The `(queue, rate key, limit, period µs)` of the rows that have a rate key.
fn rate_pairs(rows: &[InsertRow]) -> Vec<(&str, &str, u32, u64)> {
    rows.iter()
        .filter_map(|r| {
            let (key, n, p) = r.rate.as_ref()?;
            Some((r.queue.as_str(), key.as_str(), *n, *p))
        })
        .collect()
}

impl InsertRow {
    /// About how many bytes the row adds to a multi-row INSERT (values and overhead).
    fn statement_bytes(&self) -> usize {
        let opt = |s: &Option<String>| s.as_deref().map_or(0, str::len);
        self.queue.len()
            + self.kind.len()
            + self.payload.len()
            + opt(&self.run_at)
            + opt(&self.dedupe_key)
            + opt(&self.ordering_key)
            + opt(&self.concurrency_key)
            + opt(&self.meta)
            + self.rate.as_ref().map_or(0, |(k, _, _)| k.len() + 24)
            + INSERT_META_VALUES.len()
            + ROW_OVERHEAD_BYTES
    }

    /// `true` when the row sets a column of migration 5 (`meta`, `dedupe_window_us`).
    fn has_meta_columns(&self) -> bool {
        self.meta.is_some() || self.dedupe_window_us.is_some()
    }

    /// `true` when the row sets nothing beyond queue, kind, payload, priority and attempts.
    fn is_plain(&self) -> bool {
        self.delay_us == 0
            && self.run_at.is_none()
            && self.dedupe_key.is_none()
            && !self.dedupe_until_started
            && self.ordering_key.is_none()
            && self.concurrency_key.is_none()
            && self.concurrency_limit.is_none()
            && self.meta.is_none()
            && self.rate.is_none()
    }
}

/// `job_insert`: one job; a taken dedupe key returns the holder's id.
///
/// Outside a transaction (a pool or a bare connection: the statement is its own transaction)
/// the INSERT goes first, and its duplicate-key check's shared lock on the holder ends with the
/// statement; a deadlock or lock wait timeout — possible when concurrent enqueuers race for one
/// dedupe key and the first rolls back — is retried here. Inside the caller's transaction a
/// duplicate-key error would leave that shared lock on the holder's index entry until the
/// caller commits, and the worker completing the holder would wait for it: so a non-locking
/// read looks for the holder first and, when the caller's reads see the latest committed rows
/// (READ COMMITTED), answers [`Enqueued::Duplicate`] without touching the holder. Deadlocks and
/// lock wait timeouts inside the caller's transaction are returned: the caller's transaction
/// was rolled back and only the caller can redo it.
pub async fn job_insert_one(
    conn: &mut MySqlConnection,
    row: &InsertRow,
) -> Result<Enqueued, Error> {
    super::rate::buckets_ensure(conn, rate_pairs(std::slice::from_ref(row))).await?;
    if let Some(key) = row.dedupe_key.as_deref()
        && conn.is_in_transaction()
        && let Some(id) = job_dedupe_holder_current(conn, key).await?
    {
        if row.dedupe_replace
            && let Some(id) = job_dedupe_replace(conn, row).await?
        {
            return Ok(Enqueued::Replaced(id));
        }
        return Ok(Enqueued::Duplicate(id));
    }
    // A dedupe key's holder can finish between our failed INSERT and the lookup: try again.
    for _ in 0..5 {
        let insert = if row.is_plain() {
            bind_narrow_row(sqlx::query(INSERT_ONE_NARROW_SQL), row)
        } else if row.rate.is_some() {
            bind_rate_row(sqlx::query(INSERT_ONE_RATE_SQL), row)
        } else if row.has_meta_columns() {
            bind_meta_row(sqlx::query(INSERT_ONE_META_SQL), row)
        } else {
            bind_row(sqlx::query(INSERT_ONE_SQL), row)
        };
        match insert.execute(&mut *conn).await {
            Ok(done) => return Ok(Enqueued::Inserted(JobId(done.last_insert_id()))),
            Err(e)
                if !conn.is_in_transaction()
                    && matches!(sqlx_error_number(&e), Some(1213 | 1205)) =>
            {
                tokio::time::sleep(Duration::from_millis(fastrand::u64(1..20))).await;
            }
            Err(e) if is_duplicate_key(&e) && row.dedupe_key.is_some() => {
                match on_duplicate(conn, row).await {
                    Ok(Some(out)) => return Ok(out),
                    // The key is free now (the holder finished, or its window is over).
                    Ok(None) => {}
                    Err(e) if !conn.is_in_transaction() && is_lock_error(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::invalid(
        "dedupe key",
        "the key kept changing hands while enqueueing; try again".to_owned(),
    ))
}

/// After the INSERT of `row` hit a held dedupe key: frees the key when its holder is a completed
/// job whose window is over (`None`: insert again), replaces a pending holder in replace mode,
/// else names the holder. The new columns of migration 5 are touched only when the holder is a
/// completed job (which holds a key only under that migration) or in replace mode.
async fn on_duplicate(
    conn: &mut MySqlConnection,
    row: &InsertRow,
) -> Result<Option<Enqueued>, Error> {
    let key = row.dedupe_key.as_deref().unwrap_or_default();
    let mut holder = job_dedupe_holder_state(conn, key, false).await?;
    if let Some((_, status)) = &holder
        && status == "completed"
    {
        if job_dedupe_release_expired(conn, key).await? {
            return Ok(None);
        }
        // The window is not over, or another enqueuer freed the key after the snapshot our
        // plain read saw: read the latest committed holder.
        holder = job_dedupe_holder_state(conn, key, true).await?;
    }
    let Some((id, status)) = holder else {
        return Ok(None);
    };
    if row.dedupe_replace
        && status == "pending"
        && let Some(id) = job_dedupe_replace(conn, row).await?
    {
        return Ok(Some(Enqueued::Replaced(id)));
    }
    Ok(Some(Enqueued::Duplicate(id)))
}

/// `job_dedupe_holder`: the id and status of the job holding `key`. A plain read first (no lock,
/// so no deadlock with a worker claiming the holder); inside the caller's transaction, whose
/// snapshot may predate the holder, or when `latest` is asked for, a locking read (which sees the
/// latest committed row) if the plain read found nothing.
async fn job_dedupe_holder_state(
    conn: &mut MySqlConnection,
    key: &str,
    latest: bool,
) -> Result<Option<(JobId, String)>, Error> {
    let in_tx = conn.is_in_transaction();
    if !(latest && in_tx) {
        let found: Option<(u64, String)> = sqlx::query_as(
            "/* mysqlq:job_dedupe_holder */ SELECT id, CAST(status AS CHAR) FROM job_queue \
             WHERE dedupe_active = ?",
        )
        .bind(key)
        .fetch_optional(&mut *conn)
        .await?;
        if found.is_some() || !in_tx {
            return Ok(found.map(|(id, s)| (JobId(id), s)));
        }
    }
    let found: Option<(u64, String)> = sqlx::query_as(
        "/* mysqlq:job_dedupe_holder */ SELECT id, CAST(status AS CHAR) FROM job_queue \
         WHERE dedupe_active = ? LOCK IN SHARE MODE",
    )
    .bind(key)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(found.map(|(id, s)| (JobId(id), s)))
}

/// The holder of `key` by a non-locking read, when that read is known to see the latest
/// committed rows: the caller's session runs READ COMMITTED. Under REPEATABLE READ the read
/// sees the transaction's snapshot, whose holder may have finished since; `None` then, and the
/// INSERT decides.
async fn job_dedupe_holder_current(
    conn: &mut MySqlConnection,
    key: &str,
) -> Result<Option<JobId>, Error> {
    // A completed holder (a window after completion) may be past its window: the INSERT and
    // `on_duplicate` decide then.
    let id: Option<u64> = sqlx::query_scalar(
        "/* mysqlq:job_dedupe_holder */ SELECT id FROM job_queue WHERE dedupe_active = ? \
         AND status <> 'completed'",
    )
    .bind(key)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(id) = id else { return Ok(None) };
    let isolation = super::server::session_isolation(conn).await?;
    Ok((isolation.as_deref() == Some("READ-COMMITTED")).then_some(JobId(id)))
}

/// `job_dedupe_release_expired`: frees `key` when its holder is a completed job whose window
/// after completion (`dedupe_window_us`) is over, by clearing the holder's window (its
/// `dedupe_active` becomes NULL). `true` when it did: insert again. A completed row is written
/// by nobody else but the pruner, so the row lock this takes is short-lived.
pub(crate) async fn job_dedupe_release_expired(
    conn: &mut MySqlConnection,
    key: &str,
) -> Result<bool, Error> {
    let done = sqlx::query(
        "/* mysqlq:job_dedupe_release_expired */ UPDATE job_queue SET dedupe_window_us = NULL \
         WHERE dedupe_active = ? AND status = 'completed' AND finished_at IS NOT NULL \
           AND finished_at + INTERVAL dedupe_window_us MICROSECOND <= UTC_TIMESTAMP(6)",
    )
    .bind(key)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// `job_dedupe_replace`: the "replace" mode of a taken dedupe key (debounce): when the holder
/// is still `pending`, of the same kind and no workflow step (a step is never rewritten), its payload, run time and priority become the new
/// job's (and its meta, when the new job has one); its attempts and queue stay. Returns the
/// holder's id (read back through `LAST_INSERT_ID(id)`, so no second statement can see another
/// row), `None` when the holder is running, completed or of another kind.
pub(crate) async fn job_dedupe_replace(
    conn: &mut MySqlConnection,
    row: &InsertRow,
) -> Result<Option<JobId>, Error> {
    // Two statements rather than `meta = IFNULL(?, meta)`: a string parameter and a JSON
    // column in one expression is a type MySQL may refuse to store as JSON.
    macro_rules! replace_sql {
        ($meta:literal) => {
            concat!(
                "/* mysqlq:job_dedupe_replace */ UPDATE job_queue SET payload = ?, priority = ?, \
                 available_at = IFNULL(?, UTC_TIMESTAMP(6) + INTERVAL LEAST(?, TIMESTAMPDIFF(MICROSECOND, \
                   UTC_TIMESTAMP(6), '9999-12-31 23:59:59')) MICROSECOND), ",
                $meta,
                "id = LAST_INSERT_ID(id) \
                 WHERE dedupe_active = ? AND status = 'pending' AND kind <=> ? AND workflow_id IS NULL"
            )
        };
    }
    let q = sqlx::query(if row.meta.is_some() {
        replace_sql!("meta = ?, ")
    } else {
        replace_sql!("")
    })
    .bind(&row.payload)
    .bind(row.priority)
    .bind(row.run_at.as_deref())
    .bind(row.delay_us);
    let q = match row.meta.as_deref() {
        Some(meta) => q.bind(meta),
        None => q,
    };
    let done = q
        .bind(row.dedupe_key.as_deref())
        .bind(&row.kind)
        .execute(&mut *conn)
        .await?;
    Ok((done.rows_affected() > 0).then(|| JobId(done.last_insert_id())))
}

/// `job_dedupe_holder`: the job holding a dedupe key. A plain read first (it takes no lock, so
/// it cannot deadlock with a worker claiming the holder); inside the caller's transaction, whose
/// snapshot may predate the holder, a locking read (which sees the latest committed row) if the
/// plain read found nothing.
pub(crate) async fn job_dedupe_holder(
    conn: &mut MySqlConnection,
    key: &str,
) -> Result<Option<JobId>, Error> {
    let id: Option<u64> = sqlx::query_scalar(
        "/* mysqlq:job_dedupe_holder */ SELECT id FROM job_queue WHERE dedupe_active = ?",
    )
    .bind(key)
    .fetch_optional(&mut *conn)
    .await?;
    if id.is_some() || !conn.is_in_transaction() {
        return Ok(id.map(JobId));
    }
    let id: Option<u64> = sqlx::query_scalar(
        "/* mysqlq:job_dedupe_holder */ SELECT id FROM job_queue WHERE dedupe_active = ? \
         LOCK IN SHARE MODE",
    )
    .bind(key)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(id.map(JobId))
}

/// Consecutive runs of `rows` (indexes) of at most [`INSERT_CHUNK_ROWS`] rows and about
/// `budget` bytes each; a row larger than the budget goes alone.
fn chunks_by_size(rows: &[InsertRow], indexes: &[usize], budget: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut bytes = 0usize;
    for &i in indexes {
        let size = rows[i].statement_bytes();
        if !current.is_empty()
            && (current.len() == INSERT_CHUNK_ROWS || bytes.saturating_add(size) > budget)
        {
            out.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes = bytes.saturating_add(size);
        current.push(i);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// `job_insert_many`: multi-row INSERTs of at most [`INSERT_CHUNK_ROWS`] rows and at most half
/// the server's `max_allowed_packet` bytes each (a larger statement is refused by the server,
/// which closes the connection). Multi-row `INSERT … VALUES` is a "simple insert", whose
/// auto-increment ids are reserved in one block in every `innodb_autoinc_lock_mode`, so the
/// ids are `LAST_INSERT_ID() + i × auto_increment_increment`. Rows with a dedupe key go one
/// statement each, to report each duplicate. Atomicity is the caller's: run it in a transaction
/// ([`crate::enqueue_many`] does).
///
/// On a Galera cluster with `wsrep_auto_increment_control` the increment is the cluster's size
/// and changes, in open sessions too, when a node joins or leaves. So it is read before and
/// after each INSERT: when the two differ the INSERT's step is unknown, and `Ok(None)` asks the
/// caller to roll back (to its savepoint) and insert again.
pub async fn job_insert_many(
    conn: &mut MySqlConnection,
    rows: &[InsertRow],
) -> Result<Option<Vec<Enqueued>>, Error> {
    let (mut step, packet): (u64, u64) = sqlx::query_as(
        "/* mysqlq:job_insert_many */ SELECT CAST(@@session.auto_increment_increment AS UNSIGNED), \
         CAST(@@session.max_allowed_packet AS UNSIGNED)",
    )
    .fetch_one(&mut *conn)
    .await?;
    let budget = usize::try_from(packet / 2)
        .unwrap_or(usize::MAX)
        .max(MIN_STATEMENT_BYTES);
    let mut out = vec![Enqueued::Inserted(JobId(0)); rows.len()];
    super::rate::buckets_ensure(conn, rate_pairs(rows)).await?;
    let plain: Vec<usize> = (0..rows.len())
        .filter(|&i| rows[i].dedupe_key.is_none())
        .collect();
    for chunk in chunks_by_size(rows, &plain, budget) {
        // Rows that only set what every job has (no delay, run-at or keys) bind 5 values
        // instead of 12: a third of the bytes for large bulk enqueues.
        let narrow = chunk.iter().all(|&i| rows[i].is_plain());
        let with_rate = !narrow && chunk.iter().any(|&i| rows[i].rate.is_some());
        let with_meta = !narrow && chunk.iter().any(|&i| rows[i].has_meta_columns());
        let (columns, values) = if narrow {
            (INSERT_NARROW_COLUMNS, INSERT_NARROW_VALUES)
        } else if with_rate {
            (INSERT_RATE_COLUMNS, INSERT_RATE_VALUES)
        } else if with_meta {
            (INSERT_META_COLUMNS, INSERT_META_VALUES)
        } else {
            (INSERT_COLUMNS, INSERT_VALUES)
        };
        let mut sql = String::with_capacity(columns.len() + chunk.len() * (values.len() + 2) + 32);
        sql.push_str("/* mysqlq:job_insert_many */ ");
        sql.push_str(columns);
        for (n, _) in chunk.iter().enumerate() {
            if n > 0 {
                sql.push_str(", ");
            }
            sql.push_str(values);
        }
        let mut q = sqlx::query(AssertSqlSafe(sql));
        for &i in &chunk {
            let r = &rows[i];
            q = if narrow {
                bind_narrow_row(q, r)
            } else if with_rate {
                bind_rate_row(q, r)
            } else if with_meta {
                bind_meta_row(q, r)
            } else {
                bind_row(q, r)
            };
        }
        let first = q.execute(&mut *conn).await?.last_insert_id();
        let after = auto_increment_step(conn).await?;
        if after != step {
            return Ok(None);
        }
        step = after;
        for (n, &i) in chunk.iter().enumerate() {
            out[i] = Enqueued::Inserted(JobId(first + n as u64 * step.max(1)));
        }
    }
    for (i, row) in rows.iter().enumerate() {
        if row.dedupe_key.is_some() {
            out[i] = job_insert_one(conn, row).await?;
        }
    }
    Ok(Some(out))
}

/// `job_insert_many`'s check of the session's `auto_increment_increment` after an INSERT.
async fn auto_increment_step(conn: &mut MySqlConnection) -> Result<u64, Error> {
    Ok(sqlx::query_scalar(
        "/* mysqlq:job_insert_many */ SELECT CAST(@@session.auto_increment_increment AS UNSIGNED)",
    )
    .fetch_one(&mut *conn)
    .await?)
}

#[cfg(test)]
mod tests;
