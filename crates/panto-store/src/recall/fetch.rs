//! Fetching by id: the items an id names among a session's, with their neighbours; and what an
//! index keeps to fetch without reading the whole history ([`IdRow`], [`Named`],
//! [`fetch_window`]).
//!
//! An index of ids keeps, for each item's own id and each entry's id (entries that yield items
//! only), the position of the first entry holding it. A fetch then looks the id up (an item's
//! own id first), finds the positions of the `context` entries with items before and after it
//! in the index's item rows, reads those entries only, and picks from them with [`fetch_in`]:
//! the same answer as reading the whole history, since every entry with items between the
//! first and the last of the window is read. The index is derived: whatever it lacks or gets
//! wrong makes [`fetch_window`] answer `None`, and the store reads the whole history.

use panto_model::{Entry, Item, ItemKind, ItemRef, Items, Match};

use super::Fetched;
use crate::error::StoreError;

/// What a fetch of `id` from `session` in the store at `location` answers when nothing has
/// that id: [`StoreError::NotFound`], the same from every store.
pub fn no_such_id(location: &str, session: &str, id: &str) -> StoreError {
    StoreError::not_found(
        session,
        format!("{location}: session {session} has no item or entry {id}"),
    )
}

/// The items `id` names among `items` (a session's, in order), with the items of `context`
/// entries before and after; `None` when it names none.
///
/// An item's own id wins over an entry's; of several items with one id (a call id a kept copy
/// repeats) the earliest is taken.
pub fn fetch_in(items: &[Item], id: &str, context: usize) -> Option<Fetched> {
    let (asked, named) = named_in(items, id)?;
    Some(pick(items, &asked, named.position(), context))
}

/// The items `id` names among `items` (their indices) and what named them, as [`fetch_in`]
/// takes them.
fn named_in(items: &[Item], id: &str) -> Option<(Vec<usize>, Named)> {
    let wanted = ItemRef::new(id);
    if let Some(i) = items
        .iter()
        .position(|i| wanted.matches(i) == Some(Match::Item))
    {
        return Some((vec![i], Named::Item(items[i].position)));
    }
    let first = items
        .iter()
        .position(|i| wanted.matches(i) == Some(Match::Entry))?;
    let position = items[first].position;
    let all = (first..items.len())
        .take_while(|&i| items[i].position == position)
        .collect();
    Some((all, Named::Entry(position)))
}

/// The items `asked` (indices into `items`) at `position`, with the items of `context` entries
/// with items before and after.
fn pick(items: &[Item], asked: &[usize], position: u64, context: usize) -> Fetched {
    let positions = positions_of(items);
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
    Fetched {
        items: picked,
        asked: asked.iter().map(|&i| items[i].id.clone()).collect(),
    }
}

/// The positions of the entries of `items`, each once, in order.
fn positions_of(items: &[Item]) -> Vec<u64> {
    let mut positions: Vec<u64> = items.iter().map(|i| i.position).collect();
    positions.dedup();
    positions
}

/// A row of an index of ids: an item's own id, or the id of an entry that yields items, with
/// the position of its entry. A store keeps the first row of each id and kind (the earliest,
/// as entries are indexed in order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdRow {
    /// The id.
    pub id: String,
    /// Whether it is an item's own id (else an entry's).
    pub item: bool,
    /// The position of the entry.
    pub position: u64,
}

/// The rows of `items`, the items of `entry` at `position`: each item's id, and the entry's id
/// when it has one and yields items. Ids repeated within the entry are given once.
pub fn id_rows(entry: &Entry, position: u64, items: &[Item], out: &mut Vec<IdRow>) {
    for (i, item) in items.iter().enumerate() {
        if items[..i].iter().all(|o| o.id != item.id) {
            out.push(IdRow {
                id: item.id.clone(),
                item: true,
                position,
            });
        }
    }
    if let (Some(id), false) = (entry.id(), items.is_empty()) {
        out.push(IdRow {
            id: id.to_owned(),
            item: false,
            position,
        });
    }
}

/// What an id names, as an index of ids found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Named {
    /// The item with this id, whose entry is at this position (the earliest such item).
    Item(u64),
    /// The items of the entry at this position.
    Entry(u64),
}

impl Named {
    /// The position of the entry named.
    pub fn position(self) -> u64 {
        match self {
            Named::Item(p) | Named::Entry(p) => p,
        }
    }

    /// What `id` names, from what an index found: the position of the first item with it as its
    /// own id (`item`), of the first entry with it as its id (`entry`), and whether the entry at
    /// the position `@N` names yields items (`has_items`). An item's own id wins; of two
    /// entries, the earlier.
    pub fn find(
        id: &str,
        item: Option<u64>,
        entry: Option<u64>,
        has_items: impl FnOnce(u64) -> bool,
    ) -> Option<Named> {
        if let Some(p) = item {
            return Some(Named::Item(p));
        }
        let at = at_position(id).filter(|&p| has_items(p));
        match (entry, at) {
            (Some(a), Some(b)) => Some(Named::Entry(a.min(b))),
            (Some(p), None) | (None, Some(p)) => Some(Named::Entry(p)),
            (None, None) => None,
        }
    }
}

/// The position `id` names as `@N` (its canonical form only: `@07` names none), after trimming
/// as [`ItemRef::new`] does.
pub fn at_position(id: &str) -> Option<u64> {
    let id = ItemRef::new(id);
    let n = id.as_str().strip_prefix('@')?;
    let p: u64 = n.parse().ok()?;
    (p.to_string() == n).then_some(p)
}

/// The fetch of `id` with `context` neighbours from the entries of a window: `entries` are the
/// session's entries at positions `first`, `first + 1`, …, read from the first of `expect` to
/// its last, where `expect` are the positions of the entries with items that the index gave
/// (the `context` ones before the position `named` gives, it, and the `context` ones after, or
/// fewer at the history's ends); `tool` gives the tool of the latest call with a call id before
/// the item at a position and block (for a result whose call is before the window). `None`
/// when the window does not hold what the index said (the caller then reads the whole
/// history).
pub fn fetch_window(
    first: u64,
    entries: &[Entry],
    expect: &[u64],
    id: &str,
    context: usize,
    named: Named,
    mut tool: impl FnMut(&str, u64, u32) -> Option<String>,
) -> Option<Fetched> {
    let mut walk = Items::new();
    let mut items = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let position = first + i as u64;
        for mut item in walk.of(position, entry) {
            if item.kind == ItemKind::ToolResult
                && item.tool.is_none()
                && let Some(call) = &item.call
            {
                let block = u32::try_from(item.block).unwrap_or(u32::MAX);
                item.tool = tool(call, position, block);
            }
            items.push(item);
        }
    }
    let (asked, found) = named_in(&items, id)?;
    if found != named || positions_of(&items) != expect {
        return None;
    }
    let at = expect.binary_search(&named.position()).ok()?;
    // The index gave `context` positions on a side, or fewer when the history has no more.
    if at > context || expect.len() - at - 1 > context {
        return None;
    }
    Some(pick(&items, &asked, named.position(), context))
}

#[cfg(test)]
mod tests {
    use panto_model::{Entry, Item, ItemKind, ItemRef, Items, Message};
    use proptest::prelude::*;

    use super::*;
    use crate::conformance::{unit_entries, units};

    /// The items of `entries`, with the index of ids a store keeps of them.
    fn walk(entries: &[Entry]) -> (Vec<Item>, Vec<IdRow>) {
        let (mut walk, mut items, mut rows) = (Items::new(), Vec::new(), Vec::new());
        for (p, e) in entries.iter().enumerate() {
            let these = walk.of(p as u64, e);
            id_rows(e, p as u64, &these, &mut rows);
            items.extend(these);
        }
        (items, rows)
    }

    /// A fetch as a store with an index of ids makes it, in memory: the id looked up in the
    /// first rows, the window from the positions with items, only its entries read, the tool of
    /// a result whose call is before it looked up. `Some(None)` when the id names nothing.
    fn indexed(entries: &[Entry], id: &str, context: usize) -> Option<Option<Fetched>> {
        let (all, rows) = walk(entries);
        let wanted = ItemRef::new(id);
        let first = |item: bool| {
            rows.iter()
                .find(|r| r.item == item && r.id == wanted.as_str())
                .map(|r| r.position)
        };
        let positions = positions_of(&all);
        let Some(named) = Named::find(id, first(true), first(false), |p| positions.contains(&p))
        else {
            return Some(None);
        };
        let at = positions.binary_search(&named.position()).ok()?;
        let expect = positions
            [at.saturating_sub(context)..=(at + context).min(positions.len() - 1)]
            .to_vec();
        let (lo, hi) = (expect[0] as usize, expect[expect.len() - 1] as usize);
        let tool = |call: &str, p: u64, b: u32| {
            all.iter()
                .rev()
                .find(|i| {
                    i.kind == ItemKind::ToolCall
                        && i.call.as_deref() == Some(call)
                        && (i.position, i.block as u32) < (p, b)
                })
                .and_then(|i| i.tool.clone())
        };
        Some(fetch_window(
            lo as u64,
            &entries[lo..=hi],
            &expect,
            id,
            context,
            named,
            tool,
        ))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// On any session of appends and compactions (kept copies repeat call ids), the fetch
        /// of every id from the entries of its window equals the fetch over every item.
        #[test]
        fn a_window_fetch_equals_the_fetch_over_every_item(
            units in units(),
            context in 0usize..3,
        ) {
            let entries: Vec<Entry> = unit_entries(&units).into_iter().flatten().collect();
            let (all, _) = walk(&entries);
            let mut ids: Vec<String> = all.iter().flat_map(|i| [i.id.clone(), i.entry.clone()]).collect();
            ids.extend((0..=entries.len()).map(|p| format!("@{p}")));
            ids.extend(entries.iter().filter_map(|e| e.id().map(str::to_owned)));
            for id in ids {
                prop_assert_eq!(
                    indexed(&entries, &id, context),
                    Some(fetch_in(&all, &id, context)),
                    "{}", id
                );
            }
        }
    }

    #[test]
    fn at_position_takes_the_canonical_form_only() {
        assert_eq!(at_position("@12"), Some(12));
        assert_eq!(at_position(" @0 "), Some(0));
        for id in ["@012", "@", "@-1", "@1x", "12", "@+1"] {
            assert_eq!(at_position(id), None, "{id}");
        }
    }

    #[test]
    fn an_items_own_id_wins_and_of_two_entries_the_earlier() {
        let never = |_: u64| -> bool { panic!("not asked when an item has the id") };
        assert_eq!(
            Named::find("x", Some(9), Some(1), never),
            Some(Named::Item(9))
        );
        assert_eq!(
            Named::find("@5", None, Some(7), |p| p == 5),
            Some(Named::Entry(5))
        );
        assert_eq!(
            Named::find("@5", None, Some(2), |p| p == 5),
            Some(Named::Entry(2))
        );
        assert_eq!(Named::find("@5", None, None, |_| false), None);
    }

    /// A window that does not hold what the index said (positions with items it does not have,
    /// an entry's id where it named an item's) is refused, never answered short.
    #[test]
    fn a_window_unlike_the_index_is_refused() {
        let entries: Vec<Entry> = (0..5)
            .map(|i| Entry::Message(Message::user_text(format!("m{i}")).with_id(format!("m{i}"))))
            .collect();
        let none = |_: &str, _: u64, _: u32| None;
        let fetched = fetch_window(
            1,
            &entries[1..4],
            &[1, 2, 3],
            "m2",
            1,
            Named::Entry(2),
            none,
        );
        assert_eq!(fetched.map(|f| f.items.len()), Some(3));
        // The index gave positions the entries do not have.
        assert_eq!(
            fetch_window(
                1,
                &entries[1..4],
                &[1, 2, 4],
                "m2",
                1,
                Named::Entry(2),
                none
            ),
            None
        );
        // The index said an item's own id, the window has an entry's.
        assert_eq!(
            fetch_window(1, &entries[1..4], &[1, 2, 3], "m2", 1, Named::Item(2), none),
            None
        );
    }
}
