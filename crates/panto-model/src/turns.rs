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

use std::ops::Range;

use crate::calls::CallIndex;
use crate::message::Message;

/// For each message index, the index of the last message holding a result that answers one of
/// its tool calls (the index itself when nothing does).
fn reach(messages: &[Message]) -> Vec<usize> {
    let mut reach: Vec<usize> = (0..messages.len()).collect();
    let mut calls: CallIndex<usize> = CallIndex::default();
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
