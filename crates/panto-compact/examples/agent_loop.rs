//! A minimal agent loop on panto-compact, runnable offline:
//! `cargo run -p panto-compact --example agent_loop`.
//!
//! It brings its own provider (a toy model with a 300-word context window that can call a
//! `read` tool) and its own summarizer (configured as `compaction_model`); its session lives in
//! an SQLite database (panto-store-sqlite; the JSONL, PostgreSQL or in-memory store plug in the
//! same way). The conversation outgrows the window; the driver compacts and retries. Every turn
//! runs in `tokio::spawn` on the multi-thread runtime, as it would in a server, and the
//! database work runs on tokio's blocking pool. Besides panto-compact, the store is the only
//! panto dependency it names.
//!
//! A turn that fails does not end the loop: the task hands the driver back with the turn's
//! result, whatever it is, so the next turn goes on from the session as stored. `turn` sends
//! again what a failure left unanswered (the toy model answers one request with a 503), and
//! never stores a message twice: after any failure but [`CompactError::NotStored`] the new
//! messages are stored, and the next attempt sends nothing new.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example shows what it did"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use panto_compact::serde_json::{self, json};
use panto_compact::{
    CompactError, CompactionEvent, CompactionPrompt, Compactor, CompactorConfig, ContentBlock,
    Driver, EventSink, Head, Message, ModelRef, Provider, ProviderError, Request, Role, Store,
    TokenNumbers, async_trait,
};
use panto_store_sqlite::SqliteStore;

/// Words in everything a request carries: the toy model's idea of tokens.
fn words(request: &Request) -> u64 {
    let text: String = request
        .messages
        .iter()
        .map(|m| serde_json::to_string(&m.content).unwrap_or_default())
        .collect();
    (text.split_whitespace().count() + request.system.split_whitespace().count()) as u64
}

/// The toy model's context window, in words.
const WINDOW: u64 = 300;

/// A chat model: overflows past [`WINDOW`] words; reads a file when asked to, else
/// acknowledges. The first request whose last message mentions the release is answered with
/// a 503, as a busy server would.
#[derive(Default)]
struct ToyModel {
    failed_once: AtomicBool,
}

#[async_trait]
impl Provider for ToyModel {
    fn name(&self) -> &str {
        "toy"
    }

    async fn complete(
        &self,
        request: &Request,
        _events: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        let size = words(request);
        if size > WINDOW {
            return Err(ProviderError::ContextOverflow {
                message: "prompt is too long".into(),
                numbers: TokenNumbers::new(Some(size), None),
            });
        }
        let last = request.messages.last().expect("a request has messages");
        let text = last.text();
        if text.contains("release") && !self.failed_once.swap(true, Ordering::SeqCst) {
            return Err(ProviderError::Server {
                status: 503,
                message: "the server is busy".into(),
            });
        }
        Ok(match text.strip_prefix("read ") {
            Some(path) => Message::new(
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    format!("call-{path}"),
                    "read",
                    json!({ "path": path }),
                )],
            ),
            None if text.is_empty() => Message::assistant_text("I have read the file."),
            None => Message::assistant_text(format!("Noted: {text}")),
        })
    }
}

/// A summarizer: keeps the user's lines of the transcript (an extractive summary).
struct Summarizer;

#[async_trait]
impl Provider for Summarizer {
    fn name(&self) -> &str {
        "summarizer"
    }

    async fn complete(
        &self,
        request: &Request,
        _events: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        let prompt = request.messages[0].text();
        // Lines of the previous summary, then the user's lines of the transcript.
        let kept: Vec<&str> = prompt
            .lines()
            .filter_map(|l| l.strip_prefix("- ").or(l.strip_prefix("[User]: ")))
            .collect();
        let summary = format!("The user said:\n- {}", kept.join("\n- "));
        Ok(Message::assistant_text(summary))
    }
}

/// What the `read` tool returns: a file of about 160 words.
fn file_text() -> String {
    (1..=20)
        .map(|i| format!("line {i}: let token = next_token(&mut input);\n"))
        .collect()
}

/// How many times a turn sends again after a transient failure.
const ATTEMPTS: usize = 3;

/// One turn: sends `prompt`, answers every tool call, and returns the model's words. A
/// transient failure is sent again (nothing new once the prompt is stored, so it is never
/// stored twice); any other failure is returned, and the driver stays usable.
///
/// # Errors
/// The failure that ended the turn.
async fn turn(agent: &mut Driver<SqliteStore>, prompt: &str) -> Result<Message, CompactError> {
    let mut new = vec![Message::user_text(prompt)];
    let mut failures = 0;
    loop {
        let error = match agent.send(new.clone(), &mut |_| {}).await {
            Ok(reply) => match reply.message.content.first().cloned() {
                // The tool loop: answer the call, then send the result.
                Some(ContentBlock::ToolUse(call)) => {
                    println!("  (tool {} {})", call.name, call.input);
                    new = vec![Message::new(
                        Role::User,
                        vec![ContentBlock::tool_result(&call.id, file_text(), false)],
                    )];
                    continue;
                }
                _ => return Ok(reply.message),
            },
            Err(e) => e,
        };
        // Only a refused append leaves the new messages unstored; after anything else they
        // are in the session, and sending them again would store them twice.
        if !matches!(error, CompactError::NotStored(_)) {
            new.clear();
        }
        let transient = matches!(&error, CompactError::Provider(p) if p.is_transient());
        failures += 1;
        if !transient || failures >= ATTEMPTS {
            return Err(error);
        }
        eprintln!("  [{error}; sending again]");
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let compactor = Compactor::new(ModelRef::new(Arc::new(ToyModel::default()), "toy-1"))
        .with_compaction_model(Some(ModelRef::new(Arc::new(Summarizer), "summarizer-1")))
        // The built-in prompt alone is larger than the toy model's whole window.
        .with_prompt(CompactionPrompt::from_text(
            "Summarize the transcript for the next model.",
        )?)
        .with_config(CompactorConfig::new().with_keep_tokens(100))
        .on_event(|e| match e {
            CompactionEvent::Started {
                trigger,
                model,
                plan,
                ..
            } => eprintln!(
                "  [compaction {} with {model}: summarizing {} turns, keeping {}]",
                trigger.as_str(),
                plan.summarized_turns,
                plan.kept_turns
            ),
            CompactionEvent::Finished(r) => eprintln!(
                "  [compacted: about {} -> {} tokens]",
                r.tokens_before, r.tokens_after
            ),
            other => eprintln!("  [{other:?}]"),
        });
    // A database file of its own (an agent names a lasting one), removed at the end.
    let path =
        std::env::temp_dir().join(format!("panto-agent-loop-{}.sqlite3", std::process::id()));
    let store = SqliteStore::open(&path).await?;
    let (agent, _warnings) = Driver::open(compactor, store.clone(), "knot").await?;
    let mut agent = agent.with_system("You are a terse assistant.");

    let prompts = [
        "my project is a parser for a small configuration language called knot",
        "read src/lexer.rs",
        "the lexer must accept comments starting with a hash sign and ending at the newline",
        "we decided to keep the public API unchanged and to add tests for every token kind",
        "read tests/lexer.rs",
        "please remember that the release is planned for the end of the month",
    ];
    let mut failed = 0;
    for prompt in prompts {
        println!("> {prompt}");
        // Each turn is a task of its own, free to run on any worker thread: the driver moves
        // in and always comes back, with the turn's result beside it.
        let task = tokio::spawn(async move {
            let result = turn(&mut agent, prompt).await;
            (agent, result)
        });
        let (back, result) = task.await?;
        agent = back;
        match result {
            Ok(reply) => println!("{}", reply.text()),
            Err(e) => {
                // The loop goes on: what the turn stored stays in the session.
                eprintln!("  [the turn failed: {e}]");
                failed += 1;
            }
        }
    }
    assert_eq!(
        failed, 0,
        "the busy server's 503 was sent again and answered"
    );
    assert!(!agent.awaits_reply(), "every prompt is answered");

    // The store loads the same context the driver holds.
    let loaded = store.load("knot").await?;
    let context = loaded.context;
    assert_eq!(context.messages, agent.context().messages);
    assert!(
        context.compaction.is_some(),
        "the conversation was compacted"
    );
    println!(
        "\nsession: {} entries in {}; effective context: {} messages, led by the summary:\n{}",
        loaded.head.get(),
        store.location(),
        context.messages.len(),
        context.summary().unwrap_or("(none)")
    );
    assert_eq!(
        store
            .read("knot", Head::EMPTY, usize::MAX)
            .await?
            .records
            .len() as u64,
        loaded.head.get()
    );
    drop(store);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// `cargo test` runs the example (`test = true` in the manifest), so it cannot rot.
    #[test]
    fn the_agent_loop_runs_to_the_end() {
        super::main().expect("the example runs");
    }
}
