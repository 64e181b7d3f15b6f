//! The order-email example's invariant checks: every committed order mailed once, none of the
//! rolled-back ones, the bounce `failed`, and waiting until the jobs have settled.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sqlx::MySqlPool;

use crate::job_rows::JobRow;

use super::fake_mail::{Delivery, MailStats};
use super::scenario::Summary;
use super::{Placed, SendOrderEmail};

/// Waits until every committed job is `completed` or `failed`; returns how long it took.
pub(super) async fn wait_settled(
    pool: &MySqlPool,
    committed: &[Placed],
    timeout: Duration,
) -> Result<Duration, String> {
    let start = Instant::now();
    let ids: Vec<u64> = committed.iter().map(|p| p.job_id).collect();
    loop {
        let rows = job_rows(pool).await?;
        let open: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| {
                !rows
                    .get(id)
                    .is_some_and(|r| r.status == "completed" || r.status == "failed")
            })
            .collect();
        if open.is_empty() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "after {timeout:?}, {} jobs are still not finished: {open:?}",
                open.len()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every [`SendOrderEmail`] row, by id.
async fn job_rows(pool: &MySqlPool) -> Result<HashMap<u64, JobRow<SendOrderEmail>>, String> {
    crate::job_rows::job_rows(pool).await
}

/// Checks the invariants of a round.
pub(super) async fn check(
    pool: &MySqlPool,
    committed: &[Placed],
    rolled_back: &[Placed],
    mail: &MailStats,
) -> Result<Summary, String> {
    let mut v = Vec::new();
    let jobs = job_rows(pool).await?;
    let orders: Vec<u64> = sqlx::query_scalar("SELECT id FROM orders")
        .fetch_all(pool)
        .await
        .map_err(|e| format!("cannot read orders: {e}"))?;
    let mut jobs_per_order: HashMap<u64, usize> = HashMap::new();
    for row in jobs.values() {
        match row.job.as_ref().map(|j| j.order_id) {
            Some(o) => *jobs_per_order.entry(o).or_default() += 1,
            None => v.push("a job row has no order_id in its payload".to_owned()),
        }
    }
    let mut mails_per_order: HashMap<u64, Vec<&Delivery>> = HashMap::new();
    for d in mail.deliveries.values() {
        mails_per_order.entry(d.order_id).or_default().push(d);
    }

    // Rolled-back orders: no order row, no job row, no mail.
    for p in rolled_back {
        if orders.contains(&p.order_id) {
            v.push(format!("rolled-back order {} exists", p.order_id));
        }
        if jobs.contains_key(&p.job_id) || jobs_per_order.contains_key(&p.order_id) {
            v.push(format!("rolled-back order {} has a job row", p.order_id));
        }
        if mails_per_order.contains_key(&p.order_id) {
            v.push(format!("rolled-back order {} produced mail", p.order_id));
        }
    }
    if orders.len() != committed.len() {
        v.push(format!(
            "{} order rows, {} committed",
            orders.len(),
            committed.len()
        ));
    }

    // Committed orders: exactly one job; mail exactly once (non-bounce), or failed (bounce).
    let mut summary = Summary {
        committed: committed.len(),
        rolled_back: rolled_back.len(),
        outages: mail.outages,
        duplicates_absorbed: mail.duplicates,
        ..Summary::default()
    };
    for p in committed {
        let n = jobs_per_order.get(&p.order_id).copied().unwrap_or(0);
        if n != 1 {
            v.push(format!("committed order {} has {n} jobs", p.order_id));
        }
        let Some(job) = jobs.get(&p.job_id) else {
            v.push(format!(
                "job {} of order {} is missing",
                p.job_id, p.order_id
            ));
            continue;
        };
        let mails = mails_per_order
            .get(&p.order_id)
            .map_or(&[][..], Vec::as_slice);
        if job.status == "failed" {
            summary.failed += 1;
        }
        if p.bounce {
            summary.bounce_job = Some(p.job_id);
            if job.status != "failed" {
                v.push(format!(
                    "bounce job {} is `{}`, not `failed`",
                    p.job_id, job.status
                ));
            }
            if job.last_error.as_deref().is_none_or(str::is_empty) {
                v.push(format!("bounce job {} has no last_error", p.job_id));
            }
            if !mails.is_empty() {
                v.push(format!("bounce order {} was delivered", p.order_id));
            }
            continue;
        }
        if job.status != "completed" {
            v.push(format!(
                "job {} of order {} is `{}` ({})",
                p.job_id,
                p.order_id,
                job.status,
                job.last_error.as_deref().unwrap_or("no error")
            ));
        }
        let expected_key = format!("mysqlq-job-{}", p.job_id);
        match mails {
            [d] if d.key == expected_key => summary.delivered_once += 1,
            [d] => v.push(format!(
                "order {} delivered under key {}, expected {expected_key}",
                p.order_id, d.key
            )),
            _ => v.push(format!(
                "order {} delivered {} times",
                p.order_id,
                mails.len()
            )),
        }
    }
    if jobs.len() != committed.len() {
        v.push(format!(
            "{} job rows for {} committed orders",
            jobs.len(),
            committed.len()
        ));
    }
    summary.violations = v;
    Ok(summary)
}
