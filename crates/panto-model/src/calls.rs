//! [`CallIndex`]: which tool call, among those seen so far, a tool result answers.

use std::collections::HashMap;

/// How many of the latest calls [`CallIndex::latest`] compares before it asks the map.
const RECENT: usize = 16;

/// The tool calls seen so far, in order, each with a value (the message holding it, the tool's
/// name, ...), answering "what goes with the latest call with this id" the way Contract 2 pairs
/// a result with its call.
///
/// A result nearly always answers one of the last few calls, so those are compared first, in a
/// short scan backwards over calls kept in order; the map of every id is brought up to date (each
/// call enters it once) and asked only when that scan fails. Over a long session this keeps the
/// work per result constant and cache-resident, where a map of every id is one cache miss per
/// call and per result once it outgrows the cache.
///
/// ```
/// use panto_model::CallIndex;
///
/// let mut calls = CallIndex::default();
/// calls.push("toolu_1", "read");
/// calls.push("toolu_2", "grep");
/// calls.push("toolu_1", "write"); // a reused id: the latest call wins
/// assert_eq!(calls.latest("toolu_1"), Some("write"));
/// assert_eq!(calls.latest("toolu_2"), Some("grep"));
/// assert_eq!(calls.latest("toolu_3"), None);
/// ```
#[derive(Debug)]
pub struct CallIndex<'a, V> {
    /// Every call, in order: its id and its value.
    order: Vec<(&'a str, V)>,
    /// The latest value for each id among `order[..indexed]`.
    map: HashMap<&'a str, V>,
    indexed: usize,
}

impl<V> Default for CallIndex<'_, V> {
    fn default() -> Self {
        CallIndex {
            order: Vec::new(),
            map: HashMap::new(),
            indexed: 0,
        }
    }
}

impl<'a, V: Copy> CallIndex<'a, V> {
    /// Records a call with `id` and its value; it replaces any earlier call with the same id.
    pub fn push(&mut self, id: &'a str, value: V) {
        self.order.push((id, value));
    }

    /// The value of the latest call with `id`, if any.
    pub fn latest(&mut self, id: &str) -> Option<V> {
        if let Some(&(_, v)) = self.order.iter().rev().take(RECENT).find(|(c, _)| *c == id) {
            return Some(v);
        }
        // Not among the last RECENT calls: the latest such call is older, and the map, brought
        // up to date, holds it (a later insert of an id replaces an earlier one).
        for &(c, v) in &self.order[self.indexed..] {
            self.map.insert(c, v);
        }
        self.indexed = self.order.len();
        self.map.get(id).copied()
    }
}
