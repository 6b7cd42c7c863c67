//! Unit tests: the heuristic's costs, and the usage sizer's rules on small literal sessions.

use panto_model::{
    ContentBlock, Entry, Extra, ImageBlock, KEPT_BY, Message, OtherBlock, Role, Usage,
    read_entries, replay,
};
use proptest::arbitrary::any;
use serde_json::json;

use crate::*;

/// The total of the ruler's estimate of a request of `system` and `messages`, without tools.
fn estimate_request(system: &str, messages: &[Message]) -> u64 {
    estimate(system, "", messages).total()
}

/// The effective context of a literal JSONL session.
fn context(text: &str) -> Vec<Message> {
    let entries: Vec<Entry> = read_entries(text.as_bytes()).expect("valid session");
    replay(entries).messages
}

fn source_name(source: Source) -> String {
    match source {
        Source::Output => "output".to_owned(),
        Source::Span => "span".to_owned(),
        Source::Share => "share".to_owned(),
        Source::Heuristic(reason) => format!("heuristic {reason:?}"),
    }
}

/// Sizes a literal session and compares one line per message: role, tokens, source. Sizes that
/// come from the heuristic are checked against it and shown as `h`.
fn check(session: &str, expect: &str) {
    let messages = context(session);
    let measured = UsageSizer::default().measure(&messages);
    assert_eq!(measured.len(), messages.len());
    let mut lines = Vec::new();
    for (m, s) in messages.iter().zip(&measured) {
        let tokens = if let Source::Heuristic(_) = s.source {
            assert_eq!(s.tokens, Heuristic.message(m), "heuristic size of {m:?}");
            "h".to_owned()
        } else {
            s.tokens.to_string()
        };
        lines.push(format!(
            "{} {} {}",
            m.role.as_str(),
            tokens,
            source_name(s.source)
        ));
    }
    let sizes = UsageSizer::default().message_sizes(&messages);
    assert_eq!(
        sizes,
        measured.iter().map(|s| s.tokens).collect::<Vec<_>>(),
        "message_sizes agrees with measure"
    );
    let expect: Vec<&str> = expect
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines, expect);
}

const PROMPT: &str =
    r#"{"type":"message","role":"user","content":[{"type":"text","text":"Fix the failing test"}]}"#;
const RESULT: &str = r#"{"type":"message","role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"fn main() {}\nfn helper() -> u32 { 42 }"}]}"#;

/// An assistant line with a tool call, usage and model.
fn assistant(id: &str, input: u64, output: u64, model: &str) -> String {
    format!(
        r#"{{"type":"message","role":"assistant","model":"{model}","usage":{{"input_tokens":{input},"output_tokens":{output}}},"content":[{{"type":"text","text":"Reading it."}},{{"type":"tool_use","id":"{id}","name":"read","input":{{"path":"src/lib.rs"}}}}]}}"#
    )
}

fn session(lines: &[&str]) -> String {
    lines.join("\n")
}

#[test]
fn one_message_between_two_responses_gets_the_exact_difference() {
    // 5120 + 40 + 30 = 5190: the tool result is 30 tokens.
    check(
        &session(&[
            PROMPT,
            &assistant("t1", 5120, 40, "m"),
            RESULT,
            &assistant("t2", 5190, 20, "m"),
        ]),
        "user h heuristic Unbracketed
         assistant 40 output
         user 30 span
         assistant 20 output",
    );
}

#[test]
fn cache_split_counts_towards_the_input_total() {
    let first = r#"{"type":"message","role":"assistant","model":"m","usage":{"input_tokens":3,"output_tokens":40,"cache_read_input_tokens":5000,"cache_creation_input_tokens":117},"content":[{"type":"tool_use","id":"t1","name":"read","input":{"path":"a"}}]}"#;
    let second = r#"{"type":"message","role":"assistant","model":"m","usage":{"input_tokens":2,"output_tokens":9,"cache_read_input_tokens":5160,"cache_creation_input_tokens":28},"content":[{"type":"text","text":"done"}]}"#;
    // (2 + 5160 + 28) - (3 + 5000 + 117) - 40 = 30.
    check(
        &session(&[PROMPT, first, RESULT, second]),
        "user h heuristic Unbracketed
         assistant 40 output
         user 30 span
         assistant 9 output",
    );
}

#[test]
fn several_messages_share_a_span_in_proportion_and_sum_exactly() {
    let long = r#"{"type":"message","role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a much longer tool result, with many more words in it than the other one has, so it gets the larger share"}]}"#;
    let short =
        r#"{"type":"message","role":"user","content":[{"type":"text","text":"and go on"}]}"#;
    let text = session(&[
        PROMPT,
        &assistant("t1", 1000, 40, "m"),
        long,
        short,
        &assistant("t2", 1140, 20, "m"),
    ]);
    let messages = context(&text);
    let measured = UsageSizer::default().measure(&messages);
    assert_eq!(measured[2].source, Source::Share);
    assert_eq!(measured[3].source, Source::Share);
    assert_eq!(measured[2].tokens + measured[3].tokens, 100);
    let (h2, h3) = (
        Heuristic.message(&messages[2]),
        Heuristic.message(&messages[3]),
    );
    assert!(h2 > h3);
    // Cumulative rounding: the first part is floor(100 * h2 / (h2 + h3)).
    assert_eq!(measured[2].tokens, 100 * h2 / (h2 + h3));
}

#[test]
fn missing_usage_falls_back_on_both_sides() {
    let bare = r#"{"type":"message","role":"assistant","content":[{"type":"tool_use","id":"t2","name":"read","input":{"path":"b"}}]}"#;
    let result2 = r#"{"type":"message","role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"ok"}]}"#;
    check(
        &session(&[
            PROMPT,
            &assistant("t1", 1000, 40, "m"),
            RESULT,
            bare,
            result2,
            &assistant("t3", 1400, 20, "m"),
        ]),
        "user h heuristic Unbracketed
         assistant 40 output
         user h heuristic MissingUsage
         assistant h heuristic MissingUsage
         user h heuristic MissingUsage
         assistant 20 output",
    );
}

#[test]
fn input_total_going_down_falls_back() {
    // 1060 - 1000 - 80 < 0: the later request is smaller than the earlier plus its output.
    check(
        &session(&[
            PROMPT,
            &assistant("t1", 1000, 80, "m"),
            RESULT,
            &assistant("t2", 1060, 20, "m"),
        ]),
        "user h heuristic Unbracketed
         assistant 80 output
         user h heuristic Decreasing
         assistant 20 output",
    );
}

#[test]
fn a_span_far_from_the_heuristic_is_implausible() {
    // 9000 tokens for a two-line tool result: the context changed elsewhere.
    check(
        &session(&[
            PROMPT,
            &assistant("t1", 1000, 40, "m"),
            RESULT,
            &assistant("t2", 10_040, 20, "m"),
        ]),
        "user h heuristic Unbracketed
         assistant 40 output
         user h heuristic Implausible
         assistant 20 output",
    );
    // One token for it is implausible too.
    check(
        &session(&[
            PROMPT,
            &assistant("t1", 1000, 40, "m"),
            RESULT,
            &assistant("t2", 1041, 20, "m"),
        ]),
        "user h heuristic Unbracketed
         assistant 40 output
         user h heuristic Implausible
         assistant 20 output",
    );
}

#[test]
fn a_model_change_falls_back() {
    check(
        &session(&[
            PROMPT,
            &assistant("t1", 1000, 40, "model-a"),
            RESULT,
            &assistant("t2", 1070, 20, "model-b"),
        ]),
        "user h heuristic Unbracketed
         assistant 40 output
         user h heuristic ModelChanged
         assistant 20 output",
    );
}

#[test]
fn an_implausible_output_is_replaced_and_the_pair_stays_exact() {
    // A log that recorded `output_tokens: 1` for a long answer (Claude Code does this).
    let long_answer = format!(
        r#"{{"type":"message","role":"assistant","model":"m","usage":{{"input_tokens":1000,"output_tokens":1}},"content":[{{"type":"text","text":"{}"}},{{"type":"tool_use","id":"t1","name":"read","input":{{"path":"a"}}}}]}}"#,
        "word ".repeat(200)
    );
    let text = session(&[
        PROMPT,
        &long_answer,
        RESULT,
        &assistant("t2", 1400, 20, "m"),
    ]);
    let messages = context(&text);
    let h1 = Heuristic.message(&messages[1]);
    check(
        &text,
        &format!(
            "user h heuristic Unbracketed
             assistant h heuristic ImplausibleOutput
             user {} span
             assistant 20 output",
            400 - h1
        ),
    );
}

#[test]
fn a_compaction_headed_context_sizes_the_summary_by_heuristic_and_never_differences_kept_copies() {
    // The kept assistant message was measured before the compaction (input 90,000); the new
    // one after it (input 2,000). Differencing them would give nonsense.
    let kept_prompt = r#"{"type":"message","role":"user","kept_by":"c1","content":[{"type":"text","text":"Fix the failing test"}]}"#;
    let kept_answer = r#"{"type":"message","role":"assistant","kept_by":"c1","model":"m","usage":{"input_tokens":90000,"output_tokens":40},"content":[{"type":"tool_use","id":"t1","name":"read","input":{"path":"src/lib.rs"}}]}"#;
    let kept_result = r#"{"type":"message","role":"user","kept_by":"c1","content":[{"type":"tool_result","tool_use_id":"t1","content":"fn main() {}"}]}"#;
    let compaction = r#"{"type":"compaction","id":"c1","summary":"We were fixing a test in src/lib.rs.","kept_messages":3}"#;
    let prompt =
        r#"{"type":"message","role":"user","content":[{"type":"text","text":"Now run it"}]}"#;
    let text = session(&[
        PROMPT,
        &assistant("t0", 89_000, 50, "m"),
        compaction,
        kept_prompt,
        kept_answer,
        kept_result,
        &assistant("t2", 2000, 30, "m"),
        prompt,
        &assistant("t3", 2040, 20, "m"),
    ]);
    check(
        &text,
        // 2040 - 2000 - 30 = 10 for the new prompt.
        "user h heuristic Compaction
         user h heuristic Unbracketed
         assistant 40 output
         user h heuristic KeptCopy
         assistant 30 output
         user 10 span
         assistant 20 output",
    );
    // The estimate anchors on the newest response, not on the kept copy.
    let messages = context(&text);
    assert_eq!(estimate_request("a long system prompt", &messages), 2060);
}

#[test]
fn the_estimate_with_only_kept_copies_is_heuristic() {
    let kept_answer = r#"{"type":"message","role":"assistant","kept_by":"c1","model":"m","usage":{"input_tokens":90000,"output_tokens":40},"content":[{"type":"text","text":"ok"}]}"#;
    let compaction =
        r#"{"type":"compaction","id":"c1","summary":"Earlier work.","kept_messages":1}"#;
    let messages = context(&session(&[compaction, kept_answer]));
    let system = "You are a careful agent.";
    let expected =
        Heuristic.text(system) + Heuristic.message(&messages[0]) + 40 /* exact output */;
    assert_eq!(estimate_request(system, &messages), expected);
}

/// A compaction another program wrote, announcing its copies (`kept_messages`) or not, and
/// copies without `kept_by` that carry the usage of their originals, measured before it.
fn foreign_compaction(announce: &str) -> String {
    let old = assistant("t1", 180_000, 530, "m");
    let compaction =
        format!(r#"{{"type":"compaction","id":"c1","summary":"we talked"{announce}}}"#);
    session(&[PROMPT, &old, RESULT, &compaction, PROMPT, &old, RESULT])
}

#[test]
fn usage_of_a_foreign_compactions_copies_is_not_trusted() {
    for announce in [r#","kept_messages":3"#, ""] {
        let messages = context(&foreign_compaction(announce));
        assert_eq!(messages.len(), 4, "{announce}");
        // About a hundred tokens, not the 180,530 that the stale copy measured.
        let heuristic: u64 = messages.iter().map(|m| Heuristic.message(m)).sum();
        let estimate = estimate_request("", &messages);
        assert!(estimate <= heuristic + 530, "{announce}: {estimate}");
        assert!(estimate < 1_000, "{announce}: {estimate}");
    }
}

#[test]
fn usage_before_the_latest_compaction_message_never_anchors_the_estimate() {
    // A list with a compaction message after the last response with usage (as a caller may
    // build one): that usage measured the context the compaction replaced.
    let mut messages = context(&session(&[
        PROMPT,
        &assistant("t1", 90_000, 40, "m"),
        RESULT,
    ]));
    messages.push(Message::compaction("summary"));
    messages.push(Message::user_text("next"));
    let estimate = estimate_request("", &messages);
    assert!(estimate < 1_000, "{estimate}");
}

#[test]
fn the_estimate_adds_what_follows_the_last_response() {
    let text = session(&[PROMPT, &assistant("t1", 5120, 40, "m"), RESULT]);
    let messages = context(&text);
    // Input total + output + the tool result, which nothing measured yet.
    assert_eq!(
        estimate_request("ignored: already in the input total", &messages),
        5120 + 40 + Heuristic.message(&messages[2])
    );
}

#[test]
fn the_estimate_without_usage_is_system_plus_heuristic() {
    let messages = vec![
        Message::user_text("hello there"),
        Message::assistant_text("hi"),
    ];
    let system = "Be brief.";
    assert_eq!(
        estimate_request(system, &messages),
        Heuristic.text(system) + Heuristic.message(&messages[0]) + Heuristic.message(&messages[1])
    );
    assert_eq!(estimate_request("", &[]), 0);
}

#[test]
fn the_estimate_ignores_an_implausibly_small_input_total() {
    // An input total of 1 cannot hold a long prompt: fall back to the heuristic.
    let prompt = Message::user_text("a long prompt ".repeat(100));
    let mut answer = Message::assistant_text("ok");
    answer.usage = Some(Usage::new(1, 5));
    let messages = vec![prompt, answer];
    assert_eq!(
        estimate_request("", &messages),
        Heuristic.message(&messages[0]) + 5
    );
}

#[test]
fn turn_sizes_sum_and_clamp() {
    let sizes = [1, 2, 3, 4];
    assert_eq!(turn_sizes(&sizes, &[0..1, 1..3, 3..4]), vec![1, 5, 4]);
    assert_eq!(turn_sizes(&sizes, &[2..9, 7..9]), vec![7, 0]);
}

#[test]
fn text_costs_by_byte_class() {
    let h = Heuristic;
    assert_eq!(h.text(""), 0);
    // Ten letters: 10 * 0.3 = 3 tokens.
    assert_eq!(h.text("abcdefghij"), 3);
    // Ten digits: 10 * 0.8 = 8.
    assert_eq!(h.text("0123456789"), 8);
    // Ten symbols: 10 * 1.1 = 11.
    assert_eq!(h.text("{}[]();:,."), 11);
    // Ten spaces: 10 * 0.2 = 2.
    assert_eq!(h.text("          "), 2);
    // "é" is two bytes: 2 * 0.5 = 1.
    assert_eq!(h.text("é"), 1);
    // Rounded up: one letter is 0.3 token, so 1.
    assert_eq!(h.text("a"), 1);
}

#[test]
fn message_costs_count_every_block_and_the_wire_structure() {
    let h = Heuristic;
    assert_eq!(
        h.message(&Message::user_text("abcdefghij")),
        MESSAGE_OVERHEAD + BLOCK_OVERHEAD + 3
    );
    assert_eq!(
        h.message(&Message::new(Role::User, vec![])),
        MESSAGE_OVERHEAD
    );
    // {"path":"ab"}: braces, two pairs of quotes and a colon are 7 symbols (7.7), plus "path"
    // and "ab" (1.8), plus the name "read" (1.2): 10.7 tokens, 11 rounded up.
    let call = ContentBlock::tool_use("toolu_0123456789", "read", json!({"path": "ab"}));
    assert_eq!(h.block(&call), BLOCK_OVERHEAD + TOOL_CALL_OVERHEAD + 11);
    // Numbers are costed as their digits; arrays by brackets and commas: [1,22] is 3 symbols
    // (3.3) and three digits (2.4).
    let call = ContentBlock::tool_use("x", "", json!([1, 22]));
    assert_eq!(h.block(&call), BLOCK_OVERHEAD + TOOL_CALL_OVERHEAD + 6);
    // A tool result does not pay for its call id.
    let result = ContentBlock::tool_result("toolu_0123456789abcdef", "abcdefghij", false);
    assert_eq!(h.block(&result), BLOCK_OVERHEAD + 3);
    let image = ContentBlock::Image(ImageBlock::new(
        json!({"type": "base64", "media_type": "image/png", "data": "A".repeat(100_000)}),
    ));
    assert_eq!(h.block(&image), BLOCK_OVERHEAD + IMAGE_TOKENS);
    let summary = Message::compaction("abcdefghij");
    assert_eq!(
        h.message(&summary),
        MESSAGE_OVERHEAD + BLOCK_OVERHEAD + COMPACTION_OVERHEAD + 3
    );
    // An unknown block is costed as its type and JSON fields: "redacted_thinking" is 16
    // letters and one symbol (5.9), {"data":"abc"} is 7 symbols and 7 letters (9.8).
    let mut fields = Extra::new();
    fields.insert("data".to_owned(), json!("abc"));
    let other = ContentBlock::Other(OtherBlock::new("redacted_thinking", fields));
    assert_eq!(h.block(&other), BLOCK_OVERHEAD + 16);
}

#[test]
fn a_signature_is_not_counted() {
    let bare = r#"{"type":"thinking","thinking":"hmm"}"#;
    let signed = r#"{"type":"thinking","thinking":"hmm","signature":"EsMCCkYICxgCKkDuNR00D0SPshrOAOM1rE2RNrk"}"#;
    let bare: ContentBlock = panto_model::from_json(bare.as_bytes()).unwrap();
    let signed: ContentBlock = panto_model::from_json(signed.as_bytes()).unwrap();
    assert_eq!(Heuristic.block(&bare), Heuristic.block(&signed));
}

#[test]
fn sizers_work_through_references_and_boxes() {
    fn sizes(sizer: impl Sizer, messages: &[Message]) -> Vec<u64> {
        sizer.message_sizes(messages)
    }
    let messages = vec![Message::user_text("hi")];
    let boxed: Box<dyn Sizer> = Box::new(UsageSizer::default());
    let by_ref: &dyn Sizer = &Heuristic;
    assert_eq!(
        sizes(by_ref, &messages),
        vec![Heuristic.message(&messages[0])]
    );
    assert_eq!(
        sizes(boxed, &messages),
        vec![Heuristic.message(&messages[0])]
    );
}

/// The cost of a parsed JSON value as sizing computed it when tool arguments were a `Value`
/// tree: the reference the raw-text walk must reproduce, so the calibration still holds.
fn value_tenths(value: &serde_json::Value) -> u64 {
    use crate::cost::SYMBOL;
    use crate::heuristic::tenths;
    use serde_json::Value;
    let symbol = u64::from(SYMBOL);
    match value {
        Value::Null => tenths("null"),
        Value::Bool(b) => tenths(if *b { "true" } else { "false" }),
        Value::Number(n) => tenths(&n.to_string()),
        Value::String(s) => 2 * symbol + tenths(s),
        Value::Array(items) => {
            let commas = items.len().saturating_sub(1) as u64;
            (2 + commas) * symbol + items.iter().map(value_tenths).sum::<u64>()
        }
        Value::Object(map) => {
            let n = map.len() as u64;
            (2 + n.saturating_sub(1) + 3 * n) * symbol
                + map
                    .iter()
                    .map(|(k, v)| tenths(k) + value_tenths(v))
                    .sum::<u64>()
        }
    }
}

proptest::proptest! {
    #[test]
    fn tool_arguments_cost_what_their_value_cost(v in panto_model::arbitrary::json_value()) {
        let want = value_tenths(&v);
        let compact = serde_json::to_string(&v).unwrap();
        let pretty = serde_json::to_string_pretty(&v).unwrap();
        proptest::prop_assert_eq!(heuristic::json_tenths(&compact), want);
        proptest::prop_assert_eq!(heuristic::json_tenths(&pretty), want);
    }
}

#[test]
fn escapes_cost_the_character_they_stand_for() {
    use crate::heuristic::{json_tenths, tenths};
    let quotes = 2 * u64::from(cost::SYMBOL);
    for (json, text) in [
        (r#""a\nb""#, "a\nb"),
        (r#""\u00e9\/\"""#, "é/\""),
        (r#""\ud83d\ude00""#, "😀"),
        // A lone surrogate costs what U+FFFD costs.
        (r#""\ud83d""#, "\u{fffd}"),
    ] {
        assert_eq!(json_tenths(json), quotes + tenths(text), "{json}");
    }
}

#[test]
fn measure_span_is_rule_two_without_the_band() {
    let messages = context(&session(&[
        PROMPT,
        &assistant("t1", 1000, 40, "m"),
        RESULT,
        &assistant("t2", 10_040, 20, "m"),
        RESULT,
        &assistant("t3", 10_000, 20, "other"),
    ]));
    // The 9000 tokens the sizer finds implausible are still measured; the band says no.
    assert_eq!(measure_span(&messages, 1, 3, 40), Ok(9000));
    assert!(!plausible(9000, Heuristic.message(&messages[2])));
    assert_eq!(measure_span(&messages, 1, 3, 9040), Ok(0));
    assert_eq!(
        measure_span(&messages, 1, 3, 9041),
        Err(Fallback::Decreasing)
    );
    assert_eq!(
        measure_span(&messages, 3, 5, 20),
        Err(Fallback::ModelChanged)
    );
    assert_eq!(
        measure_span(&messages, 0, 1, 0),
        Err(Fallback::MissingUsage)
    );
    // The band saturates instead of overflowing.
    assert!(plausible(u64::MAX, u64::MAX / 2));
    assert!(!plausible(u64::MAX, 1));
}

/// The cost of a text as it was computed before [`crate::scan`]: one table lookup per byte. The
/// reference the class-counting scan must reproduce exactly.
fn reference_tenths(text: &[u8]) -> u64 {
    text.iter()
        .map(|&b| u64::from(cost::COST[usize::from(b)]))
        .sum()
}

/// The cost of a JSON text as it was computed before [`crate::scan`]: a byte-at-a-time state
/// machine. The reference the chunked walk must reproduce exactly, on any text.
fn reference_json_tenths(json: &str) -> u64 {
    use crate::cost::{COST, NON_ASCII};
    let b = json.as_bytes();
    let cost = |byte: u8| u64::from(COST[usize::from(byte)]);
    let hex = |i: usize| {
        json.get(i..i + 4)
            .and_then(|h| u32::from_str_radix(h, 16).ok())
    };
    let mut total = 0u64;
    let mut in_string = false;
    let mut i = 0;
    while i < b.len() {
        let byte = b[i];
        i += 1;
        if !in_string {
            match byte {
                b' ' | b'\t' | b'\n' | b'\r' => {}
                b'"' => {
                    in_string = true;
                    total += cost(byte);
                }
                _ => total += cost(byte),
            }
            continue;
        }
        match byte {
            b'"' => {
                in_string = false;
                total += cost(byte);
            }
            b'\\' => {
                let escaped = b.get(i).copied().unwrap_or(b'\\');
                i += 1;
                total += match escaped {
                    b'n' => cost(b'\n'),
                    b't' => cost(b'\t'),
                    b'r' => cost(b'\r'),
                    b'b' => cost(0x08),
                    b'f' => cost(0x0c),
                    b'u' => {
                        let n = hex(i).unwrap_or(0xFFFD);
                        i += 4;
                        let pair = (0xD800..0xDC00).contains(&n)
                            && b.get(i) == Some(&b'\\')
                            && b.get(i + 1) == Some(&b'u')
                            && hex(i + 2).is_some_and(|m| (0xDC00..0xE000).contains(&m));
                        if pair {
                            i += 6;
                            4 * u64::from(NON_ASCII)
                        } else {
                            match char::from_u32(n) {
                                Some(c) if c.is_ascii() => cost(c as u8),
                                Some(c) => c.len_utf8() as u64 * u64::from(NON_ASCII),
                                None => 3 * u64::from(NON_ASCII),
                            }
                        }
                    }
                    other => cost(other),
                };
            }
            _ => total += cost(byte),
        }
    }
    total
}

/// One character of every byte class, several of each width.
fn class_char() -> impl proptest::strategy::Strategy<Value = char> {
    use proptest::prelude::*;
    prop_oneof![
        Just('a'),
        Just('Z'),
        Just('`'),
        Just('@'),
        Just('['),
        Just('{'),
        Just('0'),
        Just('9'),
        Just('/'),
        Just(':'),
        Just(' '),
        Just('\t'),
        Just('\n'),
        Just('\r'),
        Just('\u{0}'),
        Just('\u{b}'),
        Just('\u{c}'),
        Just('\u{1f}'),
        Just('\u{7f}'),
        Just('é'),
        Just('中'),
        Just('😀'),
        any::<char>(),
    ]
}

/// A piece of text: a run of one character (some longer than a block of the scan), or any text.
fn text_piece() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (class_char(), 0usize..40).prop_map(|(c, n)| c.to_string().repeat(n)),
        3 => any::<String>(),
        1 => (class_char(), 4070usize..4200).prop_map(|(c, n)| c.to_string().repeat(n)),
    ]
}

/// Text of many pieces, of lengths that cross the scan's rows, chunks and blocks.
fn mixed_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    proptest::collection::vec(text_piece(), 0..16).prop_map(|pieces| pieces.concat())
}

/// A piece of JSON-like text: every kind of escape (`\u` ones valid, surrogate halves alone and
/// in pairs, with bad or missing digits), quotes and backslashes alone, whitespace, structure,
/// literals, and runs of text.
fn json_piece() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        3 => prop_oneof![
            Just("\""), Just("\\"), Just("\\\\"), Just("\\\""), Just("\\n"), Just("\\t"),
            Just("\\r"), Just("\\b"), Just("\\f"), Just("\\/"), Just("\\a"), Just("\\é"),
            Just("\\ "), Just("\\u"),
        ]
        .prop_map(str::to_owned),
        2 => (0u32..0x1_0000, any::<bool>()).prop_map(|(n, upper)| if upper {
            format!("\\u{n:04X}")
        } else {
            format!("\\u{n:04x}")
        }),
        2 => (0xD800u32..0xE000).prop_map(|n| format!("\\u{n:04x}")),
        2 => (0xD800u32..0xDC00, 0xDC00u32..0xE000).prop_map(|(h, l)| format!("\\u{h:04x}\\u{l:04X}")),
        2 => "\\\\u[0-9a-fA-F+\\-\"\\\\ zé]{0,5}",
        2 => "[ \t\n\r]{1,6}",
        2 => "[{}\\[\\]:,]{1,4}",
        1 => "true|false|null|-?[0-9]{1,6}(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?",
        4 => text_piece(),
    ]
}

/// JSON-like text: mostly not valid JSON, which the walk must cost exactly as the reference does.
fn json_like() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    proptest::collection::vec(json_piece(), 0..48).prop_map(|pieces| pieces.concat())
}

/// Valid JSON with long strings (escaped by `serde_json`: quotes, backslashes, control
/// characters) between nested structure.
fn long_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    use serde_json::Value;
    let leaf = prop_oneof![
        3 => mixed_text().prop_map(Value::String),
        1 => panto_model::arbitrary::json_value(),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((mixed_text(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest::proptest! {
    #[test]
    fn text_scan_costs_what_the_table_costs(text in mixed_text()) {
        proptest::prop_assert_eq!(heuristic::tenths(&text), reference_tenths(text.as_bytes()));
    }

    #[test]
    fn json_walk_costs_what_the_byte_walk_costs_on_any_text(json in json_like()) {
        proptest::prop_assert_eq!(heuristic::json_tenths(&json), reference_json_tenths(&json));
    }

    #[test]
    fn json_walk_costs_what_the_byte_walk_costs_on_long_values(value in long_json()) {
        for json in [
            serde_json::to_string(&value).unwrap(),
            serde_json::to_string_pretty(&value).unwrap(),
        ] {
            proptest::prop_assert_eq!(heuristic::json_tenths(&json), reference_json_tenths(&json));
        }
    }
}

#[test]
fn every_byte_value_costs_its_table_entry_at_every_run_length() {
    // Runs of one byte fill every lane of every row the same way, up to several full blocks, so
    // a class test that disagrees with the table or a lane counter that overflows shows here.
    for b in 0..=u8::MAX {
        for n in [1, 15, 16, 17, 31, 4079, 4080, 4081, 8177, 12_300] {
            let run = vec![b; n];
            assert_eq!(
                scan::tenths(&run),
                n as u64 * u64::from(cost::COST[usize::from(b)]),
                "byte {b:#04x} times {n}"
            );
        }
    }
}

#[test]
fn escapes_cost_the_same_at_every_offset_of_a_chunk() {
    // Each escape (and a quote, and a backslash ending the text) at every position across the
    // first two 64-byte chunks, inside a string and outside one.
    let escapes = [
        "\\n",
        "\\t",
        "\\r",
        "\\b",
        "\\f",
        "\\\"",
        "\\\\",
        "\\/",
        "\\x",
        "\\é",
        "\\u00e9",
        "\\u0041",
        "\\ud83d\\ude00",
        "\\ud83d",
        "\\ude00",
        "\\uzzzz",
        "\\u+0041",
        "\\u12\"",
        "\\\\\\",
        "\"",
        " \t",
        "\\",
    ];
    for escape in escapes {
        for offset in 0..140 {
            let pad = "a".repeat(offset);
            for json in [
                format!("{{\"k\": \"{pad}{escape}{}\"}}", "b".repeat(70)),
                format!("{{\"k\": \"{pad}{escape}"),
                format!("[1, {pad}{escape} 2, \"x\"]"),
                format!("\"{pad}\" {escape} \"tail\\n\""),
            ] {
                assert_eq!(
                    heuristic::json_tenths(&json),
                    reference_json_tenths(&json),
                    "{json}"
                );
            }
        }
    }
}

proptest::proptest! {
    #[test]
    fn heuristic_sizes_read_ahead_give_each_message_its_own_size(
        session in panto_model::arbitrary::session(12),
    ) {
        // Sessions of up to 12 rounds span several read-ahead batches and end inside one.
        let one_by_one: Vec<u64> = session.messages.iter().map(|m| Heuristic.message(m)).collect();
        proptest::prop_assert_eq!(Heuristic.message_sizes(&session.messages), one_by_one);
    }
}

/// The usage sizer's rules as first written, message by message from the public
/// [`measure_span`] and [`plausible`]: a reference for the sizer, which finds the compaction
/// messages once instead of asking each message again for every rule.
fn reference_measure(messages: &[Message]) -> Vec<MessageSize> {
    let estimates = Heuristic.message_sizes(messages);
    let heuristic = |i: usize, reason| MessageSize {
        tokens: estimates[i],
        source: Source::Heuristic(reason),
    };
    let mut sizes: Vec<MessageSize> = (0..messages.len())
        .map(|i| {
            if messages[i].compaction_summary().is_some() {
                heuristic(i, Fallback::Compaction)
            } else {
                heuristic(i, Fallback::Unbracketed)
            }
        })
        .collect();
    let mut previous: Option<usize> = None;
    for (b, message) in messages.iter().enumerate() {
        if message.role != Role::Assistant {
            continue;
        }
        sizes[b] = match &message.usage {
            _ if message.compaction_summary().is_some() => heuristic(b, Fallback::Compaction),
            None => heuristic(b, Fallback::MissingUsage),
            Some(u) if u.output_tokens.saturating_mul(PLAUSIBLE_FACTOR) < estimates[b] => {
                heuristic(b, Fallback::ImplausibleOutput)
            }
            Some(u) => MessageSize {
                tokens: u.output_tokens,
                source: Source::Output,
            },
        };
        if let Some(a) = previous.replace(b)
            && a + 1 < b
        {
            let estimate: u64 = estimates[a + 1..b].iter().sum();
            let measured = measure_span(messages, a, b, sizes[a].tokens).and_then(|m| {
                if plausible(m, estimate) {
                    Ok(m)
                } else {
                    Err(Fallback::Implausible)
                }
            });
            match measured {
                Err(reason) => {
                    for s in &mut sizes[a + 1..b] {
                        s.source = Source::Heuristic(reason);
                    }
                }
                Ok(m) if a + 2 == b => {
                    sizes[a + 1] = MessageSize {
                        tokens: m,
                        source: Source::Span,
                    };
                }
                Ok(m) => {
                    let mut running = 0u128;
                    let mut given = 0u128;
                    for i in a + 1..b {
                        running += u128::from(estimates[i]);
                        let upto = u128::from(m) * running / u128::from(estimate.max(1));
                        sizes[i] = MessageSize {
                            tokens: u64::try_from(upto - given).unwrap(),
                            source: Source::Share,
                        };
                        given = upto;
                    }
                }
            }
        }
    }
    sizes
}

proptest::proptest! {
    #[test]
    fn the_usage_sizer_gives_what_its_rules_give_message_by_message(
        session in panto_model::arbitrary::session(8),
        compactions in proptest::collection::vec(
            (any::<proptest::sample::Index>(), any::<bool>()),
            0..4,
        ),
        kept in proptest::collection::vec(any::<proptest::sample::Index>(), 0..3),
    ) {
        // Compaction messages anywhere (a user message headed by a summary, or an assistant
        // message whose first block is one), and kept copies, so that every guard is met.
        let mut messages = session.messages;
        for (at, assistant) in compactions {
            let mut m = Message::compaction("earlier work");
            if assistant {
                m.role = Role::Assistant;
                m.usage = Some(Usage::new(1000, 10));
            }
            let at = at.index(messages.len() + 1);
            messages.insert(at, m);
        }
        for at in kept {
            let i = at.index(messages.len());
            messages[i].extra.insert(KEPT_BY.to_owned(), json!("c1"));
        }
        proptest::prop_assert_eq!(UsageSizer::default().measure(&messages), reference_measure(&messages));
    }
}

/// A conversation answered once: the provider counted 1,000 tokens of input.
fn answered_once() -> Vec<Message> {
    let mut answer = Message::assistant_text("Forty-two.");
    answer.usage = Some(Usage::new(1_000, 7));
    vec![Message::user_text("What is the answer?"), answer]
}

#[test]
fn the_ruler_gives_the_measured_remainder_to_the_system_prompt_and_tools() {
    let messages = answered_once();
    let prompt = Heuristic.message(&messages[0]);
    let system = "You are terse.";
    let tools =
        r#"[{"name":"read","description":"Reads a file.","input_schema":{"type":"object"}}]"#;
    let parts = estimate(system, tools, &messages);
    // The messages are what the sizer gives them; the rest of the 1,000 tokens the provider
    // counted is the system prompt's and the tools', in proportion to their heuristic sizes.
    assert_eq!(parts.messages, prompt + 7);
    assert_eq!(parts.summary, 0);
    assert!(parts.measured);
    assert_eq!(parts.system + parts.tools, 1_000 - prompt);
    let (s, t) = (Heuristic.text(system), Heuristic.text(tools));
    assert_eq!(parts.tools, (1_000 - prompt) * t / (s + t));
    assert_eq!(parts.total(), 1_007);
    assert_eq!(estimate_request(system, &messages), 1_007);
}

#[test]
fn the_ruler_never_gives_the_system_prompt_less_than_its_own_size() {
    // The provider counted 20 tokens of input, less than panto's sizes of the prompt and the
    // system prompt together: the system prompt part is its heuristic size, and the total
    // grows by what the remainder lacked.
    let mut messages = answered_once();
    messages[1].usage = Some(Usage::new(20, 7));
    let prompt = Heuristic.message(&messages[0]);
    let system = "You are a careful and terse assistant who answers in one word.";
    assert!(20 < prompt + Heuristic.text(system));
    let parts = estimate(system, "", &messages);
    assert!(parts.measured);
    assert_eq!(parts.system, Heuristic.text(system));
    assert_eq!(parts.tools, 0);
    assert_eq!(parts.total(), prompt + 7 + Heuristic.text(system));
}

#[test]
fn without_usage_the_ruler_is_the_heuristic_of_every_part() {
    let mut messages = vec![
        Message::compaction("Earlier: the user asked for the answer."),
        Message::user_text("And now?"),
    ];
    messages.push(Message::assistant_text("Still forty-two."));
    let parts = estimate("You are terse.", "[]", &messages);
    assert!(!parts.measured);
    assert_eq!(parts.system, Heuristic.text("You are terse."));
    assert_eq!(parts.tools, Heuristic.text("[]"));
    assert_eq!(parts.summary, Heuristic.message(&messages[0]));
    assert_eq!(
        parts.messages,
        Heuristic.message(&messages[1]) + Heuristic.message(&messages[2])
    );
    assert_eq!(parts.conversation(), parts.summary + parts.messages);
}
