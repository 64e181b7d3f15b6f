//! Running a [`Plan`]: a page ([`search`]), an exact count for a confirmation
//! ([`count_matching`]) of a [`Filter`], and the queues a limit closes ([`closed_queues`]).

use sqlx::{MySqlConnection, Row};

use super::sql::{self, Bind, Sql};
use super::{
    Cursor, INDEX_CAP, MAX_PAGE, Part, Plan, Pos, ROW_CAP, SearchPage, SearchRow, Walk, Window,
    after, not_past, order, select_pos, walk_of,
};
use crate::filter::Filter;
use crate::state::{JobState, OpState, RowFacts, Timestamp};
use crate::{Error, JobId};

/// `closed_queues`: the queues whose due jobs all wait for a limit at `now`: held by a 429, at
/// their rate (the queue's bucket closed) or at their global limit.
pub(super) async fn closed_queues(
    conn: &mut MySqlConnection,
    now: Timestamp,
) -> Result<Vec<String>, Error> {
    Ok(sqlx::query_scalar(
        "/* mysqlq:search_closed_queues */ SELECT CAST(q.queue_name AS CHAR) FROM mysqlq_queue q \
         WHERE EXISTS (SELECT 1 FROM mysqlq_rate_hold h WHERE h.queue_name = q.queue_name \
             AND h.rate_key = '' AND h.held_until > ?) \
           OR (q.rate_limit IS NOT NULL AND EXISTS (SELECT 1 FROM mysqlq_rate_bucket b \
             WHERE b.queue_name = q.queue_name AND b.rate_key = '' AND b.open_at > ?)) \
           OR (q.global_limit IS NOT NULL AND (SELECT COUNT(*) FROM job_queue j \
             FORCE INDEX (idx_job_recover) WHERE j.status = 'processing' \
             AND j.queue_name = q.queue_name) >= q.global_limit)",
    )
    .bind(now)
    .bind(now)
    .fetch_all(&mut *conn)
    .await?)
}

/// A filter planned at `now`: the walk, its parts, what is left to check beyond them, and
/// whether the walk is a declared field's index (whose entries hold only the field and id).
struct Planned {
    plan: Plan,
    walk: Walk,
    parts: Vec<Part>,
    on_field: bool,
}

/// Plans `filter` at `now`: a declared field's walk when one applies (`field.rs`), else the
/// states' walk.
async fn planned(
    conn: &mut MySqlConnection,
    filter: &Filter,
    now: Timestamp,
) -> Result<Planned, Error> {
    let plan = Plan::of(filter, now);
    let declared = super::field::declared(conn, &plan).await?;
    if let Some((parts, rest)) = super::field::walk(&plan, &declared) {
        return Ok(Planned {
            plan: rest,
            walk: Walk::Ids,
            parts,
            on_field: true,
        });
    }
    let (walk, parts) = walk_of(&plan, now);
    Ok(Planned {
        plan,
        walk,
        parts,
        on_field: false,
    })
}

/// A search made ready to run: the database clock it was resolved at, the walk and its parts,
/// the queues a limit closes, what is checked beyond the walk's ranges and its read cap.
struct Resolved {
    now: Timestamp,
    walk: Walk,
    parts: Vec<Part>,
    closed: Vec<String>,
    res: Sql,
    cap: Option<u64>,
}

/// Reads the clock and the closed queues and plans `filter` ([`planned`], [`residual`]).
async fn resolve(conn: &mut MySqlConnection, filter: &Filter) -> Result<Resolved, Error> {
    let now = now(conn).await?;
    let Planned {
        plan,
        walk,
        parts,
        on_field,
    } = planned(conn, filter, now).await?;
    let closed = closed_queues(conn, now).await?;
    let (res, cap) = residual(&plan, walk, now, &closed, on_field);
    Ok(Resolved {
        now,
        walk,
        parts,
        closed,
        res,
        cap,
    })
}

/// What a plan checks beyond its walk's ranges, and how many positions a page may read for it.
/// On a declared field's index (`on_field`) every filter reads the row.
fn residual(
    plan: &Plan,
    walk: Walk,
    now: Timestamp,
    closed: &[String],
    on_field: bool,
) -> (Sql, Option<u64>) {
    let mut s = sql::entry_filters(plan);
    let entries = !s.text.is_empty();
    let mut rows = on_field && entries;
    if !plan.states.is_empty() && walk != Walk::Finished {
        s.push(" AND ")
            .append(sql::states_predicate(&plan.states, now, closed));
        rows |= on_field || plan.states.iter().any(|st| *st != OpState::Waiting);
    }
    let r = sql::row_filters(plan, walk);
    rows |= !r.text.is_empty();
    s.append(r);
    let cap = if rows {
        Some(ROW_CAP)
    } else if entries {
        Some(INDEX_CAP)
    } else {
        None
    };
    (s, cap)
}

fn part_select(part: &Part, walk: Walk, pos: Option<Pos>) -> Sql {
    let mut s = Sql::default();
    s.push(&select_pos(walk))
        .push(&format!(
            " FROM job_queue j FORCE INDEX ({}) WHERE ",
            part.index
        ))
        .append(part.range.clone());
    if let Some(pos) = pos {
        after(&mut s, walk, pos);
    }
    s
}

pub(super) async fn now(conn: &mut MySqlConnection) -> Result<Timestamp, Error> {
    Ok(
        sqlx::query_scalar("/* mysqlq:search_now */ SELECT UTC_TIMESTAMP(6)")
            .fetch_one(&mut *conn)
            .await?,
    )
}

fn floor_sql(part: &Part, walk: Walk, pos: Option<Pos>, cap: u64) -> Sql {
    let mut s = Sql::default();
    s.push("/* mysqlq:search_floor */ ")
        .append(part_select(part, walk, pos))
        .push(&format!(" ORDER BY {} LIMIT 1 OFFSET ", order(walk, false)))
        .bind(Bind::U64(cap - 1));
    s
}

/// The position `cap` steps down a part from `pos`, if the part goes that far.
async fn floor(
    conn: &mut MySqlConnection,
    part: &Part,
    walk: Walk,
    pos: Option<Pos>,
    cap: u64,
) -> Result<Option<Pos>, Error> {
    let row = floor_sql(part, walk, pos, cap)
        .query()
        .fetch_optional(&mut *conn)
        .await?;
    row.map(|r| {
        Ok::<_, Error>((
            r.try_get::<Option<i64>, _>("t")?.unwrap_or(0),
            r.try_get("id")?,
        ))
    })
    .transpose()
}

/// The nearer of two floors to the walk's start.
fn nearer(walk: Walk, a: Pos, b: Pos) -> Pos {
    let first = match walk {
        Walk::Due => a <= b,
        Walk::Finished => a >= b,
        Walk::Ids => a.1 >= b.1,
    };
    if first { a } else { b }
}

fn page_sql(
    parts: &[Part],
    walk: Walk,
    pos: Option<Pos>,
    bottom: Option<Pos>,
    res: &Sql,
    limit: u32,
) -> Sql {
    let mut s = Sql::default();
    s.push("/* mysqlq:search_page */ SELECT w.t, w.id FROM (");
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            s.push(" UNION ALL ");
        }
        s.push("(").append(part_select(part, walk, pos));
        if let Some(b) = bottom {
            not_past(&mut s, walk, b);
        }
        s.append(res.clone())
            .push(&format!(" ORDER BY {} LIMIT ", order(walk, false)))
            .bind(Bind::U64(u64::from(limit) + 1))
            .push(")");
    }
    s.push(&format!(") w ORDER BY {} LIMIT ", order(walk, true)))
        .bind(Bind::U64(u64::from(limit) + 1));
    s
}

/// `search`: one page of jobs matching `filter`, after `cursor`, in the walk's order (module
/// docs). `Err` for a cursor of another walk.
pub async fn search(
    conn: &mut MySqlConnection,
    filter: &Filter,
    cursor: Option<Cursor>,
    limit: u32,
) -> Result<SearchPage, Error> {
    let Resolved {
        now,
        walk,
        parts,
        closed,
        res,
        cap,
    } = resolve(conn, filter).await?;
    if let Some(c) = cursor
        && c.walk != walk
    {
        return Err(Error::invalid(
            "page cursor",
            "this link belongs to another search; start the search again",
        ));
    }
    let pos = cursor.map(|c| (c.at_us, c.id));
    let limit = limit.clamp(1, MAX_PAGE);
    let mut bottom: Option<Pos> = None;
    if let Some(cap) = cap {
        for part in &parts {
            if let Some(f) = floor(conn, part, walk, pos, cap).await? {
                bottom = Some(bottom.map_or(f, |b| nearer(walk, b, f)));
            }
        }
    }
    let s = page_sql(&parts, walk, pos, bottom, &res, limit);
    let mut found: Vec<Pos> = Vec::new();
    for r in s.query().fetch_all(&mut *conn).await? {
        found.push((
            r.try_get::<Option<i64>, _>("t")?.unwrap_or(0),
            r.try_get("id")?,
        ));
    }
    let full = found.len() > limit as usize;
    found.truncate(limit as usize);
    let next_pos = if full { found.last().copied() } else { bottom };
    let rows = rows_of(conn, &found, now, &closed).await?;
    Ok(SearchPage {
        walk,
        rows,
        next: next_pos.map(|(at_us, id)| Cursor { walk, at_us, id }),
        window: (!full && bottom.is_some()).then(|| Window {
            read: cap.unwrap_or(0),
            rows: cap == Some(ROW_CAP),
        }),
        now,
    })
}

/// The page's rows, classified at `now`, in the order of `ids`.
async fn rows_of(
    conn: &mut MySqlConnection,
    found: &[Pos],
    now: Timestamp,
    closed: &[String],
) -> Result<Vec<SearchRow>, Error> {
    if found.is_empty() {
        return Ok(Vec::new());
    }
    let mut s = Sql::default();
    s.push(
        "/* mysqlq:search_rows */ SELECT j.id, CAST(j.queue_name AS CHAR) AS queue_name, \
         CAST(j.kind AS CHAR) AS kind, CAST(j.status AS CHAR) AS status, j.attempts, \
         j.max_attempts, j.priority, j.created_at, j.available_at, j.finished_at, j.claimed_at, \
         CAST(j.locked_by AS CHAR) AS locked_by, CAST(j.rate_key AS CHAR) AS rate_key, \
         CAST(LEFT(CAST(j.payload AS CHAR), 300) AS CHAR) AS head, \
         (j.status = 'pending' AND ",
    )
    .append(sql::limited(now, closed))
    .push(") AS lim FROM job_queue j FORCE INDEX (PRIMARY) WHERE j.id IN (");
    for (i, p) in found.iter().enumerate() {
        if i > 0 {
            s.push(", ");
        }
        s.bind(Bind::U64(p.1));
    }
    s.push(")");
    let mut by_id = std::collections::HashMap::new();
    for r in s.query().fetch_all(&mut *conn).await? {
        let status: JobState = r.try_get::<String, _>("status")?.parse()?;
        let locked_by: Option<String> = r.try_get("locked_by")?;
        let available_at: Timestamp = r.try_get("available_at")?;
        let attempts: u32 = r.try_get("attempts")?;
        let facts = RowFacts {
            status,
            available_at,
            attempts,
            relayed: locked_by
                .as_deref()
                .is_some_and(|l| l.starts_with(crate::store::relay::RELAY_PREFIX)),
            limited: r.try_get::<Option<i64>, _>("lim")?.unwrap_or(0) != 0,
        };
        let id: u64 = r.try_get("id")?;
        by_id.insert(
            id,
            SearchRow {
                id: JobId(id),
                state: OpState::classify(&facts, now),
                status,
                queue: r.try_get("queue_name")?,
                kind: r.try_get("kind")?,
                attempts,
                max_attempts: r.try_get("max_attempts")?,
                priority: r.try_get("priority")?,
                created_at: r.try_get("created_at")?,
                available_at,
                finished_at: r.try_get("finished_at")?,
                claimed_at: r.try_get("claimed_at")?,
                locked_by,
                rate_key: r.try_get("rate_key")?,
                payload_head: r.try_get::<Option<String>, _>("head")?.unwrap_or_default(),
            },
        );
    }
    // A job deleted between the walk and this read is left out.
    Ok(found.iter().filter_map(|p| by_id.remove(&p.1)).collect())
}

/// `count_matching`: how many jobs match `plan` now among ids up to the newest (the horizon,
/// returned with the count), exact and uncapped, stopped by the server after `seconds`.
pub async fn count_matching(
    conn: &mut MySqlConnection,
    filter: &Filter,
    seconds: u32,
) -> Result<(u64, u64), Error> {
    let server = crate::store::server::detect(conn).await?;
    let horizon: Option<u64> =
        sqlx::query_scalar("/* mysqlq:search_horizon */ SELECT MAX(id) FROM job_queue")
            .fetch_one(&mut *conn)
            .await?;
    let Some(horizon) = horizon else {
        return Ok((0, 0));
    };
    let Resolved {
        walk: _,
        parts,
        res,
        ..
    } = resolve(conn, filter).await?;
    let mut inner = Sql::default();
    inner.push("CAST(COUNT(*) AS SIGNED) FROM (");
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            inner.push(" UNION ALL ");
        }
        inner
            .push(&format!(
                "SELECT j.id FROM job_queue j FORCE INDEX ({}) WHERE ",
                part.index
            ))
            .append(part.range.clone())
            .push(" AND j.id <= ")
            .bind(Bind::U64(horizon))
            .append(res.clone());
    }
    inner.push(") w");
    let text = format!(
        "/* mysqlq:search_count */ {}",
        server.time_limited_select(&inner.text, seconds)
    );
    let s = Sql {
        text,
        binds: inner.binds,
    };
    let n: i64 = s.query().fetch_one(&mut *conn).await.map_err(|e| {
        let msg = e.to_string();
        if msg.contains("1969") || msg.contains("3024") || msg.contains("max_statement_time") {
            Error::invalid(
                "search count",
                format!(
                    "counting took over {seconds} s; narrow the search (a state, a time range, a queue or kind)"
                ),
            )
        } else {
            Error::from(e)
        }
    })?
    .try_get(0)?;
    Ok((u64::try_from(n).unwrap_or(0), horizon))
}

/// `EXPLAIN`s a search's floor and page statements for `filter`, from its start and from a
/// cursor, with the text and binds they run with: `(name, plan)` pairs.
#[cfg(feature = "__internal-store")]
pub async fn search_explain(
    conn: &mut MySqlConnection,
    filter: &Filter,
) -> Result<Vec<(String, Vec<crate::store::admin::PlanRow>)>, Error> {
    let Resolved {
        now,
        walk,
        parts,
        res,
        cap,
        ..
    } = resolve(conn, filter).await?;
    let mut out = Vec::new();
    let mid = (now.timestamp_micros(), 1_000_000);
    for pos in [None, Some(mid)] {
        let mut stmts = vec![(
            format!("search_page {filter} from {pos:?}"),
            page_sql(&parts, walk, pos, cap.map(|_| (0, 1)), &res, 50),
        )];
        if let Some(cap) = cap {
            for part in &parts {
                stmts.push((
                    format!("search_floor {filter} on {} from {pos:?}", part.index),
                    floor_sql(part, walk, pos, cap),
                ));
            }
        }
        for (name, mut s) in stmts {
            s.text = format!("EXPLAIN {}", s.text);
            let rows = s.query().fetch_all(&mut *conn).await?;
            out.push((
                name,
                rows.iter()
                    .map(crate::store::admin::PlanRow::read)
                    .collect(),
            ));
        }
    }
    Ok(out)
}
