//! Silent truncation: never mistaken on real sessions' usage, always noticed from a provider that
//! front-truncates (as Ollama does past `num_ctx`), and the cases that are no truncation.

use std::path::PathBuf;

use panto_model::arbitrary::session;
use panto_model::{ContentBlock, Message, Role, ThinkingBlock, Usage, read_entries, replay};
use panto_size::{
    Heuristic, NEW_MESSAGES_DIVISOR, Sizer, TRUNCATION_SLACK_PERCENT, input_floor,
    silent_truncation, thinking_tokens,
};
use proptest::prelude::*;
use serde_json::json;

/// The shared real sessions (`../shared/data/sessions`, or `PANTO_CALIBRATE_SESSIONS`).
fn shared_sessions() -> Option<Vec<PathBuf>> {
    let dir = std::env::var_os("PANTO_CALIBRATE_SESSIONS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/sessions"),
        PathBuf::from,
    );
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!(
            "truncation: SKIPPED the real sessions: no folder at {}",
            dir.display()
        );
        return None;
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    Some(files)
}

#[test]
fn no_request_of_the_real_sessions_looks_truncated() {
    let Some(files) = shared_sessions() else {
        return;
    };
    let (mut checked, mut lowest) = (0usize, f64::INFINITY);
    for path in &files {
        let bytes = std::fs::read(path).unwrap();
        let ctx = replay(read_entries(&bytes).unwrap());
        for (k, reply) in ctx.messages.iter().enumerate() {
            let Some(counted) = reply.usage.as_ref().map(Usage::input_total) else {
                continue;
            };
            let sent = &ctx.messages[..k];
            assert_eq!(
                silent_truncation(sent, reply),
                None,
                "{}: request {k} was not truncated",
                path.display()
            );
            if let Some(floor) = input_floor(sent) {
                checked += 1;
                lowest = lowest.min(counted as f64 / floor.tokens as f64);
            }
        }
    }
    eprintln!(
        "truncation: {checked} requests with a floor; the lowest count was {lowest:.4} of its floor (truncation below {:.2})",
        1.0 - TRUNCATION_SLACK_PERCENT as f64 / 100.0
    );
    assert!(checked > 400, "{checked} requests checked");
    // Far from the threshold: an honest count never came near it.
    assert!(lowest > 0.95, "{lowest}");
}

/// A conversation grown by prompts of `words` words each until the request crosses a window of
/// `window` tokens, every reply counted by the server: honestly below the window, half the
/// window above it (the front of the prompt cut, as Ollama does). Returns the messages and,
/// per reply, whether its request was truncated (only the last one was).
fn grow(window: u64, words: usize) -> (Vec<Message>, Vec<bool>) {
    let system = 300u64;
    let mut messages = Vec::new();
    let mut truncated = Vec::new();
    for i in 0.. {
        messages.push(Message::user_text(format!(
            "Prompt {i}. {}",
            "the parser keeps the grammar ".repeat(words / 5)
        )));
        // The server's tokenizer counts a tenth more than the heuristic.
        let size: u64 = Heuristic.message_sizes(&messages).iter().sum::<u64>() + system;
        let honest = size + size / 10;
        let cut = honest > window;
        let counted = if cut { window / 2 } else { honest };
        truncated.push(cut);
        messages.push(
            Message::assistant_text(format!("Answer {i}. Understood."))
                .with_model("local")
                .with_usage(Usage::new(counted, 12)),
        );
        if cut {
            break;
        }
    }
    (messages, truncated)
}

#[test]
fn a_front_truncating_server_is_noticed_at_the_first_request_that_crossed_its_window() {
    for words in [40, 200, 600] {
        let (messages, truncated) = grow(25_128, words);
        for (i, &cut) in truncated.iter().enumerate() {
            let at = 2 * i + 1;
            let seen = silent_truncation(&messages[..at], &messages[at]);
            assert_eq!(seen.is_some(), cut, "words {words}, send {i}: {seen:?}");
            if let Some(t) = seen {
                assert_eq!(t.counted, 25_128 / 2);
                assert!(t.previous > t.counted && t.floor >= t.previous, "{t:?}");
            }
        }
    }
}

#[test]
fn a_count_that_rose_or_stood_still_is_never_truncation() {
    let mut messages = vec![
        Message::user_text("Hello."),
        Message::assistant_text("Hi.")
            .with_model("local")
            .with_usage(Usage::new(400, 3)),
        Message::user_text("the parser keeps the grammar ".repeat(6_000)),
    ];
    let floor = input_floor(&messages).unwrap();
    let paste = Heuristic.message(&messages[2]);
    assert_eq!(floor.tokens, 400 + paste / NEW_MESSAGES_DIVISOR);
    // A server that cut the paste but still counted more than before: not said (a relay with
    // made-up numbers looks the same).
    let cut = Message::assistant_text("A summary of the end.")
        .with_model("local")
        .with_usage(Usage::new(2_048, 9));
    assert_eq!(silent_truncation(&messages, &cut), None);
    // A relay that counts every request the same.
    let same = cut.clone().with_usage(Usage::new(400, 9));
    assert_eq!(silent_truncation(&messages, &same), None);
    // The next request of the cut conversation falls below that count: said.
    messages.push(cut);
    messages.push(Message::user_text("And the lexer?"));
    let next = Message::assistant_text("Which lexer?")
        .with_model("local")
        .with_usage(Usage::new(1_024, 4));
    assert!(silent_truncation(&messages, &next).is_some());
    // Usage from before a compaction measured another context: nothing to compare with.
    messages.insert(4, Message::compaction("earlier"));
    assert_eq!(input_floor(&messages), None);
}

/// An assistant message of a tool loop: `thinking` (signed, as Anthropic sends it), then a call.
fn thinking_call(thinking: &str, id: &str, input: u64) -> Message {
    Message::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking(ThinkingBlock::new(thinking, Some(format!("sig-{id}")))),
            ContentBlock::tool_use(id, "read", json!({"path": "src/lib.rs"})),
        ],
    )
    .with_model("claude")
    .with_usage(Usage::new(input, 900))
}

/// Issue 39: Anthropic counts the thinking of the tool loop in progress and leaves the
/// thinking of finished turns out, so the first request after a loop whose thinking is over a
/// quarter of it is counted far below the last request of the loop. That is no truncation.
#[test]
fn thinking_left_out_after_a_finished_tool_loop_is_no_truncation() {
    let thinking = "Weigh the parser's error paths against the grammar first. ".repeat(60);
    let result = |id: &str| {
        Message::new(
            Role::User,
            vec![ContentBlock::tool_result(id, "fn main() {}", false)],
        )
    };
    let think = Heuristic.block(&ContentBlock::Thinking(ThinkingBlock::new(
        thinking.as_str(),
        Some("sig-t1".into()),
    )));
    // What Anthropic counts: the loop's thinking while the loop runs, none after it.
    let base = 1_000;
    let mut sent = vec![
        Message::user_text("Fix the parser."),
        thinking_call(&thinking, "t1", base),
        result("t1"),
        thinking_call(&thinking, "t2", base + think + 40),
        result("t2"),
        Message::assistant_text("Fixed.")
            .with_model("claude")
            .with_usage(Usage::new(base + 2 * think + 80, 20)),
        Message::user_text("Now the lexer."),
    ];
    let reply = |input: u64| {
        Message::assistant_text("On it.")
            .with_model("claude")
            .with_usage(Usage::new(input, 5))
    };
    let floor = input_floor(&sent).unwrap();
    assert_eq!(floor.thinking, 2 * think);
    assert_eq!(thinking_tokens(&sent), 2 * think);
    let honest = base + 120;
    assert!(
        honest * 100 < (base + 2 * think) * (100 - TRUNCATION_SLACK_PERCENT),
        "the loop's thinking is over a quarter of its last request"
    );
    assert_eq!(silent_truncation(&sent, &reply(honest)), None);
    // A server that cut the front of the same request is still noticed.
    assert!(silent_truncation(&sent, &reply(300)).is_some());
    // Without thinking in the loop the same drop is a truncation.
    for m in &mut sent {
        m.content
            .retain(|b| !matches!(b, ContentBlock::Thinking(_)));
    }
    assert_eq!(thinking_tokens(&sent), 0);
    assert!(silent_truncation(&sent, &reply(honest)).is_some());
}

#[test]
fn a_count_of_zero_another_model_or_no_usage_is_no_truncation() {
    let sent = vec![
        Message::user_text("Hello."),
        Message::assistant_text("Hi.")
            .with_model("local")
            .with_usage(Usage::new(20_000, 3)),
        Message::user_text("And now?"),
    ];
    let reply = |model: &str, input: u64| {
        Message::assistant_text("Well.")
            .with_model(model)
            .with_usage(Usage::new(input, 2))
    };
    assert!(silent_truncation(&sent, &reply("local", 9_000)).is_some());
    // A relay that reports no input.
    assert_eq!(silent_truncation(&sent, &reply("local", 0)), None);
    // Another model counts with another tokenizer.
    assert_eq!(silent_truncation(&sent, &reply("other", 9_000)), None);
    // No usage at all.
    assert_eq!(
        silent_truncation(&sent, &Message::assistant_text("Well.")),
        None
    );
    // An anchor that reported no input anchors nothing.
    let mut zero = sent.clone();
    zero[1].usage = Some(Usage::new(0, 3));
    assert_eq!(silent_truncation(&zero, &reply("local", 9_000)), None);
    // A drop within the slack is a provider leaving something out, not a truncation.
    let within = 20_000 * (100 - TRUNCATION_SLACK_PERCENT) / 100 + 10;
    assert_eq!(silent_truncation(&sent, &reply("local", within)), None);
}

proptest! {
    /// A provider whose tokenizer counts each message within the heuristic's measured band
    /// (1.35 times more, down to 1.5 times less) is never taken for one that truncates.
    #[test]
    fn honest_counts_within_the_band_are_never_truncation(
        s in session(6),
        factors in prop::collection::vec(67u64..=135, 64),
        system in 0u64..5_000,
    ) {
        let mut messages = s.messages;
        let mut total = system;
        for i in 0..messages.len() {
            if messages[i].role == Role::Assistant {
                messages[i].usage = Some(Usage::new(total, Heuristic.message(&messages[i])));
                let sent = &messages[..i];
                prop_assert_eq!(silent_truncation(sent, &messages[i]), None, "at {}", i);
            }
            let h = Heuristic.message(&messages[i]);
            total += h * factors[i % factors.len()] / 100;
        }
    }
}
