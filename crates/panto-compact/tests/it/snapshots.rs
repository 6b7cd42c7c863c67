//! Snapshots of whole compaction requests: the system prompt with and without extra
//! instructions, and the user prompt with and without a previous summary.

use panto_compact::KnownWindows;
use panto_compact::{CompactOutcome, CompactRun};
use panto_model::{ContentBlock, Entry, Message, Role};
use panto_provider::Request;
use serde_json::json;

use crate::*;

/// A request as text: its parameters, then each part under a rule.
fn render(r: &Request) -> String {
    let mut out = format!(
        "model: {}\nmax_output_tokens: {}\ntools: {}\n",
        r.model,
        r.max_output_tokens,
        r.tools.len()
    );
    out.push_str("===== system =====\n");
    out.push_str(&r.system);
    for m in &r.messages {
        out.push_str(&format!("\n===== {} =====\n", m.role.as_str()));
        out.push_str(&m.text());
    }
    out
}

fn conversation() -> Vec<Message> {
    vec![
        user("The test `parse_empty` fails. Fix it without touching the public API."),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text("Let me read the parser."),
                ContentBlock::tool_use("toolu_1", "read", json!({"path": "src/parse.rs"})),
            ],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::tool_result(
                "toolu_1",
                "pub fn parse(s: &str) -> Vec<Token> {\n    s.split(',').map(Token::new).collect()\n}",
                false,
            )],
        ),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text("`parse(\"\")` yields one empty token. Filtering empty pieces."),
                ContentBlock::tool_use(
                    "toolu_2",
                    "edit",
                    json!({"path": "src/parse.rs", "old": "s.split(',')", "new": "s.split(',').filter(|p| !p.is_empty())"}),
                ),
            ],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::tool_result(
                "toolu_2",
                "permission denied: src/parse.rs",
                true,
            )],
        ),
        assistant("The file is read-only. Should I change its permissions?"),
        user("Yes, chmod it, then run the tests."),
    ]
}

#[tokio::test]
async fn compaction_requests() {
    let (provider, active) = model("main", "big");
    provider.push_text("## Goal\nFix `parse_empty` without changing the public API.");
    provider.push_text("second summary");
    let mut c = compactor(active, 300);
    let mut log = log_of(&conversation());

    let ctx = log.replay();
    let first = c
        .compact(
            &ctx,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap();
    assert!(matches!(first, CompactOutcome::Compacted(_)));

    let more = [
        assistant("Done: chmod u+w src/parse.rs, edit applied, `cargo test` passes (42 tests)."),
        user("Great. Now add a test for a trailing comma."),
        assistant("Added `parse_trailing_comma` in tests/parse.rs; it passes."),
        user("Commit it."),
    ];
    let entries: Vec<Entry> = more.into_iter().map(Entry::Message).collect();
    log.append(&entries).await.unwrap();
    let ctx = log.replay();
    let second = c
        .compact(
            &ctx,
            &mut log,
            CompactRun::manual(Some("Keep the exact test names.".into())),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap();
    assert!(matches!(second, CompactOutcome::Compacted(_)));

    let requests = provider.requests();
    insta::assert_snapshot!("first_compaction_request", render(&requests[0]));
    insta::assert_snapshot!(
        "second_compaction_request_with_instructions_and_previous_summary",
        render(&requests[1])
    );
}
