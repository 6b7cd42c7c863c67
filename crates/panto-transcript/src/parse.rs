//! Parsing: transcript text back into items, and a compaction request back into its sections.
//!
//! The parser is the exact inverse of the renderer on rendered text, and lenient elsewhere: a
//! line that is not a well-formed marker line is body text, and text before the first marker is
//! ignored, so parsing a transcript never fails.

use panto_model::{RawJson, Role};
use serde_json::Value;

use crate::error::TranscriptError;
use crate::escape::{is_plain_byte, unescape};
use crate::item::{Speaker, TranscriptItem};
use crate::syntax::{Attrs, Head, SUMMARY_CLOSE, SUMMARY_OPEN, TRANSCRIPT_CLOSE, TRANSCRIPT_OPEN};

/// A compaction request's user prompt, read back by [`parse_request`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ParsedRequest {
    /// The content of the `<previous-summary>` section, unescaped, when there is one.
    pub previous_summary: Option<String>,
    /// The items of the `<transcript>` section.
    pub items: Vec<TranscriptItem>,
}

impl ParsedRequest {
    /// A request read back as `previous_summary` and the transcript's `items`.
    pub fn new(previous_summary: Option<String>, items: Vec<TranscriptItem>) -> ParsedRequest {
        ParsedRequest {
            previous_summary,
            items,
        }
    }
}

/// Reads transcript text (as [`crate::render_transcript`] writes it) back into items.
///
/// An item starts at a marker line: a line that begins with `[`, a known head, its attributes
/// and `]:`. Its body runs to the next marker line, minus the blank line that ends each item,
/// and is unescaped. A line that looks like a marker but is not well formed is body text; text
/// before the first marker line is ignored. A tool call whose body is not JSON keeps the body as
/// a JSON string.
///
/// Invariant: `parse_transcript(&render_transcript(m)) == transcript_items(m)`.
pub fn parse_transcript(text: &str) -> Vec<TranscriptItem> {
    let b = text.as_bytes();
    let mut items = Vec::new();
    let mut open: Option<(Header, usize)> = None;
    let mut pos = 0;
    while pos < b.len() {
        if b[pos] == b'['
            && let Some((header, body_start)) = parse_header(text, pos)
        {
            if let Some((h, start)) = open.take() {
                items.push(finish(h, &text[start..pos]));
            }
            open = Some((header, body_start));
        }
        match text[pos..].find('\n') {
            Some(k) => pos += k + 1,
            None => break,
        }
    }
    if let Some((h, start)) = open {
        items.push(finish(h, &text[start..]));
    }
    items
}

/// The marker that opens an item on `line` (a line of a rendered transcript), through its
/// `]:`, such as `[Tool result bash (t1)]:`: what a part of a transcript cut inside that item
/// repeats, so that the part too starts with a marker and reads back as an item. `None` when
/// the line opens no item (escaping keeps message text from looking like a marker).
pub fn item_marker(line: &str) -> Option<&str> {
    if !line.starts_with('[') {
        return None;
    }
    let (_, body) = parse_header(line, 0)?;
    let marker = &line[..body];
    Some(marker.strip_suffix(' ').unwrap_or(marker))
}

/// The text that leads a part of a transcript cut inside the item that `marker` opens (as
/// [`item_marker`] gives it): the marker, `(continued)`, then a line break when the part
/// starts at the start of a line, else a space, so that the rest of a line cut in two goes on
/// after it and never comes to the start of a line. Led so, the part reads back as an item
/// whose text starts with `(continued)`.
pub fn continued(marker: &str, line_start: bool) -> String {
    let end = if line_start { '\n' } else { ' ' };
    format!("{marker} (continued){end}")
}

/// Reads a compaction request's user prompt (as [`crate::render_request`] writes it) back into
/// its previous summary and transcript items.
///
/// Sections are found by their tag lines: a line that is exactly `<transcript>`,
/// `</transcript>`, `<previous-summary>` or `</previous-summary>`. Rendered text never holds
/// such a line inside a section, since escaping neutralises those tags in message text.
///
/// # Errors
/// [`TranscriptError`] naming the tag and its 1-based line when there is no `<transcript>` line,
/// when a tag line appears twice, when a section is not closed, or when a tag is out of place
/// (a closing tag before its opening tag, or one section inside the other).
pub fn parse_request(text: &str) -> Result<ParsedRequest, TranscriptError> {
    let mut tags = Tags::default();
    let mut start = 0;
    for (n, line) in text.split('\n').enumerate() {
        let found = TagLine {
            line: n + 1,
            start,
            end: start + line.len(),
        };
        let slot = match line {
            TRANSCRIPT_OPEN => Some((&mut tags.transcript_open, TRANSCRIPT_OPEN)),
            TRANSCRIPT_CLOSE => Some((&mut tags.transcript_close, TRANSCRIPT_CLOSE)),
            SUMMARY_OPEN => Some((&mut tags.summary_open, SUMMARY_OPEN)),
            SUMMARY_CLOSE => Some((&mut tags.summary_close, SUMMARY_CLOSE)),
            _ => None,
        };
        if let Some((slot, tag)) = slot {
            if slot.is_some() {
                return Err(TranscriptError::RepeatedTag { tag, line: n + 1 });
            }
            *slot = Some(found);
        }
        start += line.len() + 1;
    }

    let (t_open, t_close) = section(
        tags.transcript_open,
        tags.transcript_close,
        TRANSCRIPT_OPEN,
        TRANSCRIPT_CLOSE,
    )?
    .ok_or(TranscriptError::MissingTag {
        tag: TRANSCRIPT_OPEN,
    })?;
    let summary = section(
        tags.summary_open,
        tags.summary_close,
        SUMMARY_OPEN,
        SUMMARY_CLOSE,
    )?;
    let previous_summary = match summary {
        None => None,
        Some((s_open, s_close)) => {
            if s_open.line < t_open.line && s_close.line > t_open.line {
                return Err(TranscriptError::MisplacedTag {
                    tag: TRANSCRIPT_OPEN,
                    line: t_open.line,
                });
            }
            if s_open.line > t_open.line && s_open.line < t_close.line {
                return Err(TranscriptError::MisplacedTag {
                    tag: SUMMARY_OPEN,
                    line: s_open.line,
                });
            }
            // The content ends at the newline before the closing tag line.
            let from = s_open.end + 1;
            let to = s_close.start.saturating_sub(1).max(from);
            Some(unescape(&text[from..to], true))
        }
    };
    let transcript = &text[t_open.end + 1..t_close.start];
    Ok(ParsedRequest {
        previous_summary,
        items: parse_transcript(transcript),
    })
}

/// Where a tag line is: its 1-based number and its byte range without the newline.
#[derive(Clone, Copy, Debug)]
struct TagLine {
    line: usize,
    start: usize,
    end: usize,
}

#[derive(Default)]
struct Tags {
    transcript_open: Option<TagLine>,
    transcript_close: Option<TagLine>,
    summary_open: Option<TagLine>,
    summary_close: Option<TagLine>,
}

/// Pairs an opening and a closing tag line: `None` when neither is present.
fn section(
    open: Option<TagLine>,
    close: Option<TagLine>,
    open_tag: &'static str,
    close_tag: &'static str,
) -> Result<Option<(TagLine, TagLine)>, TranscriptError> {
    match (open, close) {
        (None, None) => Ok(None),
        (Some(o), Some(c)) if c.line > o.line => Ok(Some((o, c))),
        (Some(o), None) => Err(TranscriptError::UnclosedTag {
            tag: open_tag,
            line: o.line,
        }),
        (_, Some(c)) => Err(TranscriptError::MisplacedTag {
            tag: close_tag,
            line: c.line,
        }),
    }
}

/// A parsed marker line.
#[derive(Clone, Debug)]
enum Header {
    Text(Role),
    Thinking(Role),
    Call {
        role: Role,
        name: String,
        id: String,
    },
    Result {
        is_error: bool,
        name: Option<String>,
        id: String,
    },
    Image(Speaker),
    Unknown(Speaker),
    Summary,
}

/// Parses the marker line at `pos` (which holds `[`): the header and where its body starts.
fn parse_header(text: &str, pos: usize) -> Option<(Header, usize)> {
    let rest = &text[pos..];
    Head::ALL.iter().find_map(|&head| {
        let open = head.open();
        if !rest.starts_with(open) {
            return None;
        }
        let mut cur = Cursor {
            text,
            pos: pos + open.len(),
        };
        let header = match head.attrs() {
            Attrs::None => match head {
                Head::Text(role) => Header::Text(role),
                Head::Thinking(role) => Header::Thinking(role),
                Head::Image(from) => Header::Image(from),
                Head::Unknown(from) => Header::Unknown(from),
                _ => Header::Summary,
            },
            Attrs::NameId => {
                cur.expect(" ")?;
                let name = cur.token()?;
                cur.expect(" (")?;
                let id = cur.token()?;
                cur.expect(")")?;
                let Head::ToolCall(role) = head else {
                    return None;
                };
                Header::Call { role, name, id }
            }
            Attrs::OptionalNameId => {
                cur.expect(" ")?;
                let name = if cur.eat("(") {
                    None
                } else {
                    let name = cur.token()?;
                    cur.expect(" (")?;
                    Some(name)
                };
                let id = cur.token()?;
                cur.expect(")")?;
                Header::Result {
                    is_error: head == Head::ToolError,
                    name,
                    id,
                }
            }
        };
        cur.expect("]:")?;
        cur.eat(" ");
        Some((header, cur.pos))
    })
}

/// A read position in a marker line.
struct Cursor<'a> {
    text: &'a str,
    pos: usize,
}

impl Cursor<'_> {
    fn eat(&mut self, s: &str) -> bool {
        if self.text[self.pos..].starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, s: &str) -> Option<()> {
        self.eat(s).then_some(())
    }

    /// A name or id: a bare plain token, or a JSON string on one line.
    fn token(&mut self) -> Option<String> {
        let b = self.text.as_bytes();
        let start = self.pos;
        if b.get(start) == Some(&b'"') {
            let mut j = start + 1;
            loop {
                match b.get(j)? {
                    b'\\' => j += 2,
                    b'"' => break,
                    b'\n' => return None,
                    _ => j += 1,
                }
            }
            let s: String = serde_json::from_str(&self.text[start..=j]).ok()?;
            self.pos = j + 1;
            Some(s)
        } else {
            let len = b[start..].iter().take_while(|&&c| is_plain_byte(c)).count();
            if len == 0 {
                return None;
            }
            self.pos = start + len;
            Some(self.text[start..start + len].to_owned())
        }
    }
}

/// Builds the item of a header from its body region (which still holds the item's blank line).
fn finish(header: Header, region: &str) -> TranscriptItem {
    let body = region
        .strip_suffix("\n\n")
        .or_else(|| region.strip_suffix('\n'))
        .unwrap_or(region);
    match header {
        Header::Text(role) => TranscriptItem::Text {
            role,
            text: unescape(body, false),
        },
        Header::Thinking(role) => TranscriptItem::Thinking {
            role,
            text: unescape(body, false),
        },
        Header::Call { role, name, id } => TranscriptItem::ToolCall {
            role,
            id,
            name,
            // Read as a message's input reads (a lone surrogate escape as U+FFFD), since the
            // body is that input's text, written compactly.
            input: RawJson::from_text(body).map_or_else(
                |_| Value::String(unescape(body, false)),
                |raw| raw.to_value().into_owned(),
            ),
        },
        Header::Result { is_error, name, id } => TranscriptItem::ToolResult {
            id,
            name,
            is_error,
            text: unescape(body, false),
        },
        Header::Image(from) => TranscriptItem::Image {
            from,
            media_type: Some(unescape(body, false)).filter(|m| !m.is_empty()),
        },
        Header::Unknown(from) => TranscriptItem::Unknown {
            from,
            kind: unescape(body, false),
        },
        Header::Summary => TranscriptItem::Summary {
            text: unescape(body, false),
        },
    }
}
