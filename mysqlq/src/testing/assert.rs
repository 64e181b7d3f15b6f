//! What business code enqueued: typed reads and assertions over the pending jobs, through the
//! test's own transaction (uncommitted jobs are seen), with panic messages that show what was
//! found.

use std::fmt::Write as _;

use sqlx::{Acquire, MySql};

use super::matching::EnqueuedMatch;
use crate::admin::Job as JobRow;
use crate::{Error, Job, JobId};

/// Most found jobs a panic message lists.
const SHOWN: usize = 20;

async fn pending<'c, A>(target: A, kind: Option<&str>) -> Result<Vec<JobRow>, Error>
where
    A: Acquire<'c, Database = MySql> + Send + 'c,
{
    let mut conn = target.acquire().await?;
    crate::store::job_list_pending(&mut conn, kind).await
}

fn decode<J: Job>(row: &JobRow) -> Result<J, Error> {
    serde_json::from_str(&row.payload).map_err(|e| {
        Error::invalid(
            "payload",
            format!(
                "job {} of kind `{}` does not decode: {e} (payload {})",
                row.id,
                J::KIND,
                row.payload
            ),
        )
    })
}

/// The pending jobs of type `J` visible through `target` (`&mut tx` in your test's transaction
/// sees its own uncommitted jobs; `&pool` sees committed ones), oldest first, decoded. Pending
/// includes jobs scheduled for later and jobs waiting for a retry.
pub async fn enqueued<'c, J, A>(target: A) -> Result<Vec<(JobId, J)>, Error>
where
    J: Job,
    A: Acquire<'c, Database = MySql> + Send + 'c,
{
    let rows = pending(target, Some(J::KIND)).await?;
    rows.iter().map(|r| Ok((r.id, decode::<J>(r)?))).collect()
}

/// Panics unless at least one pending job of type `J` matching `pred` is visible through
/// `target`; returns the matching jobs. The panic message lists the pending `J` jobs found.
///
/// ```no_run
/// # async fn demo(pool: sqlx::MySqlPool) -> Result<(), Box<dyn std::error::Error>> {
/// use mysqlq::testing::{assert_enqueued, refute_enqueued};
///
/// #[mysqlq::job(queue = "emails")]
/// async fn send_receipt(order_id: u64) -> Result<(), mysqlq::JobError> { Ok(()) }
///
/// let mut tx = pool.begin().await?;
/// // The business code under test enqueues in the caller's transaction:
/// SendReceipt { order_id: 42 }.enqueue(&mut tx).await?;
/// assert_enqueued::<SendReceipt, _, _>(&mut tx, |j| j.order_id == 42).await;
/// refute_enqueued::<SendReceipt, _, _>(&mut tx, |j| j.order_id == 7).await;
/// tx.rollback().await?; // nothing of the test stays behind
/// # Ok(()) }
/// ```
pub async fn assert_enqueued<'c, J, A, P>(target: A, pred: P) -> Vec<(JobId, J)>
where
    J: Job,
    A: Acquire<'c, Database = MySql> + Send + 'c,
    P: Fn(&J) -> bool,
{
    let rows = pending(target, Some(J::KIND))
        .await
        .unwrap_or_else(|e| panic!("reading the pending `{}` jobs failed: {e}", J::KIND));
    let matching = typed_matches::<J, P>(&rows, &pred);
    assert!(
        !matching.is_empty(),
        "expected a pending `{}` job matching the predicate; {}",
        J::KIND,
        found(
            &rows,
            &format!("pending `{}` jobs", J::KIND),
            "none matches"
        )
    );
    matching
}

/// Panics if a pending job of type `J` matching `pred` is visible through `target`; the panic
/// message lists the matching jobs.
pub async fn refute_enqueued<'c, J, A, P>(target: A, pred: P)
where
    J: Job,
    A: Acquire<'c, Database = MySql> + Send + 'c,
    P: Fn(&J) -> bool,
{
    let rows = pending(target, Some(J::KIND))
        .await
        .unwrap_or_else(|e| panic!("reading the pending `{}` jobs failed: {e}", J::KIND));
    let ids: Vec<JobId> = typed_matches::<J, P>(&rows, &pred)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    if !ids.is_empty() {
        let hits: Vec<JobRow> = rows.into_iter().filter(|r| ids.contains(&r.id)).collect();
        panic!(
            "expected no pending `{}` job matching the predicate; {}",
            J::KIND,
            found(&hits, "matching jobs", "")
        );
    }
}

/// The rows of `rows` whose payload decodes as `J` and matches `pred`. A row that does not
/// decode fails the test: it is a `J` the handler could not run.
fn typed_matches<J: Job, P: Fn(&J) -> bool>(rows: &[JobRow], pred: &P) -> Vec<(JobId, J)> {
    rows.iter()
        .map(|r| (r.id, decode::<J>(r).unwrap_or_else(|e| panic!("{e}"))))
        .filter(|(_, j)| pred(j))
        .collect()
}

/// Every pending job visible through `target` that `m` matches, oldest first (Oban's
/// `all_enqueued`).
pub async fn enqueued_with<'c, A>(target: A, m: &EnqueuedMatch) -> Result<Vec<JobRow>, Error>
where
    A: Acquire<'c, Database = MySql> + Send + 'c,
{
    let rows = pending(target, m.kind.as_deref()).await?;
    Ok(rows.into_iter().filter(|r| m.matches(r)).collect())
}

/// Panics unless a pending job that `m` matches is visible through `target`; returns the
/// matching jobs. The panic message lists the pending jobs found (of `m`'s kind, if it names
/// one) with their queue, priority, schedule, meta and arguments.
pub async fn assert_enqueued_with<'c, A>(target: A, m: EnqueuedMatch) -> Vec<JobRow>
where
    A: Acquire<'c, Database = MySql> + Send + 'c,
{
    let rows = pending(target, m.kind.as_deref())
        .await
        .unwrap_or_else(|e| panic!("reading the pending jobs failed: {e}"));
    let hits: Vec<JobRow> = rows.iter().filter(|r| m.matches(r)).cloned().collect();
    if hits.is_empty() {
        let what = match &m.kind {
            Some(k) => format!("pending `{k}` jobs"),
            None => "pending jobs".to_owned(),
        };
        panic!(
            "expected a pending job with {m}; {}",
            found(&rows, &what, "none matches")
        );
    }
    hits
}

/// Panics if a pending job that `m` matches is visible through `target`; the panic message
/// lists the matching jobs.
pub async fn refute_enqueued_with<'c, A>(target: A, m: EnqueuedMatch)
where
    A: Acquire<'c, Database = MySql> + Send + 'c,
{
    let hits = enqueued_with(target, &m)
        .await
        .unwrap_or_else(|e| panic!("reading the pending jobs failed: {e}"));
    if !hits.is_empty() {
        panic!(
            "expected no pending job with {m}; {}",
            found(&hits, "matching jobs", "")
        );
    }
}

/// `found 2 pending `x` jobs, none matches:` and one line per job (at most [`SHOWN`]).
fn found(rows: &[JobRow], what: &str, verdict: &str) -> String {
    let mut s = format!("found {} {what}", rows.len());
    if !verdict.is_empty() && !rows.is_empty() {
        let _ = write!(s, ", {verdict}");
    }
    if rows.is_empty() {
        return s;
    }
    s.push(':');
    for r in rows.iter().take(SHOWN) {
        let _ = write!(s, "\n  {}", describe(r));
    }
    if rows.len() > SHOWN {
        let _ = write!(s, "\n  … and {} more", rows.len() - SHOWN);
    }
    s
}

/// One line about a pending job: `job 12 `send_email` queue=emails priority=0 ready
/// args={"to":"a@b"} meta={…}`.
fn describe(r: &JobRow) -> String {
    let when = if r.available_at <= r.read_at {
        "ready".to_owned()
    } else {
        let d = (r.available_at - r.read_at).to_std().unwrap_or_default();
        format!("scheduled in {}", crate::backoff::format_duration(d))
    };
    let mut s = format!(
        "job {} `{}` queue={} priority={} max_attempts={} {when} args={}",
        r.id,
        r.kind.as_deref().unwrap_or("<no kind>"),
        r.queue,
        r.priority,
        r.max_attempts,
        r.payload
    );
    if let Some(m) = &r.meta {
        let _ = write!(s, " meta={m}");
    }
    for (name, key) in [
        ("dedupe_key", &r.dedupe_key),
        ("ordering_key", &r.ordering_key),
    ] {
        if let Some(k) = key {
            let _ = write!(s, " {name}={k}");
        }
    }
    s
}
