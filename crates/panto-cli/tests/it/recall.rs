//! Recall end to end: `panto recall` and `panto show` on a compacted session, and the chat's
//! tool loop against a loopback server speaking each protocol's tool-call shapes (streamed):
//! the model calls `recall`, panto answers from the session, says one line, and sends the
//! answer back; the model's next reply quotes what was recalled.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::fake_model::{Protocol, chat_command};
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

/// What the loopback model saw: each request body.
#[derive(Clone, Default)]
struct ToolModel {
    protocol: Option<Protocol>,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Respond for ToolModel {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        self.bodies.lock().unwrap().push(body.clone());
        let text = body.to_string();
        let p = self.protocol.unwrap();
        if text.contains(&format!("merged commit {SHA}")) {
            // The recall answer came back: quote the SHA.
            return reply(p, Answer::Text(&format!("We merged {SHA}.")));
        }
        if text.contains("\"recall\"") && text.contains("which commit") {
            return reply(p, Answer::Call(r#"{"query":"merged commit"}"#));
        }
        reply(p, Answer::Text("No tool was offered."))
    }
}

enum Answer<'a> {
    Text(&'a str),
    Call(&'a str),
}

fn sse(events: &[(&str, Value)]) -> ResponseTemplate {
    let mut out = String::new();
    for (event, data) in events {
        if !event.is_empty() {
            out.push_str(&format!("event: {event}\n"));
        }
        out.push_str(&format!("data: {data}\n\n"));
    }
    ResponseTemplate::new(200).set_body_raw(out, "text/event-stream")
}

/// A streamed answer in the protocol's shape: text, or one call of `recall` with `args`.
fn reply(p: Protocol, answer: Answer<'_>) -> ResponseTemplate {
    let usage = json!({"input_tokens": 100, "output_tokens": 10});
    match (p, answer) {
        (Protocol::Anthropic, answer) => {
            let (block, delta, stop) = match answer {
                Answer::Text(t) => (
                    json!({"type": "text", "text": ""}),
                    json!({"type": "text_delta", "text": t}),
                    "end_turn",
                ),
                Answer::Call(args) => (
                    json!({"type": "tool_use", "id": "toolu_r1", "name": "recall", "input": {}}),
                    json!({"type": "input_json_delta", "partial_json": args}),
                    "tool_use",
                ),
            };
            sse(&[
                (
                    "message_start",
                    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "fake", "content": [], "stop_reason": null, "usage": usage}}),
                ),
                (
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0, "content_block": block}),
                ),
                (
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0, "delta": delta}),
                ),
                (
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": 0}),
                ),
                (
                    "message_delta",
                    json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 10}}),
                ),
                ("message_stop", json!({"type": "message_stop"})),
            ])
        }
        (Protocol::OpenAiChat, answer) => {
            let chunk = |delta: Value, finish: Value| json!({"id": "c1", "object": "chat.completion.chunk", "model": "fake", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
            let (first, second, finish) = match answer {
                Answer::Text(t) => (
                    json!({"role": "assistant", "content": t}),
                    json!({}),
                    "stop",
                ),
                Answer::Call(args) => (
                    json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_r1", "type": "function", "function": {"name": "recall", "arguments": ""}}]}),
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}),
                    "tool_calls",
                ),
            };
            let body = format!(
                "data: {}\n\ndata: {}\n\ndata: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
                chunk(first, Value::Null),
                chunk(second, Value::Null),
                chunk(json!({}), json!(finish)),
                json!({"id": "c1", "object": "chat.completion.chunk", "model": "fake", "choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}),
            );
            ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
        }
        (Protocol::OpenAiResponses, answer) => {
            let item = match answer {
                Answer::Text(t) => {
                    json!({"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": t, "annotations": []}]})
                }
                Answer::Call(args) => {
                    json!({"type": "function_call", "id": "fc_1", "call_id": "call_r1", "name": "recall", "arguments": args, "status": "completed"})
                }
            };
            let response = json!({"id": "resp_1", "object": "response", "status": "completed", "model": "fake", "output": [item], "usage": {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110}});
            sse(&[
                (
                    "response.created",
                    json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
                ),
                (
                    "response.output_item.done",
                    json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
                ),
                (
                    "response.completed",
                    json!({"type": "response.completed", "response": response}),
                ),
            ])
        }
        (Protocol::Gemini, answer) => {
            let part = match answer {
                Answer::Text(t) => json!({"text": t}),
                Answer::Call(args) => {
                    json!({"functionCall": {"name": "recall", "args": serde_json::from_str::<Value>(args).unwrap()}})
                }
            };
            sse(&[(
                "",
                json!({"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110}, "modelVersion": "fake"}),
            )])
        }
    }
}

/// The name of the first tool a request offers, read from the protocol's tool shape.
fn offered_tool(p: Protocol, body: &Value) -> Option<String> {
    let name = match p {
        Protocol::Anthropic | Protocol::OpenAiResponses => &body["tools"][0]["name"],
        Protocol::OpenAiChat => &body["tools"][0]["function"]["name"],
        Protocol::Gemini => &body["tools"][0]["functionDeclarations"][0]["name"],
    };
    name.as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_offers_recall_and_runs_its_calls_on_every_protocol() {
    for p in Protocol::ALL {
        let model = ToolModel {
            protocol: Some(p),
            bodies: Arc::default(),
        };
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(model.clone())
            .mount(&server)
            .await;
        let sb = Sandbox::new();
        sb.write("c.jsonl", &compacted_session());
        let cmd = chat_command(&sb, p, &server.uri());
        let out = sb.chat_with_input(cmd, "which commit did we merge?\n/recall parser branch\n");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{p:?}: {stderr}");
        assert!(
            stdout.contains(&format!("We merged {SHA}.")),
            "{p:?}: {stdout}\n{stderr}"
        );
        assert!(
            stderr.contains("recalled 2 passages for 'merged commit'")
                || stderr.contains("recalled 1 passage for 'merged commit'"),
            "{p:?}: {stderr}"
        );
        // `/recall` for the person.
        assert!(stderr.contains("for 'parser branch'"), "{p:?}: {stderr}");
        assert!(stdout.contains("[m1#0] user"), "{p:?}: {stdout}");
        let bodies = model.bodies.lock().unwrap().clone();
        assert_eq!(bodies.len(), 2, "{p:?}: a call, then the answer");
        for body in &bodies {
            assert_eq!(
                offered_tool(p, body).as_deref(),
                Some("recall"),
                "{p:?}: {body}"
            );
        }
        // The session holds the call and its answer, then the reply.
        let session = std::fs::read_to_string(sb.work().join("c.jsonl")).unwrap();
        let lines: Vec<Value> = session
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let n = lines.len();
        assert_eq!(
            lines[n - 3]["content"][0]["name"],
            "recall",
            "{p:?}: {session}"
        );
        let answer = lines[n - 2]["content"][0]["content"].as_str().unwrap();
        assert!(answer.contains(SHA), "{p:?}: {answer}");
        assert!(
            lines[n - 1]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains(SHA)
        );
    }
}
