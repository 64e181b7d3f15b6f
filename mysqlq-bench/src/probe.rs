//! What the handlers (framework) and the baseline's inline "handler" record, and the clocks
//! and tokens both sides use.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// What the handlers (framework) and the baseline's inline "handler" record.
pub(crate) struct Probe {
    /// Expected ids, sorted (empty in timing mode).
    pub(crate) ids: Vec<u64>,
    /// Runs per expected id.
    pub(crate) counts: Vec<AtomicU32>,
    /// Runs of ids not expected.
    pub(crate) stray: AtomicU64,
    /// All runs.
    pub(crate) total: AtomicU64,
    /// Timing mode: (id, wall-clock µs at handler start).
    pub(crate) starts: Option<Mutex<Vec<(u64, i64)>>>,
}

impl Probe {
    pub(crate) fn counting(mut ids: Vec<u64>) -> Self {
        ids.sort_unstable();
        let counts = ids.iter().map(|_| AtomicU32::new(0)).collect();
        Self {
            ids,
            counts,
            stray: AtomicU64::new(0),
            total: AtomicU64::new(0),
            starts: None,
        }
    }

    pub(crate) fn timing() -> Self {
        Self {
            starts: Some(Mutex::new(Vec::new())),
            ..Self::counting(Vec::new())
        }
    }

    pub(crate) fn ran(&self, id: u64) {
        if let Some(starts) = &self.starts {
            let now = now_us();
            lock(starts).push((id, now));
        }
        match self.ids.binary_search(&id) {
            Ok(i) => {
                self.counts[i].fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.stray.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    /// What ran, for another process's probe to [`add_runs`](Self::add_runs):
    /// `{"once": [[first, last], …], "more": [[id, runs], …], "stray": n}` — the expected ids
    /// that ran exactly once as ranges of consecutive ids, those that ran more than once with
    /// their count, and the runs of ids not expected.
    pub(crate) fn runs_json(&self) -> Value {
        let mut once: Vec<[u64; 2]> = Vec::new();
        let mut more = Vec::new();
        for (&id, c) in self.ids.iter().zip(&self.counts) {
            match c.load(Ordering::Relaxed) {
                0 => {}
                1 => match once.last_mut() {
                    Some(r) if r[1] + 1 == id => r[1] = id,
                    _ => once.push([id, id]),
                },
                n => more.push([id, u64::from(n)]),
            }
        }
        json!({
            "once": once,
            "more": more,
            "stray": self.stray.load(Ordering::Relaxed),
        })
    }

    /// Counts the runs another process's probe reported ([`runs_json`](Self::runs_json)).
    pub(crate) fn add_runs(&self, v: &Value) {
        let pairs = |key: &str| -> Vec<(u64, u64)> {
            v[key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|p| Some((p[0].as_u64()?, p[1].as_u64()?)))
                        .collect()
                })
                .unwrap_or_default()
        };
        for (first, last) in pairs("once") {
            for id in first..=last {
                self.ran(id);
            }
        }
        for (id, n) in pairs("more") {
            for _ in 0..n {
                self.ran(id);
            }
        }
        let stray = v["stray"].as_u64().unwrap_or(0);
        self.stray.fetch_add(stray, Ordering::Relaxed);
        self.total.fetch_add(stray, Ordering::Relaxed);
    }

    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// `Ok(detail)` when every expected id ran exactly once and nothing else ran.
    pub(crate) fn exactly_once(&self) -> Result<String, String> {
        let mut never = 0u64;
        let mut twice = 0u64;
        for c in &self.counts {
            match c.load(Ordering::Relaxed) {
                0 => never += 1,
                1 => {}
                _ => twice += 1,
            }
        }
        let stray = self.stray.load(Ordering::Relaxed);
        let detail = format!(
            "{} handler runs for {} jobs: {never} never ran, {twice} ran more than once, {stray} unexpected",
            self.total(),
            self.ids.len()
        );
        if never == 0 && twice == 0 && stray == 0 {
            Ok(detail)
        } else {
            Err(detail)
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Wall-clock microseconds since the Unix epoch.
pub(crate) fn now_us() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// A claim token: 36 characters like a UUID, from the client (never `UUID()` in SQL).
pub(crate) fn new_token() -> String {
    let x = fastrand::u128(..);
    let h = format!("{x:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_look_like_uuids() {
        assert_eq!(new_token().len(), 36);
    }

    #[test]
    fn a_probe_sees_each_run() {
        let p = Probe::counting(vec![2, 1]);
        p.ran(1);
        p.ran(2);
        assert!(p.exactly_once().is_ok());
        p.ran(2);
        assert!(p.exactly_once().is_err());
    }

    #[test]
    fn runs_in_other_processes_add_up() {
        let a = Probe::counting(vec![1, 2, 3, 5, 6]);
        a.ran(1);
        a.ran(2);
        a.ran(5);
        a.ran(9);
        let b = Probe::counting(vec![1, 2, 3, 5, 6]);
        b.ran(3);
        b.ran(6);
        b.ran(6);
        assert_eq!(
            a.runs_json(),
            json!({"once": [[1, 2], [5, 5]], "more": [], "stray": 1})
        );
        let all = Probe::counting(vec![1, 2, 3, 5, 6]);
        all.add_runs(&a.runs_json());
        all.add_runs(&b.runs_json());
        assert_eq!(all.total(), 7);
        assert_eq!(
            all.exactly_once(),
            Err(
                "7 handler runs for 5 jobs: 0 never ran, 1 ran more than once, 1 unexpected".into()
            )
        );
    }
}
