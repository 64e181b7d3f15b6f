//! The scaling scenario (`--scenario scaling`): the drain rate of `--jobs` pre-enqueued no-op
//! jobs as the worker's concurrency grows ([`CONCURRENCY_POINTS`], one worker process) and as
//! worker processes are added ([`PROCESS_POINTS`], each at `--concurrency`, by default the
//! worker's), beside the raw loop at the same points.
//!
//! Every run drains in child processes of this binary (`bench-drain`,
//! [`crate::scenario::drain_child`]), the framework's and the raw loop's alike: at a point of
//! `p` processes and concurrency `c`, `p` workers at concurrency `c`, or `p` processes of `c`
//! raw claim loops each (the drain baseline's loop; each process's loops share at most
//! [`BASELINE_POOL_MAX`] connections). The parent enqueues, starts the processes, waits until
//! each has its pool and the job ids, reads the server's counters, tells them all to go and
//! times until their completions add up to `--jobs`, then stops them (SIGTERM, the worker's
//! graceful shutdown) and reads the counters again. Each point runs framework and raw loop
//! alternately in ABBA order for `--rounds`; the point's rates are the medians, its ratio the
//! median of the rounds' ratios. Every run checks that each job's handler ran exactly once over
//! all processes and that every row ended `completed` after one claim.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::bench::{BASELINE_POOL_MAX, Bench, STALL, abba, per_s, status_delta};
use crate::error::BenchError;
use crate::plot::{self, Line, Panel};
use crate::probe::Probe;
use crate::report::{median, round_to};
use crate::scenario::child::{ChildProc, stop_all};
use crate::scenario::drain::FrameworkVariant;
use crate::sql;
use crate::table::Table;

/// Worker concurrencies of the first panel, in one worker process.
pub(crate) const CONCURRENCY_POINTS: [u16; 5] = [1, 4, 16, 64, 256];
/// Worker processes of the second panel, each at `--concurrency`.
pub(crate) const PROCESS_POINTS: [u16; 3] = [1, 2, 4];

/// Where the drain runs: this many processes, each at this concurrency (raw: claim loops).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Point {
    pub(crate) processes: u16,
    pub(crate) concurrency: u16,
}

/// Every point once (the process panel's single process is a point of the concurrency panel
/// when `--concurrency` is one of its concurrencies), concurrency panel first.
pub(crate) fn points(process_concurrency: u16) -> Vec<Point> {
    let mut v: Vec<Point> = CONCURRENCY_POINTS
        .iter()
        .map(|&c| Point {
            processes: 1,
            concurrency: c,
        })
        .collect();
    for &p in &PROCESS_POINTS {
        let point = Point {
            processes: p,
            concurrency: process_concurrency,
        };
        if !v.contains(&point) {
            v.push(point);
        }
    }
    v
}

/// What one side measured at one point, over its rounds.
#[derive(Debug, Clone, Default)]
pub(crate) struct PointSide {
    /// Jobs/s per round.
    pub(crate) rates: Vec<f64>,
    pub(crate) jobs: u64,
    /// Claim transactions.
    pub(crate) claims: u64,
    /// Statements that wrote completions.
    pub(crate) flushes: u64,
    /// [`sql::BENCH_STATUS`] deltas, summed (`None`: the server lacks the counter).
    pub(crate) status: Vec<Option<i64>>,
    /// The slowest worker start (`Worker::start`, inside the timed run; framework only).
    pub(crate) start_ms_max: Option<f64>,
    /// CPU seconds of the drain processes, summed.
    pub(crate) cpu_s: Option<f64>,
}

impl PointSide {
    fn add(&mut self, run: &PointSide) {
        self.rates.extend(&run.rates);
        self.jobs += run.jobs;
        self.claims += run.claims;
        self.flushes += run.flushes;
        if self.status.is_empty() {
            self.status.clone_from(&run.status);
        } else {
            for (a, b) in self.status.iter_mut().zip(&run.status) {
                *a = a.zip(*b).map(|(a, b)| a + b);
            }
        }
        self.start_ms_max = match (self.start_ms_max, run.start_ms_max) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.cpu_s = match (self.cpu_s, run.cpu_s) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }

    fn median(&self) -> Option<f64> {
        median(&self.rates).map(|x| round_to(x, 1))
    }

    #[allow(clippy::cast_precision_loss)]
    fn per_job(&self, name: &str) -> Option<f64> {
        let i = sql::BENCH_STATUS.iter().position(|n| *n == name)?;
        let v = self.status.get(i).copied().flatten()?;
        (self.jobs > 0).then(|| round_to(v as f64 / self.jobs as f64, 4))
    }

    #[allow(clippy::cast_precision_loss)]
    fn json(&self) -> Value {
        let div = |a: u64| (a > 0).then(|| round_to(self.jobs as f64 / a as f64, 2));
        json!({
            "per_s": self.median(),
            "rounds_per_s": self.rates.iter().map(|x| round_to(*x, 1)).collect::<Vec<_>>(),
            "jobs_per_claim": div(self.claims),
            "jobs_per_flush": div(self.flushes),
            "commits_per_job": self.per_job("Handler_commit"),
            "fsyncs_per_job": self.per_job("Innodb_data_fsyncs"),
            "statements_per_job": self.per_job("Questions"),
            "row_lock_waits_per_job": self.per_job("Innodb_row_lock_waits"),
            "worker_start_ms_max": self.start_ms_max.map(|x| round_to(x, 1)),
            "cpu_s": self.cpu_s.map(|x| round_to(x, 2)),
        })
    }
}

/// One point's two sides.
#[derive(Debug, Clone)]
pub(crate) struct PointRun {
    pub(crate) point: Point,
    pub(crate) framework: PointSide,
    pub(crate) raw: PointSide,
}

impl PointRun {
    /// Median of the rounds' framework / raw loop ratios.
    fn ratio(&self) -> Option<f64> {
        let r: Vec<f64> = self
            .framework
            .rates
            .iter()
            .zip(&self.raw.rates)
            .filter(|(_, b)| **b > 0.0)
            .map(|(f, b)| f / b)
            .collect();
        median(&r).map(|x| round_to(x, 3))
    }
}

/// The scaling scenario's results.
#[derive(Debug, Clone)]
pub(crate) struct ScalingRun {
    pub(crate) jobs: u32,
    pub(crate) rounds: u32,
    pub(crate) batch: u32,
    /// The process panel's concurrency per process.
    pub(crate) process_concurrency: u16,
    pub(crate) points: Vec<PointRun>,
    /// Where the plot went, or why it could not be written.
    pub(crate) plot: Result<PathBuf, String>,
}

impl Bench<'_> {
    /// The scaling scenario: every point, framework and raw loop alternating, `rounds` times;
    /// then the plot at `plot_path`.
    pub(crate) async fn scaling(
        &mut self,
        rounds: u32,
        process_concurrency: u16,
        plot_path: PathBuf,
    ) -> Result<ScalingRun, BenchError> {
        let mut runs: Vec<PointRun> = points(process_concurrency)
            .into_iter()
            .map(|point| PointRun {
                point,
                framework: PointSide::default(),
                raw: PointSide::default(),
            })
            .collect();
        for round in 0..rounds {
            for run in &mut runs {
                for framework in abba(round) {
                    let r = self.scaling_run(run.point, framework, round).await?;
                    if framework {
                        run.framework.add(&r);
                    } else {
                        run.raw.add(&r);
                    }
                }
            }
        }
        let mut out = ScalingRun {
            jobs: self.jobs,
            rounds,
            batch: self.batch,
            process_concurrency,
            points: runs,
            plot: Ok(plot_path.clone()),
        };
        out.plot = plot::write_svg(&plot_path, &out.caption(), &out.panels()).map(|()| plot_path);
        Ok(out)
    }

    /// One drain at `point` by the framework or the raw loop, in child processes.
    async fn scaling_run(
        &mut self,
        point: Point,
        framework: bool,
        round: u32,
    ) -> Result<PointSide, BenchError> {
        let n = self.jobs;
        let label = format!(
            "scaling {} {} process{} at concurrency {} round {}",
            if framework { "framework" } else { "raw loop" },
            point.processes,
            if point.processes == 1 { "" } else { "es" },
            point.concurrency,
            round + 1
        );
        let ids = self.prepare(&label, n).await?;
        self.phase(&format!("{label}: starting"), n);
        let mut procs = Vec::with_capacity(usize::from(point.processes));
        for index in 0..point.processes {
            let args = self.child_args(point, framework, index);
            procs.push(ChildProc::spawn(&self.scratch.url, &args)?);
        }
        for p in &mut procs {
            p.ready().await?;
        }
        self.phase(&label, n);
        let before = self.status().await?;
        let started = Instant::now();
        for p in &mut procs {
            p.go().await?;
        }
        let waited = self.wait_for_children(&mut procs, u64::from(n)).await;
        let took = started.elapsed();
        if let Err(e) = waited {
            // A child's own error says more than the stall or the early exit seen here.
            return Err(stop_all(procs).await.err().unwrap_or(e));
        }
        let lines = stop_all(procs).await?;
        let after = self.status().await?;
        let probe = Probe::counting(ids);
        let mut side = PointSide {
            rates: vec![per_s(n, took)],
            jobs: u64::from(n),
            status: status_delta(&after, &before),
            ..PointSide::default()
        };
        let mut lost = 0;
        for line in &lines {
            probe.add_runs(&line["runs"]);
            let count = |k: &str| line[k].as_u64().unwrap_or(0);
            side.claims += count("claims");
            side.flushes += count("flushes");
            lost += count("lost");
            if let Some(ms) = line["start_ms"].as_f64() {
                side.start_ms_max = Some(side.start_ms_max.unwrap_or(0.0).max(ms));
            }
            if let Some(c) = line["cpu_s"].as_f64() {
                side.cpu_s = Some(side.cpu_s.unwrap_or(0.0) + c);
            }
        }
        self.check(format!("{label}: handlers"), probe.exactly_once());
        self.check_rows_completed(&label, n).await?;
        if lost > 0 {
            self.check(
                format!("{label}: ownership"),
                Err(format!("{lost} completions refused (lease or token lost)")),
            );
        }
        Ok(side)
    }

    /// `bench-drain`'s arguments for process `index` at `point`.
    fn child_args(&self, point: Point, framework: bool, index: u16) -> Vec<String> {
        let mut args = vec![
            "bench-drain".to_owned(),
            "--index".to_owned(),
            index.to_string(),
            "--concurrency".to_owned(),
            point.concurrency.to_string(),
        ];
        if framework {
            args.extend([
                "--variant".to_owned(),
                FrameworkVariant::DEFAULTS.label.to_owned(),
            ]);
            if let Some(b) = self.batch_arg {
                args.extend(["--batch".to_owned(), b.to_string()]);
            }
        } else {
            args.extend([
                "--raw".to_owned(),
                "--batch".to_owned(),
                self.batch.to_string(),
            ]);
        }
        args
    }

    /// Waits until the children's completions add up to `n`; an error when one exits first or
    /// they stop moving for [`STALL`].
    async fn wait_for_children(&self, procs: &mut [ChildProc], n: u64) -> Result<(), BenchError> {
        let mut last = 0;
        let mut moved = Instant::now();
        loop {
            let now: u64 = procs.iter().map(ChildProc::progress).sum();
            self.bar.set_position(now.min(n));
            if now >= n {
                return Ok(());
            }
            if procs.iter_mut().any(ChildProc::has_exited) {
                return Err(BenchError::new(
                    format!("a drain process exited after {now} of {n} jobs"),
                    "see its error",
                ));
            }
            if now != last {
                last = now;
                moved = Instant::now();
            } else if moved.elapsed() > STALL {
                return Err(BenchError::new(
                    format!(
                        "the run stalled at {now} of {n} jobs for {}s",
                        STALL.as_secs()
                    ),
                    "check the server (`mysqlq-cli doctor`) and the warnings above",
                ));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

impl ScalingRun {
    /// The points of the concurrency panel, in order.
    fn concurrency_panel(&self) -> Vec<&PointRun> {
        CONCURRENCY_POINTS
            .iter()
            .filter_map(|&c| {
                self.points.iter().find(|r| {
                    r.point
                        == Point {
                            processes: 1,
                            concurrency: c,
                        }
                })
            })
            .collect()
    }

    /// The points of the process panel, in order.
    fn process_panel(&self) -> Vec<&PointRun> {
        PROCESS_POINTS
            .iter()
            .filter_map(|&p| {
                self.points.iter().find(|r| {
                    r.point
                        == Point {
                            processes: p,
                            concurrency: self.process_concurrency,
                        }
                })
            })
            .collect()
    }

    fn caption(&self) -> String {
        format!(
            "mysqlq drain of {} no-op jobs: worker against raw claim loop (median of {} round{}, batch {})",
            self.jobs,
            self.rounds,
            if self.rounds == 1 { "" } else { "s" },
            self.batch
        )
    }

    /// The plot's two panels: jobs/s against concurrency, and against processes.
    fn panels(&self) -> Vec<Panel> {
        let lines = |runs: &[&PointRun], x: fn(Point) -> u16| {
            let line = |label: &str, side: fn(&PointRun) -> &PointSide| Line {
                label: label.to_owned(),
                points: runs
                    .iter()
                    .filter_map(|r| Some((f64::from(x(r.point)), side(r).median()?)))
                    .collect(),
            };
            vec![
                line("framework (worker)", |r| &r.framework),
                line("raw loop (claim loops = concurrency)", |r| &r.raw),
            ]
        };
        vec![
            Panel {
                title: "one worker process".to_owned(),
                x_label: "worker concurrency (raw: claim loops)".to_owned(),
                xs: CONCURRENCY_POINTS.iter().map(|&c| f64::from(c)).collect(),
                lines: lines(&self.concurrency_panel(), |p| p.concurrency),
            },
            Panel {
                title: format!(
                    "worker processes at concurrency {}",
                    self.process_concurrency
                ),
                x_label: "worker processes".to_owned(),
                xs: PROCESS_POINTS.iter().map(|&p| f64::from(p)).collect(),
                lines: lines(&self.process_panel(), |p| p.processes),
            },
        ]
    }

    /// The `scaling` object.
    pub(crate) fn json(&self) -> Value {
        let panel = |runs: Vec<&PointRun>| -> Vec<Value> {
            runs.iter()
                .map(|r| {
                    json!({
                        "processes": r.point.processes,
                        "concurrency": r.point.concurrency,
                        "raw_loops": u32::from(r.point.processes) * u32::from(r.point.concurrency),
                        "framework_per_s": r.framework.median(),
                        "raw_per_s": r.raw.median(),
                        "ratio": r.ratio(),
                        "framework": r.framework.json(),
                        "raw": r.raw.json(),
                    })
                })
                .collect()
        };
        json!({
            "jobs": self.jobs,
            "rounds": self.rounds,
            "batch": self.batch,
            "concurrency_points": CONCURRENCY_POINTS,
            "process_points": PROCESS_POINTS,
            "process_concurrency": self.process_concurrency,
            "raw_pool_max_per_process": BASELINE_POOL_MAX,
            "by_concurrency": panel(self.concurrency_panel()),
            "by_processes": panel(self.process_panel()),
            "plot": self.plot.as_ref().ok().map(|p| p.display().to_string()),
            "plot_error": self.plot.as_ref().err(),
        })
    }

    /// The scaling table as text.
    pub(crate) fn human(&self) -> String {
        let mut text = format!(
            "\nscaling: {} jobs per run, {} round(s), framework and raw loop alternating (ABBA), \
             every run in child processes of this binary; batch {}; raw loop: as many claim \
             loops per process as the concurrency, at most {} connections per process; rates \
             are medians, the ratio the median of the rounds' ratios:\n",
            self.jobs, self.rounds, self.batch, BASELINE_POOL_MAX
        );
        let mut t = Table::new(&[
            "PROCESSES",
            ">CONCURRENCY",
            ">FRAMEWORK JOBS/S",
            ">RAW LOOP JOBS/S",
            ">RATIO",
            ">FW JOBS/CLAIM",
            ">RAW JOBS/CLAIM",
            ">FW COMMITS/JOB",
            ">RAW COMMITS/JOB",
        ]);
        let f = |v: Option<f64>, places: usize| {
            v.map_or_else(|| "-".to_owned(), |x| format!("{x:.places$}"))
        };
        let mut rows: Vec<&PointRun> = self.concurrency_panel();
        for r in self.process_panel() {
            if !rows.iter().any(|o| o.point == r.point) {
                rows.push(r);
            }
        }
        for r in rows {
            let fw = r.framework.json();
            let raw = r.raw.json();
            t.row(vec![
                r.point.processes.to_string(),
                r.point.concurrency.to_string(),
                f(r.framework.median(), 0),
                f(r.raw.median(), 0),
                f(r.ratio(), 3),
                f(fw["jobs_per_claim"].as_f64(), 1),
                f(raw["jobs_per_claim"].as_f64(), 1),
                f(fw["commits_per_job"].as_f64(), 3),
                f(raw["commits_per_job"].as_f64(), 3),
            ]);
        }
        text.push_str(&t.render());
        let start = self
            .points
            .iter()
            .filter_map(|r| r.framework.start_ms_max)
            .fold(0.0, f64::max);
        text.push_str(&format!(
            "(commits: Handler_commit, server-wide; the framework's runs include its workers' \
             start, at most {start:.1} ms)\n"
        ));
        match &self.plot {
            Ok(p) => text.push_str(&format!("plot: {}\n", p.display())),
            Err(e) => text.push_str(&format!("plot: NOT written: {e}\n")),
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_single_process_point_at_the_default_concurrency_runs_once() {
        let p = points(16);
        assert_eq!(p.len(), 7);
        assert_eq!(
            p.iter()
                .filter(|x| x.processes == 1 && x.concurrency == 16)
                .count(),
            1
        );
        assert_eq!(points(10).len(), 8);
    }
}
