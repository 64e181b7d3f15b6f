//! Unit tests of the multi-row INSERT's chunking.
use super::{InsertRow, chunks_by_size};

fn row(payload_bytes: usize) -> InsertRow {
    InsertRow {
        queue: "q".into(),
        kind: "k".into(),
        payload: "x".repeat(payload_bytes),
        priority: 0,
        max_attempts: 1,
        delay_us: 0,
        run_at: None,
        dedupe_key: None,
        dedupe_until_started: false,
        ordering_key: None,
        concurrency_key: None,
        concurrency_limit: None,
        meta: None,
        dedupe_window_us: None,
        dedupe_replace: false,
        rate: None,
    }
}

#[test]
fn chunks_are_cut_by_rows_and_by_bytes() {
    let small: Vec<InsertRow> = (0..1200).map(|_| row(10)).collect();
    let all: Vec<usize> = (0..small.len()).collect();
    let sizes: Vec<usize> = chunks_by_size(&small, &all, usize::MAX)
        .iter()
        .map(Vec::len)
        .collect();
    assert_eq!(sizes, [500, 500, 200]);

    let big: Vec<InsertRow> = (0..500).map(|_| row(60_000)).collect();
    let all: Vec<usize> = (0..big.len()).collect();
    let budget = 8 << 20;
    let chunks = chunks_by_size(&big, &all, budget);
    assert!(chunks.len() >= 4, "{}", chunks.len());
    for c in &chunks {
        let bytes: usize = c.iter().map(|&i| big[i].statement_bytes()).sum();
        assert!(bytes <= budget, "{bytes}");
    }
    let flat: Vec<usize> = chunks.concat();
    assert_eq!(flat, all, "every row once, in order");

    let huge = [row(100)];
    assert_eq!(chunks_by_size(&huge, &[0], 10), vec![vec![0]]);
}
