//! The results: medians, percentiles and ratios, as one JSON object or as text.

use serde_json::{Value, json};

use crate::args::BenchArgs;
use crate::bench::{Finished, PICKUP_RATE, SINGLE_TASKS_MAX, Side};
use crate::scenario::dashboard::DashboardRun;
use crate::scenario::drain::{ARTICLE_LOOPS, BASELINE_LOOPS, Drainer, FRAMEWORK_VARIANTS};
use crate::scenario::idle::{IDLE_SETTLE, IDLE_WINDOW};
use crate::scenario::periodic::PeriodicRun;
use crate::scenario::rate::RateRun;
use crate::scenario::scaling::ScalingRun;
use crate::scenario::workflow::WorkflowRun;
use crate::sql;
use crate::table::Table;

/// Nearest-rank percentile of sorted values (0 for none).
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Median (mean of the middle two for an even count); `None` for none.
pub(crate) fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len().is_multiple_of(2) {
        f64::midpoint(s[m - 1], s[m])
    } else {
        s[m]
    })
}

pub(crate) fn round_to(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

/// A byte count in MiB with one decimal, as the server's buffer pool is sized.
fn mib(n: i64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let m = n.max(0) as f64 / (1024.0 * 1024.0);
    format!("{m:.1} MiB")
}

pub(crate) struct Report<'a> {
    pub(crate) server: sql::BenchServer,
    pub(crate) database: String,
    pub(crate) dropped: bool,
    pub(crate) args: &'a BenchArgs,
    pub(crate) fw: Side,
    pub(crate) bl: Side,
    pub(crate) bench: Finished,
}

/// The metric keys of one side, in output order, with their values.
pub(crate) fn values(s: &Side) -> Vec<(&'static str, Option<f64>)> {
    vec![
        (
            "enqueue_single_per_s",
            median(&s.enqueue_single).map(|x| round_to(x, 1)),
        ),
        (
            "enqueue_bulk_per_s",
            median(&s.enqueue_bulk).map(|x| round_to(x, 1)),
        ),
        ("drain_per_s", median(&s.drain).map(|x| round_to(x, 1))),
        (
            "pickup_same_process_p50_ms",
            s.pickup_same.map(|p| round_to(p.0, 3)),
        ),
        (
            "pickup_same_process_p99_ms",
            s.pickup_same.map(|p| round_to(p.1, 3)),
        ),
        (
            "pickup_cross_process_p50_ms",
            s.pickup_cross.map(|p| round_to(p.0, 3)),
        ),
        (
            "pickup_cross_process_p99_ms",
            s.pickup_cross.map(|p| round_to(p.1, 3)),
        ),
    ]
}

pub(crate) fn ratio(fw: Option<f64>, bl: Option<f64>) -> Option<f64> {
    match (fw, bl) {
        (Some(f), Some(b)) if b > 0.0 => Some(round_to(f / b, 3)),
        _ => None,
    }
}

impl Report<'_> {
    pub(crate) fn peak_rss_mib(&self) -> Option<f64> {
        #[allow(clippy::cast_precision_loss)]
        self.bench
            .peak_rss
            .map(|b| round_to(b as f64 / (1024.0 * 1024.0), 1))
    }

    pub(crate) fn ratios(&self) -> Vec<(&'static str, Option<f64>)> {
        vec![
            (
                "enqueue_single",
                ratio(
                    median(&self.fw.enqueue_single),
                    median(&self.bl.enqueue_single),
                ),
            ),
            (
                "enqueue_bulk",
                ratio(median(&self.fw.enqueue_bulk), median(&self.bl.enqueue_bulk)),
            ),
            (
                "drain",
                median(&self.bench.drain_ratios).map(|r| round_to(r, 3)),
            ),
        ]
    }

    /// The baseline's drain per loop count: (JSON key, label, median jobs/s).
    pub(crate) fn drain_loops(&self) -> Vec<(String, String, Option<f64>)> {
        loop_medians(
            &BASELINE_LOOPS,
            &self.bl.drain_loops,
            ("drain", "baseline with"),
        )
    }

    /// The raw loop on the article's table per loop count: (JSON key, label, median jobs/s).
    pub(crate) fn article_loops(&self) -> Vec<(String, String, Option<f64>)> {
        loop_medians(
            &ARTICLE_LOOPS,
            &self.bl.article_loops,
            ("drain_article_schema", "raw loop, article's schema,"),
        )
    }

    /// The framework sides after the first (other worker settings): (JSON key, label, median
    /// jobs/s, median over rounds of its rate / the round's best baseline).
    pub(crate) fn drain_variants(&self) -> Vec<(String, String, Option<f64>, Option<f64>)> {
        FRAMEWORK_VARIANTS
            .iter()
            .enumerate()
            .skip(1)
            .map(|(i, &v)| {
                let rates = self.fw.drain_variants.get(i).cloned().unwrap_or_default();
                let ratios: Vec<f64> = rates
                    .iter()
                    .zip(&self.bl.drain)
                    .filter(|(_, b)| **b > 0.0)
                    .map(|(f, b)| f / b)
                    .collect();
                (
                    Drainer::Framework(v).key(),
                    format!("  {} (jobs/s)", v.label),
                    median(&rates).map(|x| round_to(x, 1)),
                    median(&ratios).map(|x| round_to(x, 3)),
                )
            })
            .collect()
    }

    /// Each drain round: the framework, every baseline loop count, the best, the ratio.
    fn drain_rounds(&self) -> Value {
        let rounds = self.fw.drain.len();
        Value::Array(
            (0..rounds)
                .map(|r| {
                    let mut o = serde_json::Map::new();
                    o.insert(
                        "framework_per_s".into(),
                        json!(round_to(self.fw.drain[r], 1)),
                    );
                    for (i, &n) in BASELINE_LOOPS.iter().enumerate() {
                        let v = self.bl.drain_loops.get(i).and_then(|v| v.get(r));
                        o.insert(
                            format!("{}_per_s", Drainer::Baseline(n).key()),
                            json!(v.map(|x| round_to(*x, 1))),
                        );
                    }
                    for (i, &n) in ARTICLE_LOOPS.iter().enumerate() {
                        let v = self.bl.article_loops.get(i).and_then(|v| v.get(r));
                        o.insert(
                            format!("{}_per_s", Drainer::Article(n).key()),
                            json!(v.map(|x| round_to(*x, 1))),
                        );
                    }
                    for (i, &v) in FRAMEWORK_VARIANTS.iter().enumerate().skip(1) {
                        let rate = self.fw.drain_variants.get(i).and_then(|v| v.get(r));
                        let best = self.bl.drain.get(r).filter(|b| **b > 0.0);
                        let key = Drainer::Framework(v).key();
                        o.insert(format!("{key}_per_s"), json!(rate.map(|x| round_to(*x, 1))));
                        o.insert(
                            format!("{key}_ratio"),
                            json!(rate.zip(best).map(|(f, b)| round_to(f / b, 3))),
                        );
                    }
                    o.insert(
                        "baseline_best_per_s".into(),
                        json!(self.bl.drain.get(r).map(|x| round_to(*x, 1))),
                    );
                    o.insert(
                        "ratio".into(),
                        json!(self.bench.drain_ratios.get(r).map(|x| round_to(*x, 3))),
                    );
                    Value::Object(o)
                })
                .collect(),
        )
    }

    pub(crate) fn json(&self) -> Value {
        let obj = |pairs: Vec<(&'static str, Option<f64>)>| {
            Value::Object(
                pairs
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), json!(v)))
                    .collect(),
            )
        };
        let mut fw = obj(values(&self.fw));
        fw["peak_rss_mib"] = json!(self.peak_rss_mib());
        fw["idle_statements_per_s"] = json!(self.fw.idle_statements.map(|x| round_to(x, 2)));
        let mut ratio = obj(self.ratios());
        for (key, _, v, r) in self.drain_variants() {
            fw[format!("{key}_per_s")] = json!(v);
            ratio[key] = json!(r);
        }
        let mut bl = obj(values(&self.bl));
        for (key, _, v) in self.drain_loops().into_iter().chain(self.article_loops()) {
            bl[key] = json!(v);
        }
        bl["idle_statements_per_s"] = json!(self.bl.idle_statements.map(|x| round_to(x, 2)));
        let b = &self.bench;
        json!({
            "server": self.server.version,
            "jobs": b.jobs,
            "concurrency": b.concurrency,
            "batch": b.batch,
            "framework": fw,
            "baseline": bl,
            "baseline_drain_loops": BASELINE_LOOPS,
            "drain_rounds": self.drain_rounds(),
            "ratio": ratio,
            "scenario": format!("{:?}", self.args.scenario).to_lowercase(),
            "after_migrate": self.args.after_migrate,
            "rounds": self.args.rounds(),
            "enqueue_single_jobs": b.single_jobs,
            "pickup_jobs": b.pickup_jobs,
            "pickup_rate_per_s": PICKUP_RATE,
            "idle_settle_s": IDLE_SETTLE.as_secs_f64(),
            "idle_window_s": IDLE_WINDOW.as_secs_f64(),
            "peak_rss_note": if b.rss_reset {
                "VmHWM of the bench process, reset just before the first framework drain"
            } else {
                "VmHWM of the bench process since it started"
            },
            "database": self.database,
            "database_dropped": self.dropped,
            "diagnostics": b.diag.json(),
            "redis": if b.redis.server.is_some() { b.redis.json() } else { Value::Null },
            "periodic": b.periodic.as_ref().map_or(Value::Null, PeriodicRun::json),
            "workflow": b.workflow.as_ref().map_or(Value::Null, WorkflowRun::json),
            "rate": b.rate.as_ref().map_or(Value::Null, RateRun::json),
            "dashboard": b.dashboard.as_ref().map_or(Value::Null, DashboardRun::json),
            "scaling": b.scaling.as_ref().map_or(Value::Null, ScalingRun::json),
            "settings": {
                "innodb_flush_log_at_trx_commit": self.server.flush_log_at_trx_commit,
                "sync_binlog": self.server.sync_binlog,
                "log_bin": self.server.log_bin,
                "binlog_format": self.server.binlog_format,
                "innodb_buffer_pool_size": self.server.buffer_pool_bytes,
                "max_connections": self.server.max_connections,
            },
            "verification": {
                "passed": b.checks.iter().all(|c| c.ok),
                "checks": b.checks.iter().map(|c| json!({
                    "check": c.what, "ok": c.ok, "detail": c.detail,
                })).collect::<Vec<_>>(),
            },
        })
    }

    pub(crate) fn human(&self) -> String {
        let b = &self.bench;
        let s = &self.server;
        let mut text = format!(
            "server {} (innodb_flush_log_at_trx_commit={}, sync_binlog={}, log_bin={}, buffer pool {})\n\
             scratch database {} ({})\n\
             {} jobs, worker concurrency {}, batch {}, other worker settings default; {} round(s) \
             per throughput scenario in ABBA order; drain baseline: the better of {} raw claim \
             loops each round; single-row enqueue: {} jobs from {} tasks; pickup: {} jobs at {}/s; \
             idle: statements counted for {} s after {} s\n\n",
            s.version,
            s.flush_log_at_trx_commit,
            s.sync_binlog,
            s.log_bin,
            mib(s.buffer_pool_bytes),
            self.database,
            if self.dropped {
                "dropped"
            } else {
                "NOT dropped"
            },
            b.jobs,
            b.concurrency,
            b.batch,
            self.args.rounds(),
            BASELINE_LOOPS
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" and "),
            b.single_jobs,
            b.concurrency.min(SINGLE_TASKS_MAX),
            b.pickup_jobs,
            PICKUP_RATE,
            IDLE_WINDOW.as_secs(),
            IDLE_SETTLE.as_secs(),
        );
        let mut t = Table::new(&["METRIC", ">FRAMEWORK", ">BASELINE", ">RATIO"]);
        let fmt = |v: Option<f64>, places: usize| {
            v.map_or_else(|| "-".to_owned(), |x| format!("{x:.places$}"))
        };
        let ratios = self.ratios();
        let labels = [
            "enqueue single (jobs/s)",
            "enqueue bulk (jobs/s)",
            "drain (jobs/s; baseline: its best loop count)",
            "pickup same process p50 (ms)",
            "pickup same process p99 (ms)",
            "pickup cross-process p50 (ms)",
            "pickup cross-process p99 (ms)",
        ];
        for (i, ((label, (_, f)), (_, bl))) in labels
            .iter()
            .zip(values(&self.fw))
            .zip(values(&self.bl))
            .enumerate()
        {
            let (places, r) = if i < 3 {
                (0, fmt(ratios[i].1, 3))
            } else {
                (1, String::new())
            };
            t.row(vec![
                (*label).to_owned(),
                fmt(f, places),
                fmt(bl, places),
                r,
            ]);
            if i == 2 && !self.fw.drain.is_empty() {
                for (_, label, v, r) in self.drain_variants() {
                    t.row(vec![label, fmt(v, 0), String::new(), fmt(r, 3)]);
                }
            }
            if i == 2 && !self.bl.drain.is_empty() {
                for (_, label, v) in self.drain_loops().into_iter().chain(self.article_loops()) {
                    t.row(vec![label, String::new(), fmt(v, 0), String::new()]);
                }
            }
        }
        if self.fw.idle_statements.is_some() || self.bl.idle_statements.is_some() {
            t.row(vec![
                "idle, empty queue (statements/s)".to_owned(),
                fmt(self.fw.idle_statements, 2),
                fmt(self.bl.idle_statements, 2),
                String::new(),
            ]);
        }
        // A run of scenarios without throughput figures (periodic, workflow, rate alone) has
        // nothing in this table: print none.
        let any = values(&self.fw)
            .into_iter()
            .chain(values(&self.bl))
            .any(|(_, v)| v.is_some())
            || self.fw.idle_statements.is_some()
            || self.bl.idle_statements.is_some();
        if any {
            text.push_str(&t.render());
        }
        if b.redis.server.is_some() {
            let mysql: Vec<Option<f64>> = values(&self.fw)
                .into_iter()
                .skip(2)
                .map(|(_, v)| v)
                .collect();
            text.push_str(&b.redis.human(&mysql));
        }
        if let Some(p) = &b.periodic {
            text.push_str(&p.human());
        }
        if let Some(w) = &b.workflow {
            text.push_str(&w.human());
        }
        if let Some(r) = &b.rate {
            text.push_str(&r.human());
        }
        if let Some(d) = &b.dashboard {
            text.push_str(&d.human());
        }
        if let Some(s) = &b.scaling {
            text.push_str(&s.human());
        }
        if let Some(mib) = self.peak_rss_mib() {
            text.push_str(&format!(
                "\nworker peak RSS: {mib:.1} MiB ({})\n",
                if b.rss_reset {
                    "VmHWM of this process, reset just before the first framework drain"
                } else {
                    "VmHWM of this process since it started"
                }
            ));
        }
        if b.diag.sides.iter().any(|(_, s)| s.jobs > 0) {
            text.push_str(&diag_tables(&b.diag.json()));
        }
        let failed = b.checks.iter().filter(|c| !c.ok).count();
        text.push_str(&format!(
            "\nverification: {} ({} checks, {failed} failed)\n",
            if failed == 0 { "passed" } else { "FAILED" },
            b.checks.len()
        ));
        for c in &b.checks {
            text.push_str(&format!(
                "  {} {}: {}\n",
                if c.ok { "ok  " } else { "FAIL" },
                c.what,
                c.detail
            ));
        }
        text
    }
}

/// The drain's diagnostics as text: claim and flush sizes, commits and fsyncs per job, then
/// the raw server counters per job.
fn diag_tables(d: &Value) -> String {
    let f = |x: &Value, places: usize| {
        x.as_f64()
            .map_or_else(|| "-".to_owned(), |x| format!("{x:.places$}"))
    };
    let mut text = String::from(
        "\ndrain, where the work goes (commits and fsyncs are server-wide counters per job; \
         other sessions count too):\n",
    );
    let mut t = Table::new(&[
        "SIDE",
        ">JOBS/CLAIM TX",
        ">JOBS/COMPLETION FLUSH",
        ">PIGGYBACKED/JOB",
        ">COMMITS/JOB",
        ">FSYNCS/JOB",
        ">LOG FSYNCS/JOB",
        ">CLIENT CPU µs/JOB",
        ">SERVER CPU µs/JOB",
    ]);
    let sides: Vec<(Drainer, &Value)> = Drainer::all()
        .into_iter()
        .map(|who| (who, &d[who.key()]))
        .filter(|(_, v)| !v.is_null())
        .collect();
    for &(who, v) in &sides {
        #[allow(clippy::cast_precision_loss)]
        let piggy = match (v["piggybacked_completions"].as_u64(), v["jobs"].as_u64()) {
            (Some(p), Some(j)) if j > 0 => json!(p as f64 / j as f64),
            _ => Value::Null,
        };
        t.row(vec![
            who.label(),
            f(&v["jobs_per_claim"], 1),
            f(&v["jobs_per_flush"], 1),
            f(&piggy, 3),
            f(&v["commits_per_job"], 3),
            f(&v["fsyncs_per_job"], 3),
            f(&v["log_fsyncs_per_job"], 3),
            f(&v["client_cpu_us_per_job"], 1),
            f(&v["server_cpu_us_per_job"], 1),
        ]);
    }
    text.push_str(&t.render());
    text.push_str(
        "(commits: Handler_commit; fsyncs: Innodb_data_fsyncs; log fsyncs: Innodb_os_log_fsyncs, \
         `-` where the server has none; CPU: user + system seconds of this process (the drainer \
         and the bench's probe) and of the server process, `-` when the server is not on this \
         host, per job)\n",
    );
    text.push_str(&per_job_table(&sides));
    text
}

/// The group a [`sql::BENCH_STATUS`] counter is printed under.
fn counter_group(name: &str) -> &'static str {
    if name == "Questions" || name.starts_with("Com_") {
        "statements"
    } else if name.starts_with("Innodb_rows_") {
        "rows (InnoDB)"
    } else if name.starts_with("Handler_read_") {
        "row reads by kind (handler calls)"
    } else if name == "Handler_commit" || name.ends_with("fsyncs") {
        "commits and fsyncs"
    } else if name.starts_with("Innodb_row_lock") {
        "row locks (time in ms)"
    } else {
        "row changes (handler calls)"
    }
}

/// Every server counter per job, one row each and one column per drain side, then the
/// secondary index entries each side changes per job (computed from the schema).
fn per_job_table(sides: &[(Drainer, &Value)]) -> String {
    let mut text = String::from(
        "\nper job, on the server (SHOW GLOBAL STATUS deltas over each side's runs / its jobs; \
         server-wide: other sessions count too; `missing`: the server has no such counter):\n",
    );
    let labels: Vec<String> = sides
        .iter()
        .map(|(who, _)| format!(">{}", who.label().to_uppercase()))
        .collect();
    let headers: Vec<&str> = std::iter::once("COUNTER")
        .chain(labels.iter().map(String::as_str))
        .collect();
    let mut t = Table::new(&headers);
    let mut group = "";
    for name in sql::BENCH_STATUS {
        if counter_group(name) != group {
            group = counter_group(name);
            t.row(vec![group.to_owned()]);
        }
        let mut row = vec![format!("  {name}")];
        for (_, v) in sides {
            row.push(
                v["server_counters_per_job"][name]
                    .as_f64()
                    .map_or_else(|| "missing".to_owned(), |x| format!("{x:.3}")),
            );
        }
        t.row(row);
    }
    t.row(vec!["computed from job_queue's indexes".to_owned()]);
    let mut row = vec!["  secondary index entries changed".to_owned()];
    for (_, v) in sides {
        row.push(
            v["secondary_index_entries"]["entries_per_job"]
                .as_u64()
                .map_or_else(|| "-".to_owned(), |n| n.to_string()),
        );
    }
    t.row(row);
    text.push_str(&t.render());
    text.push_str(
        "(index entries: an UPDATE changes one entry of each secondary index holding a column it \
         assigns, a DELETE one of every secondary index; per statement:)\n",
    );
    for (who, v) in sides {
        let Some(statements) = v["secondary_index_entries"]["statements"].as_array() else {
            continue;
        };
        let parts: Vec<String> = statements
            .iter()
            .map(|st| {
                let names: Vec<&str> = st["indexes"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                format!(
                    "{} {} ({})",
                    st["statement"].as_str().unwrap_or("?"),
                    names.len(),
                    names.join(", ")
                )
            })
            .collect();
        text.push_str(&format!("  {}: {}\n", who.label(), parts.join("; ")));
    }
    text
}

/// Per loop count of `loops`: (JSON key `<key>_<n>_loop(s)_per_s`, label `  <label> <n> claim
/// loop(s) (jobs/s)`, median of `rates[i]`).
fn loop_medians(
    loops: &[usize],
    rates: &[Vec<f64>],
    (key, label): (&str, &str),
) -> Vec<(String, String, Option<f64>)> {
    loops
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let plural = if n == 1 { "loop" } else { "loops" };
            (
                format!("{key}_{n}_{plural}_per_s"),
                format!("  {label} {n} claim {plural} (jobs/s)"),
                rates.get(i).and_then(|v| median(v)).map(|x| round_to(x, 1)),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_medians() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert!((percentile(&v, 50.0) - 50.0).abs() < 1e-9);
        assert!((percentile(&v, 99.0) - 99.0).abs() < 1e-9);
        assert_eq!(median(&[3.0, 1.0]), Some(2.0));
        assert_eq!(median(&[]), None);
    }
}
