//! Reading numbers out of provider error messages: token counts and limits ("prompt is too
//! long: 219,898 tokens > 200000 maximum") and retry delays ("please try again in 1.5s").
//!
//! Messages are matched after normalisation (see `signals::normalize`): lowercase, no
//! backticks, single spaces. A size pattern is that normalised text with placeholders:
//! `{I}` the input size, `{O}` the requested output, `{W}` the context window (limit), `{T}` the
//! whole request (input plus output), `{B}` the room left for the input, `{_}` a number to skip.

use std::time::Duration;

/// The least room, in tokens, that the window must leave for the input after the requested
/// output for compaction to be worth trying. Below it the caller must lower its output limit
/// first: even a perfect summary and a short suffix would not fit.
pub(super) const MIN_INPUT_ROOM: u64 = 256;

/// Size patterns, most specific first. For each role the first pattern that matches wins.
pub(super) const SIZE_PATTERNS: &[&str] = &[
    // Anthropic (direct, Bedrock, Vertex).
    "prompt is too long: {I} tokens > {W} maximum",
    "{I} + {O} > {W}",
    // OpenAI and the servers that copy its wording (Azure, vLLM, DeepSeek, OpenRouter, FastChat).
    "maximum context length is {W}",
    "your messages resulted in {I} tokens",
    "({I} in the messages",
    "({I} in your prompt",
    "{O} in the completion",
    "{O} for the completion",
    "{O} in the output",
    "{O} tokens for the completion",
    "you requested about {T} tokens",
    "you requested {T} tokens",
    "requested a total of {T} tokens",
    "{I} tokens from the input messages",
    "configured limit of {W} tokens",
    // vLLM, newer wordings.
    "requested {O} output tokens",
    "prompt contains at least {I} input tokens",
    "you passed {I} input tokens",
    "context length is only {W} tokens",
    "maximum input length of {B} tokens",
    "upper bound for {B} input tokens",
    "max_completion_tokens' is too large: {O}",
    "request has {I} input tokens",
    "max_tokens={O}",
    "max_model_len={W}",
    "(total length {I})",
    "(context length {W})",
    "decoder prompt (length {I})",
    "maximum model length of {W}",
    // Gemini.
    "input token count ({I})",
    "input token count {I}",
    "input token count of {I}",
    "maximum allowed {W} tokens",
    "maximum number of tokens allowed ({W})",
    // llama.cpp, LocalAI, LM Studio.
    "request ({I} tokens)",
    "input ({I} tokens)",
    "available context size ({W} tokens)",
    "max context size ({W} tokens)",
    "n_keep: {I}",
    "n_ctx: {W}",
    "n_keep ({I})",
    "n_ctx ({W})",
    "keep the first {I} tokens",
    "context length of only {W} tokens",
    "input has {I} tokens",
    "context length only supports {W} tokens",
    // Fireworks, Ollama cloud, oMLX, xAI, Mistral, Cerebras, Together, SGLang.
    "prompt is too long: {I}",
    "maximum context length: {W}",
    "prompt too long: {I} tokens",
    "max context window of {W} tokens",
    "maximum prompt length is {W}",
    "request contains {I} tokens",
    "prompt contains {I} tokens",
    "too large for model with {W} maximum context length",
    "current length is {I} while limit is {W}",
    "context length ({W} tokens)",
    // TGI-style servers.
    "max_new_tokens must be <= {W}",
    "given: {I} inputs tokens and {O} max_new_tokens",
    "inputs must have less than {W} tokens. given: {I}",
    // Cohere, Kimi, DashScope, Copilot, DS4, Poolside, GitHub Models, others.
    "cannot exceed {W} - received {I}",
    "model token limit: {W} (requested: {I})",
    "total message size {I} exceeds limit {W}",
    "range of input length should be [{_}, {W}]",
    "prompt token count of {I} exceeds the limit of {W}",
    "prompt has {I} tokens",
    "configured context size is {W} tokens",
    "input length {I} exceeds",
    "maximum allowed input length of {W}",
    "input length ({I}",
    "maximum context length ({W}",
    "maximum context length of {W}",
    "maximum context of {W}",
    "maximum allowed length ({W}",
    "number of input tokens ({I})",
    "max_prompt_tokens ({W})",
    "max size: {W} tokens",
    // Generic forms, last.
    "context window of {W}",
    "context window is {W}",
    "context window ({W}",
    "context size of {W}",
    "context size ({W}",
    "context limit of {W}",
    "context length of {W}",
    "context length {W}",
    "token limit of {W}",
    "limit of {W} tokens",
    "{W} token limit",
    "maximum of {W} tokens",
    "maximum is {W}",
    "limit of {W}",
    "token count {I}",
    "requested {T} tokens",
    "used {I} tokens",
    "{I} input tokens",
    "{I} prompt tokens",
    "prompt of {I} tokens",
    "input of {I} tokens",
];

/// The sizes a message states; every one is optional.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Sizes {
    /// The input (prompt) size.
    pub input: Option<u64>,
    /// The requested output (`max_tokens` and its cousins).
    pub output: Option<u64>,
    /// The context window.
    pub limit: Option<u64>,
    /// The whole request, input plus output.
    pub total: Option<u64>,
    /// The room the window leaves for the input.
    pub input_room: Option<u64>,
}

impl Sizes {
    /// Reads the sizes out of normalised text.
    pub(super) fn read(text: &str) -> Sizes {
        let mut sizes = Sizes::default();
        for pattern in SIZE_PATTERNS {
            if let Some(found) = match_pattern(pattern, text) {
                for (role, value) in found {
                    let slot = match role {
                        'I' => &mut sizes.input,
                        'O' => &mut sizes.output,
                        'W' => &mut sizes.limit,
                        'T' => &mut sizes.total,
                        'B' => &mut sizes.input_room,
                        _ => continue,
                    };
                    slot.get_or_insert(value);
                }
            }
        }
        sizes
    }

    /// The input size: stated, or the whole request less the output, or the whole request.
    pub(super) fn input_tokens(&self) -> Option<u64> {
        self.input.or(match (self.total, self.output) {
            (Some(total), Some(output)) => total.checked_sub(output),
            (total, _) => total,
        })
    }

    /// Whether the input size or the limit is known.
    pub(super) fn any(&self) -> bool {
        self.input_tokens().is_some() || self.limit.is_some()
    }

    /// Whether the requested output alone fills the window, or leaves it less than
    /// [`MIN_INPUT_ROOM`] tokens for the input; then compacting the input cannot help.
    pub(super) fn output_fills_window(&self) -> bool {
        if self.input_room.is_some_and(|room| room < MIN_INPUT_ROOM) {
            return true;
        }
        match (self.output, self.limit) {
            (Some(output), Some(limit)) => limit.saturating_sub(output) < MIN_INPUT_ROOM,
            _ => false,
        }
    }
}

/// One piece of a size pattern.
enum Piece<'a> {
    Literal(&'a str),
    Number(char),
}

fn pieces(pattern: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            out.push(Piece::Literal(&rest[..open]));
        }
        let role = rest[open + 1..].chars().next().unwrap_or('_');
        let close = rest[open..].find('}').map_or(rest.len(), |c| open + c + 1);
        out.push(Piece::Number(role));
        rest = &rest[close..];
    }
    if !rest.is_empty() {
        out.push(Piece::Literal(rest));
    }
    out
}

/// Matches `pattern` anywhere in `text`; on success, the numbers with their roles.
pub(super) fn match_pattern(pattern: &str, text: &str) -> Option<Vec<(char, u64)>> {
    let pieces = pieces(pattern);
    let starts: Vec<usize> = match pieces.first()? {
        Piece::Literal(lit) => text.match_indices(lit).map(|(i, _)| i).collect(),
        Piece::Number(_) => number_starts(text).collect(),
    };
    starts
        .into_iter()
        .find_map(|start| match_at(&pieces, text, start))
}

fn match_at(pieces: &[Piece<'_>], text: &str, mut at: usize) -> Option<Vec<(char, u64)>> {
    let mut found = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Literal(lit) => {
                if !text.get(at..)?.starts_with(lit) {
                    return None;
                }
                at += lit.len();
            }
            Piece::Number(role) => {
                let (value, end) = parse_count(text, at)?;
                found.push((*role, value));
                at = end;
            }
        }
    }
    Some(found)
}

/// Byte offsets where a run of digits begins.
fn number_starts(text: &str) -> impl Iterator<Item = usize> + '_ {
    let bytes = text.as_bytes();
    (0..bytes.len())
        .filter(move |&i| bytes[i].is_ascii_digit() && (i == 0 || !bytes[i - 1].is_ascii_digit()))
}

/// Parses a whole count at byte `at`: digits with optional thousands separators (`128,000`,
/// `128_000`, `128'000`) and an optional `k` suffix (`128k`). Returns the value and the end.
pub(super) fn parse_count(text: &str, at: usize) -> Option<(u64, usize)> {
    let bytes = text.as_bytes();
    if !bytes.get(at)?.is_ascii_digit() {
        return None;
    }
    let mut value: u64 = 0;
    let mut i = at;
    loop {
        while let Some(&b) = bytes.get(i).filter(|b| b.is_ascii_digit()) {
            value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
            i += 1;
        }
        let grouped = matches!(bytes.get(i), Some(b',' | b'_' | b'\''))
            && bytes
                .get(i + 1..i + 4)
                .is_some_and(|g| g.iter().all(u8::is_ascii_digit))
            && !bytes.get(i + 4).is_some_and(u8::is_ascii_digit);
        if !grouped {
            break;
        }
        i += 1;
    }
    if bytes.get(i) == Some(&b'k') && !bytes.get(i + 1).is_some_and(u8::is_ascii_alphanumeric) {
        value = value.checked_mul(1000)?;
        i += 1;
    }
    Some((value, i))
}

/// Phrases that introduce a retry delay in a message.
const RETRY_PHRASES: &[&str] = &[
    "try again in ",
    "retry in ",
    "retry after ",
    "try again after ",
    "retry-after: ",
    "wait ",
];

/// The first retry delay a normalised message states ("please try again in 1.5s", "please retry
/// after 20 seconds", "try again in 6m0s").
pub(super) fn retry_delay_in_text(text: &str) -> Option<Duration> {
    RETRY_PHRASES.iter().find_map(|phrase| {
        text.match_indices(phrase)
            .find_map(|(i, _)| parse_duration(&text[i + phrase.len()..]))
    })
}

/// Parses a duration at the start of `s`: one or more `number unit` items (`1.5s`, `20ms`,
/// `6m0s`, `86400 seconds`, `2 minutes`), or a bare number of seconds.
pub(super) fn parse_duration(s: &str) -> Option<Duration> {
    let mut seconds = 0.0_f64;
    let mut rest = s;
    let mut items = 0;
    loop {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = match rest[..digits].parse() {
            Ok(n) if digits > 0 => n,
            _ => break,
        };
        let after = rest[digits..].strip_prefix(' ').unwrap_or(&rest[digits..]);
        let word_len = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let scale = match &after[..word_len] {
            "ms" | "millisecond" | "milliseconds" => 0.001,
            "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
            "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600.0,
            "" if items == 0 => {
                seconds = number;
                items = 1;
                break;
            }
            _ => break,
        };
        seconds += number * scale;
        items += 1;
        rest = &after[word_len..];
        // Another item may follow directly ("6m0s") or after one space ("1 minute 30 seconds").
        let next = rest.strip_prefix(' ').unwrap_or(rest);
        if !next.starts_with(|c: char| c.is_ascii_digit()) {
            break;
        }
        rest = next;
    }
    if items == 0 {
        return None;
    }
    Duration::try_from_secs_f64(seconds).ok()
}
