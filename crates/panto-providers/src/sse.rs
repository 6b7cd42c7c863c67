//! A small server-sent events decoder that accepts bytes in chunks of any size.
//!
//! It follows the WHATWG event-stream rules: lines end with CRLF, LF or CR; a line starting with
//! `:` is a comment; `field: value` loses one space after the colon; `data` lines accumulate
//! with `\n` between them; a blank line dispatches the event (if it has data). `id` and `retry`
//! are read and ignored. One extension: old llama.cpp servers write a bare `error: {json}` line
//! in the middle of a stream; such a line is dispatched at once as an event named `error` with
//! [`SseEvent::raw`] set.
//!
//! Invariant: the events produced do not depend on how the byte stream is split into chunks.

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` name, empty when the event had none (the default `message` type).
    pub(crate) event: String,
    /// The data lines joined by `\n`.
    pub(crate) data: String,
    /// Whether the event came from a non-standard bare `error:` line.
    pub(crate) raw: bool,
}

/// The incremental decoder.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    /// The previous chunk ended with CR: a LF at the start of the next one belongs to it.
    skip_lf: bool,
    /// Whether the first line has begun (a UTF-8 byte order mark there is dropped).
    started: bool,
    event: String,
    data: String,
    /// Whether a `data` field has been seen since the last dispatch.
    has_data: bool,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub(crate) fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// Feeds the next bytes, appending every event they complete to `out`.
    pub(crate) fn push(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) {
        if self.skip_lf && !bytes.is_empty() {
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
            self.skip_lf = false;
        }
        while let Some(end) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&bytes[..end]);
            self.end_line(out);
            let terminator = bytes[end];
            bytes = &bytes[end + 1..];
            if terminator == b'\r' {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
        }
        self.line.extend_from_slice(bytes);
    }

    /// Ends the stream: an unterminated last line is taken as a line, and a pending event with
    /// data is dispatched (some servers omit the final blank line). A truncated payload is
    /// therefore still seen, and rejected by whoever parses it.
    pub(crate) fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            self.end_line(out);
        }
        self.dispatch(out);
        self.skip_lf = false;
    }

    /// Whether part of an event has arrived that is not yet dispatched: a field line, or the
    /// start of a line that is not a comment. Keep-alive comments leave this false.
    pub(crate) fn in_event(&self) -> bool {
        self.has_data || !self.event.is_empty() || self.line.first().is_some_and(|&b| b != b':')
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        let mut line = std::mem::take(&mut self.line);
        if !self.started {
            self.started = true;
            if line.starts_with(b"\xEF\xBB\xBF") {
                line.drain(..3);
            }
        }
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let text = String::from_utf8_lossy(&line);
        let (field, value) = match text.find(':') {
            Some(i) => {
                let value = &text[i + 1..];
                (&text[..i], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (&*text, ""),
        };
        match field {
            "event" => value.clone_into(&mut self.event),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "error" => out.push(SseEvent {
                event: "error".to_owned(),
                data: value.to_owned(),
                raw: true,
            }),
            _ => {}
        }
        // Reuse the line's allocation.
        line.clear();
        self.line = line;
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        if self.has_data {
            out.push(SseEvent {
                event: std::mem::take(&mut self.event),
                data: std::mem::take(&mut self.data),
                raw: false,
            });
        }
        self.event.clear();
        self.data.clear();
        self.has_data = false;
    }
}
