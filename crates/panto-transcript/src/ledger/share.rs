//! Fair shares of a budget ([`allocate`]): how the record's cap and a rendering's budget are
//! divided between the kinds of item (their weights are `record.rs`'s `WEIGHTS`), so that no
//! kind is emptied by another.
//!
//! Each kind has a weight. A kind that needs less than its weight's share of what is left gets
//! all it needs; what it leaves is divided again, by weight, between the kinds that need more
//! (weighted max-min fairness, "water-filling"). So a kind always gets at least
//! `budget × weight / total weight`, or all it needs when that is less, whatever the others
//! hold.

/// How much of `budget` each kind gets, by weighted max-min fairness over what each `needs`,
/// with `weights` (as long as `needs`). The allocations sum to at most `budget`; a kind never
/// gets more than it needs, and gets at least `min(needs, budget × weight / total weight)`.
pub(super) fn allocate(budget: usize, needs: &[usize], weights: &[u64]) -> Vec<usize> {
    let mut given = vec![0usize; needs.len()];
    let mut open: Vec<usize> = (0..needs.len()).filter(|&k| needs[k] > 0).collect();
    let mut left = budget;
    while !open.is_empty() && left > 0 {
        let weight: u64 = open.iter().map(|&k| weights[k]).sum();
        let share =
            |k: usize| (left as u128 * u128::from(weights[k]) / u128::from(weight.max(1))) as usize;
        // Every kind that needs no more than its share gets what it needs, and the rest is
        // shared again; when none does, each gets its share.
        let sated: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&k| needs[k] - given[k] <= share(k))
            .collect();
        if sated.is_empty() {
            let shares: Vec<(usize, usize)> = open.iter().map(|&k| (k, share(k))).collect();
            for (k, s) in shares {
                given[k] += s;
            }
            break;
        }
        for k in sated {
            left -= needs[k] - given[k];
            given[k] = needs[k];
            open.retain(|&o| o != k);
        }
    }
    given
}
