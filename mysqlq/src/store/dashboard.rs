//! Statements of the web dashboard (`mysqlq-cli dashboard`, `mysqlq_cli::dashboard::router`).
//!
//! The dashboard also reuses [`super::admin`]: `stats_queues` (overview, queues page),
//! `job_failed_list`, `job_retry_failed`, `job_discard_failed` (failed page) and
//! [`super::queue_set_paused`] (pause / resume). Every statement here reaches `job_queue`
//! through an index, and pages are keyset on `id` (never OFFSET):
//!
//! | statement | index |
//! |---|---|
//! | [`job_page`], no state | `PRIMARY`: `id < ? ORDER BY id DESC` |
//! | [`job_page`], a state other than `processing` | `idx_job_recover (status, lease_expires_at)`: those states have no lease, so `(status, NULL, id)` is read in id order |
//! | [`job_page`], state `processing` | `idx_job_recover` range on the status (sorted: only running jobs) |
//! | [`job_get`](super::admin::job_get) | `PRIMARY` |
//! | [`dashboard_chart`] | `mysqlq_stats_minute` primary key range on `minute` |
//!
//! Queue and kind filters are not in those indexes: they are applied to a bounded window of
//! [`SCAN_WINDOW`] index entries, so a page never reads more than that many rows. A page can
//! then hold fewer matches than asked for while [`JobPage::next`] still points further down.
//! [`dashboard_explain`] EXPLAINs every variant with the text it runs with.

use serde::Serialize;
use sqlx::{AssertSqlSafe, MySqlConnection, Row};

#[cfg(feature = "__internal-store")]
use super::admin::PlanRow;
use crate::state::{JobState, Timestamp};
use crate::{Error, JobId};

/// Most index entries one page of [`Admin::jobs`](crate::admin::Admin::jobs) reads when
/// filtering by queue or kind.
pub const SCAN_WINDOW: u32 = 2000;

/// Most jobs on one page.
pub const MAX_PAGE: u32 = 500;

/// The states a job can be in (`job_queue.status`).
pub const STATES: [&str; 5] = ["pending", "processing", "completed", "failed", "cancelled"];

const JOB_COLUMNS: &str = "j.id, CAST(j.queue_name AS CHAR) AS queue_name, \
    CAST(j.kind AS CHAR) AS kind, CAST(j.status AS CHAR) AS status, j.attempts, j.max_attempts, \
    j.created_at, j.available_at, j.finished_at";

/// Parameters of [`Admin::jobs`](crate::admin::Admin::jobs).
#[derive(Debug, Clone, Copy, Default)]
pub struct JobPageParams<'a> {
    /// Only jobs in this state (a [`JobState`](crate::admin::JobState)'s name, such as
    /// `"failed"`).
    pub state: Option<&'a str>,
    /// Only this queue.
    pub queue: Option<&'a str>,
    /// Only this kind.
    pub kind: Option<&'a str>,
    /// Only ids below this one (the cursor; `None` for the first page).
    pub before: Option<u64>,
    /// Most jobs (1..=[`MAX_PAGE`]).
    pub limit: u32,
}

/// A job in a listing ([`Admin::jobs`](crate::admin::Admin::jobs)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobRow {
    /// The job's id.
    pub id: JobId,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: Option<String>,
    /// Its state.
    pub state: JobState,
    /// Attempts started.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// When it was enqueued.
    pub created_at: Timestamp,
    /// Not claimed before this.
    pub available_at: Timestamp,
    /// When it reached a final state.
    pub finished_at: Option<Timestamp>,
}

/// One page of [`Admin::jobs`](crate::admin::Admin::jobs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobPage {
    /// The jobs, newest id first.
    pub jobs: Vec<JobRow>,
    /// The cursor of the next page (pass it as [`JobPageParams::before`]), `None` at the end.
    pub next: Option<u64>,
    /// `true` when the page was filtered over a bounded window and may hold fewer jobs than
    /// asked for although more follow.
    pub windowed: bool,
}

/// Which index a listing walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// `PRIMARY`, every state.
    All,
    /// `idx_job_recover` with `lease_expires_at IS NULL`: id order within a state.
    State,
    /// `idx_job_recover`, `processing` (leases set; few rows, sorted).
    Processing,
}

/// The SELECT of the index window: ids in descending order, bounded by a LIMIT.
fn window_sql(walk: Walk) -> &'static str {
    match walk {
        Walk::All => "SELECT id FROM job_queue WHERE id < ? ORDER BY id DESC LIMIT ?",
        Walk::State => {
            "SELECT id FROM job_queue FORCE INDEX (idx_job_recover) \
             WHERE status = ? AND lease_expires_at IS NULL AND id < ? ORDER BY id DESC LIMIT ?"
        }
        Walk::Processing => {
            "SELECT id FROM job_queue FORCE INDEX (idx_job_recover) \
             WHERE status = 'processing' AND id < ? ORDER BY id DESC LIMIT ?"
        }
    }
}

fn page_sql(walk: Walk, queue: bool, kind: bool) -> AssertSqlSafe<String> {
    let mut filter = Vec::new();
    if queue {
        filter.push("j.queue_name = ?");
    }
    if kind {
        filter.push("j.kind = ?");
    }
    let filter = if filter.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", filter.join(" AND "))
    };
    AssertSqlSafe(format!(
        "/* mysqlq:job_page */ SELECT {JOB_COLUMNS} FROM ({}) w \
         JOIN job_queue j ON j.id = w.id{filter} ORDER BY j.id DESC LIMIT ?",
        window_sql(walk)
    ))
}

fn floor_sql(walk: Walk) -> AssertSqlSafe<String> {
    AssertSqlSafe(format!(
        "/* mysqlq:job_page_floor */ SELECT CAST(COUNT(*) AS SIGNED) AS n, MIN(w.id) AS floor \
         FROM ({}) w",
        window_sql(walk)
    ))
}

fn walk_of(state: Option<&str>) -> Walk {
    match state {
        None => Walk::All,
        Some("processing") => Walk::Processing,
        Some(_) => Walk::State,
    }
}

type Query<'q> = sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>;

fn bind_window<'q>(q: Query<'q>, walk: Walk, state: &'q str, before: u64, n: u32) -> Query<'q> {
    let q = if walk == Walk::State {
        q.bind(state)
    } else {
        q
    };
    q.bind(before).bind(n)
}

/// `job_page`: one page of jobs, newest id first, filtered by state, queue and kind, keyset on
/// `id` (see the module docs for the indexes). Filters by queue or kind read at most
/// [`SCAN_WINDOW`] index entries.
pub async fn job_page(conn: &mut MySqlConnection, p: &JobPageParams<'_>) -> Result<JobPage, Error> {
    if let Some(s) = p.state
        && !STATES.contains(&s)
    {
        return Err(Error::Invalid {
            what: "job state",
            reason: format!("`{s}` is not one of {}", STATES.join(", ")),
        });
    }
    if let Some(q) = p.queue {
        crate::queue::validate_queue_name(q)?;
    }
    let walk = walk_of(p.state);
    let state = p.state.unwrap_or("");
    let before = p.before.unwrap_or(u64::MAX);
    let limit = p.limit.clamp(1, MAX_PAGE);
    let filtered = p.queue.is_some() || p.kind.is_some();
    let window = if filtered { SCAN_WINDOW } else { limit + 1 };
    let mut q = bind_window(
        sqlx::query(page_sql(walk, p.queue.is_some(), p.kind.is_some())),
        walk,
        state,
        before,
        window,
    );
    if let Some(queue) = p.queue {
        q = q.bind(queue);
    }
    if let Some(kind) = p.kind {
        q = q.bind(kind);
    }
    let rows = q.bind(limit + 1).fetch_all(&mut *conn).await?;
    let mut jobs = Vec::with_capacity(rows.len());
    for r in &rows {
        jobs.push(JobRow {
            id: JobId(r.try_get("id")?),
            queue: r.try_get("queue_name")?,
            kind: r.try_get("kind")?,
            state: r.try_get::<String, _>("status")?.parse()?,
            attempts: r.try_get("attempts")?,
            max_attempts: r.try_get("max_attempts")?,
            created_at: r.try_get("created_at")?,
            available_at: r.try_get("available_at")?,
            finished_at: r.try_get("finished_at")?,
        });
    }
    let limit_usize = usize::try_from(limit).unwrap_or(usize::MAX);
    if jobs.len() > limit_usize {
        jobs.truncate(limit_usize);
        let next = jobs.last().map(|j| j.id.0);
        return Ok(JobPage {
            jobs,
            next,
            windowed: false,
        });
    }
    if !filtered {
        return Ok(JobPage {
            jobs,
            next: None,
            windowed: false,
        });
    }
    // Fewer matches than asked for: more may lie below the window, if the window was full.
    let r = bind_window(sqlx::query(floor_sql(walk)), walk, state, before, window)
        .fetch_one(&mut *conn)
        .await?;
    let scanned: i64 = r.try_get("n")?;
    let floor: Option<u64> = r.try_get("floor")?;
    let full = u64::try_from(scanned).unwrap_or(0) >= u64::from(window);
    Ok(JobPage {
        jobs,
        next: if full { floor } else { None },
        windowed: full,
    })
}

const CHART_SQL: &str = "/* mysqlq:dashboard_chart */ \
    SELECT CAST(TIMESTAMPDIFF(MINUTE, minute, UTC_TIMESTAMP()) AS SIGNED) AS ago, \
      CAST(SUM(completions) AS SIGNED) AS completions, CAST(SUM(failures) AS SIGNED) AS failures \
    FROM mysqlq_stats_minute WHERE minute > UTC_TIMESTAMP() - INTERVAL 60 MINUTE \
    GROUP BY minute ORDER BY minute";

/// Completions and failures of one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MinutePoint {
    /// Whole minutes before now (0 = the current minute).
    pub minutes_ago: u32,
    /// Jobs completed in that minute (all workers).
    pub completions: u64,
    /// Jobs failed for good in that minute.
    pub failures: u64,
}

/// `dashboard_chart`: completions and failures per minute over the last hour, oldest first
/// (minutes without a row are absent), from `mysqlq_stats_minute`.
pub async fn dashboard_chart(conn: &mut MySqlConnection) -> Result<Vec<MinutePoint>, Error> {
    let rows = sqlx::query(CHART_SQL).fetch_all(&mut *conn).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let ago: i64 = r.try_get("ago")?;
        let completions: Option<i64> = r.try_get("completions")?;
        let failures: Option<i64> = r.try_get("failures")?;
        out.push(MinutePoint {
            minutes_ago: u32::try_from(ago.clamp(0, 59)).unwrap_or(0),
            completions: u64::try_from(completions.unwrap_or(0)).unwrap_or(0),
            failures: u64::try_from(failures.unwrap_or(0)).unwrap_or(0),
        });
    }
    Ok(out)
}

/// `EXPLAIN`s every statement of this module (each `job_page` variant) with the text and binds
/// it runs with. Returns `(name, plan)` pairs.
#[cfg(feature = "__internal-store")]
pub async fn dashboard_explain(
    conn: &mut MySqlConnection,
) -> Result<Vec<(String, Vec<PlanRow>)>, Error> {
    let mut out = Vec::new();
    for state in [None, Some("pending"), Some("processing"), Some("completed")] {
        for (queue, kind) in [(false, false), (true, false), (false, true), (true, true)] {
            let walk = walk_of(state);
            let window = if queue || kind { SCAN_WINDOW } else { 51 };
            let name = format!("job_page state={state:?} queue={queue} kind={kind}");
            let sql = page_sql(walk, queue, kind);
            let mut q = bind_window(
                sqlx::query(AssertSqlSafe(format!("EXPLAIN {}", sql.0))),
                walk,
                state.unwrap_or(""),
                u64::MAX,
                window,
            );
            if queue {
                q = q.bind("test");
            }
            if kind {
                q = q.bind("noop");
            }
            out.push((name, plan(conn, q.bind(51u32)).await?));
            if !(queue && kind) {
                continue;
            }
            let q = bind_window(
                sqlx::query(AssertSqlSafe(format!("EXPLAIN {}", floor_sql(walk).0))),
                walk,
                state.unwrap_or(""),
                u64::MAX,
                window,
            );
            out.push((
                format!("job_page_floor state={state:?}"),
                plan(conn, q).await?,
            ));
        }
    }
    let q = sqlx::query(AssertSqlSafe(format!(
        "EXPLAIN {}",
        super::admin::JOB_GET_SQL
    )))
    .bind(1u64);
    out.push(("job_get".to_owned(), plan(conn, q).await?));
    let q = sqlx::query(AssertSqlSafe(format!("EXPLAIN {CHART_SQL}")));
    out.push(("dashboard_chart".to_owned(), plan(conn, q).await?));
    Ok(out)
}

#[cfg(feature = "__internal-store")]
async fn plan(conn: &mut MySqlConnection, q: Query<'_>) -> Result<Vec<PlanRow>, Error> {
    let rows = q.fetch_all(&mut *conn).await?;
    Ok(rows.iter().map(PlanRow::read).collect())
}
