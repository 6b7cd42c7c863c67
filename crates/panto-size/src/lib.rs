//! Sizing: how many tokens each message of a conversation costs.
//!
//! PLACEHOLDER API: the signatures below are the contract other crates code against; the bodies
//! are a first rough version to be replaced by the foundation issue's sizing work (usage-based
//! inference with guards, a calibrated heuristic).

use std::ops::Range;

use panto_model::Message;

/// Gives each message of a conversation a size in tokens.
pub trait Sizer {
    /// The estimated tokens of each message of `messages` as part of a request, in order.
    fn message_sizes(&self, messages: &[Message]) -> Vec<u64>;
}

/// The fallback heuristic: cheap, monotonic, conservative.
#[derive(Clone, Copy, Debug, Default)]
pub struct Heuristic;

impl Heuristic {
    /// Estimated tokens of a piece of text.
    pub fn text(&self, text: &str) -> u64 {
        (text.len() as u64).div_ceil(2)
    }

    /// Estimated tokens of one message.
    pub fn message(&self, message: &Message) -> u64 {
        let json = serde_json::to_string(&message.content).unwrap_or_default();
        4 + self.text(&json)
    }
}

impl Sizer for Heuristic {
    fn message_sizes(&self, messages: &[Message]) -> Vec<u64> {
        messages.iter().map(|m| self.message(m)).collect()
    }
}

/// Sizes from provider-reported usage where it can be trusted, the heuristic elsewhere.
#[derive(Clone, Copy, Debug, Default)]
pub struct UsageSizer {
    /// Used where usage is missing or cannot be trusted.
    pub fallback: Heuristic,
}

impl Sizer for UsageSizer {
    fn message_sizes(&self, messages: &[Message]) -> Vec<u64> {
        self.fallback.message_sizes(messages)
    }
}

/// Sums message sizes per turn.
pub fn turn_sizes(sizes: &[u64], turns: &[Range<usize>]) -> Vec<u64> {
    turns
        .iter()
        .map(|t| sizes[t.clone()].iter().sum())
        .collect()
}

/// The estimated input size of the next request: `system` plus `messages`.
pub fn estimate_request(system: &str, messages: &[Message]) -> u64 {
    let h = Heuristic;
    h.text(system) + h.message_sizes(messages).iter().sum::<u64>()
}
