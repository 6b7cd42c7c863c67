//! Turning whatever a provider sent (JSON object or array, `error` as a string, a top-level
//! `message`, JSON nested inside strings, HTML, plain text, nothing) into the signals the rules
//! read: error codes, normalised text, the provider's own message, numeric fields, a retry
//! delay and a status embedded in the payload.

use std::borrow::Cow;
use std::time::Duration;

use panto_transcript::cut::{self, Budget, Cut};
use serde_json::Value;

use super::numbers::{parse_count, parse_duration};

/// The longest message kept in a [`panto_provider::ProviderError`], in characters.
pub(super) const MAX_MESSAGE_CHARS: usize = 2000;
/// The most text the rules look at, in bytes; the rest of an absurd body is ignored.
const MAX_TEXT_BYTES: usize = 256 * 1024;
/// How deep the walk goes into nested JSON (and JSON inside strings).
const MAX_DEPTH: usize = 16;
/// How many JSON nodes the walk visits at most.
const MAX_NODES: usize = 20_000;

/// What the rules read from one answer.
#[derive(Clone, Debug, Default)]
pub(super) struct Signals {
    /// Lowercased values of `code`, `type`, `status`, `reason`, `__type` and `@type` fields at
    /// any depth (for `@type` also the part after the last `/`, for `__type` after the `#`).
    pub codes: Vec<String>,
    /// Normalised text of every message-like field, joined with ` | `.
    pub text: String,
    /// The provider's own message, for humans.
    pub message: String,
    /// llama.cpp's `n_prompt_tokens` field.
    pub n_prompt_tokens: Option<u64>,
    /// llama.cpp's `n_ctx` field.
    pub n_ctx: Option<u64>,
    /// A retry delay given as a field (Gemini `RetryInfo.retryDelay`, `retry_after`).
    pub retry_delay: Option<Duration>,
    /// An HTTP status given inside the payload (`code: 400`, `http_status_code`), the
    /// shallowest one.
    pub embedded_status: Option<u16>,
}

impl Signals {
    /// Reads the raw body of an HTTP answer.
    pub(super) fn from_body(body: &[u8]) -> Signals {
        let trimmed = trim_bytes(body);
        if trimmed.is_empty() {
            return Signals {
                message: "empty response body".to_owned(),
                ..Signals::default()
            };
        }
        if let Ok(value) = serde_json::from_slice::<Value>(trimmed) {
            return Signals::from_value(&value);
        }
        let raw = String::from_utf8_lossy(trimmed);
        let plain = if looks_like_html(&raw) {
            html_text(&raw)
        } else {
            raw.to_string()
        };
        let mut walk = Walk::default();
        walk.text(&plain, 0);
        let message = message_from_string(&plain, 0);
        walk.finish(message)
    }

    /// Reads a JSON payload: an SSE event's data, or a 2xx body.
    pub(super) fn from_value(value: &Value) -> Signals {
        let mut walk = Walk::default();
        walk.value(value, 0, false);
        let message = display_message(value, 0).unwrap_or_else(|| compact_json(value));
        walk.finish(message)
    }
}

/// The state of one walk over a payload.
#[derive(Default)]
struct Walk {
    codes: Vec<String>,
    texts: Vec<String>,
    text_bytes: usize,
    nodes: usize,
    n_prompt_tokens: Option<u64>,
    n_ctx: Option<u64>,
    retry_delay: Option<Duration>,
    status: Option<(usize, u16)>,
}

impl Walk {
    fn finish(self, message: String) -> Signals {
        Signals {
            codes: self.codes,
            text: self.texts.join(" | "),
            // Cut before redacting (a body may be megabytes), then cut again to the limit; the
            // first cut is far enough past the second that no half key survives.
            message: truncate_chars(
                &redact_secrets(truncate_bytes(&message, 16 * 1024)),
                MAX_MESSAGE_CHARS,
            ),
            n_prompt_tokens: self.n_prompt_tokens,
            n_ctx: self.n_ctx,
            retry_delay: self.retry_delay,
            embedded_status: self.status.map(|(_, s)| s),
        }
    }

    /// Visits a JSON node. `texty` says the node sits under a message-like key, so its strings
    /// are text.
    fn value(&mut self, value: &Value, depth: usize, texty: bool) {
        self.nodes += 1;
        if depth > MAX_DEPTH || self.nodes > MAX_NODES {
            return;
        }
        match value {
            Value::Object(map) => {
                for (key, field) in map {
                    self.field(&lower(key), field, depth);
                }
            }
            Value::Array(items) => {
                for item in items {
                    self.value(item, depth + 1, texty);
                }
            }
            Value::String(s) if texty || depth == 0 => self.text(s, depth),
            _ => {}
        }
    }

    fn field(&mut self, key: &str, field: &Value, depth: usize) {
        match key {
            "code" | "type" | "status" | "reason" | "error_type" | "errortype" | "error_code"
            | "errorcode" | "__type" | "@type" | "statustext" => {
                self.code(key, field, depth);
                if field.is_object() || field.is_array() {
                    self.value(field, depth + 1, false);
                }
            }
            "message" | "error" | "detail" | "details" | "msg" | "error_message"
            | "errormessage" | "description" | "raw" | "errors" | "title" => {
                self.value(field, depth + 1, true);
            }
            "param" => {
                // A field path (`messages`, `input[0].content`) is not text; a sentence is
                // (a gateway put the upstream message there).
                if let Value::String(s) = field
                    && s.contains(' ')
                {
                    self.text(s, depth);
                }
            }
            "n_prompt_tokens" => self.n_prompt_tokens = self.n_prompt_tokens.or(count(field)),
            "n_ctx" => self.n_ctx = self.n_ctx.or(count(field)),
            "retrydelay" | "retry_after" | "retryafter" | "retry_after_seconds" => {
                let delay = match field {
                    Value::String(s) => parse_duration(s.trim()),
                    Value::Number(n) => {
                        n.as_f64().and_then(|f| Duration::try_from_secs_f64(f).ok())
                    }
                    _ => None,
                };
                self.retry_delay = self.retry_delay.or(delay);
            }
            "http_status_code" | "status_code" | "statuscode" | "raw_status_code"
            | "httpstatuscode" | "http_status" => {
                if let Some(status) = http_status(field) {
                    self.status_at(depth, status);
                }
            }
            // Content of a normal answer, never part of an error.
            "choices" | "candidates" | "content" | "output" | "usage" | "input" | "tools"
            | "messages" | "instructions" => {}
            _ => {
                if field.is_object() || field.is_array() {
                    self.value(field, depth + 1, false);
                }
            }
        }
    }

    fn code(&mut self, key: &str, field: &Value, depth: usize) {
        let raw = match field {
            Value::String(s) => s.trim().to_owned(),
            Value::Number(n) => n.to_string(),
            _ => return,
        };
        if matches!(key, "code" | "status")
            && let Some(status) = http_status(field)
        {
            self.status_at(depth, status);
        }
        let code = raw.to_lowercase();
        if code.is_empty() {
            return;
        }
        if key == "@type"
            && let Some((_, short)) = code.rsplit_once('/')
        {
            self.codes.push(short.to_owned());
        }
        if key == "__type"
            && let Some((_, short)) = code.rsplit_once('#')
        {
            self.codes.push(short.to_owned());
        }
        self.codes.push(code);
    }

    fn status_at(&mut self, depth: usize, status: u16) {
        if self.status.is_none_or(|(d, _)| depth < d) {
            self.status = Some((depth, status));
        }
    }

    /// Adds a string as text, and walks the JSON it may carry (a whole JSON document, or one
    /// after a prefix such as `litellm.BadRequestError: AnthropicException - {...}`).
    fn text(&mut self, s: &str, depth: usize) {
        let normalized = normalize(s);
        if normalized.is_empty() || self.text_bytes >= MAX_TEXT_BYTES {
            return;
        }
        let room = MAX_TEXT_BYTES - self.text_bytes;
        let piece = truncate_bytes(&normalized, room).to_owned();
        self.text_bytes += piece.len() + 3;
        self.texts.push(piece);
        if depth < MAX_DEPTH
            && let Some(inner) = embedded_json(s)
        {
            self.value(&inner, depth + 1, true);
        }
    }
}

/// The JSON a string carries: the whole string, or the first object after a prefix.
fn embedded_json(s: &str) -> Option<Value> {
    let t = s.trim();
    if t.starts_with(['{', '['])
        && let Ok(v) = serde_json::from_str::<Value>(t)
    {
        return Some(v);
    }
    let start = t.find('{')?;
    let mut stream = serde_json::Deserializer::from_str(&t[start..]).into_iter::<Value>();
    match stream.next() {
        Some(Ok(v)) if v.is_object() => Some(v),
        _ => None,
    }
}

/// The provider's own message: `error.message`, a string `error`, a top-level `message`,
/// `response.error.message` (`OpenAI` `response.failed`), `detail`, in that order, looking
/// inside JSON carried by strings. A gateway's generic message is completed with the upstream
/// one (`metadata.raw`, or a sentence in `param`).
fn display_message(value: &Value, depth: usize) -> Option<String> {
    if depth > MAX_DEPTH {
        return None;
    }
    match value {
        Value::Array(items) => items.iter().find_map(|v| display_message(v, depth + 1)),
        Value::String(s) => Some(message_from_string(s, depth)),
        Value::Object(map) => {
            let from_error = map.get("error").and_then(|e| match e {
                Value::String(s) if !s.trim().is_empty() => Some(message_from_string(s, depth)),
                Value::Object(_) | Value::Array(_) => display_message(e, depth + 1),
                _ => None,
            });
            let from_response = || {
                map.get("response")
                    .and_then(|r| r.get("error"))
                    .filter(|e| e.is_object())
                    .and_then(|e| display_message(e, depth + 1))
            };
            let own = || {
                [
                    "message",
                    "detail",
                    "msg",
                    "error_message",
                    "errorMessage",
                    "description",
                ]
                .iter()
                .find_map(|key| match map.get(*key)? {
                    Value::String(s) if !s.trim().is_empty() => Some(message_from_string(s, depth)),
                    v @ (Value::Object(_) | Value::Array(_)) => Some(compact_json(v)),
                    _ => None,
                })
            };
            let mut message = from_error.or_else(from_response).or_else(own)?;
            let upstream = map
                .get("metadata")
                .and_then(|m| m.get("raw"))
                .and_then(Value::as_str)
                .map(|raw| message_from_string(raw, depth))
                .or_else(|| {
                    map.get("param")
                        .and_then(Value::as_str)
                        .filter(|p| p.contains(' '))
                        .map(str::to_owned)
                });
            if let Some(upstream) = upstream
                && !message.contains(upstream.as_str())
            {
                message = format!("{message}: {upstream}");
            }
            Some(message)
        }
        _ => None,
    }
}

/// A message string, with any JSON it carries replaced by that JSON's own message.
fn message_from_string(s: &str, depth: usize) -> String {
    let t = s.trim();
    if let Some(inner) = embedded_json(t).and_then(|v| display_message(&v, depth + 1)) {
        let prefix = match t.find(['{', '[']) {
            Some(0) | None => "",
            Some(i) => {
                let head = t[..i].trim_end();
                let head = head
                    .strip_suffix("b'")
                    .or_else(|| head.strip_suffix("b\""))
                    .unwrap_or(head);
                head.trim_end_matches([' ', '-', ':', '\'', '"'])
            }
        };
        return if prefix.is_empty() {
            inner
        } else {
            format!("{prefix}: {inner}")
        };
    }
    collapse_whitespace(t)
}

fn count(field: &Value) -> Option<u64> {
    match field {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => parse_count(s.trim(), 0).map(|(v, _)| v),
        _ => None,
    }
}

/// An HTTP status carried by a field: a number or a three-digit string from 100 to 599.
fn http_status(field: &Value) -> Option<u16> {
    let n = match field {
        Value::Number(n) => n.as_u64()?,
        Value::String(s) if s.len() == 3 => s.parse().ok()?,
        _ => return None,
    };
    u16::try_from(n).ok().filter(|s| (100..600).contains(s))
}

/// Lowercases, drops backticks, unifies quotes and collapses whitespace, so that rule phrases
/// match however a provider (or a proxy in front of it) spaced and quoted its message.
pub(super) fn normalize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut space = false;
    for c in s.chars() {
        let c = match c {
            '`' => continue,
            '\u{2018}' | '\u{2019}' => '\'',
            '\u{201c}' | '\u{201d}' => '"',
            c if c.is_whitespace() => ' ',
            c => c,
        };
        if c == ' ' {
            space = !out.is_empty();
            continue;
        }
        if space {
            out.push(' ');
            space = false;
        }
        out.extend(c.to_lowercase());
    }
    out
}

fn collapse_whitespace(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn lower(key: &str) -> Cow<'_, str> {
    if key.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(key.to_ascii_lowercase())
    } else {
        Cow::Borrowed(key)
    }
}

fn trim_bytes(body: &[u8]) -> &[u8] {
    let body = body.strip_prefix(b"\xef\xbb\xbf").unwrap_or(body);
    let start = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(body.len());
    let end = body
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &body[start..end]
}

fn looks_like_html(s: &str) -> bool {
    let head = s.get(..s.len().min(512)).unwrap_or(s).to_ascii_lowercase();
    head.starts_with('<')
        && (head.contains("<html")
            || head.contains("<!doctype")
            || head.contains("<head")
            || head.contains("<body")
            || head.contains("<title"))
}

/// The visible text of an HTML error page: its title when it has one, else the text between
/// tags.
fn html_text(html: &str) -> String {
    let lower = html.to_ascii_lowercase();
    if let Some(start) = lower.find("<title>").map(|i| i + "<title>".len())
        && let Some(len) = lower[start..].find("</title>")
    {
        let title = collapse_whitespace(&html[start..start + len]);
        if !title.is_empty() {
            return title;
        }
    }
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => {
                in_tag = true;
                out.push(' ');
            }
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    collapse_whitespace(&out)
}

fn compact_json(value: &Value) -> String {
    truncate_chars(&value.to_string(), MAX_MESSAGE_CHARS)
}

/// Cuts `s` to at most `max` characters, marking the cut.
pub(super) fn truncate_chars(s: &str, max: usize) -> String {
    let kept = cut::head(s, Budget::chars(max), Cut::Char);
    if kept.len() == s.len() {
        s.to_owned()
    } else {
        format!("{kept}… (truncated)")
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn truncate_bytes(s: &str, max: usize) -> &str {
    cut::head(s, Budget::bytes(max), Cut::Char)
}

/// Prefixes of credentials that a provider or a proxy might echo in a message.
const SECRET_PREFIXES: &[&str] = &["sk-", "sk_", "AIza", "xai-", "gsk_", "key="];

/// Replaces anything that looks like an API key with `[redacted]`, so that no credential
/// reaches an error message (`OpenAI` echoes a masked key; a proxy may echo a URL with `key=`).
pub(super) fn redact_secrets(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    'scan: while !rest.is_empty() {
        for prefix in SECRET_PREFIXES {
            if let Some(tail) = rest.strip_prefix(prefix) {
                let boundary = out
                    .chars()
                    .next_back()
                    .is_none_or(|c| !c.is_ascii_alphanumeric());
                let run = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '*')))
                    .unwrap_or(tail.len());
                if boundary && run >= 8 {
                    if *prefix == "key=" {
                        out.push_str("key=");
                    }
                    out.push_str("[redacted]");
                    rest = &tail[run..];
                    continue 'scan;
                }
            }
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}
