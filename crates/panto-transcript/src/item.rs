//! Transcript items: what a transcript holds, one item per marker, and the walk from messages
//! to items that both the renderer and [`transcript_items`] use.

use std::borrow::Cow;

use panto_model::{CallIndex, ContentBlock, ImageBlock, Message, RawJson, Role, ToolResultContent};
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
    walk(messages, |item| items.push(item.view().to_item()));
    items
}

/// Calls `f` with each item of [`transcript_items`]`(messages)`, in order, one at a time and
/// borrowed from the messages: the items of a long prefix are never copied nor all held at once.
pub fn for_each_item<'a>(messages: &'a [Message], mut f: impl FnMut(ItemView<'a>)) {
    walk(messages, |item| f(item.view()));
}

/// A [`TranscriptItem`] borrowed from what it comes from (messages, by [`for_each_item`], or an
/// item, by [`TranscriptItem::view`]): the same variants and fields, without copies of the text.
/// Only the text of a tool result whose content is a list of blocks is joined into a new string.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ItemView<'a> {
    /// [`TranscriptItem::Text`].
    Text {
        /// The author.
        role: Role,
        /// The text.
        text: &'a str,
    },
    /// [`TranscriptItem::Thinking`].
    Thinking {
        /// The author.
        role: Role,
        /// The reasoning text.
        text: &'a str,
    },
    /// [`TranscriptItem::ToolCall`].
    ToolCall {
        /// The author.
        role: Role,
        /// The call id.
        id: &'a str,
        /// The tool name.
        name: &'a str,
        /// The arguments: the message's JSON text, or a parsed item's value.
        input: ToolInput<'a>,
    },
    /// [`TranscriptItem::ToolResult`].
    ToolResult {
        /// The call id it answers.
        id: &'a str,
        /// The tool's name, when the call is known.
        name: Option<&'a str>,
        /// Whether the tool reported an error.
        is_error: bool,
        /// The text of the content.
        text: Cow<'a, str>,
    },
    /// [`TranscriptItem::Image`].
    Image {
        /// Where the image came from.
        from: Speaker,
        /// Its media type, when known.
        media_type: Option<&'a str>,
    },
    /// [`TranscriptItem::Unknown`].
    Unknown {
        /// Where the block came from.
        from: Speaker,
        /// The block's `type`.
        kind: &'a str,
    },
    /// [`TranscriptItem::Summary`].
    Summary {
        /// The summary text.
        text: &'a str,
    },
}

impl ItemView<'_> {
    /// The owned item.
    pub fn to_item(&self) -> TranscriptItem {
        match self {
            ItemView::Text { role, text } => TranscriptItem::Text {
                role: *role,
                text: (*text).to_owned(),
            },
            ItemView::Thinking { role, text } => TranscriptItem::Thinking {
                role: *role,
                text: (*text).to_owned(),
            },
            ItemView::ToolCall {
                role,
                id,
                name,
                input,
            } => TranscriptItem::ToolCall {
                role: *role,
                id: (*id).to_owned(),
                name: (*name).to_owned(),
                input: input.value().into_owned(),
            },
            ItemView::ToolResult {
                id,
                name,
                is_error,
                text,
            } => TranscriptItem::ToolResult {
                id: (*id).to_owned(),
                name: name.map(str::to_owned),
                is_error: *is_error,
                text: text.clone().into_owned(),
            },
            ItemView::Image { from, media_type } => TranscriptItem::Image {
                from: *from,
                media_type: media_type.map(str::to_owned),
            },
            ItemView::Unknown { from, kind } => TranscriptItem::Unknown {
                from: *from,
                kind: (*kind).to_owned(),
            },
            ItemView::Summary { text } => TranscriptItem::Summary {
                text: (*text).to_owned(),
            },
        }
    }
}

impl TranscriptItem {
    /// This item, borrowed.
    pub fn view(&self) -> ItemView<'_> {
        match self {
            TranscriptItem::Text { role, text } => ItemView::Text { role: *role, text },
            TranscriptItem::Thinking { role, text } => ItemView::Thinking { role: *role, text },
            TranscriptItem::ToolCall {
                role,
                id,
                name,
                input,
            } => ItemView::ToolCall {
                role: *role,
                id,
                name,
                input: ToolInput::Value(input),
            },
            TranscriptItem::ToolResult {
                id,
                name,
                is_error,
                text,
            } => ItemView::ToolResult {
                id,
                name: name.as_deref(),
                is_error: *is_error,
                text: Cow::Borrowed(text),
            },
            TranscriptItem::Image { from, media_type } => ItemView::Image {
                from: *from,
                media_type: media_type.as_deref(),
            },
            TranscriptItem::Unknown { from, kind } => ItemView::Unknown { from: *from, kind },
            TranscriptItem::Summary { text } => ItemView::Summary { text },
        }
    }
}

/// The arguments of a tool call, borrowed: the JSON text of a message's call ([`RawJson`],
/// never parsed to be viewed), or the value of an item.
#[derive(Clone, Copy, Debug)]
pub enum ToolInput<'a> {
    /// A message's call: its exact JSON text.
    Text(&'a RawJson),
    /// An item's value.
    Value(&'a Value),
}

impl<'a> ToolInput<'a> {
    /// The arguments as a value: borrowed when there is one already, else parsed from the text
    /// for this use only ([`RawJson::to_value`]), so that reading it keeps nothing beside the text.
    pub fn value(&self) -> Cow<'a, Value> {
        match *self {
            ToolInput::Text(raw) => raw.to_value(),
            ToolInput::Value(value) => Cow::Borrowed(value),
        }
    }
}

/// Two inputs are equal when their values are: a text and the value it reads as are equal.
impl PartialEq for ToolInput<'_> {
    fn eq(&self, other: &ToolInput<'_>) -> bool {
        match (self, other) {
            (ToolInput::Text(a), ToolInput::Text(b)) => a == b || a.to_value() == b.to_value(),
            _ => self.value() == other.value(),
        }
    }
}

/// An item as the walk gives it: its view, except that a tool result's content is not joined
/// into one text, so that the renderer writes its blocks as they are.
#[derive(Clone, Debug)]
pub(crate) enum ItemRef<'a> {
    /// Any item but a tool result. A tool call's input is the message's JSON text
    /// ([`ToolInput::Text`]).
    View(ItemView<'a>),
    /// A tool result, with its content as the message holds it.
    ToolResult {
        id: &'a str,
        name: Option<&'a str>,
        is_error: bool,
        content: &'a ToolResultContent,
    },
}

impl<'a> ItemRef<'a> {
    fn view(self) -> ItemView<'a> {
        match self {
            ItemRef::View(view) => view,
            ItemRef::ToolResult {
                id,
                name,
                is_error,
                content,
            } => ItemView::ToolResult {
                id,
                name,
                is_error,
                text: match content {
                    ToolResultContent::Text(text) => Cow::Borrowed(text),
                    ToolResultContent::Blocks(_) => Cow::Owned(content.text()),
                },
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
                ContentBlock::Text(t) => f(ItemRef::View(ItemView::Text {
                    role,
                    text: &t.text,
                })),
                ContentBlock::Thinking(t) => f(ItemRef::View(ItemView::Thinking {
                    role,
                    text: &t.thinking,
                })),
                ContentBlock::ToolUse(u) => {
                    names.push(&u.id, &u.name);
                    f(ItemRef::View(ItemView::ToolCall {
                        role,
                        id: &u.id,
                        name: &u.name,
                        input: ToolInput::Text(&u.input),
                    }));
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
                                ContentBlock::Image(i) => f(ItemRef::View(ItemView::Image {
                                    from: Speaker::Tool,
                                    media_type: media_type(i),
                                })),
                                other => f(ItemRef::View(ItemView::Unknown {
                                    from: Speaker::Tool,
                                    kind: other.type_name(),
                                })),
                            }
                        }
                    }
                }
                ContentBlock::Image(i) => f(ItemRef::View(ItemView::Image {
                    from: role.into(),
                    media_type: media_type(i),
                })),
                ContentBlock::Compaction(c) => {
                    f(ItemRef::View(ItemView::Summary { text: &c.summary }));
                }
                // A provider's native compaction block with a readable summary (Anthropic's
                // `content`) is a summary like panto's; an opaque one stays an unknown block.
                ContentBlock::Other(o) => match o.native_summary() {
                    Some(text) => f(ItemRef::View(ItemView::Summary { text })),
                    None => f(ItemRef::View(ItemView::Unknown {
                        from: role.into(),
                        kind: &o.kind,
                    })),
                },
            }
        }
    }
}
