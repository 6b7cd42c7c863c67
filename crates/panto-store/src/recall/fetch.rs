//! Fetching by id: the items an id names among a session's, with their neighbours.

use panto_model::{Item, ItemRef, Match};

use super::Fetched;

/// The items `id` names among `items` (a session's, in order), with the items of `context`
/// entries before and after; `None` when it names none.
///
/// An item's own id wins over an entry's; of several items with one id (a call id a kept copy
/// repeats) the earliest is taken.
pub fn fetch_in(items: &[Item], id: &str, context: usize) -> Option<Fetched> {
    let wanted = ItemRef::new(id);
    let own = items
        .iter()
        .position(|i| wanted.matches(i) == Some(Match::Item));
    let (asked, position): (Vec<usize>, u64) = if let Some(i) = own {
        (vec![i], items[i].position)
    } else {
        let first = items
            .iter()
            .position(|i| wanted.matches(i) == Some(Match::Entry))?;
        let position = items[first].position;
        let all = (first..items.len())
            .take_while(|&i| items[i].position == position)
            .collect();
        (all, position)
    };
    let mut positions: Vec<u64> = items.iter().map(|i| i.position).collect();
    positions.dedup();
    let at = positions.binary_search(&position).unwrap_or(0);
    let low = positions[at.saturating_sub(context)];
    let high = positions[(at + context).min(positions.len() - 1)];
    let picked = items
        .iter()
        .enumerate()
        .filter(|(i, it)| {
            asked.contains(i) || (context > 0 && it.position >= low && it.position <= high)
        })
        .map(|(_, it)| it.clone())
        .collect();
    Some(Fetched {
        items: picked,
        asked: asked.iter().map(|&i| items[i].id.clone()).collect(),
    })
}
