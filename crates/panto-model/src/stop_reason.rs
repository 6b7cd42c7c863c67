//! The stop reasons an assistant message carries after a provider adapter has normalised them.
//!
//! Every adapter maps its protocol's own words onto this one vocabulary (Anthropic's, which the
//! session file already uses), so code that reacts to a stop reason checks one spelling:
//! `max_tokens`, never also `OpenAI`'s `length` or Gemini's `MAX_TOKENS`. A message read from a
//! session file that another program wrote may carry any text here; panto only compares it.

/// The model finished its answer.
pub const END_TURN: &str = "end_turn";
/// The model stopped to call one or more tools.
pub const TOOL_USE: &str = "tool_use";
/// The answer was cut at the output-token limit of the request.
pub const MAX_TOKENS: &str = "max_tokens";
/// The answer stopped at one of the request's stop sequences.
pub const STOP_SEQUENCE: &str = "stop_sequence";
/// The provider refused or filtered the answer.
pub const REFUSAL: &str = "refusal";
/// The provider ended the answer early for a reason it did not name.
pub const INCOMPLETE: &str = "incomplete";
