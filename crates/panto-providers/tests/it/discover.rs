//! Asking servers for their context window, against loopback emulations of each kind that
//! answer as their documentation shows:
//! - llama-server: `GET /props` (llama.cpp `tools/server/README.md`, "GET `/props`: Get server
//!   global properties"; `default_generation_settings.n_ctx`), and in router mode only with
//!   `?model=` (same README, "router mode");
//! - Ollama: `GET /api/ps` (`context_length` of a loaded model: `ProcessModelResponse` in
//!   ollama `api/types.go`, docs.ollama.com/api/ps) and `POST /api/show` (ollama
//!   `docs/api.md`, "Show Model Information": `parameters` text with `num_ctx`, `model_info`
//!   with `llama.context_length`);
//! - vLLM: `GET /v1/models` with `max_model_len` (vLLM `vllm/entrypoints/openai/protocol.py`,
//!   `ModelCard` in `ModelList`);
//! - LM Studio: `GET /api/v1/models` (lmstudio.ai/docs/developer/rest/list: `key`,
//!   `loaded_instances[].config.context_length`, `max_context_length`) and `GET /api/v0/models`
//!   (lmstudio.ai/docs/api/rest-api: `id`, `max_context_length`).

use panto_provider::ProviderError;
use panto_providers::{DiscoveredWindow, ServerKind, WindowProbe};
use serde_json::{Value, json};
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::{KEY, config};

async fn probe(server: &MockServer) -> WindowProbe {
    WindowProbe::new(config(&format!("{}/v1", server.uri()))).unwrap()
}

async fn serve(server: &MockServer, verb: &str, at: &str, body: Value) {
    Mock::given(method(verb))
        .and(path(at))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(server)
        .await;
}

/// The `/props` answer of llama-server as its README shows it, with `n_ctx` set.
fn props(n_ctx: u64) -> Value {
    json!({
        "default_generation_settings": {
            "id": 0, "id_task": -1, "n_ctx": n_ctx, "speculative": false, "is_processing": false,
            "params": {"n_predict": -1, "seed": 4_294_967_295u64, "temperature": 0.8, "max_tokens": -1},
            "prompt": "", "next_token": {"has_next_token": true, "n_remain": -1, "n_decoded": 0}
        },
        "total_slots": 1,
        "model_path": "../models/SmolLM2-135M-Instruct-Q8_0.gguf",
        "chat_template": "{% for message in messages %}...{% endfor %}",
        "modalities": {"vision": false},
        "build_info": "b6000-abcdef0",
        "is_sleeping": false
    })
}

fn window(tokens: u64, server: ServerKind, served: bool) -> (u64, ServerKind, bool) {
    (tokens, server, served)
}

fn seen(found: &DiscoveredWindow) -> (u64, ServerKind, bool) {
    (found.tokens, found.server, found.served)
}

#[tokio::test]
async fn llama_server_says_the_context_of_a_slot_in_props_and_the_key_goes_as_a_bearer() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/props"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(props(4096)))
        .expect(1)
        .mount(&server)
        .await;
    let p = probe(&server).await;
    let found = p.discover("local").await.unwrap().unwrap();
    assert_eq!(seen(&found), window(4096, ServerKind::LlamaServer, true));
    assert_eq!(
        found.endpoint,
        "GET /props default_generation_settings.n_ctx"
    );
}

#[tokio::test]
async fn a_llama_server_router_says_it_for_the_model_asked() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/props"))
        .and(query_param("model", "main-model"))
        .respond_with(ResponseTemplate::new(200).set_body_json(props(8192)))
        .mount(&server)
        .await;
    // Without a model, a router answers about itself, without `n_ctx`.
    serve(
        &server,
        "GET",
        "/props",
        json!({"role": "router", "build_info": "b6000"}),
    )
    .await;
    let p = probe(&server).await;
    let found = p.llama_server("main-model").await.unwrap().unwrap();
    assert_eq!(seen(&found), window(8192, ServerKind::LlamaServer, true));
}

#[tokio::test]
async fn ollama_says_the_context_of_a_loaded_model_then_num_ctx_then_the_models_own_length() {
    // Loaded: `/api/ps` has the context it was loaded with.
    let server = MockServer::start().await;
    serve(
        &server,
        "GET",
        "/api/ps",
        json!({"models": [{"name": "llama3.2:latest", "model": "llama3.2:latest", "size": 2_019_393_189u64,
            "digest": "a80c4f17acd5", "details": {"format": "gguf", "family": "llama"},
            "expires_at": "2025-10-17T16:47:07Z", "size_vram": 0, "context_length": 4096}]}),
    )
    .await;
    let p = probe(&server).await;
    let found = p.discover("llama3.2").await.unwrap().unwrap();
    assert_eq!(seen(&found), window(4096, ServerKind::Ollama, true));
    assert_eq!(found.endpoint, "GET /api/ps context_length");

    // Not loaded, `num_ctx` set in the Modelfile: `/api/show` says it in `parameters`.
    let server = MockServer::start().await;
    serve(&server, "GET", "/api/ps", json!({"models": []})).await;
    Mock::given(method("POST"))
        .and(path("/api/show"))
        .and(body_json(json!({"model": "llama3.2"})))
        .respond_with(ResponseTemplate::new(200).set_body_json(show(Some(16_384))))
        .mount(&server)
        .await;
    let found = probe(&server)
        .await
        .discover("llama3.2")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen(&found), window(16_384, ServerKind::Ollama, true));
    assert_eq!(found.endpoint, "POST /api/show parameters num_ctx");

    // Neither: the model's own length, which the server may serve less of.
    let server = MockServer::start().await;
    serve(&server, "GET", "/api/ps", json!({"models": []})).await;
    serve(&server, "POST", "/api/show", show(None)).await;
    let found = probe(&server)
        .await
        .ollama("llama3.2")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen(&found), window(8192, ServerKind::Ollama, false));
}

/// Ollama's `/api/show` answer as its API documentation shows it, with `num_ctx` among the
/// parameters when given.
fn show(num_ctx: Option<u64>) -> Value {
    let mut parameters = "num_keep                       24\nstop                           \"<|start_header_id|>\"\nstop                           \"<|eot_id|>\"".to_owned();
    if let Some(n) = num_ctx {
        parameters.push_str(&format!("\nnum_ctx                        {n}"));
    }
    json!({
        "modelfile": "# Modelfile generated by \"ollama show\"\nFROM /root/.ollama/models/blobs/sha256-dde5",
        "parameters": parameters,
        "template": "{{ .Prompt }}",
        "details": {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
            "parameter_size": "8.0B", "quantization_level": "Q4_0"},
        "model_info": {
            "general.architecture": "llama", "general.parameter_count": 8_030_261_248u64,
            "llama.attention.head_count": 32, "llama.block_count": 32,
            "llama.context_length": 8192, "llama.embedding_length": 4096,
            "tokenizer.ggml.model": "gpt2"
        }
    })
}

#[tokio::test]
async fn vllm_says_max_model_len_in_its_model_listing() {
    let server = MockServer::start().await;
    serve(
        &server,
        "GET",
        "/v1/models",
        json!({"object": "list", "data": [
            {"id": "other", "object": "model", "owned_by": "vllm", "max_model_len": 2048},
            {"id": "Qwen/Qwen2.5-7B-Instruct", "object": "model", "created": 1_700_000_000, "owned_by": "vllm",
             "root": "Qwen/Qwen2.5-7B-Instruct", "parent": null, "max_model_len": 32_768, "permission": []}
        ]}),
    )
    .await;
    let found = probe(&server)
        .await
        .discover("Qwen/Qwen2.5-7B-Instruct")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen(&found), window(32_768, ServerKind::Vllm, true));
}

#[tokio::test]
async fn lm_studio_says_the_context_a_model_was_loaded_with_else_its_longest() {
    let listing = |loaded: bool| {
        let instances = if loaded {
            json!([{"id": "qwen/qwen3-4b", "config": {"context_length": 8192, "eval_batch_size": 512}}])
        } else {
            json!([])
        };
        json!({"models": [{"type": "llm", "publisher": "qwen", "key": "qwen/qwen3-4b",
            "display_name": "Qwen3 4B", "loaded_instances": instances, "max_context_length": 32_768,
            "format": "gguf"}]})
    };
    let server = MockServer::start().await;
    serve(&server, "GET", "/api/v1/models", listing(true)).await;
    let found = probe(&server)
        .await
        .discover("qwen/qwen3-4b")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen(&found), window(8192, ServerKind::LmStudio, true));

    let server = MockServer::start().await;
    serve(&server, "GET", "/api/v1/models", listing(false)).await;
    let found = probe(&server)
        .await
        .lm_studio("qwen/qwen3-4b")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen(&found), window(32_768, ServerKind::LmStudio, false));

    // An LM Studio older than the v1 API lists its models under v0.
    let server = MockServer::start().await;
    serve(
        &server,
        "GET",
        "/api/v0/models",
        json!({"object": "list", "data": [{"id": "meta-llama-3.1-8b-instruct", "object": "model",
            "type": "llm", "publisher": "lmstudio-community", "arch": "llama", "compatibility_type": "gguf",
            "quantization": "Q4_K_M", "state": "not-loaded", "max_context_length": 131_072}]}),
    )
    .await;
    let found = probe(&server)
        .await
        .lm_studio("meta-llama-3.1-8b-instruct")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen(&found), window(131_072, ServerKind::LmStudio, false));
}

#[tokio::test]
async fn a_server_that_says_nothing_gives_nothing_and_a_server_that_is_not_there_an_error() {
    // A server of none of the kinds: 404 everywhere, or JSON without the fields.
    let server = MockServer::start().await;
    serve(
        &server,
        "GET",
        "/v1/models",
        json!({"data": [{"id": "local"}]}),
    )
    .await;
    serve(&server, "GET", "/props", json!({"other": true})).await;
    assert_eq!(probe(&server).await.discover("local").await.unwrap(), None);
    // HTML where JSON was expected is another kind of server too.
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/props"))
        .respond_with(ResponseTemplate::new(200).set_body_raw("<html>hi</html>", "text/html"))
        .mount(&server)
        .await;
    assert_eq!(
        probe(&server).await.llama_server("local").await.unwrap(),
        None
    );

    // Nothing listens: a connection error, at once (no other kind is asked).
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let p = WindowProbe::new(config(&format!("http://127.0.0.1:{closed}/v1"))).unwrap();
    let err = p.discover("local").await.unwrap_err();
    assert!(matches!(err, ProviderError::Connection { .. }), "{err}");
}

#[tokio::test]
async fn a_refused_key_is_an_error_that_never_shows_the_key() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(401).set_body_json(
            json!({"error": {"code": 401, "message": format!("Invalid API Key {KEY}"), "type": "authentication_error"}}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_json(
            json!({"error": {"code": 401, "message": format!("Invalid API Key {KEY}"), "type": "authentication_error"}}),
        ))
        .mount(&server)
        .await;
    let err = probe(&server).await.discover("local").await.unwrap_err();
    assert!(matches!(err, ProviderError::Authentication { .. }), "{err}");
    let shown = format!("{err} {err:?}");
    assert!(
        !shown.contains(KEY) && !shown.contains(&KEY[..8]),
        "{shown}"
    );
    assert!(!format!("{:?}", probe(&server).await).contains(KEY));
}

#[tokio::test]
async fn the_servers_own_endpoints_are_at_its_root_whatever_the_version_in_the_base_url() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/proxy/props"))
        .respond_with(ResponseTemplate::new(200).set_body_json(props(2048)))
        .mount(&server)
        .await;
    for base in ["/proxy/v1", "/proxy/v1/", "/proxy"] {
        let p = WindowProbe::new(config(&format!("{}{base}", server.uri()))).unwrap();
        let found = p.llama_server("local").await.unwrap();
        assert_eq!(found.map(|f| f.tokens), Some(2048), "{base}");
    }
}
