//! Issue 27: a conversation whose replies carry thinking goes on through an overflow compaction
//! and three more sends, on Anthropic, Gemini and `OpenAI` Responses, each against an emulator
//! that enforces its provider's rule for thinking sent back (`emulate`). A refusal of thinking
//! as bound to a different conversation is recovered from once, and the choice is stored with
//! the reply so that a restarted agent makes it too.

use std::sync::Arc;

use panto_compact::model::{ContentBlock, Entry, Message, Role, SequentialIds};
use panto_compact::{
    CompactionPrompt, Compactor, CompactorConfig, Driver, MemoryLog, MemoryStore, ModelRef,
    Provider, ReasoningEffort, RequestOptions, StreamEvent, ToolSpec,
};
use panto_model::{THINKING_RESET, decode_line, encode_line};
use serde_json::json;

use crate::common::config;
use crate::emulate::SUMMARY_PROMPT;
use crate::emulate::Seen;
use crate::emulate::claude::Claude;
use crate::emulate::gemini::Gemini;
use crate::emulate::responses::Responses;

const SYSTEM: &str = "You are a careful agent. Answer every note.";

/// The window of every emulator, in tokens (a quarter of a request's bytes).
const WINDOW: u64 = 1_400;

pub(crate) fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec::new(
        "lookup",
        "Look a number up",
        json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
    )]
}

/// A compactor for the emulators: a short prompt they recognise, a small keep budget.
pub(crate) fn compactor(provider: Arc<dyn Provider>, model: &str) -> Compactor {
    Compactor::new(ModelRef::new(provider, model))
        .with_prompt(CompactionPrompt::from_text(SUMMARY_PROMPT).unwrap())
        .with_config(CompactorConfig::new().with_keep_tokens(100))
        .with_ids(Arc::new(SequentialIds::new()))
}

pub(crate) fn driver(
    provider: Arc<dyn Provider>,
    model: &str,
    log: MemoryLog,
) -> Driver<MemoryStore> {
    let context = log.replay();
    Driver::new(compactor(provider, model), log, context)
        .with_system(SYSTEM)
        .with_tools(tools())
        .with_request_options(RequestOptions::new().with_reasoning_effort(ReasoningEffort::Low))
        .with_max_output_tokens(2_048)
}

/// A note of about `bytes` bytes.
pub(crate) fn note(n: usize, bytes: usize, tool: bool) -> Message {
    let tag = if tool { " [tool]" } else { "" };
    let head = format!("Note {n}{tag}. ");
    let filler = "The parser keeps its state between lines. ".repeat(bytes / 42 + 1);
    Message::user_text(format!(
        "{head}{}",
        &filler[..bytes.saturating_sub(head.len())]
    ))
}

/// The results answering the tool calls of `reply`, of about `bytes` bytes each.
pub(crate) fn results(reply: &Message, bytes: usize) -> Message {
    let blocks = reply
        .tool_use_ids()
        .map(|id| {
            let text = "The value found is four. ".repeat(bytes / 25 + 1);
            ContentBlock::tool_result(id, &text[..bytes], false)
        })
        .collect();
    Message::new(Role::User, blocks)
}

/// Runs the conversation of the issue: four sends (one a tool loop), a fifth whose large tool
/// result overflows (the in-flight turn is that tool loop), then three more sends (one a tool
/// loop again). Returns the driver and the stream events.
pub(crate) async fn conversation(
    provider: Arc<dyn Provider>,
    model: &str,
) -> (Driver<MemoryStore>, Vec<String>) {
    let mut driver = driver(provider, model, MemoryLog::memory());
    let mut events = Vec::new();
    let mut sink = |e: StreamEvent<'_>| {
        if let StreamEvent::Notice(text) = e {
            events.push(text.to_owned());
        }
    };
    let mut compactions = 0;
    let mut last: Option<Message> = None;
    for step in 1..=8 {
        let new = match step {
            1 => note(1, 900, false),
            2 => note(2, 900, true),
            3 | 5 | 8 => results(last.as_ref().unwrap(), if step == 5 { 2_500 } else { 20 }),
            4 => note(4, 900, true),
            6 => note(6, 200, false),
            7 => note(7, 200, true),
            _ => unreachable!(),
        };
        let reply = driver
            .send(vec![new], &mut sink)
            .await
            .unwrap_or_else(|e| panic!("send {step} failed: {e}"));
        if reply.compaction.is_some() {
            assert_eq!(step, 5, "the overflow comes with the large tool result");
            compactions += 1;
        }
        last = Some(reply.message);
    }
    assert_eq!(compactions, 1, "one overflow compaction");
    (driver, events)
}

/// Checks what the emulator saw: one refusal, the overflow of the fifth send, and everything
/// else answered, chat requests after the compaction included.
fn one_overflow_only(seen: &[Seen], overflow_words: &str) {
    let refused: Vec<&Seen> = seen.iter().filter(|s| s.status != 200).collect();
    assert_eq!(
        refused.len(),
        1,
        "refusals: {:#?}",
        refused.iter().map(|s| &s.refusal).collect::<Vec<_>>()
    );
    assert!(
        refused[0]
            .refusal
            .as_deref()
            .unwrap()
            .contains(overflow_words),
        "{:?}",
        refused[0].refusal
    );
    let at = seen.iter().position(|s| s.status != 200).unwrap();
    let after = seen[at..]
        .iter()
        .filter(|s| s.kind == "chat" && s.status == 200)
        .count();
    assert_eq!(
        after, 4,
        "the retry and three more sends (the tool loop's two) after the overflow"
    );
}

#[tokio::test]
async fn anthropic_thinking_survives_an_overflow_compaction() {
    let (server, claude) = Claude::start(WINDOW).await;
    let provider: Arc<dyn Provider> =
        Arc::new(panto_providers::AnthropicProvider::new(config(&server.uri())).unwrap());
    let (driver, notices) = conversation(provider, "claude-emulated").await;
    let state = claude.state();
    one_overflow_only(&state.seen, "prompt is too long");
    assert!(
        notices.is_empty(),
        "no refusal to recover from: {notices:?}"
    );
    // The kept tool loop's thinking went back with `drop_block` (and was dropped by the API)
    // while it waited for its results; the thinking written after the compaction went back
    // and was accepted.
    assert!(
        state.dropped >= 1,
        "the in-flight loop's stale thinking was sent with drop_block"
    );
    let retry = state.seen.iter().position(|s| s.status != 200).unwrap() + 1;
    let retry = state.seen[retry..]
        .iter()
        .find(|s| s.kind == "chat")
        .unwrap();
    assert_eq!(
        retry
            .body
            .pointer("/thinking/block_binding/prefix_mismatch_behavior"),
        Some(&json!("drop_block"))
    );
    let last = state.seen.last().unwrap();
    assert!(
        last.raw.contains("\"type\":\"thinking\""),
        "thinking is still sent back"
    );
    assert!(state.accepted > 0);
    // The session keeps every thinking block, the kept copies' included.
    let copies_with_thinking = driver
        .context()
        .messages
        .iter()
        .filter(|m| m.kept_by().is_some())
        .filter(|m| {
            m.content
                .iter()
                .any(|b| matches!(b, ContentBlock::Thinking(_)))
        })
        .count();
    assert!(copies_with_thinking >= 1);
}

#[tokio::test]
async fn anthropic_streaming_thinking_survives_an_overflow_compaction() {
    let (server, claude) = Claude::start(WINDOW).await;
    let provider: Arc<dyn Provider> = Arc::new(
        panto_providers::AnthropicProvider::new(config(&server.uri()).with_streaming(true))
            .unwrap(),
    );
    conversation(provider, "claude-emulated").await;
    one_overflow_only(&claude.state().seen, "prompt is too long");
}

#[tokio::test]
async fn gemini_thought_signatures_survive_an_overflow_compaction() {
    let (server, gemini) = Gemini::start(WINDOW).await;
    let provider: Arc<dyn Provider> =
        Arc::new(panto_providers::GeminiProvider::new(config(&server.uri())).unwrap());
    conversation(provider, "gemini-emulated").await;
    let state = gemini.state();
    one_overflow_only(&state.seen, "exceeds the maximum number of tokens allowed");
    // The current turn's calls went back signed, the kept one after the compaction included.
    assert!(state.accepted >= 3, "{}", state.accepted);
}

#[tokio::test]
async fn responses_reasoning_items_survive_an_overflow_compaction() {
    let (server, responses) = Responses::start(WINDOW).await;
    let provider: Arc<dyn Provider> = Arc::new(
        panto_providers::OpenAiResponsesProvider::new(config(&format!("{}/v1", server.uri())))
            .unwrap()
            .with_encrypted_reasoning(true),
    );
    conversation(provider, "gpt-emulated").await;
    let state = responses.state();
    one_overflow_only(&state.seen, "exceeds the context window");
    assert!(
        state.accepted > 0,
        "reasoning items went back and were verified"
    );
}

/// The same conversation without the facts the compaction writes (`kept_by`), as a store that
/// dropped them would give it: the emulator refuses the kept thinking, the adapter sends the
/// request once more without it and says so, the reply is marked, and the agent restarted from
/// the stored session makes the same choice without another refusal.
#[tokio::test]
async fn a_binding_refusal_is_recovered_once_and_stored_with_the_reply() {
    let (server, claude) = Claude::start(WINDOW).await;
    let provider: Arc<dyn Provider> =
        Arc::new(panto_providers::AnthropicProvider::new(config(&server.uri())).unwrap());
    let (driver, _) = conversation(provider.clone(), "claude-emulated").await;
    // The context as another store might keep it: the same messages, the summary as the
    // first one, no `kept_by`.
    let stripped: Vec<Entry> = driver
        .context()
        .messages
        .iter()
        .map(|m| {
            let mut m = m.clone();
            m.extra.remove("kept_by");
            Entry::Message(m)
        })
        .collect();
    let mut agent = driver_over(provider.clone(), stripped);
    let before = claude.state().seen.len();
    let mut notices = Vec::new();
    let reply = agent
        .send(vec![note(9, 100, false)], &mut |e: StreamEvent<'_>| {
            if let StreamEvent::Notice(t) = e {
                notices.push(t.to_owned());
            }
        })
        .await
        .unwrap();
    {
        let state = claude.state();
        let new = &state.seen[before..];
        assert_eq!(new.len(), 2, "refused once, sent once more");
        assert!(
            new[0]
                .refusal
                .as_deref()
                .unwrap()
                .contains("bound to a different conversation")
        );
        assert_eq!(new[1].status, 200);
    }
    assert_eq!(notices.len(), 1, "the user is told: {notices:?}");
    assert!(notices[0].contains("bound to a different conversation"));
    assert_eq!(reply.message.extra.get(THINKING_RESET), Some(&json!(true)));
    assert!(reply.compaction.is_none(), "never read as an overflow");

    // A restart: the session written as JSONL, read back, and a new agent on it.
    let (_, log, _) = agent.into_parts();
    let reread: Vec<Entry> = log
        .to_jsonl()
        .lines()
        .enumerate()
        .map(|(i, line)| decode_line(line.as_bytes(), i + 1).unwrap())
        .collect();
    assert_eq!(
        reread.iter().map(encode_line).collect::<String>(),
        log.to_jsonl(),
        "the session reads back byte for byte"
    );
    let mut restarted = driver_over(provider, reread);
    let before = claude.state().seen.len();
    restarted
        .send(vec![note(10, 100, false)], &mut |_| {})
        .await
        .unwrap();
    let state = claude.state();
    assert_eq!(state.seen.len(), before + 1, "no refusal after the restart");
    assert_eq!(state.seen[before].status, 200);
}

fn driver_over(provider: Arc<dyn Provider>, entries: Vec<Entry>) -> Driver<MemoryStore> {
    driver(
        provider,
        "claude-emulated",
        MemoryLog::with_entries(entries),
    )
}
