//! Transcript items: what a transcript holds, one item per marker, and the walk from messages
//! to items that both the renderer and [`transcript_items`] use.

use panto_model::{CallIndex, ContentBlock, ImageBlock, Message, Role, ToolResultContent};
use serde_json::Value;

/// Who an image or an unknown block came from: a message author, or a tool (inside a result).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Speaker {
    /// A user message.
    User,
    /// An assistant message.
    Assistant,
    /// The content of a tool result.
    Tool,
}

impl From<Role> for Speaker {
    fn from(role: Role) -> Speaker {
        match role {
            Role::User => Speaker::User,
            Role::Assistant => Speaker::Assistant,
        }
    }
}

/// One item of a transcript: what one role marker introduces.
///
/// [`transcript_items`] gives the items of messages; [`crate::parse_transcript`] gives the items
/// of a rendered transcript, and the two agree: for any messages `m`,
/// `parse_transcript(&render_transcript(m)) == transcript_items(m)`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum TranscriptItem {
    /// A text block: `[User]: ...` or `[Assistant]: ...`.
    Text {
        /// The author.
        role: Role,
        /// The text.
        text: String,
    },
    /// A thinking block (`[Assistant thinking]: ...`); its signature is not rendered.
    Thinking {
        /// The author (the assistant, in a valid session).
        role: Role,
        /// The reasoning text.
        text: String,
    },
    /// A tool call: `[Assistant tool call NAME (ID)]: {compact JSON arguments}`.
    ToolCall {
        /// The author (the assistant, in a valid session).
        role: Role,
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
        /// The arguments. A parsed call whose body is not JSON holds the body as a string.
        input: Value,
    },
    /// A tool result: `[Tool result NAME (ID)]: ...`, or `[Tool error NAME (ID)]: ...` when the
    /// tool failed. The text is the result's text blocks joined by newlines; its images and
    /// other blocks follow as their own items, from [`Speaker::Tool`].
    ToolResult {
        /// The id of the call it answers.
        id: String,
        /// The tool name, when the call it answers comes earlier in the same transcript.
        name: Option<String>,
        /// Whether the tool reported a failure (`is_error: true`).
        is_error: bool,
        /// The text of the result.
        text: String,
    },
    /// An image placeholder: `[User image]: image/png`.
    Image {
        /// Where the image came from.
        from: Speaker,
        /// Its media type, when the source names a non-empty one.
        media_type: Option<String>,
    },
    /// A placeholder for a block the transcript does not render: `[Assistant unknown block]:
    /// redacted_thinking`.
    Unknown {
        /// Where the block came from.
        from: Speaker,
        /// The block's `type`.
        kind: String,
    },
    /// A compaction block inside the messages: `[Summary of earlier conversation]: ...`.
    Summary {
        /// The summary text.
        text: String,
    },
}

/// The items of the transcript of `messages`, in order: what [`crate::render_transcript`]
/// writes and [`crate::parse_transcript`] reads back.
///
/// Each content block gives one item, in message and block order, except a tool result, which
/// gives its own item followed by one item per non-text block of its content. A tool result is
/// named after the latest tool call with its id that comes before it in `messages`.
pub fn transcript_items(messages: &[Message]) -> Vec<TranscriptItem> {
    let mut items = Vec::new();
    for_each_item(messages, |item| items.push(item));
    items
}

/// Calls `f` with each item of [`transcript_items`]`(messages)`, in order, one at a time: the
/// items of a long prefix are never all held at once.
pub fn for_each_item(messages: &[Message], mut f: impl FnMut(TranscriptItem)) {
    walk(messages, |item| f(item.to_owned_item()));
}

/// A borrowed [`TranscriptItem`], as the walk produces it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ItemRef<'a> {
    Text {
        role: Role,
        text: &'a str,
    },
    Thinking {
        role: Role,
        text: &'a str,
    },
    ToolCall {
        role: Role,
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    ToolResult {
        id: &'a str,
        name: Option<&'a str>,
        is_error: bool,
        content: &'a ToolResultContent,
    },
    Image {
        from: Speaker,
        media_type: Option<&'a str>,
    },
    Unknown {
        from: Speaker,
        kind: &'a str,
    },
    Summary {
        text: &'a str,
    },
}

impl ItemRef<'_> {
    fn to_owned_item(self) -> TranscriptItem {
        match self {
            ItemRef::Text { role, text } => TranscriptItem::Text {
                role,
                text: text.to_owned(),
            },
            ItemRef::Thinking { role, text } => TranscriptItem::Thinking {
                role,
                text: text.to_owned(),
            },
            ItemRef::ToolCall {
                role,
                id,
                name,
                input,
            } => TranscriptItem::ToolCall {
                role,
                id: id.to_owned(),
                name: name.to_owned(),
                input: input.clone(),
            },
            ItemRef::ToolResult {
                id,
                name,
                is_error,
                content,
            } => TranscriptItem::ToolResult {
                id: id.to_owned(),
                name: name.map(str::to_owned),
                is_error,
                text: content.text(),
            },
            ItemRef::Image { from, media_type } => TranscriptItem::Image {
                from,
                media_type: media_type.map(str::to_owned),
            },
            ItemRef::Unknown { from, kind } => TranscriptItem::Unknown {
                from,
                kind: kind.to_owned(),
            },
            ItemRef::Summary { text } => TranscriptItem::Summary {
                text: text.to_owned(),
            },
        }
    }
}

/// The media type to show for an image: the source's, when it names a non-empty one.
fn media_type(image: &ImageBlock) -> Option<&str> {
    image.media_type().filter(|m| !m.is_empty())
}

/// Calls `f` with every item of `messages`, in order (see [`transcript_items`]).
pub(crate) fn walk<'a>(messages: &'a [Message], mut f: impl FnMut(ItemRef<'a>)) {
    walk_indexed(messages, |_, _, item| f(item));
}

/// Like [`walk`], also passing the index of the message and of the content block each item
/// comes from (a tool result's inner images and unknown blocks carry the result's indices).
pub(crate) fn walk_indexed<'a>(
    messages: &'a [Message],
    mut f: impl FnMut(usize, usize, ItemRef<'a>),
) {
    // Tool name by call id, for the calls seen so far; a later call with the same id wins.
    let mut names: CallIndex<'a, &'a str> = CallIndex::default();
    for (m, message) in messages.iter().enumerate() {
        let role = message.role;
        for (b, block) in message.content.iter().enumerate() {
            let mut f = |item| f(m, b, item);
            match block {
                ContentBlock::Text(t) => f(ItemRef::Text {
                    role,
                    text: &t.text,
                }),
                ContentBlock::Thinking(t) => f(ItemRef::Thinking {
                    role,
                    text: &t.thinking,
                }),
                ContentBlock::ToolUse(u) => {
                    names.push(&u.id, &u.name);
                    f(ItemRef::ToolCall {
                        role,
                        id: &u.id,
                        name: &u.name,
                        input: &u.input,
                    });
                }
                ContentBlock::ToolResult(r) => {
                    f(ItemRef::ToolResult {
                        id: &r.tool_use_id,
                        name: names.latest(&r.tool_use_id),
                        is_error: r.failed(),
                        content: &r.content,
                    });
                    if let ToolResultContent::Blocks(blocks) = &r.content {
                        for inner in blocks {
                            match inner {
                                ContentBlock::Text(_) => {}
                                ContentBlock::Image(i) => f(ItemRef::Image {
                                    from: Speaker::Tool,
                                    media_type: media_type(i),
                                }),
                                other => f(ItemRef::Unknown {
                                    from: Speaker::Tool,
                                    kind: other.type_name(),
                                }),
                            }
                        }
                    }
                }
                ContentBlock::Image(i) => f(ItemRef::Image {
                    from: role.into(),
                    media_type: media_type(i),
                }),
                ContentBlock::Compaction(c) => f(ItemRef::Summary { text: &c.summary }),
                ContentBlock::Other(o) => f(ItemRef::Unknown {
                    from: role.into(),
                    kind: &o.kind,
                }),
            }
        }
    }
}
