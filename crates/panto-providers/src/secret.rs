//! The API key type: a string that never shows itself in `Debug` output or messages, and the
//! scrubbing that removes it, whole or in part, from whatever a server sends back.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;

use panto_model::{ContentBlock, Extra, Message, RawJson, ToolResultContent};
use panto_provider::{EventSink, StreamEvent};
use serde_json::{Map, Value};

/// Whether a header of this name carries a credential, so that its value is treated like the
/// key: `authorization` and `proxy-authorization`, or any name holding `auth`, `key`, `token`,
/// `secret`, `cookie`, `password` or `session` (case-insensitive). Erring towards sensitive
/// costs only a redacted `Debug` line.
pub(crate) fn is_sensitive_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "auth", "key", "token", "secret", "cookie", "password", "session",
    ]
    .iter()
    .any(|word| name.contains(word))
}

/// An API key. Its `Debug` prints `ApiKey(<redacted>)` (or `ApiKey(<empty>)`), it has no
/// `Display`, and the adapters only ever put it into a request header.
///
/// An empty key means "send no credentials", for keyless local servers.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key. Surrounding whitespace (a trailing newline from a file) is trimmed.
    pub fn new(key: impl Into<String>) -> ApiKey {
        let key = key.into();
        let trimmed = key.trim();
        if trimmed.len() == key.len() {
            ApiKey(key)
        } else {
            ApiKey(trimmed.to_owned())
        }
    }

    /// No key: requests carry no credentials.
    pub fn none() -> ApiKey {
        ApiKey(String::new())
    }

    /// Whether there is no key.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The key itself, for the request header. Crate-private so it cannot leak by accident.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with the key removed, whole or in part: every run of text made of pieces of the
    /// key at least [`MIN_FRAGMENT`] bytes long is replaced by `<redacted>` (a key shorter than
    /// that is replaced only whole).
    ///
    /// Servers sometimes echo the key they were sent (`incorrect API key provided: ...`), and a
    /// message cut to a length may end in the middle of it; every message the adapters return
    /// passes through here, so neither a whole key nor a piece of 8 bytes or more survives,
    /// wherever a cut fell. Keys are ASCII, so the replaced ranges start and end on character
    /// boundaries.
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.scrub_cow(text).into_owned()
    }

    /// [`ApiKey::scrub`] without a copy when there is nothing to remove.
    pub(crate) fn scrub_cow<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let ranges = self.ranges(text.as_bytes());
        if ranges.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (start, end) in ranges {
            out.push_str(&text[at..start]);
            out.push_str(REDACTED);
            at = end;
        }
        out.push_str(&text[at..]);
        Cow::Owned(out)
    }

    /// The byte ranges of `text` that scrubbing replaces, in order, merged where they touch.
    fn ranges(&self, text: &[u8]) -> Vec<(usize, usize)> {
        let key = self.0.as_bytes();
        if key.len() < 4 || text.len() < key.len().min(MIN_FRAGMENT) {
            return Vec::new();
        }
        if key.len() >= MIN_FRAGMENT {
            return fragment_ranges(key, text);
        }
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for start in memchr_all(key, text) {
            push_range(&mut ranges, start, start + key.len());
        }
        ranges
    }

    /// How much of streamed `text` can be scrubbed and shown now: everything before the part
    /// that the next event could still turn into (a longer) piece of the key. That part is the
    /// longest suffix that occurs in the key, widened to the start of any piece of the key it
    /// touches, so no piece is ever split between what is shown now and what is shown later.
    pub(crate) fn stream_split(&self, text: &str) -> usize {
        let ranges = self.ranges(text.as_bytes());
        let mut split = text.len() - self.open_suffix(text);
        for &(start, end) in ranges.iter().rev() {
            if end <= split {
                break;
            }
            split = split.min(start);
        }
        split
    }

    /// The length of the longest suffix of `text` that occurs in the key (0 without a key).
    fn open_suffix(&self, text: &str) -> usize {
        if self.0.len() < 4 {
            return 0;
        }
        // A suffix that does not occur in the key has no longer suffix that does.
        let mut held = 0;
        for len in 1..=text.len().min(self.0.len()) {
            match text.get(text.len() - len..) {
                Some(tail) if self.0.contains(tail) => held = len,
                _ => break,
            }
        }
        held
    }

    /// Scrubs every string of an answer: texts, reasoning, tool names, ids and arguments, and
    /// the fields panto keeps without modelling them. See [`ApiKey::scrub`].
    pub(crate) fn scrub_message(&self, message: &mut Message) {
        if self.0.len() < 4 {
            return;
        }
        self.scrub_opt(&mut message.id);
        self.scrub_opt(&mut message.model);
        self.scrub_opt(&mut message.stop_reason);
        self.scrub_blocks(&mut message.content);
        if let Some(usage) = &mut message.usage {
            self.scrub_extra(&mut usage.extra);
        }
        self.scrub_extra(&mut message.extra);
    }

    fn scrub_blocks(&self, blocks: &mut [ContentBlock]) {
        for block in blocks {
            match block {
                ContentBlock::Text(t) => {
                    self.scrub_string(&mut t.text);
                    self.scrub_extra(&mut t.extra);
                }
                ContentBlock::Thinking(t) => {
                    self.scrub_string(&mut t.thinking);
                    self.scrub_opt(&mut t.signature);
                    self.scrub_extra(&mut t.extra);
                }
                ContentBlock::ToolUse(u) => {
                    self.scrub_string(&mut u.id);
                    self.scrub_string(&mut u.name);
                    self.scrub_raw(&mut u.input);
                    self.scrub_extra(&mut u.extra);
                }
                ContentBlock::ToolResult(r) => {
                    self.scrub_string(&mut r.tool_use_id);
                    match &mut r.content {
                        ToolResultContent::Text(s) => self.scrub_string(s),
                        ToolResultContent::Blocks(b) => self.scrub_blocks(b),
                    }
                    self.scrub_extra(&mut r.extra);
                }
                ContentBlock::Image(i) => {
                    self.scrub_value(&mut i.source);
                    self.scrub_extra(&mut i.extra);
                }
                ContentBlock::Compaction(c) => {
                    self.scrub_string(&mut c.summary);
                    self.scrub_extra(&mut c.extra);
                }
                ContentBlock::Other(o) => {
                    self.scrub_string(&mut o.kind);
                    self.scrub_extra(&mut o.fields);
                }
            }
        }
    }

    /// Scrubs a string or a [`Name`](panto_model::Name) in place, rebuilt only when it held a
    /// piece of the key.
    fn scrub_string<T: Deref<Target = str> + From<String>>(&self, s: &mut T) {
        if let Cow::Owned(clean) = self.scrub_cow(s) {
            *s = clean.into();
        }
    }

    fn scrub_opt<T: Deref<Target = str> + From<String>>(&self, s: &mut Option<T>) {
        if let Some(s) = s {
            self.scrub_string(s);
        }
    }

    fn scrub_value(&self, value: &mut Value) {
        match value {
            Value::String(s) => self.scrub_string(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.scrub_value(v)),
            Value::Object(map) => self.scrub_map(map),
            _ => {}
        }
    }

    /// Scrubs a value kept as exact JSON text: only a value that holds a piece of the key is
    /// rewritten (parsed, scrubbed string by string, and written again), so every other value
    /// stays byte for byte.
    fn scrub_raw(&self, raw: &mut RawJson) {
        if matches!(self.scrub_cow(raw.json()), Cow::Borrowed(_)) {
            return;
        }
        let mut value = raw.value().clone();
        self.scrub_value(&mut value);
        let clean = RawJson::from_value(&value);
        *raw = if matches!(self.scrub_cow(clean.json()), Cow::Borrowed(_)) {
            clean
        } else {
            // A piece hidden by escapes, or a value too deep to be parsed: keep nothing of it.
            RawJson::from_value(&Value::String(REDACTED.to_owned()))
        };
    }

    /// Scrubs the unmodelled fields of an entry: their keys and their values.
    fn scrub_extra(&self, extra: &mut Extra) {
        if extra.iter().all(|(k, v)| {
            matches!(
                (self.scrub_cow(k), self.scrub_cow(v.json())),
                (Cow::Borrowed(_), Cow::Borrowed(_))
            )
        }) {
            return;
        }
        *extra = std::mem::take(extra)
            .into_iter()
            .map(|(k, mut v)| {
                self.scrub_raw(&mut v);
                (self.scrub(&k), v)
            })
            .collect();
    }

    fn scrub_map(&self, map: &mut Map<String, Value>) {
        if map
            .keys()
            .any(|k| matches!(self.scrub_cow(k), Cow::Owned(_)))
        {
            *map = std::mem::take(map)
                .into_iter()
                .map(|(k, v)| (self.scrub(&k), v))
                .collect();
        }
        map.values_mut().for_each(|v| self.scrub_value(v));
    }
}

/// The shortest piece of a key that [`ApiKey::scrub`] finds and removes anywhere in a text.
pub(crate) const MIN_FRAGMENT: usize = 8;

/// What a removed key, or piece of one, becomes.
const REDACTED: &str = "<redacted>";

/// The byte ranges of `text` covered by a window of [`MIN_FRAGMENT`] bytes that also occurs in
/// `key`, merged where they touch or overlap, in order.
fn fragment_ranges(key: &[u8], text: &[u8]) -> Vec<(usize, usize)> {
    let window = |w: &[u8]| u64::from_le_bytes(w.try_into().expect("a window of 8 bytes"));
    let mut windows: Vec<u64> = key.windows(MIN_FRAGMENT).map(window).collect();
    windows.sort_unstable();
    windows.dedup();
    // Bytes that occur in the key: a window holding any other byte cannot match.
    let mut in_key = [false; 256];
    key.iter().for_each(|&b| in_key[usize::from(b)] = true);
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i + MIN_FRAGMENT <= text.len() {
        // Skip past the last byte of the window that the key does not hold.
        if let Some(bad) = text[i..i + MIN_FRAGMENT]
            .iter()
            .rposition(|&b| !in_key[usize::from(b)])
        {
            i += bad + 1;
            continue;
        }
        if windows
            .binary_search(&window(&text[i..i + MIN_FRAGMENT]))
            .is_ok()
        {
            push_range(&mut ranges, i, i + MIN_FRAGMENT);
        }
        i += 1;
    }
    ranges
}

/// Adds `start..end` to ordered ranges, merging it with the last one when they touch.
fn push_range(ranges: &mut Vec<(usize, usize)>, start: usize, end: usize) {
    match ranges.last_mut() {
        Some(last) if last.1 >= start => last.1 = last.1.max(end),
        _ => ranges.push((start, end)),
    }
}

/// The start of every occurrence of `needle` in `haystack`, overlapping ones included.
fn memchr_all<'a>(needle: &'a [u8], haystack: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    haystack
        .windows(needle.len())
        .enumerate()
        .filter(move |(_, w)| *w == needle)
        .map(|(i, _)| i)
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("ApiKey(<empty>)")
        } else {
            f.write_str("ApiKey(<redacted>)")
        }
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> ApiKey {
        ApiKey::new(key)
    }
}

impl From<&str> for ApiKey {
    fn from(key: &str) -> ApiKey {
        ApiKey::new(key)
    }
}

/// The caller's event sink behind a scrubber: streamed text and reasoning reach the caller
/// only after every secret (the key, and the values of sensitive extra headers), whole or in
/// part, is removed from them.
///
/// A piece of the key may arrive split over several events, so the end of each event that
/// could still become such a piece is held back ([`ApiKey::stream_split`]) until the next event
/// shows what follows it (or the stream ends, [`StreamGuard::finish`]); with several secrets,
/// the earliest cut any of them asks for. A piece is therefore
/// always scrubbed whole, and no piece of 8 bytes or more reaches the caller across events
/// either. Ordinary text holds back a few bytes at most.
pub(crate) struct StreamGuard<'k, 'e> {
    secrets: Vec<&'k ApiKey>,
    events: EventSink<'e>,
    held_text: String,
    held_thinking: String,
}

impl<'k, 'e> StreamGuard<'k, 'e> {
    pub(crate) fn new(
        secrets: impl IntoIterator<Item = &'k ApiKey>,
        events: EventSink<'e>,
    ) -> StreamGuard<'k, 'e> {
        StreamGuard {
            secrets: secrets.into_iter().collect(),
            events,
            held_text: String::new(),
            held_thinking: String::new(),
        }
    }

    /// Passes one event on, scrubbed.
    pub(crate) fn event(&mut self, event: StreamEvent<'_>) {
        match event {
            StreamEvent::Text(text) => {
                self.release_thinking();
                let clean = self.hold(text, true);
                if !clean.is_empty() {
                    (self.events)(StreamEvent::Text(&clean));
                }
            }
            StreamEvent::Thinking(text) => {
                self.release_text();
                let clean = self.hold(text, false);
                if !clean.is_empty() {
                    (self.events)(StreamEvent::Thinking(&clean));
                }
            }
            StreamEvent::ToolCall { name } => {
                self.finish();
                let name = self.scrub(name);
                (self.events)(StreamEvent::ToolCall { name: &name });
            }
            other => {
                self.finish();
                (self.events)(other);
            }
        }
    }

    /// Sends whatever is held back; called when the stream has ended.
    pub(crate) fn finish(&mut self) {
        self.release_text();
        self.release_thinking();
    }

    /// Appends `more` to what is held and returns the part that can be shown now, scrubbed.
    fn hold(&mut self, more: &str, text: bool) -> String {
        let held = if text {
            &mut self.held_text
        } else {
            &mut self.held_thinking
        };
        held.push_str(more);
        let split = self
            .secrets
            .iter()
            .map(|k| k.stream_split(held))
            .min()
            .unwrap_or(held.len());
        let rest = held.split_off(split);
        let ready = std::mem::replace(held, rest);
        scrub_all(&self.secrets, &ready)
    }

    /// `text` without any of the secrets.
    fn scrub(&self, text: &str) -> String {
        scrub_all(&self.secrets, text)
    }

    fn release_text(&mut self) {
        if !self.held_text.is_empty() {
            let held = std::mem::take(&mut self.held_text);
            let text = self.scrub(&held);
            (self.events)(StreamEvent::Text(&text));
        }
    }

    fn release_thinking(&mut self) {
        if !self.held_thinking.is_empty() {
            let held = std::mem::take(&mut self.held_thinking);
            let text = self.scrub(&held);
            (self.events)(StreamEvent::Thinking(&text));
        }
    }
}

/// `text` with every secret scrubbed from it, one after the other.
fn scrub_all(secrets: &[&ApiKey], text: &str) -> String {
    let mut out = Cow::Borrowed(text);
    for secret in secrets {
        if let Cow::Owned(clean) = secret.scrub_cow(&out) {
            out = Cow::Owned(clean);
        }
    }
    out.into_owned()
}
