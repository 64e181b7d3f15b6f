//! The pure part of a settlement: which completions can be written now, given the gate and
//! dependent rows the transaction could lock (unit-tested without a database).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::NO_GATE;
use crate::Error;

/// An unsettled edge: `dep` → `dependent`, counted in gate `(dependent, block)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Edge {
    pub(super) dep: u64,
    pub(super) dependent: u64,
    pub(super) block: u32,
}

/// A locked gate row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Gate {
    pub(super) remaining: u32,
    pub(super) open_blocks: u32,
}

/// What a settlement writes: the deps it settles, the decrements, the releases; or what it
/// still has to lock to know.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Plan {
    /// Deps settled now (their completions are written now).
    pub(super) settle: BTreeSet<u64>,
    /// Decrement of `remaining` per gate `(dependent, block)`.
    pub(super) dec: BTreeMap<(u64, u32), u32>,
    /// Blocks `> 0` closed per dependent: decrement of its head's `open_blocks`.
    pub(super) closed: BTreeMap<u64, u32>,
    /// Dependents whose head reaches zero and whose row is locked `waiting`: released now.
    pub(super) release: Vec<u64>,
    /// Heads to lock before the plan can be final (not tried yet).
    pub(super) need_heads: BTreeSet<u64>,
    /// Dependent rows to lock before the plan can be final (not tried yet).
    pub(super) need_rows: BTreeSet<u64>,
}

/// Plans a settlement of `candidates` (deps being completed) from their unsettled `edges` and
/// the gate rows this transaction locked. A candidate is settled only when every row its
/// settlement writes is locked: its gates, the heads of the blocks it closes, the rows of the
/// dependents it releases. Heads and rows not tried yet are asked for (`need_*`). What another
/// transaction holds drops only the candidates that need it — those counted in a held gate
/// block; for a held head or dependent row, those counted in the dependent's block 0 or in a
/// block they close — and the plan is made again without them (dropping only removes needs, so
/// this ends). A wide fan-in's other blocks go on being settled.
pub(super) fn plan(
    candidates: &BTreeSet<u64>,
    edges: &[Edge],
    gates: &HashMap<(u64, u32), Gate>,
    heads_tried: &BTreeSet<u64>,
    rows: &HashMap<u64, Option<String>>,
) -> Result<Plan, Error> {
    // The candidates counted in each gate block.
    let mut in_block: HashMap<(u64, u32), Vec<u64>> = HashMap::new();
    for e in edges.iter().filter(|e| candidates.contains(&e.dep)) {
        in_block
            .entry((e.dependent, e.block))
            .or_default()
            .push(e.dep);
    }
    let mut settle = candidates.clone();
    'again: loop {
        let mut p = Plan {
            settle: settle.clone(),
            ..Plan::default()
        };
        // Edges of dependents with one dependency: no gate, only the dependent's row.
        let mut sole: Vec<&Edge> = Vec::new();
        for e in edges.iter().filter(|e| settle.contains(&e.dep)) {
            if e.block == NO_GATE {
                sole.push(e);
            } else {
                *p.dec.entry((e.dependent, e.block)).or_default() += 1;
            }
        }
        let mut touched: BTreeSet<u64> = BTreeSet::new();
        // Blocks > 0 closed now, per dependent.
        let mut closing: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        for (&(d, b), &n) in &p.dec {
            let Some(g) = gates.get(&(d, b)) else {
                let held = &in_block[&(d, b)];
                settle.retain(|c| !held.contains(c));
                continue 'again;
            };
            if n > g.remaining {
                return Err(inconsistent(d, b, n, g.remaining));
            }
            if b > 0 && n == g.remaining {
                *p.closed.entry(d).or_default() += 1;
                closing.entry(d).or_default().push(b);
            }
            touched.insert(d);
        }
        // Drops the candidates that change `d`'s head: block 0's and the closing blocks'.
        let drop_head_changers = |d: u64, settle: &mut BTreeSet<u64>| {
            let blocks = closing.get(&d).cloned().unwrap_or_default();
            for b in std::iter::once(0).chain(blocks) {
                if let Some(held) = in_block.get(&(d, b)) {
                    settle.retain(|c| !held.contains(c));
                }
            }
        };
        for &d in &touched {
            let n0 = p.dec.get(&(d, 0)).copied().unwrap_or(0);
            let closes = p.closed.get(&d).copied().unwrap_or(0);
            if n0 == 0 && closes == 0 {
                continue;
            }
            let Some(head) = gates.get(&(d, 0)) else {
                if heads_tried.contains(&d) {
                    drop_head_changers(d, &mut settle);
                    continue 'again;
                }
                p.need_heads.insert(d);
                continue;
            };
            if closes > head.open_blocks {
                return Err(inconsistent(d, 0, closes, head.open_blocks));
            }
            if head.remaining == n0 && head.open_blocks == closes {
                match rows.get(&d) {
                    None => {
                        p.need_rows.insert(d);
                    }
                    Some(None) => {
                        drop_head_changers(d, &mut settle);
                        continue 'again;
                    }
                    Some(Some(status)) if status == "waiting" => p.release.push(d),
                    // Cancelled by an operator or upstream: its gates count down, no release.
                    Some(Some(_)) => {}
                }
            }
        }
        for e in sole {
            match rows.get(&e.dependent) {
                None => {
                    p.need_rows.insert(e.dependent);
                }
                Some(None) => {
                    settle.remove(&e.dep);
                    continue 'again;
                }
                Some(Some(status)) if status == "waiting" => p.release.push(e.dependent),
                // Cancelled by an operator or upstream: settled, not released.
                Some(Some(_)) => {}
            }
        }
        return Ok(p);
    }
}

fn inconsistent(step: u64, block: u32, by: u32, left: u32) -> Error {
    Error::invalid(
        "workflow gate",
        format!(
            "gate ({step}, {block}) would go below zero ({by} settled, {left} left): the \
             workflow tables were changed by hand; see docs/workflows.md"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(dep: u64, dependent: u64, block: u32) -> Edge {
        Edge {
            dep,
            dependent,
            block,
        }
    }
    fn g(remaining: u32, open_blocks: u32) -> Gate {
        Gate {
            remaining,
            open_blocks,
        }
    }

    #[test]
    fn the_last_dep_releases_and_asks_for_the_row_first() {
        let c = BTreeSet::from([1]);
        let edges = [e(1, 10, 0)];
        let gates = HashMap::from([((10, 0), g(1, 0))]);
        let p = plan(&c, &edges, &gates, &BTreeSet::new(), &HashMap::new()).unwrap();
        assert_eq!(p.need_rows, BTreeSet::from([10]));
        assert!(p.release.is_empty());
        let rows = HashMap::from([(10, Some("waiting".to_owned()))]);
        let p = plan(&c, &edges, &gates, &BTreeSet::new(), &rows).unwrap();
        assert_eq!(p.release, vec![10]);
        assert_eq!(p.settle, c);
        // Another transaction holds the dependent: the candidate is handed back.
        let rows = HashMap::from([(10, None)]);
        let p = plan(&c, &edges, &gates, &BTreeSet::new(), &rows).unwrap();
        assert!(p.settle.is_empty() && p.release.is_empty() && p.dec.is_empty());
    }

    #[test]
    fn a_held_gate_hands_back_only_the_deps_feeding_it() {
        let c = BTreeSet::from([1, 2]);
        let edges = [e(1, 10, 0), e(2, 20, 0)];
        let gates = HashMap::from([((20, 0), g(3, 0))]);
        let p = plan(&c, &edges, &gates, &BTreeSet::new(), &HashMap::new()).unwrap();
        assert_eq!(p.settle, BTreeSet::from([2]));
        assert_eq!(p.dec, BTreeMap::from([((20, 0), 1)]));
        assert!(p.need_rows.is_empty());
    }

    #[test]
    fn closing_a_block_needs_the_head_and_counts_it_down() {
        let c = BTreeSet::from([1, 2]);
        let edges = [e(1, 10, 1), e(2, 10, 1)];
        let mut gates = HashMap::from([((10, 1), g(2, 0))]);
        let p = plan(&c, &edges, &gates, &BTreeSet::new(), &HashMap::new()).unwrap();
        assert_eq!(p.need_heads, BTreeSet::from([10]));
        // The head could not be locked: both are handed back.
        let tried = BTreeSet::from([10]);
        let p = plan(&c, &edges, &gates, &tried, &HashMap::new()).unwrap();
        assert!(p.settle.is_empty());
        // Locked, with block 0 still open: counted down, not released.
        gates.insert((10, 0), g(5, 1));
        let p = plan(&c, &edges, &gates, &tried, &HashMap::new()).unwrap();
        assert_eq!(p.closed, BTreeMap::from([(10, 1)]));
        assert!(p.need_rows.is_empty() && p.release.is_empty());
        // Block 0 done already: the last block closing releases.
        gates.insert((10, 0), g(0, 1));
        let rows = HashMap::from([(10, Some("waiting".to_owned()))]);
        let p = plan(&c, &edges, &gates, &tried, &rows).unwrap();
        assert_eq!(p.release, vec![10]);
    }

    #[test]
    fn a_held_block_of_a_wide_fan_in_hands_back_only_its_own_candidates() {
        // Dependent 10: block 1 (deps 1, 2) held by another transaction, block 2 (deps 3, 4)
        // free, the head free and not reached.
        let c = BTreeSet::from([1, 2, 3, 4]);
        let edges = [e(1, 10, 1), e(2, 10, 1), e(3, 10, 2), e(4, 10, 2)];
        let gates = HashMap::from([((10, 2), g(5, 0)), ((10, 0), g(10, 2))]);
        let p = plan(&c, &edges, &gates, &BTreeSet::from([10]), &HashMap::new()).unwrap();
        assert_eq!(p.settle, BTreeSet::from([3, 4]));
        assert_eq!(p.dec, BTreeMap::from([((10, 2), 2)]));
        // Block 2 closing needs the head; held: only the closers go back, block 1's stay.
        let gates = HashMap::from([((10, 1), g(9, 0)), ((10, 2), g(2, 0))]);
        let p = plan(&c, &edges, &gates, &BTreeSet::from([10]), &HashMap::new()).unwrap();
        assert_eq!(p.settle, BTreeSet::from([1, 2]));
        assert!(p.closed.is_empty());
    }

    #[test]
    fn a_dependent_with_one_dependency_needs_only_its_row() {
        let c = BTreeSet::from([1, 2]);
        let edges = [e(1, 10, NO_GATE), e(2, 20, NO_GATE)];
        let gates = HashMap::new();
        let p = plan(&c, &edges, &gates, &BTreeSet::new(), &HashMap::new()).unwrap();
        assert_eq!(p.need_rows, BTreeSet::from([10, 20]));
        assert!(p.dec.is_empty() && p.need_heads.is_empty());
        // 10 waiting: released; 20 held by another transaction: 2 is not settled now.
        let rows = HashMap::from([(10, Some("waiting".to_owned())), (20, None)]);
        let p = plan(&c, &edges, &gates, &BTreeSet::new(), &rows).unwrap();
        assert_eq!(p.settle, BTreeSet::from([1]));
        assert_eq!(p.release, vec![10]);
        // 20 cancelled meanwhile: settled, not released.
        let rows = HashMap::from([
            (10, Some("waiting".to_owned())),
            (20, Some("cancelled".to_owned())),
        ]);
        let p = plan(&c, &edges, &gates, &BTreeSet::new(), &rows).unwrap();
        assert_eq!(p.settle, c);
        assert_eq!(p.release, vec![10]);
    }

    #[test]
    fn a_cancelled_dependent_counts_down_without_release() {
        let c = BTreeSet::from([1]);
        let edges = [e(1, 10, 0)];
        let gates = HashMap::from([((10, 0), g(1, 0))]);
        let rows = HashMap::from([(10, Some("cancelled".to_owned()))]);
        let p = plan(&c, &edges, &gates, &BTreeSet::new(), &rows).unwrap();
        assert_eq!(p.settle, c);
        assert!(p.release.is_empty());
        assert_eq!(p.dec, BTreeMap::from([((10, 0), 1)]));
    }

    #[test]
    fn a_gate_counted_below_zero_is_an_error_not_a_wrap() {
        let c = BTreeSet::from([1, 2]);
        let edges = [e(1, 10, 0), e(2, 10, 0)];
        let gates = HashMap::from([((10, 0), g(1, 0))]);
        let err = plan(&c, &edges, &gates, &BTreeSet::new(), &HashMap::new()).unwrap_err();
        assert!(err.to_string().contains("below zero"), "{err}");
    }
}
