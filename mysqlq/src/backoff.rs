//! Retry schedules. Retries are persisted state: the worker writes the next run time into
//! `available_at` and forgets the job; nothing waits in memory.

use std::time::Duration;

/// How long to wait before the next attempt of a failed job.
///
/// [`Backoff::delay`] is the pure schedule; [`Backoff::delay_with_jitter`] spreads it by ±10 %
/// so that jobs failing together do not come back together.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backoff {
    /// `base × 2^(attempt-1)`, capped at `max`.
    Exponential {
        /// Delay after the first failed attempt.
        base: Duration,
        /// Upper bound of any delay.
        max: Duration,
    },
    /// `step × attempt`, capped at `max`.
    Linear {
        /// Delay added per failed attempt.
        step: Duration,
        /// Upper bound of any delay.
        max: Duration,
    },
    /// The same delay after every failed attempt.
    Fixed(Duration),
    /// An explicit schedule: the n-th entry after the n-th failed attempt, the last entry repeated.
    Schedule(&'static [Duration]),
}

impl Backoff {
    /// Default base of `"exp"`: 5 seconds (5s, 10s, 20s, 40s, … up to [`Self::DEFAULT_MAX`]).
    pub const DEFAULT_EXP_BASE: Duration = Duration::from_secs(5);
    /// Default step of `"linear"`: 15 seconds (15s, 30s, 45s, …).
    pub const DEFAULT_LINEAR_STEP: Duration = Duration::from_secs(15);
    /// Default delay of `"fixed"`: 30 seconds.
    pub const DEFAULT_FIXED: Duration = Duration::from_secs(30);
    /// Default cap of the growing schedules: 1 hour.
    pub const DEFAULT_MAX: Duration = Duration::from_secs(3600);

    /// `"exp"` with its defaults.
    pub const fn exponential() -> Self {
        Self::Exponential {
            base: Self::DEFAULT_EXP_BASE,
            max: Self::DEFAULT_MAX,
        }
    }

    /// `"linear"` with its defaults.
    pub const fn linear() -> Self {
        Self::Linear {
            step: Self::DEFAULT_LINEAR_STEP,
            max: Self::DEFAULT_MAX,
        }
    }

    /// `"fixed"` with its default.
    pub const fn fixed() -> Self {
        Self::Fixed(Self::DEFAULT_FIXED)
    }

    /// The delay after failed attempt number `attempt` (1-based), without jitter.
    pub fn delay(&self, attempt: u32) -> Duration {
        let n = attempt.max(1);
        match self {
            Self::Exponential { base, max } => {
                let factor = 1u32.checked_shl(n - 1).unwrap_or(u32::MAX);
                base.checked_mul(factor).unwrap_or(*max).min(*max)
            }
            Self::Linear { step, max } => step.checked_mul(n).unwrap_or(*max).min(*max),
            Self::Fixed(d) => *d,
            Self::Schedule(list) => {
                let i = usize::try_from(n - 1).unwrap_or(usize::MAX);
                list.get(i)
                    .or_else(|| list.last())
                    .copied()
                    .unwrap_or(Duration::ZERO)
            }
        }
    }

    /// The delay after failed attempt `attempt`, spread by ±10 %: `unit` is a uniform random
    /// number in `[0, 1)` (injected so tests can pin it).
    pub fn delay_with_jitter(&self, attempt: u32, unit: f64) -> Duration {
        let base = self.delay(attempt);
        let factor = 0.9 + 0.2 * unit.clamp(0.0, 1.0);
        base.mul_f64(factor)
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::exponential()
    }
}

/// A job's retry policy: how many attempts in all, and the delay between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (`retries + 1`). At least 1.
    pub max_attempts: u32,
    /// Delay before each retry.
    pub backoff: Backoff,
}

impl RetryPolicy {
    /// Default retries after the first attempt: 4, so 5 attempts in all — the article's
    /// `max_attempts` column default.
    pub const DEFAULT_RETRIES: u32 = 4;

    /// A policy with `retries` retries after the first attempt.
    pub const fn new(retries: u32, backoff: Backoff) -> Self {
        Self {
            max_attempts: retries.saturating_add(1),
            backoff,
        }
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::new(Self::DEFAULT_RETRIES, Backoff::exponential())
    }
}

/// `1h2m3s`, `1.5s`, `250ms`: short, for messages.
pub(crate) fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_doubles_and_caps() {
        let b = Backoff::Exponential {
            base: Duration::from_secs(5),
            max: Duration::from_secs(60),
        };
        let got: Vec<u64> = (1..=6).map(|a| b.delay(a).as_secs()).collect();
        assert_eq!(got, [5, 10, 20, 40, 60, 60]);
        assert_eq!(b.delay(200), Duration::from_secs(60));
    }

    #[test]
    fn linear_and_fixed() {
        assert_eq!(Backoff::linear().delay(3), Duration::from_secs(45));
        assert_eq!(Backoff::fixed().delay(9), Duration::from_secs(30));
    }

    #[test]
    fn schedule_repeats_last_entry() {
        const S: &[Duration] = &[Duration::from_secs(5), Duration::from_secs(15)];
        let b = Backoff::Schedule(S);
        assert_eq!(b.delay(1), Duration::from_secs(5));
        assert_eq!(b.delay(2), Duration::from_secs(15));
        assert_eq!(b.delay(7), Duration::from_secs(15));
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        let b = Backoff::Fixed(Duration::from_secs(100));
        assert_eq!(b.delay_with_jitter(1, 0.0), Duration::from_secs(90));
        assert_eq!(b.delay_with_jitter(1, 0.5), Duration::from_secs(100));
        assert!(b.delay_with_jitter(1, 0.999_999) <= Duration::from_secs(110));
    }

    #[test]
    fn retries_count_after_first_attempt() {
        assert_eq!(RetryPolicy::new(5, Backoff::fixed()).max_attempts, 6);
        assert_eq!(RetryPolicy::default().max_attempts, 5);
    }

    #[test]
    fn formats_durations() {
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_secs(3723)), "1h2m3s");
        assert_eq!(format_duration(Duration::from_secs(60)), "1m");
    }
}
