//! The example sessions of the repository (`examples/sessions/`), sized end to end.

use std::path::Path;

use panto_model::{EffectiveContext, read_entries, replay};
use panto_size::{Fallback, Heuristic, Source, UsageSizer};

use crate::estimate_request;

fn context(name: &str) -> EffectiveContext {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/sessions")
        .join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    replay(read_entries(&bytes).expect("valid example session"))
}

#[test]
fn a_session_compacted_twice_trusts_only_usage_measured_after_the_compaction() {
    let ctx = context("compacted-twice.jsonl");
    let sizes = UsageSizer::default().measure(&ctx.messages);
    let rendered: Vec<String> = ctx
        .messages
        .iter()
        .zip(&sizes)
        .map(|(m, s)| {
            let id = m.id.as_deref().unwrap_or("summary");
            match s.source {
                Source::Heuristic(reason) => {
                    assert_eq!(s.tokens, Heuristic.message(m));
                    format!("{id} h {reason:?}")
                }
                other => format!("{id} {} {other:?}", s.tokens),
            }
        })
        .collect();
    assert_eq!(
        rendered,
        [
            "summary h Compaction",
            // Kept copies keep their exact outputs...
            "k2-0 37 Output",
            "k2-1 h KeptCopy",
            "k2-2 48 Output",
            // ...but are never differenced against the requests after the compaction.
            "e21 h KeptCopy",
            "e22 56 Output",
            // (3 + 3333 + 109) - (3 + 0 + 3330) - 56 = 56.
            "e23 56 Span",
            "e24 74 Output",
        ]
    );
    // The last request's input total (3445) plus its output.
    assert_eq!(estimate_request("", &ctx.messages), 3445 + 74);
    assert!(
        !sizes
            .iter()
            .any(|s| s.source == Source::Heuristic(Fallback::Decreasing))
    );
}

#[test]
fn an_uncompacted_session_is_measured_everywhere_but_the_first_prompt() {
    for name in ["debugging.jsonl", "design-discussion.jsonl"] {
        let ctx = context(name);
        let sizes = UsageSizer::default().measure(&ctx.messages);
        assert_eq!(
            sizes[0].source,
            Source::Heuristic(Fallback::Unbracketed),
            "{name}"
        );
        assert!(
            sizes[1..]
                .iter()
                .all(|s| matches!(s.source, Source::Output | Source::Span | Source::Share)),
            "{name}: {sizes:?}"
        );
        // The sessions end with an answer: the estimate is its input total plus its output.
        let last = ctx.messages.last().unwrap();
        let usage = last.usage.as_ref().unwrap();
        assert_eq!(
            estimate_request("", &ctx.messages),
            usage.input_total() + usage.output_tokens,
            "{name}"
        );
    }
}
