//! Issue 39 point 3 over loopback HTTP: an overflow into a small window (1,000 to 8,000
//! tokens) through the Chat Completions adapter, against a 127.0.0.1 server that refuses a
//! request too large for its window with the real error bodies of the servers that speak that
//! protocol (`shared/data/overflow/visible.jsonl` and the fixture corpus): vLLM, which counts
//! the completion against the window and says so; `OpenAI`'s "your messages resulted in", a
//! limit stated for the input, true, a quarter too low or a half too high; llama.cpp's
//! `exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`; Ollama's string error, which
//! states nothing. Every case ends with the retry answered or a typed overflow error, within
//! the bound derived from what the fold learned (the sweep in panto-compact's
//! `tests/it/smallwin.rs` states it), and a vLLM server is learned to count the output from its
//! wording.

use std::sync::{Arc, Mutex};

use panto_compact::model::{Entry, Message, SequentialIds};
use panto_compact::testing::{sized_conversation, transcript_tokens};
use panto_compact::{
    CompactError, Compactor, Driver, Heuristic, MIN_OUTPUT_TOKENS, MemoryLog, ModelRef, Provider,
    TINY_PROMPT_BELOW, output_floor,
};
use panto_providers::OpenAiChatProvider;
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::common::config;

/// The agent's system prompt; a request with a transcript is a compaction.
const AGENT: &str = "agent";

/// The server's wording of a refusal, and what it counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wording {
    /// vLLM: the input and the completion against the window, both stated.
    Vllm,
    /// `OpenAI`'s "your messages resulted in": the input, with the limit stated as a share
    /// of the true window (4/4 true, 3/4 too low, 6/4 too high).
    OpenAi(u64),
    /// llama.cpp: the input, `n_prompt_tokens` and `n_ctx` beside a message that states nothing.
    LlamaCpp,
    /// Ollama: the input, a string error that states nothing.
    Ollama,
}

/// One request, as the server counted it.
#[derive(Clone, Debug)]
struct Seen {
    compaction: bool,
    input: u64,
    output: u64,
    transcript: u64,
    fits: bool,
}

/// A window of `window` tokens (counted by the server: the heuristic over each message's
/// text, and 4 per message), refusing in `wording`.
#[derive(Clone)]
struct Server {
    window: u64,
    wording: Wording,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// The text of a Chat Completions message's content (a string or parts) and of its calls.
fn texts(message: &Value) -> String {
    let mut out = String::new();
    match &message["content"] {
        Value::String(s) => out.push_str(s),
        Value::Array(parts) => {
            for p in parts {
                out.push_str(p["text"].as_str().unwrap_or_default());
            }
        }
        _ => {}
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        out.push_str(call["function"]["name"].as_str().unwrap_or_default());
        out.push_str(call["function"]["arguments"].as_str().unwrap_or_default());
    }
    out
}

impl Server {
    fn refusal(&self, input: u64, output: u64) -> Value {
        let w = self.window;
        match self.wording {
            Wording::Vllm => json!({"object": "error",
                "message": format!("This model's maximum context length is {w} tokens. However, you requested {} tokens ({input} in the messages, {output} in the completion). Please reduce the length of the messages or completion.", input + output),
                "type": "BadRequestError", "param": null, "code": 400}),
            Wording::OpenAi(quarters) => json!({"error": {
                "message": format!("This model's maximum context length is {} tokens. However, your messages resulted in {input} tokens. Please reduce the length of the messages.", w * quarters / 4),
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
            Wording::LlamaCpp => json!({"error": {"code": 400,
                "message": "the request exceeds the available context size. try increasing the context size or enable context shift",
                "type": "exceed_context_size_error", "n_prompt_tokens": input, "n_ctx": w}}),
            Wording::Ollama => {
                json!({"error": "the prompt is longer than the context length currently available to the model; shorten the prompt, adjust the context length in settings, or use a model with a longer context length"})
            }
        }
    }
}

impl Respond for Server {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let input: u64 = messages.iter().map(|m| Heuristic.text(&texts(m)) + 4).sum();
        let output = body["max_tokens"]
            .as_u64()
            .or(body["max_completion_tokens"].as_u64())
            .unwrap_or(0);
        let prompt = messages.iter().map(texts).collect::<String>();
        let compaction = prompt.contains("<transcript>");
        let counted = match self.wording {
            Wording::Vllm => input + output,
            _ => input,
        };
        let fits = counted <= self.window;
        let mut seen = self.seen.lock().unwrap();
        let answered = seen.iter().filter(|s| s.compaction && s.fits).count();
        seen.push(Seen {
            compaction,
            input,
            output,
            transcript: if compaction {
                transcript_tokens(&prompt)
            } else {
                0
            },
            fits,
        });
        drop(seen);
        if !fits {
            return ResponseTemplate::new(400).set_body_json(self.refusal(input, output));
        }
        let text = if compaction {
            format!(
                "Summary {} of {} characters: the user asked, the assistant read the logs and answered.",
                answered + 1,
                prompt.len()
            )
        } else {
            "the reply".to_owned()
        };
        ResponseTemplate::new(200).set_body_json(json!({"id": "c1", "object": "chat.completion",
            "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
            "finish_reason": "stop"}],
            "usage": {"prompt_tokens": input, "completion_tokens": 12, "total_tokens": input + 12}}))
    }
}

/// The sweep's bound derived from what the fold learned (panto-compact's
/// `tests/it/smallwin.rs`, `derived_bound`), in the server's count: the overflow and the
/// retry, `ceil(conversation / room)` steps, 3 requests per compaction request refused.
fn derived_bound(window: u64, wording: Wording, seen: &[Seen]) -> usize {
    let accepted: Vec<&Seen> = seen.iter().filter(|s| s.compaction && s.fits).collect();
    let refused = seen.iter().filter(|s| s.compaction && !s.fits).count();
    let believed = match wording {
        Wording::OpenAi(q) if q < 4 => window * q / 4,
        _ => window,
    };
    let learned = accepted
        .iter()
        .map(|s| s.input + s.output)
        .max()
        .unwrap_or(window)
        .min(believed);
    let fixed = accepted
        .iter()
        .map(|s| s.input.saturating_sub(s.transcript))
        .max()
        .unwrap_or(0)
        + floor_of(window, wording, learned);
    let room = (learned / 2).min(learned.saturating_sub(fixed)).max(1);
    2 + seen[0].input.div_ceil(room) as usize + 3 * refused
}

/// The output floor of the fold's requests within `limit`: a tenth of it (at least 64) where
/// the window is tiny, stated under 2,000 tokens (truly or not); 256 elsewhere, Ollama's
/// window that states no limit included (panto never takes it for tiny).
fn floor_of(window: u64, wording: Wording, limit: u64) -> u64 {
    let stated = match wording {
        Wording::Vllm | Wording::LlamaCpp => Some(window),
        Wording::OpenAi(q) => Some(window * q / 4),
        Wording::Ollama => None,
    };
    if stated.is_some_and(|w| w < TINY_PROMPT_BELOW) {
        output_floor(Some(limit))
    } else {
        u64::from(MIN_OUTPUT_TOKENS)
    }
}

/// One case: a conversation of `times` the window, a reply budget of `window / share`, one
/// more prompt sent through the adapter to the server.
/// Returns whether the retry was answered and whether the requests went past the derived bound.
async fn case(window: u64, wording: Wording, tools: bool, times: f64, share: u64) -> (bool, bool) {
    let mock = MockServer::start().await;
    let server = Server {
        window,
        wording,
        seen: Arc::default(),
    };
    Mock::given(method("POST"))
        .respond_with(server.clone())
        .mount(&mock)
        .await;
    let mut settings = config(&format!("{}/v1", mock.uri())).with_streaming(false);
    settings.retry.max_retries = 0;
    let provider: Arc<dyn Provider> = Arc::new(OpenAiChatProvider::new(settings).unwrap());
    let history = sized_conversation(AGENT, (window as f64 * times) as u64, window, tools);
    let log = MemoryLog::with_entries(history.into_iter().map(Entry::Message).collect());
    let context = log.replay();
    let compactor =
        Compactor::new(ModelRef::new(provider, "m")).with_ids(Arc::new(SequentialIds::new()));
    let mut driver = Driver::new(compactor, log, context)
        .with_system(AGENT)
        .with_max_output_tokens(u32::try_from(window / share).unwrap());
    let result = driver
        .send(
            vec![Message::user_text("now fix the last one")],
            &mut |_| {},
        )
        .await;
    let seen = server.seen.lock().unwrap().clone();
    let label = format!("{window} {wording:?} tools {tools} x{times} 1/{share}");
    let describe = seen
        .iter()
        .map(|s| {
            let kind = if s.compaction { "c" } else { "r" };
            let refused = if s.fits { "" } else { "!" };
            format!("{kind}{refused}:{}+{}", s.input, s.output)
        })
        .collect::<Vec<_>>()
        .join(" ");
    match &result {
        Ok(reply) => assert_eq!(reply.message.text(), "the reply", "{label}"),
        Err(
            CompactError::OverflowAfterCompaction { .. }
            | CompactError::OverflowNoProgress { .. }
            | CompactError::OverflowCompactionFailed { .. }
            | CompactError::OverflowNothingToCompact { .. },
        ) => {}
        Err(other) => panic!("{label}: not an overflow's error: {other}\n{describe}"),
    }
    assert!(!seen[0].fits, "{label}: the conversation did not overflow");
    // Within the derived bound, or 2 past it: the server counts in its own tokens (4 a
    // message, usage reported back), which panto's estimate and the fold's transcript
    // rendering do not match exactly.
    let most = derived_bound(window, wording, &seen);
    assert!(
        seen.len() <= most + 2,
        "{label}: {} requests for a bound of {most}: {describe}\n{result:?}",
        seen.len()
    );
    if wording == Wording::Vllm {
        // The completion the refusal stated shows the output counted.
        assert_eq!(driver.windows().counts_output, Some(true), "{label}");
    }
    (result.is_ok(), seen.len() > most)
}

/// The sweep over HTTP: every wording, windows of 1,000 to 8,000 tokens, talk and tool
/// results, a reply budget of an eighth or a quarter of the window.
#[tokio::test]
async fn every_small_window_overflow_over_http_ends_answered_or_with_a_clear_error_within_the_bound()
 {
    let wordings = [
        Wording::Vllm,
        Wording::OpenAi(4),
        Wording::OpenAi(3),
        Wording::OpenAi(6),
        Wording::LlamaCpp,
        Wording::Ollama,
    ];
    let (mut answered, mut past, mut cases) = (0, 0, 0);
    for (i, window) in [1_000u64, 1_700, 2_600, 4_100, 8_000]
        .into_iter()
        .enumerate()
    {
        for (j, wording) in wordings.into_iter().enumerate() {
            for tools in [false, true] {
                let times = [1.4, 2.5, 3.6][(i + j) % 3];
                let share = [8, 4][(i + j + usize::from(tools)) % 2];
                let (ok, over) = case(window, wording, tools, times, share).await;
                cases += 1;
                answered += usize::from(ok);
                past += usize::from(over);
            }
        }
    }
    // Most cases end answered (the rest with a typed overflow error, each checked above), and
    // nearly all within the derived bound itself (measured: 58 of 60; the two past it, by one
    // and two requests, a limit stated a quarter too low at 1,700 tokens).
    println!("{answered} of {cases} answered, {past} past the derived bound");
    assert!(answered * 10 >= cases * 9, "{answered} of {cases} answered");
    assert!(past <= 2, "{past} of {cases} past the derived bound");
}
