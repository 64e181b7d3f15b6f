//! The memory scenario: the worker's peak resident set, read around the first framework drain
//! ([`crate::scenario::drain`]).

/// The peak resident set (`VmHWM`) of this process, in bytes.
pub(crate) fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Resets `VmHWM` to the current resident set (Linux `clear_refs` value 5).
pub(crate) fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}
