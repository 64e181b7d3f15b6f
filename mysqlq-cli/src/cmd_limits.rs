//! `limits`: a queue's queue-wide limits, which every worker obeys (`work --rate`, `--global`,
//! `docs/rate-limits.md`): shown, changed or cleared, each change in the audit trail.

use clap::Args;
use mysqlq::admin::QueueLimits;

use crate::args::Acting;
use crate::confirm;
use crate::db::Target;
use crate::error::CliError;

/// `limits`.
#[derive(Debug, Args)]
pub(crate) struct LimitsArgs {
    /// The queue
    #[arg(value_parser = parse_queue)]
    pub(crate) queue: String,
    /// Set the queue's rate: at most N job starts per period across every worker (`100/s`,
    /// `600/min`), or `none`
    #[arg(long, value_parser = parse_rate_or_none, value_name = "N/PERIOD|none")]
    pub(crate) rate: Option<OrNone<mysqlq::Rate>>,
    /// Set the queue's global limit: at most N of its jobs running at once across every
    /// worker, or `none`
    #[arg(long, value_parser = parse_global_or_none, value_name = "N|none")]
    pub(crate) global: Option<OrNone<u32>>,
    /// Remove both limits
    #[arg(long, conflicts_with_all = ["rate", "global"])]
    pub(crate) clear: bool,
    #[command(flatten)]
    pub(crate) acting: Acting,
}

/// Shows `a.queue`'s limits, after changing them when asked to.
pub(crate) async fn limits(target: &Target, a: &LimitsArgs) -> Result<(), CliError> {
    let admin = confirm::admin(target.pool(2).await?, &a.acting);
    let mut limits = admin
        .queue_limits(&a.queue)
        .await
        .map_err(|e| CliError::mysqlq("cannot read the queue's limits", &e))?;
    if a.clear || a.rate.is_some() || a.global.is_some() {
        if a.clear {
            limits = QueueLimits::default();
        }
        if let Some(r) = &a.rate {
            limits.rate = r.0;
        }
        if let Some(g) = &a.global {
            limits.global = g.0;
        }
        admin
            .set_queue_limits(&a.queue, limits)
            .await
            .map_err(|e| CliError::mysqlq("cannot set the queue's limits", &e))?;
    }
    let show = |v: Option<String>| v.unwrap_or_else(|| "none".to_owned());
    println!(
        "queue {}: rate {}, global {}",
        a.queue,
        show(limits.rate.map(|r| r.to_string())),
        show(limits.global.map(|g| g.to_string()))
    );
    Ok(())
}

fn parse_queue(s: &str) -> Result<String, String> {
    mysqlq::validate_queue_name(s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

/// A value or `none` (remove the limit).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OrNone<T>(Option<T>);

fn parse_rate_or_none(s: &str) -> Result<OrNone<mysqlq::Rate>, String> {
    if s == "none" {
        return Ok(OrNone(None));
    }
    s.parse()
        .map(|r| OrNone(Some(r)))
        .map_err(|e: mysqlq::Error| e.to_string())
}

fn parse_global_or_none(s: &str) -> Result<OrNone<u32>, String> {
    if s == "none" {
        return Ok(OrNone(None));
    }
    s.trim()
        .parse()
        .ok()
        .filter(|&n: &u32| n > 0)
        .map(|n| OrNone(Some(n)))
        .ok_or_else(|| format!("`{s}`: write a whole number of jobs above 0, or none"))
}

/// `QUEUE=N/PERIOD` of `work --rate`.
pub(crate) fn parse_queue_rate(s: &str) -> Result<(String, mysqlq::Rate), String> {
    let (name, rate) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: write QUEUE=N/PERIOD, e.g. emails=100/s"))?;
    let rate = rate
        .parse::<mysqlq::Rate>()
        .map_err(|e| format!("`{s}`: {e}"))?;
    Ok((parse_queue(name.trim())?, rate))
}

/// `QUEUE=N` of `work --global`.
pub(crate) fn parse_queue_global(s: &str) -> Result<(String, u32), String> {
    let (name, n) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: write QUEUE=N, e.g. emails=20"))?;
    let n: u32 = n.trim().parse().ok().filter(|&n| n > 0).ok_or_else(|| {
        format!("`{s}`: the limit after `=` must be a whole number of jobs above 0, e.g. {name}=20")
    })?;
    Ok((parse_queue(name.trim())?, n))
}
