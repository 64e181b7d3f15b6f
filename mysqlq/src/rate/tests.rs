//! Tests of `rate`: parsing and display, the log's encoding, `decide` on hand-built logs, and
//! seeded simulations of a bucket that check the window property, `open_at` and utilisation.

use std::time::Duration;

use super::{
    DecideInput, Decision, Entry, MAX_ENTRIES, Rate, decide, decode, encode, slack, unreadable,
};

/// A time of 2023 in µs, so that the arithmetic runs at production magnitudes.
const T0: i64 = 1_700_000_000_000_000;
/// The poll ceiling the simulations pass.
const IDLE: Duration = Duration::from_secs(1);
/// The default slack floor.
const FLOOR: Duration = Duration::from_millis(5);

fn rate(text: &str) -> Rate {
    text.parse().unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// Why `text` is refused (the reason of `invalid rate: …`).
fn refusal(text: &str) -> String {
    match text.parse::<Rate>() {
        Ok(r) => panic!("{text:?} was accepted as {r:?}"),
        Err(e) => e.to_string().replacen("invalid rate: ", "", 1),
    }
}

/// A log from (µs after `T0`, count) pairs.
fn log(entries: &[(i64, u32)]) -> Vec<Entry> {
    entries
        .iter()
        .map(|&(t, n)| Entry { t_us: T0 + t, n })
        .collect()
}

fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).expect("a test duration fits in i64 µs")
}

#[test]
fn parses_count_slash_period() {
    let ms = Duration::from_millis;
    for (text, count, period) in [
        ("10/s", 10, ms(1_000)),
        ("600/min", 600, ms(60_000)),
        ("5/100ms", 5, ms(100)),
        ("1/2s", 1, ms(2_000)),
        (" 3 / h ", 3, ms(3_600_000)),
        ("3/1h", 3, ms(3_600_000)),
        ("1/90s", 1, ms(90_000)),
        ("7/sec", 7, ms(1_000)),
        ("7/m", 7, ms(60_000)),
        ("7/d", 7, ms(86_400_000)),
        ("2/10ms", 2, ms(10)),
        ("1/1h30m", 1, ms(5_400_000)),
        ("1/1h 30min", 1, ms(5_400_000)),
        ("1/1s500ms", 1, ms(1_500)),
        ("\t12/ 2 s\n", 12, ms(2_000)),
        ("1/24h", 1, ms(86_400_000)),
        ("1000000/d", 1_000_000, ms(86_400_000)),
        ("010/s", 10, ms(1_000)),
        ("1/10000us", 1, ms(10)),
    ] {
        let r = rate(text);
        assert_eq!((r.count(), r.period()), (count, period), "{text:?}");
    }
    assert_eq!(rate("10/s"), Rate::__validated(10, 1_000));
    assert_eq!(Rate::per_second(20).ok(), Some(rate("20/s")));
}

#[test]
fn refuses_bad_rates_saying_what_to_change() {
    for text in ["10", " 10 ", "10/", ""] {
        let t = text.trim();
        let no_period = format!(
            "`{t}` has no period: write \"<count>/<period>\", e.g. \"10/s\", \"600/min\", \"5/100ms\""
        );
        assert_eq!(refusal(text), no_period, "{text:?}");
    }
    let count = |c: &str| format!("the count must be 1 to 1000000 starts per period, not `{c}`");
    for c in ["0", "1000001", "99999999999"] {
        assert_eq!(refusal(&format!("{c}/s")), count(c));
    }
    for c in ["ten", "-1", "+1", "1.5", ""] {
        let whole = format!("`{c}` is not a whole number of starts");
        assert_eq!(refusal(&format!("{c}/s")), whole);
    }
    for p in ["fortnight", "5", "1.5s", "S", "s/2", "2 weeks"] {
        let unit = format!(
            "period `{p}`: unknown time unit; use ms, s, min, h or d, optionally with a number (`100ms`, `2s`)"
        );
        assert_eq!(refusal(&format!("10/{p}")), unit);
    }
    for p in ["5ms", "0s", "ms"] {
        let short = format!("period `{p}` is shorter than 10ms");
        assert_eq!(refusal(&format!("10/{p}")), short);
    }
    for p in ["2d", "24h1ms", "9999999999999999999d"] {
        assert_eq!(
            refusal(&format!("10/{p}")),
            format!("period `{p}` is longer than 1d")
        );
    }
    for p in ["1500us", "us", "10ms1us"] {
        let whole = format!("period `{p}`: durations count whole milliseconds");
        assert_eq!(refusal(&format!("10/{p}")), whole);
    }

    // Rate::new says the same, with the period written out.
    let new = |count, period| match Rate::new(count, period) {
        Ok(r) => panic!("Rate::new({count}, {period:?}) accepted as {r:?}"),
        Err(e) => e.to_string().replacen("invalid rate: ", "", 1),
    };
    let (ms, micros) = (Duration::from_millis, Duration::from_micros);
    assert_eq!(new(0, ms(1_000)), count("0"));
    assert_eq!(new(1_000_001, ms(1_000)), count("1000001"));
    for (period, text) in [
        (ms(5), "5ms"),
        (ms(172_800_000), "2d"),
        (micros(1_500), "1500us"),
    ] {
        assert_eq!(new(1, period), refusal(&format!("1/{text}")));
    }
    assert_eq!(new(1, ms(86_400_001)), refusal("1/86400001ms"));
    let ns = "period `10000000500ns`: durations count whole milliseconds";
    assert_eq!(new(1, Duration::from_nanos(10_000_000_500)), ns);
    assert!(Rate::per_second(0).is_err());
    assert!(Rate::new(1, ms(10)).is_ok() && Rate::new(1_000_000, ms(86_400_000)).is_ok());
}

#[test]
fn displays_the_shortest_text_and_parses_it_back() {
    for (count, period_ms, text) in [
        (10, 1_000, "10/s"),
        (600, 60_000, "600/min"),
        (5, 100, "5/100ms"),
        (1, 2_000, "1/2s"),
        (3, 3_600_000, "3/h"),
        (1, 90_000, "1/90s"),
        (7, 120_000, "7/2min"),
        (1, 5_400_000, "1/90min"),
        (4, 7_200_000, "4/2h"),
        (2, 86_400_000, "2/d"),
        (1, 1_500, "1/1500ms"),
        (1, 10, "1/10ms"),
    ] {
        let r = Rate::__validated(count, period_ms);
        assert_eq!(r.to_string(), text);
        assert_eq!(rate(text), r, "{text}");
    }
    let mut rng = Rng(7);
    for i in 0..20_000 {
        let period_ms = match i % 3 {
            0 => rng.between(10, 86_400_001),
            1 => rng.between(1, 1_441) * 60_000, // whole minutes, hours and days
            _ => rng.between(1, 86_401) * 1_000, // whole seconds
        };
        let period = Duration::from_millis(period_ms.unsigned_abs());
        let count = u32::try_from(rng.between(1, 1_000_001)).expect("≤ 1000000");
        let r = Rate::new(count, period).unwrap_or_else(|e| panic!("{count} per {period:?}: {e}"));
        assert_eq!(rate(&r.to_string()), r, "{r}");
    }
}

#[test]
fn slack_is_a_twentieth_of_the_period_between_the_floor_and_250ms() {
    let ms = Duration::from_millis;
    assert_eq!(slack(ms(1_000), ms(5)), ms(50));
    assert_eq!(slack(ms(100), ms(5)), ms(5));
    assert_eq!(slack(ms(10), ms(5)), ms(5));
    assert_eq!(slack(ms(300), ms(5)), ms(15));
    assert_eq!(slack(ms(400), ms(20)), ms(20));
    assert_eq!(slack(ms(10_000), ms(5)), ms(250));
    assert_eq!(slack(ms(86_400_000), ms(5)), ms(250));
    assert_eq!(slack(ms(10_000), ms(300)), ms(300)); // the floor wins over the cap
}

#[test]
fn the_log_encodes_as_a_version_byte_and_big_endian_entries() {
    let (t_us, n) = (0x0102_0304_0506_0708, 0x0A0B_0C0D);
    let entries = [Entry { t_us, n }, Entry { t_us: -1, n: 1 }];
    let bytes = encode(&entries);
    let mut expected = vec![1, 1, 2, 3, 4, 5, 6, 7, 8, 0x0A, 0x0B, 0x0C, 0x0D];
    expected.extend([0xFF; 8].into_iter().chain([0, 0, 0, 1]));
    assert_eq!(bytes, expected);
    assert_eq!(decode(&bytes), entries);
    assert_eq!(encode(&[]), [1]);
    let full = log(&[(0, u32::MAX); MAX_ENTRIES]);
    assert_eq!(encode(&full).len(), 769); // fits VARBINARY(1024)
    assert_eq!(decode(&encode(&full)), full);
}

#[test]
fn an_empty_log_is_readable_and_garbage_is_not() {
    // `[1]`: a bucket whose entries all left the window (logged as unreadable before).
    for ok in [vec![], encode(&[]), encode(&log(&[(0, 3)]))] {
        assert!(!unreadable(&ok, &decode(&ok)), "{ok:?}");
    }
    for bad in [vec![2; 13], vec![1, 0], vec![0; 13]] {
        assert!(unreadable(&bad, &decode(&bad)), "{bad:?}");
    }
}

#[test]
fn decode_of_garbage_is_an_empty_log_and_never_panics() {
    let one = encode(&log(&[(0, 3)]));
    let (short, long) = (one[..12].to_vec(), [&one[..], &[0]].concat());
    for bytes in [vec![], vec![1], vec![0; 13], vec![2; 13], short, long] {
        assert_eq!(decode(&bytes), [], "{bytes:?}");
    }
    let mut rng = Rng(11);
    for _ in 0..20_000 {
        let len = usize::try_from(rng.between(0, 800)).expect("small");
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.next().to_le_bytes()[0]).collect();
        if rng.chance(50) && !bytes.is_empty() {
            bytes[0] = 1;
            bytes.truncate(1 + (bytes.len() - 1) / 12 * 12);
        }
        let entries = decode(&bytes);
        if entries.is_empty() {
            continue;
        }
        assert_eq!(bytes.len(), 1 + 12 * entries.len());
        // Whatever came out (unsorted, extreme times and counts), deciding on it does not panic.
        let now = rng.between(i64::MIN / 2, i64::MAX / 2);
        let huge = Duration::from_secs(u64::MAX / 4);
        let d = decide(&after(huge, input(&entries, rate("1000/s"), now, 8, true)));
        assert!(d.log.len() <= MAX_ENTRIES && d.log.is_sorted_by_key(|e| e.t_us));
    }
}

/// `input` after a decision whose window was `prev`.
fn after(prev: Duration, input: DecideInput<'_>) -> DecideInput<'_> {
    DecideInput {
        prev_window: Some(prev),
        ..input
    }
}

/// A decision with ε = 50 ms, no previous window and a poll ceiling of 1 s.
fn input(log: &[Entry], rate: Rate, now_us: i64, want: u32, more_ready: bool) -> DecideInput<'_> {
    let (slack, prev_window, idle_recheck) = (Duration::from_millis(50), None, IDLE);
    DecideInput {
        log,
        rate,
        slack,
        prev_window,
        now_us,
        want,
        more_ready,
        idle_recheck,
    }
}

/// `decide` for 3/s with ε = 50 ms (W = 1.05 s) at `T0 + now`, wanting `want`, more ready.
fn three_per_s(log: &[Entry], now: i64, want: u32) -> Decision {
    decide(&input(log, rate("3/s"), T0 + now, want, true))
}

#[test]
fn decide_admits_up_to_the_limit_and_says_when_to_come_back() {
    let w = 1_050_000;
    let d = three_per_s(&[], 0, 2);
    assert_eq!((d.admit, d.t_us, d.open_at_us), (2, T0, T0)); // room left, more ready
    assert_eq!(
        (d.log, d.window),
        (log(&[(0, 2)]), Duration::from_millis(1_050))
    );
    let d = decide(&input(&[], rate("3/s"), T0, 2, false));
    assert_eq!(d.open_at_us, T0 + 1_000_000); // room left, nothing ready: the poll ceiling
    let d = three_per_s(&[], 0, 5);
    assert_eq!((d.admit, d.open_at_us), (3, T0 + w)); // full

    // Full: open_at is W after the entry where the count, walking back, reaches N.
    let d = three_per_s(&log(&[(0, 2), (100_000, 2)]), 200_000, 4);
    assert_eq!((d.admit, d.open_at_us), (0, T0 + w));
    let over = log(&[(0, 1), (100_000, 1), (150_000, 2)]); // over the limit (it was lowered)
    let d = three_per_s(&over, 200_000, 4);
    assert_eq!((d.admit, d.open_at_us), (0, T0 + 100_000 + w));
    let d = three_per_s(&log(&[(0, 1), (100_000, 1)]), 200_000, 4);
    assert_eq!((d.admit, d.open_at_us), (1, T0 + w));
    // At open_at exactly a start is admitted (T0 leaves the window), a microsecond before not.
    assert_eq!(three_per_s(&d.log, w, 4).admit, 1);
    assert_eq!(three_per_s(&d.log, w - 1, 4).admit, 0);
}

#[test]
fn decide_never_records_a_time_before_the_last() {
    let d = three_per_s(&log(&[(0, 1)]), -5_000, 1); // the database clock went back
    assert_eq!((d.admit, d.t_us), (1, T0));
    assert_eq!(d.log, log(&[(0, 2)])); // same time: added to the last entry
}

#[test]
fn decide_drops_only_entries_outside_both_windows() {
    let (r, now) = (rate("3/s"), T0 + 2_500_000); // W = 1.05 s
    let entries = log(&[(0, 1), (1_000_000, 1), (1_500_000, 1), (2_000_000, 1)]);
    let d = decide(&input(&entries, r, now, 5, true));
    assert_eq!(d.admit, 1); // 1.5 s and 2 s are inside (now − W, now]
    assert_eq!(d.log[0].t_us, T0 + 1_500_000);
    // A wider previous window keeps what it still covers, without counting it.
    let d = decide(&after(
        Duration::from_secs(2),
        input(&entries, r, now, 5, true),
    ));
    assert_eq!((d.admit, d.log[0].t_us), (1, T0 + 1_000_000));
}

#[test]
fn decide_merges_the_closest_entries_into_the_later_one() {
    let mut entries: Vec<_> = (0..64).map(|i| (i * 10_000, 1)).collect();
    entries[30] = (291_000, 5); // 290 ms and 291 ms are the closest pair
    let (r, entries) = (rate("1000/s"), log(&entries));
    let d = decide(&input(&entries, r, T0 + 700_000, 1, true));
    assert_eq!((d.admit, d.log.len()), (1, MAX_ENTRIES));
    assert_eq!(d.log[28..30], log(&[(280_000, 1), (291_000, 6)]));
    assert_eq!(d.log.iter().map(|e| e.n).sum::<u32>(), 64 + 4 + 1);
}

#[test]
fn open_at_counts_the_log_after_a_merge() {
    // A count just outside the window merges into one just inside: the bucket is then full,
    // and open_at says so instead of sending the next claim to be refused.
    let (r, w, now) = (rate("3/s"), 1_050_000, 10_000_000);
    let mut entries: Vec<_> = (0..62).map(|i| (i * 10_000, 1)).collect();
    entries.extend([(now - w - 1, 1), (now - w + 1, 1)]);
    let entries = log(&entries);
    let d = decide(&after(
        Duration::from_secs(20),
        input(&entries, r, T0 + now, 1, true),
    ));
    assert_eq!(d.admit, 1); // one counted + one admitted: room for one more before the merge
    assert_eq!(d.log[62..], log(&[(now - w + 1, 2), (now, 1)]));
    assert_eq!(d.open_at_us, T0 + now + 1);
    assert_eq!(three_per_s(&d.log, now, 1).admit, 0);
    assert_eq!(three_per_s(&d.log, now + 1, 1).admit, 1);
}

/// splitmix64: a seeded generator, so that every run of the simulations is the same.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`lo` when the range is empty).
    fn between(&mut self, lo: i64, hi: i64) -> i64 {
        let span = hi.abs_diff(lo);
        if hi <= lo {
            return lo;
        }
        lo.wrapping_add_unsigned(self.next() % span)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// The first j whose N + 1 recorded starts `j − N ..= j` span less than the window W of start
/// j − N's decision (`starts` holds (recorded time, W) in µs, in admission order). With a
/// constant ε this is "any N + 1 consecutive recorded starts span ≥ W"; when ε grows the
/// earlier start's W is what the start guard needs (its handler starts within its own ε).
fn first_violation(starts: &[(i64, i64)], n: usize) -> Option<usize> {
    (n..starts.len()).find(|&j| starts[j].0 - starts[j - n].0 < starts[j - n].1)
}

/// A bucket driven through `decide` as the claim drives it: the log stored as bytes between
/// decisions, every admitted start recorded with the W of its decision.
struct Bucket {
    rate: Rate,
    slack: Duration,
    stored: Vec<u8>,
    prev_window: Option<Duration>,
    starts: Vec<(i64, i64)>,
    last_t: i64,
    full_logs: usize,
}

impl Bucket {
    fn new(rate: Rate, slack: Duration) -> Self {
        let (stored, starts) = (Vec::new(), Vec::new());
        Self {
            rate,
            slack,
            stored,
            prev_window: None,
            starts,
            last_t: i64::MIN,
            full_logs: 0,
        }
    }

    fn input<'a>(&self, log: &'a [Entry], now_us: i64, want: u32, ready: bool) -> DecideInput<'a> {
        let prev_window = self.prev_window;
        DecideInput {
            slack: self.slack,
            prev_window,
            ..input(log, self.rate, now_us, want, ready)
        }
    }

    fn decide(&mut self, now_us: i64, want: u32, more_ready: bool) -> Decision {
        let log = decode(&self.stored);
        let d = decide(&self.input(&log, now_us, want, more_ready));
        assert!(d.admit <= want);
        assert!(d.log.len() <= MAX_ENTRIES, "{} entries", d.log.len());
        assert!(d.log.windows(2).all(|p| p[0].t_us < p[1].t_us), "{d:?}");
        assert!(d.t_us >= now_us && d.open_at_us >= d.t_us);
        assert!(
            d.admit == 0 || d.t_us >= self.last_t,
            "recorded times went back"
        );
        self.stored = encode(&d.log);
        assert_eq!(decode(&self.stored), d.log);
        self.full_logs += usize::from(d.log.len() == MAX_ENTRIES);
        self.prev_window = Some(d.window);
        if d.admit > 0 {
            self.last_t = d.t_us;
        }
        // W as the proof needs it (P + ε given), not as the decision reports it.
        let w = us(self.rate.period() + self.slack);
        assert_eq!(us(d.window), w);
        self.starts.extend(std::iter::repeat_n(
            (d.t_us, w),
            usize::try_from(d.admit).expect("small"),
        ));
        d
    }

    /// The log counts N starts in (t − W, t].
    fn is_full(&self, d: &Decision) -> bool {
        let w = us(d.window);
        d.log
            .iter()
            .filter(|e| e.t_us > d.t_us - w)
            .map(|e| u64::from(e.n))
            .sum::<u64>()
            >= u64::from(self.rate.count())
    }

    /// Starts a decision at `now_us` would admit (wanting many), without changing the bucket:
    /// the same with the previous W as with a wider one that keeps older entries.
    fn probe(&self, d: &Decision, now_us: i64) -> u32 {
        let [admit, wider] = [d.window, d.window * 3]
            .map(|prev| decide(&after(prev, self.input(&d.log, now_us, 1_000, true))).admit);
        assert_eq!(admit, wider, "a wider previous window counted more: {d:?}");
        admit
    }
}

/// Drives a bucket through `decisions` decisions with the demand and the clock of a busy
/// queue: phases of wide gaps (0..2W), dense bursts (gaps 0..W/200, which fill the 64 entries
/// and force merges) and wake-ups at `open_at` + 0.5–3 ms; want 1–8; sometimes nothing more
/// ready; sometimes the database clock steps back, or the previous window was wider. With
/// `grow`, ε sometimes grows (`slack_us` only grows). After each decision, a decision at
/// `open_at` must admit, and when the bucket is full one a microsecond earlier must not.
fn simulate(rate: Rate, slack: Duration, decisions: usize, seed: u64, grow: bool) -> Bucket {
    let mut rng = Rng(seed);
    let mut bucket = Bucket::new(rate, slack);
    let (mut now, mut open_at, mut phase, mut phase_left) = (T0, T0, 0, 0);
    for _ in 0..decisions {
        if phase_left == 0 {
            (phase, phase_left) = (rng.between(0, 3), rng.between(200, 1_000));
        }
        phase_left -= 1;
        let w = us(rate.period() + bucket.slack);
        now = match phase {
            _ if rng.chance(2) => now - rng.between(0, us(bucket.slack)),
            0 => now + rng.between(0, 2 * w),
            1 => now + rng.between(0, w / 200 + 1),
            _ => open_at.max(now) + rng.between(500, 3_000),
        };
        if grow && rng.chance(1) {
            bucket.slack += Duration::from_micros(rng.between(0, 20_000).unsigned_abs());
        }
        if rng.chance(5) {
            // A wider previous window (the limit was looser): kept entries, never counted.
            let wider = Duration::from_micros(rng.between(0, 2 * w).unsigned_abs());
            bucket.prev_window = bucket.prev_window.map(|prev| prev + wider);
        }
        let want = u32::try_from(rng.between(1, 9)).expect("small");
        let d = bucket.decide(now, want, phase == 2 || rng.chance(70));
        open_at = d.open_at_us;
        if rate.count() > 0 {
            assert!(
                bucket.probe(&d, open_at) >= 1,
                "nothing admitted at open_at {open_at}: {d:?}"
            );
        }
        if bucket.is_full(&d) {
            assert_eq!(
                bucket.probe(&d, open_at - 1),
                0,
                "admitted before open_at {open_at}: {d:?}"
            );
        }
    }
    bucket
}

const RATES: [&str; 7] = [
    "1/100ms", "4/300ms", "3/1s", "20/s", "50/s", "100/s", "1000/s",
];

fn count_of(r: Rate) -> usize {
    usize::try_from(r.count()).expect("small")
}

#[test]
fn any_n_plus_one_recorded_starts_span_the_window() {
    let (mut decisions, mut full_logs) = (0, 0);
    for (seed, text) in (1..).zip(RATES) {
        let r = rate(text);
        let bucket = simulate(r, slack(r.period(), FLOOR), 16_000, seed, false);
        assert_eq!(first_violation(&bucket.starts, count_of(r)), None, "{text}");
        assert!(
            bucket.starts.len() > 10 * count_of(r),
            "{text}: only {} starts",
            bucket.starts.len()
        );
        decisions += 16_000;
        full_logs += bucket.full_logs;
    }
    assert!(decisions >= 100_000);
    assert!(
        full_logs > 1_000,
        "the log reached {MAX_ENTRIES} entries only {full_logs} times: merges untested"
    );
}

#[test]
fn a_growing_slack_keeps_the_window_of_the_earlier_start() {
    for (seed, text) in (100..).zip(RATES) {
        let r = rate(text);
        let bucket = simulate(r, slack(r.period(), FLOOR), 8_000, seed, true);
        assert_eq!(first_violation(&bucket.starts, count_of(r)), None, "{text}");
    }
}

#[test]
fn the_checker_finds_what_a_window_without_slack_lets_through() {
    assert_eq!(
        first_violation(&[(0, 100), (50, 100), (99, 100)], 2),
        Some(2)
    );
    assert_eq!(first_violation(&[(0, 100), (50, 100), (100, 100)], 2), None);
    assert_eq!(first_violation(&[(0, 100), (99, 100)], 1), Some(1));
    // The same simulation with W = P (ε = 0 given to decide) admits N + 1 starts within the
    // P + ε the start guard needs.
    for (seed, text) in (200..).zip(RATES) {
        let r = rate(text);
        let needed = us(r.period() + slack(r.period(), FLOOR));
        let bucket = simulate(r, Duration::ZERO, 16_000, seed, false);
        let relabelled: Vec<_> = bucket.starts.iter().map(|&(t, _)| (t, needed)).collect();
        assert!(
            first_violation(&relabelled, count_of(r)).is_some(),
            "{text}: no violation found without slack"
        );
    }
}

/// Admitted starts of one key with a backlog over 60 s, each decision at `open_at` + 0.5–3 ms
/// wanting N, as a share of N per P.
fn utilisation(text: &str, slack_ms: u64, seed: u64) -> f64 {
    let r = rate(text);
    let eps = Duration::from_millis(slack_ms);
    assert_eq!(
        eps,
        slack(r.period(), FLOOR),
        "{text}: the ε of the default floor"
    );
    let mut rng = Rng(seed);
    let mut bucket = Bucket::new(r, eps);
    let (mut now, end) = (T0, T0 + 60_000_000);
    let mut admitted = 0;
    while now < end {
        let d = bucket.decide(now, r.count(), true);
        admitted += d.admit;
        now = d.open_at_us + rng.between(500, 3_001);
    }
    assert_eq!(first_violation(&bucket.starts, count_of(r)), None, "{text}");
    let possible = f64::from(r.count()) * 60.0 / r.period().as_secs_f64();
    f64::from(admitted) / possible
}

#[test]
fn a_backlog_uses_at_least_90_percent_of_the_limit() {
    for (seed, (text, slack_ms)) in (300..).zip([("20/s", 50), ("50/s", 50), ("5/100ms", 5)]) {
        let u = utilisation(text, slack_ms, seed);
        eprintln!("utilisation {text}, ε {slack_ms} ms: {u:.3}");
        assert!((0.90..=1.0).contains(&u), "{text}: utilisation {u:.3}");
    }
}
