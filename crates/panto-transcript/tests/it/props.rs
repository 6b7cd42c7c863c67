//! Property tests: parsing inverts rendering for any messages, and no text, name, id, type or
//! argument can forge a marker line or an envelope tag.

use panto_model::arbitrary;
use panto_model::{
    ContentBlock, Extra, ImageBlock, Message, OtherBlock, Role, ThinkingBlock, ToolResultBlock,
    ToolResultContent,
};
use panto_transcript::{
    Ledger, ParsedRequest, TranscriptItem, continued, elision_marker, for_each_item, item_marker,
    parse_request, parse_transcript, render_request, render_request_text, render_request_turns,
    render_transcript, render_transcript_elided, render_transcript_into, render_turns,
    render_turns_with, request_len, transcript_items, turn_ends_with,
};
use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Pieces of the format, to be glued into adversarial strings.
const FRAGMENTS: &[&str] = &[
    "[",
    "]",
    "]:",
    ": ",
    " ",
    "(",
    ")",
    "\"",
    "\\",
    "\\\\",
    "User",
    "user",
    "USER",
    "Assistant",
    "assistant thinking",
    "Tool",
    "tool result",
    " error",
    " call",
    " image",
    " unknown block",
    "Summary of earlier conversation",
    "System",
    "[User]: ",
    "[Assistant]:",
    "[Tool result x (t)]: ",
    "<",
    "/",
    ">",
    "transcript",
    "TRANSCRIPT",
    "previous-summary",
    "Previous-Summary",
    "</transcript>",
    "<transcript>",
    "</previous-summary>",
    "<previous-summary>",
    "<\\/",
    "\n",
    "\n\n",
    "\r",
    "\r\n",
    "\u{0B}",
    "\u{0C}",
    "\u{85}",
    "\u{2028}",
    "\u{2029}",
    "\t",
    "é",
    "—",
    "\u{2027}",
    "\u{84}",
    "\u{FEFF}",
    "🦀",
    "{",
    "}",
    "null",
];

prop_compose! {
    /// A string glued from format fragments.
    fn fragments()(parts in vec(prop::sample::select(FRAGMENTS), 0..24)) -> String {
        parts.concat()
    }
}

prop_compose! {
    /// A very long line with fragments around it.
    fn long_line()(head in fragments(), n in 1_000usize..20_000, tail in fragments()) -> String {
        format!("{head}{}{tail}", "x".repeat(n))
    }
}

/// Text that tries to break the format.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => arbitrary::text(),
        4 => fragments(),
        1 => long_line(),
    ]
}

/// A tool name or call id: usually a plain token, sometimes anything.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => "[a-zA-Z0-9_.:-]{1,12}",
        1 => text(),
    ]
}

/// Tool arguments whose keys and strings are adversarial.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            vec((text(), inner), 0..4).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn image() -> impl Strategy<Value = ContentBlock> {
    let source = prop_oneof![
        text().prop_map(|m| json!({"type": "base64", "media_type": m, "data": "AAAA"})),
        Just(json!({"type": "url", "url": "https://example.com/x.png"})),
        Just(json!({"type": "base64", "media_type": 7})),
    ];
    source.prop_map(|source| ContentBlock::Image(ImageBlock::new(source)))
}

fn other() -> impl Strategy<Value = ContentBlock> {
    text().prop_map(|kind| ContentBlock::Other(OtherBlock::new(kind, Extra::new())))
}

/// A block that may appear inside a tool result.
fn result_part() -> impl Strategy<Value = ContentBlock> {
    prop_oneof![
        4 => text().prop_map(ContentBlock::text),
        1 => image(),
        1 => other(),
        1 => text().prop_map(|t| ContentBlock::Thinking(ThinkingBlock::new(t, None))),
    ]
}

/// Any content block, of every kind, with adversarial strings everywhere.
fn block() -> impl Strategy<Value = ContentBlock> {
    let result_content = prop_oneof![
        text().prop_map(ToolResultContent::Text),
        vec(result_part(), 0..4).prop_map(ToolResultContent::Blocks),
    ];
    prop_oneof![
        4 => text().prop_map(ContentBlock::text),
        1 => (text(), prop::option::of("[A-Za-z0-9+/]{4,12}")).prop_map(|(t, signature)| {
            ContentBlock::Thinking(ThinkingBlock::new(t, signature))
        }),
        2 => (token(), token(), json_value())
            .prop_map(|(id, name, input)| ContentBlock::tool_use(id, name, input)),
        2 => (token(), result_content, prop::option::of(any::<bool>())).prop_map(
            |(tool_use_id, content, is_error)| {
                ContentBlock::ToolResult(ToolResultBlock::new(tool_use_id, content, is_error))
            }
        ),
        1 => image(),
        1 => other(),
        1 => text().prop_map(|s| Message::compaction(s).content.remove(0)),
    ]
}

prop_compose! {
    /// Messages of either role holding any blocks, protocol-valid or not.
    fn messages()(raw in vec((any::<bool>(), vec(block(), 0..5)), 0..8)) -> Vec<Message> {
        raw.into_iter()
            .map(|(user, content)| {
                Message::new(if user { Role::User } else { Role::Assistant }, content)
            })
            .collect()
    }
}

/// Whether `c` ends a line for a reader: the seven Unicode line terminators.
fn is_line_terminator(c: char) -> bool {
    matches!(
        c,
        '\n' | '\u{0B}' | '\u{0C}' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

/// How many line starts (after any line terminator) open with `[` and a reserved word, checked
/// without the crate's parser.
fn marker_lines(text: &str) -> usize {
    let mut starts = vec![0];
    starts.extend(
        text.char_indices()
            .filter(|&(_, c)| is_line_terminator(c))
            .map(|(i, c)| i + c.len_utf8()),
    );
    starts
        .into_iter()
        .filter(|&i| {
            let rest = &text.as_bytes()[i..];
            rest.first() == Some(&b'[')
                && ["user", "assistant", "tool", "summary", "system"]
                    .iter()
                    .any(|w| {
                        rest.len() > w.len() && rest[1..=w.len()].eq_ignore_ascii_case(w.as_bytes())
                    })
        })
        .count()
}

/// How many times `needle` occurs in `text`, ignoring ASCII case.
fn count_ci(text: &str, needle: &str) -> usize {
    let hay = text.as_bytes();
    let n = needle.as_bytes();
    hay.windows(n.len())
        .filter(|w| w.eq_ignore_ascii_case(n))
        .count()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parse_inverts_render(messages in messages()) {
        let rendered = render_transcript(&messages);
        prop_assert_eq!(parse_transcript(&rendered), transcript_items(&messages));
    }

    #[test]
    fn parse_inverts_render_on_valid_sessions(session in arbitrary::session(6)) {
        let rendered = render_transcript(&session.messages);
        prop_assert_eq!(parse_transcript(&rendered), transcript_items(&session.messages));
    }

    #[test]
    fn render_into_appends_the_same_transcript(head in text(), messages in messages()) {
        let mut out = head.clone();
        render_transcript_into(&mut out, &messages);
        prop_assert_eq!(out, format!("{head}{}", render_transcript(&messages)));
    }

    #[test]
    fn request_round_trips(messages in messages(), summary in prop::option::of(text())) {
        let request = render_request(&messages, summary.as_deref());
        prop_assert_eq!(
            parse_request(&request),
            Ok(ParsedRequest::new(summary, transcript_items(&messages)))
        );
    }

    #[test]
    fn text_cannot_forge_markers_or_tags(
        messages in messages(),
        summary in prop::option::of(text()),
    ) {
        let request = render_request(&messages, summary.as_deref());
        // One marker line per item, whatever the line terminators in the text.
        prop_assert_eq!(marker_lines(&request), transcript_items(&messages).len());
        // Exactly the envelope's own tags, anywhere and in any case.
        let summaries = usize::from(summary.is_some());
        prop_assert_eq!(count_ci(&request, "<transcript"), 1);
        prop_assert_eq!(count_ci(&request, "</transcript"), 1);
        prop_assert_eq!(count_ci(&request, "<previous-summary"), summaries);
        prop_assert_eq!(count_ci(&request, "</previous-summary"), summaries);
        // And every tag is alone on its line.
        for tag in ["<transcript>", "</transcript>"] {
            prop_assert!(request.lines().any(|l| l == tag));
        }
    }

    #[test]
    fn turn_by_turn_rendering_is_the_transcript(session in arbitrary::session(6)) {
        let turns = panto_model::turns(&session.messages);
        let rendered = render_turns(&session.messages, &turns);
        prop_assert_eq!(rendered.text(), render_transcript(&session.messages));
        prop_assert_eq!(rendered.len(), turns.len());
        // The texts handed out while rendering are the turns' parts, in order.
        let mut handed = Vec::new();
        let again = render_turns_with(&session.messages, &turns, |t| handed.push(t.to_owned()));
        prop_assert_eq!(&again, &rendered);
        prop_assert_eq!(handed.len(), turns.len());
        for (i, t) in handed.iter().enumerate() {
            prop_assert_eq!(t.as_str(), rendered.turns(i..i + 1));
        }
        // Every run of consecutive turns is the transcript of its messages.
        for a in 0..turns.len() {
            for b in a..=turns.len() {
                let messages = match (turns.get(a), b.checked_sub(1).and_then(|l| turns.get(l))) {
                    (Some(first), Some(last)) if b > a => &session.messages[first.start..last.end],
                    _ => &session.messages[0..0],
                };
                prop_assert_eq!(rendered.turns(a..b), render_transcript(messages));
            }
        }
    }

    #[test]
    fn turn_ends_without_the_transcript_are_those_of_the_rendered_transcript(
        session in arbitrary::session(6),
    ) {
        let turns = panto_model::turns(&session.messages);
        let rendered = render_turns(&session.messages, &turns);
        let mut handed = Vec::new();
        let ends = turn_ends_with(&session.messages, &turns, |t| handed.push(t.to_owned()));
        prop_assert_eq!(ends.as_slice(), rendered.ends());
        prop_assert_eq!(handed.len(), turns.len());
        for (i, t) in handed.iter().enumerate() {
            prop_assert_eq!(t.as_str(), rendered.turns(i..i + 1));
            // Every item ends with a line break, so a whole turn never ends inside a line.
            prop_assert!(t.is_empty() || t.ends_with('\n'));
        }
    }

    #[test]
    fn a_requests_measured_length_is_its_rendered_length(
        session in arbitrary::session(6),
        summary in prop::option::of(text()),
    ) {
        let request = render_request(&session.messages, summary.as_deref());
        prop_assert_eq!(request_len(&session.messages, summary.as_deref()), request.len());
    }

    #[test]
    fn a_request_built_in_the_transcripts_buffer_is_the_request_around_its_slice(
        session in arbitrary::session(6),
        summary in prop::option::of(text()),
        from in 0usize..8,
    ) {
        let turns = panto_model::turns(&session.messages);
        let rendered = render_turns(&session.messages, &turns);
        let from = from.min(turns.len());
        let expect = render_request_text(rendered.turns(from..turns.len()), summary.as_deref());
        prop_assert_eq!(rendered.into_request(from, summary.as_deref()), expect);
    }

    #[test]
    fn a_transcript_rendered_after_a_request_head_is_the_transcript_and_gives_the_request(
        session in arbitrary::session(6),
        rendered_for in prop::option::of(text()),
        other in prop::option::of(text()),
        same in any::<bool>(),
        from in 0usize..8,
    ) {
        let turns = panto_model::turns(&session.messages);
        let plain = render_turns(&session.messages, &turns);
        let mut handed = Vec::new();
        let headed = render_request_turns(
            &session.messages,
            &turns,
            rendered_for.as_deref(),
            |t| handed.push(t.to_owned()),
        );
        prop_assert_eq!(headed.text(), plain.text());
        // Equal as transcripts: what precedes the text in the buffer is not part of it.
        prop_assert_eq!(&headed, &plain);
        prop_assert_eq!(headed.len(), turns.len());
        prop_assert_eq!(handed.len(), turns.len());
        for (a, turn) in handed.iter().enumerate() {
            prop_assert_eq!(turn.as_str(), plain.turns(a..a + 1));
            for b in a..=turns.len() {
                prop_assert_eq!(headed.turns(a..b), plain.turns(a..b));
            }
        }
        // The request of any turn on, for the summary it was rendered for or another.
        let summary = if same { rendered_for.clone() } else { other };
        let from = from.min(turns.len());
        let expect = render_request_text(plain.turns(from..turns.len()), summary.as_deref());
        prop_assert_eq!(headed.into_request(from, summary.as_deref()), expect);
    }

    #[test]
    fn a_request_around_a_transcript_is_allocated_at_its_exact_size(
        messages in messages(),
        summary in prop::option::of(text()),
    ) {
        let request = render_request_text(&render_transcript(&messages), summary.as_deref());
        prop_assert_eq!(request.capacity(), request.len());
    }

    #[test]
    fn items_one_at_a_time_are_the_transcript_items(messages in messages()) {
        let mut items = Vec::new();
        for_each_item(&messages, |item| items.push(item.to_item()));
        prop_assert_eq!(&items, &transcript_items(&messages));
        prop_assert_eq!(Ledger::from_messages(&messages), Ledger::from_items(&items));
    }

    #[test]
    fn request_around_a_rendered_transcript_is_the_request(
        messages in messages(),
        summary in prop::option::of(text()),
    ) {
        prop_assert_eq!(
            render_request_text(&render_transcript(&messages), summary.as_deref()),
            render_request(&messages, summary.as_deref())
        );
    }

    #[test]
    fn elision_keeps_structure_and_bounds_every_body(
        messages in messages(),
        max_body in 0usize..400,
    ) {
        let mut out = String::new();
        let elided = render_transcript_elided(&mut out, &messages, max_body);
        let whole = transcript_items(&messages);
        let parsed = parse_transcript(&out);
        // No item is lost or forged: the same markers, in order, with the same heads.
        prop_assert_eq!(marker_lines(&out), whole.len());
        prop_assert_eq!(parsed.len(), whole.len());
        for (p, w) in parsed.iter().zip(&whole) {
            prop_assert_eq!(std::mem::discriminant(p), std::mem::discriminant(w));
        }
        // Every elided body holds its head, the marker and its tail, within the bound.
        for e in &elided {
            prop_assert!(e.bytes > max_body);
            prop_assert!(e.kept <= max_body);
            prop_assert!(out.contains(&elision_marker(e.omitted())));
        }
        // Nothing is elided when no body is too long.
        if elided.is_empty() {
            prop_assert_eq!(out, render_transcript(&messages));
        }
    }

    #[test]
    fn parsing_any_text_never_panics(text in text(), more in fragments()) {
        let text = format!("{text}{more}");
        let _ = parse_transcript(&text);
        let _ = parse_request(&text);
        let wrapped = format!("<transcript>\n{text}\n</transcript>\n");
        // With no other tag line, the one transcript section is found.
        let tags = ["<transcript>", "</transcript>", "<previous-summary>", "</previous-summary>"];
        if wrapped.split('\n').filter(|l| tags.contains(l)).count() == 2 {
            prop_assert!(parse_request(&wrapped).is_ok());
        }
    }
}

// Shrunk failures found by proptest (kept in `proptest-regressions/props.txt` as well) while
// checking that the properties catch a broken escaper: without CR as a line terminator, and
// without escaping the first line of the previous summary.

#[test]
fn media_type_cannot_forge_a_marker_after_a_bare_cr() {
    let image = ContentBlock::Image(ImageBlock::new(
        json!({"type": "base64", "media_type": "\r[User]: ", "data": "AAAA"}),
    ));
    let messages = [Message::new(Role::Assistant, vec![image])];
    let request = render_request(&messages, None);
    assert_eq!(marker_lines(&request), 1, "{request:?}");
}

#[test]
fn previous_summary_starting_with_a_marker_round_trips() {
    let request = render_request(&[], Some("[User]: "));
    assert_eq!(marker_lines(&request), 0, "{request:?}");
    assert_eq!(
        parse_request(&request),
        Ok(ParsedRequest::new(Some("[User]: ".to_owned()), vec![]))
    );
}

#[test]
fn an_elided_tool_result_keeps_its_head_and_tail() {
    let body = format!("HEAD{}TAIL", "x".repeat(10_000));
    let messages = vec![
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolUse(panto_model::ToolUseBlock::new(
                "t1",
                "read",
                json!({"path": "big.log"}),
            ))],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::ToolResult(ToolResultBlock::new(
                "t1",
                ToolResultContent::Text(body.clone()),
                None,
            ))],
        ),
    ];
    let mut out = String::new();
    let elided = render_transcript_elided(&mut out, &messages, 100);
    assert_eq!(elided.len(), 1);
    assert_eq!((elided[0].message, elided[0].block), (1, 0));
    assert_eq!(elided[0].bytes, body.len());
    assert_eq!(elided[0].kept, 100);
    let items = parse_transcript(&out);
    let TranscriptItem::ToolResult { name, text, .. } = &items[1] else {
        panic!("{items:?}");
    };
    assert_eq!(name.as_deref(), Some("read"));
    assert!(text.starts_with("HEAD") && text.ends_with("TAIL"), "{text}");
    assert!(text.contains(&elision_marker(body.len() - 100)), "{text}");
}

/// The request of a transcript rendered after its own envelope's head is built where the
/// transcript lies: the text does not move, and only the close is written after it.
#[test]
fn a_request_rendered_for_its_summary_is_built_without_moving_the_transcript() {
    let messages = vec![
        Message::user_text("Fix the parser"),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::text("Done: the parser is fixed.")],
        ),
        Message::user_text("Thanks"),
    ];
    let turns = panto_model::turns(&messages);
    for summary in [None, Some("We were fixing the parser.")] {
        let headed = render_request_turns(&messages, &turns, summary, |_| {});
        let at = headed.text().as_ptr();
        let head = render_request_text("", summary);
        let head = &head[..head.find("<transcript>\n").unwrap() + "<transcript>\n".len()];
        let request = headed.into_request(0, summary);
        assert_eq!(request.as_ptr().wrapping_add(head.len()), at);
        assert_eq!(
            request,
            render_request_text(&render_transcript(&messages), summary)
        );
    }
}

proptest! {
    /// A transcript cut anywhere between lines or words: the parts are the text, and a part
    /// that starts inside an item, led by `continued` of that item's marker, starts with a
    /// marker and has exactly one marker line more than its own; no text becomes a marker
    /// and the request reads back.
    #[test]
    fn a_transcript_cut_between_lines_or_words_and_led_keeps_its_markers(
        messages in messages(),
        every in 1usize..6,
    ) {
        let whole = render_transcript(&messages);
        // The whole transcript as one turn.
        let all = 0..messages.len();
        let rendered = render_turns(&messages, std::slice::from_ref(&all));
        // Cut after every `every`-th line end or space.
        let mut ends = Vec::new();
        let mut opened = Vec::new();
        let mut marker: Option<String> = None;
        let mut seen = 0;
        // Where the marker's head on the current line ends (a caller never cuts inside it).
        let mut head_end = 0;
        for (pos, c) in whole.char_indices() {
            if pos == 0 || whole.as_bytes()[pos - 1] == b'\n' {
                let m = item_marker(&whole[pos..]);
                if let Some(m) = m {
                    marker = Some(m.to_owned());
                }
                head_end = pos + m.map_or(0, str::len);
            }
            let end = pos + c.len_utf8();
            if (c == '\n' || (c == ' ' && pos >= head_end)) && end < whole.len() {
                seen += 1;
                if seen % every == 0 {
                    ends.push(end);
                    opened.push((marker.clone(), c == '\n'));
                }
            }
        }
        ends.push(whole.len());
        let cut = rendered.with_ends(ends.clone());
        prop_assert_eq!(cut.ends(), &ends[..]);
        let parts: Vec<&str> = (0..ends.len()).map(|i| cut.turns(i..i + 1)).collect();
        prop_assert_eq!(parts.concat(), whole.clone());
        for (i, part) in parts.iter().enumerate().skip(1) {
            let (marker, line_start) = &opened[i - 1];
            let inside = !*line_start || item_marker(part).is_none();
            let led = match marker {
                Some(m) if inside => format!("{}{part}", continued(m, *line_start)),
                _ => (*part).to_owned(),
            };
            prop_assert!(item_marker(&led).is_some(), "{:?}", led);
            let own = if *line_start { marker_lines(part) } else { marker_lines(&format!("x{part}")) };
            prop_assert_eq!(marker_lines(&led), own + usize::from(inside));
            // A part that ends inside a line is closed by a line break before the envelope's
            // tag.
            let tail = if led.ends_with('\n') { "" } else { "\n" };
            let request = render_request_text(&format!("{led}{tail}"), None);
            prop_assert!(parse_request(&request).is_ok(), "{:?} {:?}", request, parse_request(&request));
            prop_assert_eq!(count_ci(&request, "<transcript"), 1);
        }
    }
}
