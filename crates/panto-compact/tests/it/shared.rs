//! `Driver::send_shared` (several writers taking turns on one session, issue 39 point 1) with
//! the other features on (issue 39 point 3): every reply carries signed thinking, the window
//! is under 4,000 tokens, and every writer compacts ahead; on the memory store (writers sharing
//! one store) and on SQLite (each writer with its own connection to one file, as processes
//! are). Every prompt is stored exactly once and a reply follows it, every request the model
//! gets is a valid conversation whose thinking blocks are whole (a model's signed thinking goes
//! back as it came), every stored reply keeps its thinking, the window compacts, and no send
//! asks for more than a few summaries.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use panto_compact::{
    Compactor, CompactorConfig, ContentBlock, Driver, Head, MemoryStore, Message, ModelRef,
    Provider, ProviderError, Request, Role, SharedTurns, Store, TokenNumbers, Window, WindowSource,
    async_trait,
};
use panto_model::{Entry, ThinkingBlock, validate};
use panto_provider::EventSink;
use panto_store_sqlite::SqliteStore;

use crate::short_prompt;

const AGENT: &str = "You are the agent.";

/// How many summary requests one send may ask for over all its tries: one compaction ahead
/// (a fold of one or two requests), another after one lost, and, rarely, one more when the
/// conversation outgrew the window while the turn waited.
const SUMMARIES_PER_SEND: usize = 8;

/// A model that thinks before it answers: every reply is a signed thinking block, then the
/// answer naming the latest prompt. It checks every request it gets: a valid conversation,
/// every thinking block with the signature it was given. It takes a moment, so that the
/// writers' turns overlap. Each writer has its own (its summaries counted apart); the answers
/// and their thinking are numbered and kept across all of them.
#[derive(Default)]
struct Thinker {
    /// A window that counts the reply's output budget against it (vLLM): a conversation
    /// request whose input and `max_output_tokens` exceed it is refused in vLLM's words.
    counting: Option<u64>,
    /// How many requests that window refused, over every writer.
    refused: Arc<AtomicUsize>,
    summaries: AtomicUsize,
    answers: Arc<AtomicUsize>,
    /// The thinking each answer of every writer's model carried, by its signature.
    signed: Arc<Mutex<HashMap<String, String>>>,
}

impl Thinker {
    fn check(&self, request: &Request) -> Result<(), String> {
        let problems = validate(&request.messages);
        if !problems.is_empty() {
            return Err(format!("an invalid request: {problems:?}"));
        }
        let signed = self.signed.lock().unwrap();
        for block in request.messages.iter().flat_map(|m| &m.content) {
            if let ContentBlock::Thinking(t) = block {
                let Some(signature) = &t.signature else {
                    return Err(format!("thinking without its signature: {:?}", t.thinking));
                };
                if signed.get(signature) != Some(&t.thinking) {
                    return Err(format!("thinking changed or forged: {:?}", t.thinking));
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl Provider for Thinker {
    fn name(&self) -> &str {
        "thinker"
    }

    async fn complete(
        &self,
        request: &Request,
        _events: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        tokio::time::sleep(Duration::from_millis(2)).await;
        if request.system != AGENT {
            let n = self.summaries.fetch_add(1, Ordering::Relaxed);
            // A summary that says something new each time: how many questions the transcript
            // holds, and the latest.
            let text: String = request.messages.iter().map(Message::text).collect();
            let asked = text.matches(" question ").count();
            let latest = text
                .rfind("writer ")
                .map(|at| text[at..].split(':').next().unwrap_or_default())
                .unwrap_or_default();
            return Ok(Message::assistant_text(format!(
                "Summary {n}: the writers asked {asked} questions about a failure, the latest \
                 {latest}; each was answered."
            )));
        }
        if let Some(window) = self.counting {
            let input = crate::estimate_request(&request.system, &request.messages);
            let output = u64::from(request.max_output_tokens);
            if input + output > window {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err(ProviderError::ContextOverflow {
                    message: format!(
                        "This model's maximum context length is {window} tokens. However, you requested {} tokens ({input} in the messages, {output} in the completion).",
                        input + output
                    ),
                    numbers: TokenNumbers::new(Some(input), Some(window)).with_output(Some(output)),
                });
            }
        }
        if let Err(problem) = self.check(request) {
            return Err(ProviderError::InvalidRequest {
                status: 400,
                message: problem,
            });
        }
        let n = self.answers.fetch_add(1, Ordering::Relaxed);
        // Every question of the request that no answer in it quotes yet.
        let answers: Vec<String> = (request.messages.iter())
            .filter(|m| m.role == Role::Assistant)
            .map(Message::text)
            .collect();
        let open: Vec<String> = (request.messages.iter())
            .filter(|m| m.role == Role::User)
            .map(|m| format!("<{}>", m.text()))
            .filter(|q| !answers.iter().any(|a| a.contains(q.as_str())))
            .collect();
        let open = open.join(" and ");
        let thinking = format!("thinking {n} about {open}: {}", "weigh it. ".repeat(20));
        let signature = format!("sig-{n}");
        self.signed
            .lock()
            .unwrap()
            .insert(signature.clone(), thinking.clone());
        Ok(Message::new(
            Role::Assistant,
            vec![
                ContentBlock::Thinking(ThinkingBlock::new(thinking, Some(signature))),
                ContentBlock::text(format!("answer to {open}")),
            ],
        ))
    }
}

fn prompt(writer: usize, i: usize) -> String {
    format!(
        "writer {writer} question {i}: {}",
        "why does it fail? ".repeat(8)
    )
}

/// One writer: `sends` prompts with `send_shared`, at a window of `window` tokens with
/// compaction ahead at half of it. Returns the most summary requests one send asked for, and
/// what the writer's driver learned of the output (`KnownWindows::counts_output`).
async fn write<S: Store>(
    store: S,
    model: Arc<Thinker>,
    window: u64,
    writer: usize,
    sends: usize,
) -> (usize, Option<bool>) {
    let compactor = Compactor::new(ModelRef::new(model.clone(), "thinker-1"))
        .with_prompt(short_prompt())
        .with_config(CompactorConfig::new().with_keep_tokens(window / 4));
    let (agent, _) = Driver::open(compactor, store, "s").await.unwrap();
    // A window that counts the output is learned from its refusals, with a reply budget of a
    // third of it (an eighth kept for the reply would not do); the other is given.
    let agent = agent.with_system(AGENT).with_auto_compact(Some(0.5));
    let mut agent = match model.counting {
        Some(_) => agent.with_max_output_tokens(u32::try_from(window / 3).unwrap()),
        None => agent
            .with_max_output_tokens(u32::try_from(window / 8).unwrap())
            .with_window(Window::new(window, WindowSource::Reported)),
    };
    let turns = SharedTurns::new()
        .with_pause(Duration::from_millis(4))
        .with_max_tries(200);
    let mut most = 0;
    for i in 0..sends {
        let before = model.summaries.load(Ordering::Relaxed);
        agent
            .send_shared(
                vec![Message::user_text(prompt(writer, i))],
                &mut |_| {},
                &turns,
                tokio::time::sleep,
            )
            .await
            .unwrap_or_else(|e| panic!("writer {writer}, send {i}: {e}"));
        most = most.max(model.summaries.load(Ordering::Relaxed) - before);
    }
    (most, agent.windows().counts_output)
}

/// Every entry of `store`'s session, oldest first.
async fn entries<S: Store>(store: &S) -> Vec<Entry> {
    let (mut out, mut from) = (Vec::new(), Head::EMPTY);
    loop {
        let page = store.read("s", from, 500).await.unwrap();
        if page.records.is_empty() {
            return out;
        }
        for (n, record) in page.records.iter().enumerate() {
            out.push(record.decode(n + 1).unwrap());
        }
        from = page.next;
    }
}

/// `writers` writers of `sends` prompts each on the stores `open` gives (one per writer, and
/// one to read the session after), at a window of `window` tokens.
/// With `counting`, the model's window counts the output against it and is learned from
/// its refusals: then some request is refused, every writer that saw a refusal learns that
/// the output counts, and every send is still answered (a retry without room for the whole
/// reply would be refused and fail the send).
async fn run<S, F, Fut>(open: F, window: u64, writers: usize, sends: usize)
where
    S: Store + 'static,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    run_with(open, window, (writers, sends), false).await;
}

async fn run_with<S, F, Fut>(open: F, window: u64, (writers, sends): (usize, usize), counting: bool)
where
    S: Store + 'static,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let first = Thinker::default();
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let store = open().await;
        let model = Arc::new(Thinker {
            counting: counting.then_some(window),
            refused: first.refused.clone(),
            summaries: AtomicUsize::new(0),
            answers: first.answers.clone(),
            signed: first.signed.clone(),
        });
        tasks.push(tokio::spawn(write(store, model, window, writer, sends)));
    }
    let mut learned = 0;
    for task in tasks {
        let (most, counts_output) = task.await.unwrap();
        assert!(
            most <= SUMMARIES_PER_SEND,
            "a send asked for {most} summaries"
        );
        learned += usize::from(counts_output == Some(true));
    }
    if counting {
        let refused = first.refused.load(Ordering::Relaxed);
        assert!(refused > 0, "the window of {window} refused nothing");
        assert!(learned > 0, "no writer learned that the output counts");
    } else {
        assert_eq!(learned, 0);
    }
    let entries = entries(&open().await).await;
    let messages: Vec<&Message> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::Message(m) if m.kept_by().is_none() => Some(m),
            _ => None,
        })
        .collect();
    let compactions = entries
        .iter()
        .filter(|e| matches!(e, Entry::Compaction(_)))
        .count();
    assert!(compactions > 0, "the window of {window} never compacted");
    for writer in 0..writers {
        for i in 0..sends {
            let question = prompt(writer, i);
            let at: Vec<usize> = (0..messages.len())
                .filter(|&j| messages[j].role == Role::User && messages[j].text() == question)
                .collect();
            assert_eq!(at.len(), 1, "{question} stored {} times", at.len());
            // Answered after it was stored: by this writer's reply, or by another's that came
            // later (which quotes it, unless a compaction summarized it first).
            let answered = (messages[at[0]..].iter())
                .any(|m| m.role == Role::Assistant && m.text().starts_with("answer to"));
            assert!(answered, "{question} is never answered");
        }
    }
    // Every reply stored keeps its signed thinking.
    let replies = messages.iter().filter(|m| m.role == Role::Assistant);
    for reply in replies.filter(|m| m.text().starts_with("answer to")) {
        assert!(
            matches!(&reply.content[0], ContentBlock::Thinking(t) if t.signature.is_some()),
            "a reply lost its thinking: {reply:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_turns_with_thinking_at_windows_under_4k_on_the_memory_store() {
    for window in [1_500, 3_000] {
        let store = MemoryStore::new();
        run(|| async { store.clone() }, window, 3, 12).await;
    }
}

/// Several writers on SQLite, thinking on, against a window that counts the reply's output
/// (vLLM's refusal, the completion stated) and that no writer is told: `counts_output` and
/// `reply_room` used together with `send_shared` and thinking (issue 39 point 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_turns_with_thinking_learn_a_window_that_counts_the_output_on_sqlite() {
    for window in [1_500, 3_000] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.db");
        run_with(
            || {
                let path = path.clone();
                async move { SqliteStore::open(path).await.unwrap() }
            },
            window,
            (3, 12),
            true,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_turns_with_thinking_at_windows_under_4k_on_sqlite() {
    for window in [1_500, 3_000] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.db");
        run(
            || {
                let path = path.clone();
                async move { SqliteStore::open(path).await.unwrap() }
            },
            window,
            3,
            12,
        )
        .await;
    }
}
