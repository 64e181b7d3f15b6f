//! What the handlers (framework) and the baseline's inline "handler" record, and the clocks
//! and tokens both sides use.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

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
}
