//! `stats`: each queue's jobs by operator state and every metric of the job-queue article, from
//! indexed queries and the workers' minute tables.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::Duration;

use mysqlq::admin::{Admin, Stats as Snapshot};

use crate::args::{ConnArgs, StatsArgs};
use crate::db::Target;
use crate::error::CliError;
use crate::out::{self, Table};
use crate::signals::Stop;

/// `stats` (once, or `--watch`).
pub(crate) async fn stats(target: &Target, a: &StatsArgs, conn: &ConnArgs) -> Result<(), CliError> {
    if a.window < Duration::from_secs(60) {
        return Err(CliError::usage(
            format!(
                "--window {} is shorter than a minute",
                humantime::format_duration(a.window)
            ),
            "the workers count per minute: use 1m or more",
        ));
    }
    let pool = target.pool(2).await?;
    let admin = Admin::new(pool.clone());
    #[cfg(feature = "redis")]
    let redis = conn.redis.connect().await?;
    #[cfg(not(feature = "redis"))]
    let _ = conn;
    let tty = std::io::stdout().is_terminal();
    // Registered before the first read: a Ctrl-C during a read (or a read the server holds)
    // ends the watch as surely as one during the sleep.
    let mut stop = a.watch.then(Stop::new);
    loop {
        let round = async {
            let snap = admin
                .stats(a.window)
                .await
                .map_err(|e| CliError::mysqlq("cannot read the statistics", &e))?;
            #[cfg(feature = "redis")]
            let streams = match &redis {
                Some(r) => Some(read_streams(r, &pool).await?),
                None => None,
            };
            #[cfg(not(feature = "redis"))]
            let streams: Option<Streams> = None;
            print_snapshot(&snap, streams.as_ref(), a, tty)
        };
        let Some(stop) = stop.as_mut() else {
            return round.await;
        };
        tokio::select! {
            r = round => r?,
            () = stop.recv() => return Ok(()),
        }
        tokio::select! {
            () = tokio::time::sleep(a.interval) => {}
            () = stop.recv() => return Ok(()),
        }
    }
}

/// Without the `redis` feature there is no stream side.
#[cfg(not(feature = "redis"))]
#[derive(serde::Serialize)]
struct Streams {}

fn print_snapshot(
    snap: &Snapshot,
    streams: Option<&Streams>,
    a: &StatsArgs,
    tty: bool,
) -> Result<(), CliError> {
    let text = if a.json {
        let bug = |e: serde_json::Error| {
            CliError::new(format!("cannot encode JSON: {e}"), "report this bug")
        };
        let mut value = serde_json::to_value(snap).map_err(bug)?;
        if let (Some(s), Some(obj)) = (streams, value.as_object_mut()) {
            obj.insert("redis".into(), serde_json::to_value(s).map_err(bug)?);
        }
        let json = if a.watch {
            serde_json::to_string(&value)
        } else {
            serde_json::to_string_pretty(&value)
        };
        json.map_err(bug)? + "\n"
    } else {
        #[cfg_attr(not(feature = "redis"), allow(unused_mut))]
        let mut text = render(snap);
        #[cfg(feature = "redis")]
        if let Some(s) = streams {
            text.push_str(&crate::redis_args::render_streams(&s.streams, &s.relayed));
        }
        text
    };
    if a.watch && tty && !a.json {
        print!("\x1b[2J\x1b[H");
    }
    print!("{text}");
    Ok(())
}

fn render(s: &Snapshot) -> String {
    let mut o = String::new();
    let mut q = Table::new(&[
        "QUEUE",
        ">WAITING",
        ">READY",
        ">RATE-LIMITED",
        ">SCHEDULED",
        ">RETRYING",
        ">RUNNING",
        ">FAILED",
        ">OLDEST READY",
        "PAUSED",
    ]);
    for r in &s.queues {
        let st = &r.states;
        q.row(vec![
            r.queue.clone(),
            st.waiting.to_string(),
            st.ready.to_string(),
            st.rate_limited.to_string(),
            st.scheduled.to_string(),
            st.retrying.to_string(),
            st.running.to_string(),
            st.failed.to_string(),
            out::age(r.oldest_ready_age_seconds),
            if r.paused { "yes".into() } else { "no".into() },
        ]);
    }
    if q.is_empty() {
        o.push_str("no queues yet (no unfinished or failed jobs)\n");
    } else {
        o.push_str(&q.render());
    }
    let w = humantime::format_duration(Duration::from_secs(s.window_seconds));
    let _ = writeln!(
        o,
        "\nleases: {} processing, {} expired (oldest expiry {})",
        s.leases.processing,
        s.leases.expired,
        if s.leases.expired > 0 {
            out::age(s.leases.oldest_expiry_age_seconds) + " ago"
        } else {
            "-".into()
        }
    );
    let a = &s.activity;
    let mut t = Table::new(&["EVENT", ">TOTAL", ">PER MINUTE"]);
    let pm = &s.per_minute;
    for (name, total, per) in [
        ("claims", a.claims, pm.claims),
        ("completions", a.completions, pm.completions),
        ("retries", a.retries, pm.retries),
        ("failures", a.failures, pm.failures),
        ("deadlocks", a.deadlocks, pm.deadlocks),
        ("lock waits", a.lock_waits, pm.lock_waits),
    ] {
        t.row(vec![name.into(), total.to_string(), format!("{per:.2}")]);
    }
    let _ = writeln!(o, "\nactivity over the last {w}:");
    o.push_str(&t.render());
    let _ = writeln!(
        o,
        "empty polls: {} of {} ({}); snoozes {}, cancels {}, lost leases {}, db errors {}",
        a.empty_polls,
        a.polls,
        s.empty_poll_ratio
            .map_or("-".into(), |r| format!("{:.1}%", r * 100.0)),
        a.snoozes,
        a.cancels,
        a.lost,
        a.db_errors
    );
    let mut wt = Table::new(&[
        "WORKER",
        "HOST",
        ">PID",
        "QUEUES",
        ">RUNNING",
        ">CLAIMS",
        ">DONE",
        ">RETRIES",
        ">FAILURES",
        ">DB ERRORS",
        "LAST SEEN",
    ]);
    for r in &s.workers {
        wt.row(vec![
            r.worker_id.clone(),
            r.host.clone(),
            r.pid.to_string(),
            r.queues.clone(),
            format!("{}/{}", r.running, r.concurrency),
            r.claims.to_string(),
            r.completions.to_string(),
            r.retries.to_string(),
            r.failures.to_string(),
            r.db_errors.to_string(),
            if r.stopped_at.is_some() {
                "stopped".into()
            } else {
                out::age(Some(r.last_seen_age_seconds)) + " ago"
            },
        ]);
    }
    let _ = writeln!(o, "\nworkers (last {w}):");
    if wt.is_empty() {
        o.push_str("none\n");
    } else {
        o.push_str(&wt.render());
    }
    let mut kt = Table::new(&["KIND", ">RUNS", ">ERRORS", ">AVG", ">MAX"]);
    for k in &s.kinds {
        kt.row(vec![
            k.kind.clone(),
            k.runs.to_string(),
            k.errors.to_string(),
            out::micros(k.avg_us),
            out::micros(k.max_us),
        ]);
    }
    let _ = writeln!(o, "\nprocessing time per kind (last {w}):");
    if kt.is_empty() {
        o.push_str("none\n");
    } else {
        o.push_str(&kt.render());
    }
    let tb = &s.table;
    let _ = writeln!(
        o,
        "\njob_queue: data {}, indexes {}, ~{} rows (estimate)\ncleanup lag: oldest completed row finished {}{}",
        out::bytes(tb.data_bytes),
        out::bytes(tb.index_bytes),
        tb.rows_estimate,
        tb.oldest_completed_age_seconds
            .map_or("-".into(), |s| out::age(Some(s)) + " ago"),
        tb.oldest_failed_age_seconds
            .map_or(String::new(), |s| format!(
                "; oldest failed row {} ago",
                out::age(Some(s))
            )),
    );
    o
}

/// The streams of every queue the statistics know, and the jobs MySQL says are in them.
#[cfg(feature = "redis")]
async fn read_streams(
    redis: &mysqlq::redis::Redis,
    pool: &sqlx::MySqlPool,
) -> Result<Streams, CliError> {
    let mut queues: Vec<String> = crate::registry()
        .map(|r| r.queues().into_iter().map(str::to_owned).collect())
        .unwrap_or_default();
    let relayed = mysqlq::redis::relayed(pool)
        .await
        .map_err(|e| CliError::mysqlq("cannot count the relayed jobs", &e))?;
    queues.extend(relayed.iter().map(|(q, _)| q.clone()));
    queues.sort();
    queues.dedup();
    let streams = redis
        .streams(&queues)
        .await
        .map_err(|e| CliError::mysqlq("cannot read the Redis streams", &e))?;
    Ok(Streams { streams, relayed })
}

/// The stream side of the statistics.
#[cfg(feature = "redis")]
#[derive(serde::Serialize)]
struct Streams {
    streams: Vec<mysqlq::redis::StreamInfo>,
    relayed: Vec<(String, u64)>,
}
