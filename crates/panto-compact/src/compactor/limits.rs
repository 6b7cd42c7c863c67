//! What a request of the fold costs besides its transcript (the system prompt, the envelope,
//! the summary it carries) and the limit it must fit: the least one a fold can plan in, and
//! the smaller one a rejection teaches.

use panto_provider::ProviderError;
use panto_size::{BLOCK_OVERHEAD, Heuristic, MESSAGE_OVERHEAD};
use panto_transcript::render_request_text;

use crate::config::min_known;
use crate::fold::MIN_ROOM;
use crate::window::scale;

/// The estimated tokens of a compaction request besides its user prompt's text: the system
/// prompt, and the overhead of the system part and of the one user message.
/// The envelope (the intro line and the tags, with room for a previous summary) counts too.
pub(crate) fn request_overhead(system: &str) -> u64 {
    Heuristic.text(system) + 2 * MESSAGE_OVERHEAD + BLOCK_OVERHEAD + envelope_tokens()
}

/// The estimated tokens of the request envelope with room for a previous summary (counted in
/// [`request_overhead`]).
pub(super) fn envelope_tokens() -> u64 {
    Heuristic.text(&render_request_text("", Some("")))
}

/// The estimated tokens a previous summary adds to a request.
pub(super) fn previous_tokens(summary: &str) -> u64 {
    // Escaping adds at most one backslash per reserved line start; a token each is ample.
    Heuristic.text(summary) + summary.lines().count() as u64 / 8 + 1
}

/// The limit after a compaction request of `input` estimated tokens (with output `output` and
/// a transcript of `transcript` tokens) overflowed: from the limit the refusal stated when the
/// fold believes it (`believed`, [`believed_limit`]). Else the window lies somewhere below the
/// rejected input: when a request was accepted before, the limit goes back to `known`, what is
/// known to fit ([`super::state::Limits::fall_back`]; later requests may try higher again,
/// [`super::state::Limits::try_higher`]); else to a quarter of the rejected input, so that
/// the rejections a fold allows reach a window a sixteenth of the first request. Always below
/// what failed.
pub(super) fn shrink(
    limit: Option<u64>,
    believed: Option<u64>,
    input: u64,
    output: u64,
    transcript: u64,
    known: Option<u64>,
) -> u64 {
    let sent = input + output;
    let halved = sent.saturating_sub(transcript / 2 + 1);
    // A request was taken: the window holds at least its input, whatever a smaller input
    // refused with a larger output says (never a quarter of that input).
    let guess = known.unwrap_or(input / 4);
    let smaller = match believed {
        Some(l) => l.min(halved.max(l * 9 / 10)),
        None => guess,
    };
    min_known(limit, Some(smaller))
        .unwrap_or(smaller)
        .min(sent.saturating_sub(1))
}

/// Half way from `low` to `high` in proportion (their geometric mean): where the fold tries
/// next between what it knows fits (or the least it can work in) and what was refused.
pub(super) fn halfway(low: u64, high: u64) -> u64 {
    (low as f64 * high as f64).sqrt() as u64
}

/// The limit the refusal `error` stated, in panto's estimated tokens (scaled by `input /
/// counted` when it counted the request), when it explains the refusal of a request of
/// `input` estimated tokens allowing `output` more: the limit is below what was sent. A
/// refusal that states no limit, or one its own numbers contradict ("7,300 tokens > 10,636
/// maximum"), says nothing of the window: `None`. The one judge of a stated limit in a fold,
/// asked once per refusal (`Limits::refused`, which gives it to the shrink that follows).
pub(super) fn believed_limit(error: &ProviderError, input: u64, output: u64) -> Option<u64> {
    let stated = error.token_numbers()?;
    let limit = stated.limit?;
    let in_estimate = match stated.input_tokens {
        Some(n) if n > 0 => scale(limit, input, n),
        _ => limit,
    };
    (in_estimate < input + output).then_some(in_estimate)
}

/// The least limit a fold can plan in: the fixed part, the summary carried (or the reserve of
/// a later request), the output `floor` and the least transcript ([`fold`]'s `NoRoom` rule).
pub(super) fn least_limit(fixed: u64, previous: u64, floor: u64) -> u64 {
    fixed + (previous + floor + MIN_ROOM).max(floor + floor / 4 + floor + MIN_ROOM)
}

/// What a request of the fold costs besides its user prompt, for the system prompt it is sent
/// with: `fixed` for the plan (the envelope counted, with room for a previous summary), and
/// `base_tokens` for a prompt sized whole (its own size counts the envelope).
pub(super) struct Overheads {
    pub(super) fixed: u64,
    pub(super) base_tokens: u64,
}

impl Overheads {
    pub(super) fn of(system: &str) -> Overheads {
        let fixed = request_overhead(system);
        Overheads {
            fixed,
            base_tokens: fixed.saturating_sub(envelope_tokens()),
        }
    }
}
