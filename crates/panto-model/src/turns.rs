//! Turn segmentation (Contract 2): where a conversation may be cut without breaking the protocol.
//!
//! A cut before message `i` is allowed exactly when no tool result at or after `i` answers a tool
//! call before `i`. Turns are the runs of messages between consecutive allowed cuts, so a user
//! prompt on its own is a turn, and an assistant response is one turn together with every tool
//! result that answers its calls, however many messages those results are spread over.
//!
//! Pairing: a result answers the latest tool call with its id that comes before it. (Ids should
//! be unique; validation reports duplicates. Pairing with the latest keeps a reused id from
//! welding a whole session into one turn.)

use std::collections::HashMap;
use std::ops::Range;

use crate::message::Message;

/// For each message index, the index of the last message holding a result that answers one of
/// its tool calls (the index itself when nothing does).
fn reach(messages: &[Message]) -> Vec<usize> {
    let mut reach: Vec<usize> = (0..messages.len()).collect();
    let mut calls = Calls::default();
    for (j, msg) in messages.iter().enumerate() {
        for id in msg.tool_result_ids() {
            if let Some(k) = calls.latest(id) {
                reach[k] = reach[k].max(j);
            }
        }
        for id in msg.tool_use_ids() {
            calls.push(id, j);
        }
    }
    reach
}

/// How many of the latest calls [`Calls::latest`] compares before it asks the map.
const RECENT: usize = 16;

/// The tool calls seen so far, answering "which message holds the latest call with this id".
///
/// A result nearly always answers one of the last few calls, so those are compared first, in a
/// short scan backwards over calls kept in order; the map of every id is brought up to date (each
/// call enters it once) and asked only when that scan fails. Over a long session this keeps the
/// work per result constant and cache-resident, where a map of every id is one cache miss per
/// call and per result once it outgrows the cache.
#[derive(Default)]
struct Calls<'a> {
    /// Every call, in order: its id and the message holding it.
    order: Vec<(&'a str, usize)>,
    /// The latest message for each id among `order[..indexed]`.
    map: HashMap<&'a str, usize>,
    indexed: usize,
}

impl<'a> Calls<'a> {
    fn push(&mut self, id: &'a str, message: usize) {
        self.order.push((id, message));
    }

    /// The message of the latest call with `id`, if any.
    fn latest(&mut self, id: &str) -> Option<usize> {
        if let Some(&(_, at)) = self.order.iter().rev().take(RECENT).find(|(c, _)| *c == id) {
            return Some(at);
        }
        // Not among the last RECENT calls: the latest such call is older, and the map, brought
        // up to date, holds it (a later insert of an id replaces an earlier one).
        for &(c, at) in &self.order[self.indexed..] {
            self.map.insert(c, at);
        }
        self.indexed = self.order.len();
        self.map.get(id).copied()
    }
}

/// Whether a cut is allowed before each index `0..=messages.len()`.
///
/// Invariant: the first and the last positions are always allowed.
pub fn allowed_cuts(messages: &[Message]) -> Vec<bool> {
    let reach = reach(messages);
    let mut allowed = Vec::with_capacity(messages.len() + 1);
    allowed.push(true);
    let mut furthest = 0usize;
    for i in 1..=messages.len() {
        furthest = furthest.max(reach[i - 1]);
        allowed.push(furthest < i);
    }
    allowed
}

/// Splits messages into turns: consecutive, non-empty, covering every message in order.
///
/// Invariant: every tool result lies in the same turn as the call it answers.
pub fn turns(messages: &[Message]) -> Vec<Range<usize>> {
    let allowed = allowed_cuts(messages);
    let mut out = Vec::new();
    let mut start = 0;
    for (i, ok) in allowed.iter().enumerate().skip(1) {
        if *ok {
            out.push(start..i);
            start = i;
        }
    }
    out
}
