//! Recall end to end: `panto recall` and `panto show` on a compacted session.

use serde_json::json;

use crate::support::Sandbox;

const SHA: &str = "4f2a9c1be07d35a8e6c2b91f0d4a7e3c58b16f29";

/// A session whose tool loop printed [`SHA`], then a compaction that summarized it.
fn compacted_session() -> String {
    [
        json!({"type":"message","id":"m1","role":"user","content":[{"type":"text","text":"merge the parser branch"}]}),
        json!({"type":"message","id":"m2","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"bash","input":{"command":"git merge parser"}}]}),
        json!({"type":"message","id":"m3","role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":format!("Merge made by the 'ort' strategy.\nmerged commit {SHA}")}]}),
        json!({"type":"message","id":"m4","role":"assistant","content":[{"type":"text","text":"Merged."}]}),
        json!({"type":"compaction","id":"c1","summary":"The user merged a branch.","kept_messages":0}),
    ]
    .iter()
    .map(|v| format!("{v}\n"))
    .collect()
}

#[test]
fn recall_and_show_find_what_was_summarized() {
    let sb = Sandbox::new();
    sb.write("s.jsonl", &compacted_session());
    let run = sb.run(&["recall", "s.jsonl", "4f2a9c1", "--json"]);
    run.expect_code(0);
    let doc = run.json();
    let hit = &doc["hits"][0];
    assert_eq!(hit["id"], "toolu_1");
    assert_eq!(hit["role"], "user");
    assert_eq!(hit["tool"], "bash");
    assert_eq!(hit["summarized_by"], "c1");
    assert!(hit["snippet"].as_str().unwrap().contains(SHA));
    assert!(hit["text"].as_str().unwrap().contains("'ort' strategy"));
    assert!(hit["score"].is_number());
    let run = sb.run(&["recall", "s.jsonl", "merged commit"]);
    run.expect_code(0);
    assert!(
        run.stdout.contains("[toolu_1] tool result of bash"),
        "{}",
        run.stdout
    );
    let run = sb.run(&["show", "s.jsonl", "toolu_1", "--context", "1"]);
    run.expect_code(0);
    assert!(
        run.stdout.contains("[m2#0] tool call of bash"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains(SHA), "{}", run.stdout);
    sb.run(&["show", "s.jsonl", "m99"]).expect_code(2);
}
