//! An agent that offers its model the recall tool, runnable offline:
//! `cargo run -p panto-compact --example recall_tool`.
//!
//! A tool loop printed a commit SHA; a compaction summarized it away; later the user asks which
//! commit was merged. The model (a toy one here) calls `recall`, the driver answers the call
//! from the session's history, and the model answers with the exact SHA. Adding recall to an
//! agent is the two marked lines.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example shows what it did"
)]

use std::sync::Arc;

use panto_compact::serde_json::json;
use panto_compact::{
    CompactOutcome, CompactRun, CompactionPrompt, Compactor, CompactorConfig, ContentBlock, Driver,
    EventSink, MemoryStore, Message, ModelRef, Provider, ProviderError, RECALL_TOOL, Request, Role,
    async_trait,
};

/// A chat model: asks for a commit's SHA through the recall tool, then answers with it.
struct ToyModel;

#[async_trait]
impl Provider for ToyModel {
    fn name(&self) -> &str {
        "toy"
    }

    async fn complete(
        &self,
        request: &Request,
        _: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        let last = request.messages.last().expect("a request has messages");
        if let Some(ContentBlock::ToolResult(result)) = last.content.first() {
            // The recall answer holds the passage with the SHA.
            let text = result.content.text();
            let sha = text
                .split_whitespace()
                .find(|w| w.len() == 40 && w.bytes().all(|b| b.is_ascii_hexdigit()))
                .unwrap_or("(not found)");
            return Ok(Message::assistant_text(format!("We merged {sha}.")));
        }
        let offered = request.tools.iter().any(|t| t.name == RECALL_TOOL);
        if offered && last.text().contains("which commit") {
            return Ok(Message::new(
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    "call-1",
                    RECALL_TOOL,
                    json!({"query": "merged commit"}),
                )],
            ));
        }
        Ok(Message::assistant_text("Done."))
    }
}

/// A summarizer that forgets every detail.
struct Forgetful;

#[async_trait]
impl Provider for Forgetful {
    fn name(&self) -> &str {
        "forgetful"
    }

    async fn complete(&self, _: &Request, _: EventSink<'_>) -> Result<Message, ProviderError> {
        Ok(Message::assistant_text(
            "The user merged a branch and moved on to the docs.",
        ))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let compactor = Compactor::new(ModelRef::new(Arc::new(ToyModel), "toy-1"))
        .with_compaction_model(Some(ModelRef::new(Arc::new(Forgetful), "forgetful-1")))
        .with_prompt(CompactionPrompt::from_text("Summarize.")?)
        .with_config(CompactorConfig::new().with_keep_tokens(10));
    let store = MemoryStore::new();
    let (agent, _) = Driver::open(compactor, store, "work").await?;
    // 1. Offer the tool (and let every summary name it).
    let mut agent = agent.with_recall_tool();

    let sha = "4f2a9c1be07d35a8e6c2b91f0d4a7e3c58b16f29";
    agent
        .append(vec![Message::user_text("merge the parser branch")])
        .await?;
    agent
        .append(vec![
            Message::new(
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    "toolu_1",
                    "bash",
                    json!({"command": "git merge parser"}),
                )],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::tool_result(
                    "toolu_1",
                    format!("Merge made by the 'ort' strategy.\nmerged commit {sha}"),
                    false,
                )],
            ),
            Message::assistant_text("Merged."),
        ])
        .await?;
    agent
        .append(vec![Message::user_text("now update the docs")])
        .await?;
    agent
        .append(vec![Message::assistant_text("Docs updated.")])
        .await?;
    // A conversation this small would not get smaller: forced, as `/compact --force`.
    let run = CompactRun::manual(None).with_force(true);
    if let CompactOutcome::Compacted(c) = agent.compact_with(run).await? {
        println!("summary:\n{}\n", c.report.summary);
    }
    assert!(
        !agent
            .context()
            .messages
            .iter()
            .any(|m| format!("{m:?}").contains(sha))
    );

    let mut reply = agent
        .send(
            vec![Message::user_text("which commit did we merge?")],
            &mut |_| {},
        )
        .await?;
    // 2. The tool loop: answer the recall calls, send the results back.
    loop {
        let answers = agent.answer_recall(&reply.message).await;
        if answers.is_empty() {
            break;
        }
        let results = answers
            .iter()
            .map(|(id, answer)| {
                println!("  ({})", answer.line);
                answer.to_block(id)
            })
            .collect();
        reply = agent
            .send(vec![Message::new(Role::User, results)], &mut |_| {})
            .await?;
    }
    println!("{}", reply.message.text());
    assert!(
        reply.message.text().contains(sha),
        "the model found the SHA"
    );
    Ok(())
}
