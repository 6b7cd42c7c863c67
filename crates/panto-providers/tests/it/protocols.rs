//! The scenarios every adapter must pass, as one table run against each protocol compiled in:
//! text and tool calls, whole and streamed, with usage; stop reasons; a cut stream; a
//! transient failure retried; an overflow answer from the shared corpus; the key header;
//! request options on the wire; extra headers; a caller's client. Each protocol's fixtures
//! live beside its own tests (`PROTOCOL` in `anthropic.rs`, `openai_chat.rs`, ...).

use panto_model::{ContentBlock, Message, Role, ThinkingBlock, Usage};
use panto_provider::{Provider, ProviderError, Request, RequestOptions};
use panto_providers::{Config, Error};
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::{
    self, KEY, Protocol, assert_malformed, bodies, case_response, hello, json_answer,
    options_request, run,
};

/// The protocols compiled in (one per adapter feature). Each adapter's module uses `common`, so
/// the list lives here, above them, and `common` knows none of them.
pub(crate) fn protocols() -> Vec<&'static Protocol> {
    vec![
        #[cfg(feature = "anthropic")]
        &crate::anthropic::PROTOCOL,
        #[cfg(feature = "openai-chat")]
        &crate::openai_chat::PROTOCOL,
        #[cfg(feature = "openai-responses")]
        &crate::openai_responses::PROTOCOL,
        #[cfg(feature = "gemini")]
        &crate::gemini::PROTOCOL,
    ]
}

/// The usage every fixture reports, on the Contract 1 names.
fn table_usage() -> Usage {
    let mut usage = Usage::new(200, 30);
    usage.cache_read_input_tokens = Some(1000);
    usage
}

/// A fresh server answering `response` for `protocol`, and the adapter for it.
async fn serve(
    protocol: &Protocol,
    streaming: bool,
    response: ResponseTemplate,
) -> (MockServer, Box<dyn Provider>) {
    let server = MockServer::start().await;
    protocol.answer(&server, response).await;
    let provider = protocol.provider(&server, streaming);
    (server, provider)
}

/// The roles of a request body's conversation in order, as the protocol names them (a
/// Responses item other than a message by its type).
fn wire_roles(protocol: &str, body: &Value) -> Vec<String> {
    let (list, role) = match protocol {
        "openai-responses" => ("/input", "/role"),
        "gemini" => ("/contents", "/role"),
        _ => ("/messages", "/role"),
    };
    body.pointer(list)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|item| {
            let named = item.pointer(role).or_else(|| item.get("type"));
            named.and_then(Value::as_str).unwrap_or("?").to_owned()
        })
        .filter(|r| r != "system")
        .collect()
}

/// An assistant message of nothing but thinking that the protocol cannot send back (unsigned;
/// another provider's signature; a Responses reasoning item with nothing after it) is left out
/// before the wire and the user messages around it merged, on every protocol: never two user
/// messages side by side (fixed for Anthropic first; Chat dropped every thinking-only message
/// at rendering, Responses and Gemini theirs). Thinking the protocol does take back keeps its
/// message.
#[tokio::test]
async fn an_assistant_message_of_thinking_that_cannot_go_back_leaves_no_two_user_messages() {
    let thinking = |signature: Option<&str>, extra: Option<(&str, &str)>| {
        let mut t = ThinkingBlock::new("Look at the parser first.", signature.map(str::to_owned));
        if let Some((k, v)) = extra {
            t.extra.insert(k.to_owned(), json!(v));
        }
        ContentBlock::Thinking(t)
    };
    let kinds = [
        ("unsigned", thinking(None, None)),
        ("Anthropic-signed", thinking(Some("sig-a"), None)),
        (
            "Responses-encrypted",
            thinking(None, Some(("encrypted_content", "gAAAA-enc"))),
        ),
        (
            "Gemini-signed",
            thinking(None, Some(("thoughtSignature", "c2ln"))),
        ),
    ];
    for protocol in protocols() {
        for (kind, block) in &kinds {
            let at = format!("{}, {kind}", protocol.name);
            let (server, provider) =
                serve(protocol, false, protocol.text_answer("Ok.", false)).await;
            let request = Request::new(
                "test-model",
                "Be brief.",
                vec![
                    Message::user_text("Read the parser."),
                    Message::new(Role::Assistant, vec![block.clone()]),
                    Message::user_text("And the lexer?"),
                ],
                256,
            );
            let (result, _) = run(&provider, &request).await;
            result.unwrap_or_else(|e| panic!("{at}: {e}"));
            let body = &bodies(&server).await[0];
            let roles = wire_roles(protocol.name, body);
            let kept = matches!(
                (protocol.name, *kind),
                ("anthropic", "Anthropic-signed") | ("gemini", "Gemini-signed")
            );
            let expected: &[&str] = match (kept, protocol.name) {
                (false, _) => &["user"],
                (true, "gemini") => &["user", "model", "user"],
                (true, _) => &["user", "assistant", "user"],
            };
            assert_eq!(roles, expected, "{at}: {body}");
            let text = body.to_string();
            assert!(
                text.contains("Read the parser.") && text.contains("And the lexer?"),
                "{at}: {text}"
            );
        }
    }
}

#[tokio::test]
async fn text_answers_whole_and_streamed_with_usage() {
    for protocol in protocols() {
        for streaming in [false, true] {
            let at = format!("{} (streaming {streaming})", protocol.name);
            let answer = protocol.text_answer("Hello there.", streaming);
            let (server, provider) = serve(protocol, streaming, answer).await;
            let (result, events) = run(&provider, &hello()).await;
            let message = result.unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(
                message.content,
                [ContentBlock::text("Hello there.")],
                "{at}"
            );
            assert_eq!(message.stop_reason.as_deref(), Some("end_turn"), "{at}");
            assert_eq!(message.usage, Some(table_usage()), "{at}");
            assert!(message.model.is_some(), "{at}");
            let expected: &[&str] = if streaming {
                &["text:Hello ", "text:there."]
            } else {
                &["text:Hello there."]
            };
            assert_eq!(events, expected, "{at}");
            let body = &bodies(&server).await[0];
            assert!(body.to_string().contains("Hello?"), "{at}: {body}");
        }
    }
}

#[tokio::test]
async fn tool_calls_whole_and_streamed() {
    for protocol in protocols() {
        for streaming in [false, true] {
            let at = format!("{} (streaming {streaming})", protocol.name);
            let answer = if streaming {
                common::sse_answer((protocol.tool_stream)())
            } else {
                json_answer((protocol.tool_whole)())
            };
            let (_server, provider) = serve(protocol, streaming, answer).await;
            let (result, events) = run(&provider, &hello()).await;
            let message = result.unwrap_or_else(|e| panic!("{at}: {e}"));
            let call = ContentBlock::tool_use("call_1", "read", json!({"path": "a.rs"}));
            assert_eq!(message.content, [call], "{at}");
            assert_eq!(message.stop_reason.as_deref(), Some("tool_use"), "{at}");
            assert_eq!(message.usage, Some(table_usage()), "{at}");
            assert_eq!(events, ["tool:read"], "{at}");
        }
    }
}

#[tokio::test]
async fn stop_reasons_map_to_the_session_file_names() {
    for protocol in protocols() {
        for (body, want) in (protocol.stop_cases)() {
            let (_server, provider) = serve(protocol, false, json_answer(body.clone())).await;
            let message = run(&provider, &hello()).await.0.unwrap();
            assert_eq!(
                message.stop_reason.as_deref(),
                Some(want),
                "{}: {body}",
                protocol.name
            );
        }
    }
}

#[tokio::test]
async fn a_cut_stream_is_an_error_naming_the_missing_end_and_is_not_retried() {
    for protocol in protocols() {
        let answer = common::sse_answer((protocol.cut_stream)("Half an ans"));
        let (server, provider) = serve(protocol, true, answer).await;
        let (result, events) = run(&provider, &hello()).await;
        assert_malformed(&result);
        assert!(
            panto_providers::cut_short(result.as_ref().unwrap_err()),
            "{}: a cut stream is recognised as cut short",
            protocol.name
        );
        let error = result.unwrap_err().to_string();
        assert!(
            error.contains(protocol.end_marker),
            "{}: {error}",
            protocol.name
        );
        // The text was shown as it came (the last byte, which also occurs in the key, held
        // back by the key scrubber until the stream ended), but the answer is not taken, and
        // nothing is retried once text was shown.
        assert_eq!(events, ["text:Half an an", "text:s"], "{}", protocol.name);
        assert_eq!(server.received_requests().await.unwrap().len(), 1);
    }
}

#[tokio::test]
async fn a_transient_failure_before_anything_was_shown_is_retried_and_announced() {
    for protocol in protocols() {
        for streaming in [false, true] {
            let at = format!("{} (streaming {streaming})", protocol.name);
            let server = MockServer::start().await;
            Mock::given(method("POST"))
                .respond_with((protocol.transient)(streaming))
                .up_to_n_times(1)
                .mount(&server)
                .await;
            protocol
                .answer(&server, protocol.text_answer("Hello there.", streaming))
                .await;
            let provider = protocol.provider(&server, streaming);
            let (result, events) = run(&provider, &hello()).await;
            assert_eq!(result.unwrap().text(), "Hello there.", "{at}");
            let expected: &[&str] = if streaming {
                &["retry:1/3:server", "text:Hello ", "text:there."]
            } else {
                &["retry:1/3:server", "text:Hello there."]
            };
            assert_eq!(events, expected, "{at}");
            assert_eq!(server.received_requests().await.unwrap().len(), 2, "{at}");
        }
    }
}

/// The first overflow case of each protocol in the shared visible sample
/// (`shared/data/overflow/visible.jsonl`, whose cases `tests/fixtures/overflow.jsonl` carries
/// with `origin: visible`): an HTTP error, or an error inside a stream.
fn shared_overflow(protocol: &str) -> Value {
    let text = std::fs::read_to_string(crate::classify::fixture("overflow.jsonl")).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|c| {
            c["origin"] == "visible" && c["protocol"] == protocol && c["expect"] == "overflow"
        })
        .unwrap_or_else(|| panic!("no shared overflow case for {protocol}"))
}

#[tokio::test]
async fn an_overflow_answer_is_context_overflow_and_never_retried() {
    for protocol in protocols() {
        let case = shared_overflow(protocol.name);
        // An error inside a stream needs a streaming request; an HTTP error is recognised
        // whether the request streamed or not.
        let modes: &[bool] = if case.get("sse").is_some() {
            &[true]
        } else {
            &[false, true]
        };
        for &streaming in modes {
            let at = format!("{} {} (streaming {streaming})", protocol.name, case["id"]);
            let (server, provider) = serve(protocol, streaming, case_response(&case)).await;
            let error = run(&provider, &hello()).await.0.unwrap_err();
            assert!(
                matches!(error, ProviderError::ContextOverflow { .. }),
                "{at}: {error}"
            );
            assert_eq!(server.received_requests().await.unwrap().len(), 1, "{at}");
        }
    }
}

#[tokio::test]
async fn the_key_travels_in_the_protocol_header_and_no_key_sends_none() {
    for protocol in protocols() {
        let (name, prefix) = protocol.key_header;
        let (server, provider) = serve(protocol, true, protocol.text_answer("ok", true)).await;
        run(&provider, &hello()).await.0.unwrap();
        let mut config = common::config(&(protocol.base)(&server.uri()));
        config.api_key = panto_providers::ApiKey::none();
        run(&protocol.build(config), &hello()).await.0.unwrap();
        let requests = server.received_requests().await.unwrap();
        let header = |i: usize, n: &str| {
            requests[i]
                .headers
                .get(n)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        assert_eq!(
            header(0, name),
            Some(format!("{prefix}{KEY}")),
            "{}",
            protocol.name
        );
        assert_eq!(header(1, name), None, "{}", protocol.name);
        assert!(!requests[0].url.as_str().contains(KEY), "{}", protocol.name);
        for (fixed, value) in protocol.fixed_headers {
            for i in 0..2 {
                assert_eq!(
                    header(i, fixed).as_deref(),
                    Some(*value),
                    "{}",
                    protocol.name
                );
            }
        }
    }
}

#[tokio::test]
async fn request_options_reach_the_wire_under_each_protocols_names() {
    for protocol in protocols() {
        let (server, provider) = serve(protocol, false, protocol.text_answer("ok", false)).await;
        // Every option set, then none set, then a tool choice without tools.
        run(&provider, &options_request()).await.0.unwrap();
        run(&provider, &hello()).await.0.unwrap();
        let mut toolless = options_request();
        toolless.tools.clear();
        run(&provider, &toolless).await.0.unwrap();
        let bodies = bodies(&server).await;
        let (choice_at, _) = protocol.choice_wire;
        for (pointer, value) in (protocol.options_wire)() {
            let at = format!("{} {pointer}", protocol.name);
            assert_eq!(
                bodies[0].pointer(pointer),
                Some(&value),
                "{at}: {}",
                bodies[0]
            );
            assert_eq!(bodies[1].pointer(pointer), None, "{at}: {}", bodies[1]);
            if !choice_at.starts_with(pointer) {
                assert_eq!(bodies[2].pointer(pointer), Some(&value), "{at}");
            }
        }
        assert_eq!(bodies[2].pointer(choice_at), None, "{}", protocol.name);
    }
}

#[tokio::test]
async fn each_tool_choice_has_its_protocol_name() {
    for protocol in protocols() {
        let (choice_at, choices) = protocol.choice_wire;
        let (server, provider) = serve(protocol, false, protocol.text_answer("ok", false)).await;
        let choices = choices();
        for (choice, _) in &choices {
            let mut request = options_request();
            request.options = RequestOptions::new().with_tool_choice(choice.clone());
            run(&provider, &request).await.0.unwrap();
        }
        let bodies = bodies(&server).await;
        for ((choice, value), body) in choices.iter().zip(&bodies) {
            assert_eq!(
                body.pointer(choice_at),
                Some(value),
                "{} {choice:?}",
                protocol.name
            );
        }
    }
}

#[tokio::test]
async fn extra_headers_are_sent_and_a_sensitive_one_is_never_shown() {
    const TOKEN: &str = "gw-secret-4242-abcdef";
    for protocol in protocols() {
        let server = MockServer::start().await;
        let echo = json!({"error": {"message": format!("gateway token {TOKEN} was rejected")}});
        protocol
            .answer(&server, ResponseTemplate::new(403).set_body_json(echo))
            .await;
        let config = common::config(&(protocol.base)(&server.uri()))
            .with_header("x-team", "compaction")
            .with_header("X-Gateway-Token", TOKEN);
        let shown = format!("{config:?}");
        assert!(
            !shown.contains(TOKEN) && shown.contains("compaction"),
            "{shown}"
        );
        let provider = protocol.build(config);
        let error = run(&provider, &hello()).await.0.unwrap_err();
        assert!(
            !error.to_string().contains(TOKEN),
            "{}: {error}",
            protocol.name
        );
        let requests = server.received_requests().await.unwrap();
        assert_eq!(requests[0].headers.get("x-team").unwrap(), "compaction");
        assert_eq!(requests[0].headers.get("x-gateway-token").unwrap(), TOKEN);
        // A server that echoes the token in an answer cannot get it stored either.
        server.reset().await;
        let echoed = format!("Your gateway token is {TOKEN}.");
        protocol
            .answer(&server, protocol.text_answer(&echoed, false))
            .await;
        let config = common::config(&(protocol.base)(&server.uri()))
            .with_streaming(false)
            .with_header("X-Gateway-Token", TOKEN);
        let message = run(&protocol.build(config), &hello()).await.0.unwrap();
        assert!(
            !message.text().contains(TOKEN),
            "{}: {message:?}",
            protocol.name
        );
        assert!(message.text().contains("<redacted>"), "{}", protocol.name);
        // Nor can it get it shown while the answer streams, in any cut of the stream.
        server.reset().await;
        protocol
            .answer(&server, protocol.text_answer(&echoed, true))
            .await;
        let config =
            common::config(&(protocol.base)(&server.uri())).with_header("X-Gateway-Token", TOKEN);
        let (message, events) = run(&protocol.build(config), &hello()).await;
        let streamed: String = events
            .iter()
            .filter_map(|e| e.strip_prefix("text:"))
            .collect();
        assert!(
            !streamed.contains(TOKEN) && !streamed.contains(&TOKEN[..8]),
            "{}: {events:?}",
            protocol.name
        );
        assert!(
            streamed.contains("<redacted>"),
            "{}: {events:?}",
            protocol.name
        );
        assert!(
            !message.unwrap().text().contains(TOKEN),
            "{}",
            protocol.name
        );
    }
}

#[tokio::test]
async fn a_callers_client_carries_the_requests() {
    for protocol in protocols() {
        let (server, _) = serve(protocol, true, protocol.text_answer("ok", true)).await;
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("x-from-client", "yes".parse().unwrap());
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .unwrap();
        let config = common::config(&(protocol.base)(&server.uri())).with_client(client);
        assert!(config.client().is_some());
        let provider = protocol.build(config);
        run(&provider, &hello()).await.0.unwrap();
        let requests = server.received_requests().await.unwrap();
        assert_eq!(
            requests[0].headers.get("x-from-client").unwrap(),
            "yes",
            "{}",
            protocol.name
        );
    }
}

#[test]
fn extra_headers_that_cannot_be_sent_are_refused_naming_the_header_not_the_value() {
    for protocol in protocols() {
        for (name, value, reason) in [
            ("bad name", "v", "name"),
            ("x-api-token", "line\nbreak-secret", "value"),
        ] {
            let config = Config::new("http://127.0.0.1:1", "").with_header(name, value);
            let Err(error) = (protocol.make)(config) else {
                panic!("{}: {name} was accepted", protocol.name);
            };
            assert!(matches!(error, Error::InvalidHeader { .. }), "{error}");
            let text = error.to_string();
            assert!(text.contains(name) && text.contains(reason), "{text}");
            assert!(!text.contains("secret"), "{text}");
        }
    }
}
