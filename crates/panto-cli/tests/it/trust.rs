//! Project trust: an untrusted project's `.panto/config.toml` cannot send the user's key to a
//! server of its choosing; `panto trust` lets it; `panto config` shows which is the case.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::{Sandbox, scrub};

const KEY: &str = "sk-user-key-0f9e8d7c6b5a";

/// A Chat Completions server that answers every request with one short reply.
async fn server() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "c", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "A short summary."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3}})))
        .mount(&server)
        .await;
    server
}

/// The keys that reached `server`, one per request.
async fn keys_seen(server: &MockServer) -> Vec<String> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| {
            r.headers
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default()
        })
        .collect()
}

/// A user who configured their own server, in a cloned repository whose `.panto/config.toml`
/// points at an attacker's server. Commands run from a subfolder of the repository.
struct Clone {
    sb: Sandbox,
}

impl Clone {
    fn new(user_server: &str, attacker: &str) -> Clone {
        let sb = Sandbox::new();
        std::fs::write(
            sb.user_config.join("config.toml"),
            format!("provider = \"openai\"\nbase_url = \"{user_server}/v1\"\nmodel = \"m\"\n"),
        )
        .unwrap();
        sb.write(
            ".panto/config.toml",
            &format!("provider = \"openai\"\nbase_url = \"{attacker}/v1\"\nkeep_tokens = 1500\n"),
        );
        std::fs::create_dir_all(sb.work().join("src/deep")).unwrap();
        sb.example("debugging.jsonl");
        Clone { sb }
    }

    fn run(&self, args: &[&str]) -> crate::support::Run {
        let mut cmd = self.sb.command(args);
        cmd.current_dir(self.sb.work().join("src/deep"))
            .env("OPENAI_API_KEY", KEY);
        let sb = &self.sb;
        tokio::task::block_in_place(|| sb.run_with(cmd))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_project_cannot_send_the_key_elsewhere_and_a_trusted_one_can() {
    let (user, attacker) = (server().await, server().await);
    let c = Clone::new(&user.uri(), &attacker.uri());
    let session = c.sb.work().join("debugging.jsonl");
    let session = session.to_str().unwrap();
    let fresh = c.sb.work().join("new.jsonl");
    let fresh = fresh.to_str().unwrap();

    for args in [
        vec!["send", fresh, "hello"],
        vec!["compact", session, "--dry-run"],
    ] {
        let run = c.run(&args);
        run.expect_code(0);
        let notes: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.contains("panto: note:"))
            .collect();
        assert_eq!(notes.len(), 1, "{}", run.stderr);
        assert_eq!(
            scrub(notes[0], &c.sb),
            "panto: note: ignoring provider, base_url from [work]/.panto/config.toml: the project is not trusted; if you trust it to choose where requests and your key go, run `panto trust [work]`"
        );
    }
    assert_eq!(keys_seen(&attacker).await, Vec::<String>::new());
    assert_eq!(
        keys_seen(&user).await,
        [format!("Bearer {KEY}"), format!("Bearer {KEY}")]
    );
    // The project's other settings applied: the keep budget reached the compaction.
    let config = c.run(&["config"]);
    assert!(
        config
            .stdout
            .contains("keep_tokens                   = 1500"),
        "{}",
        config.stdout
    );

    let trusted = c.run(&["trust"]);
    trusted.expect_code(0);
    assert_eq!(
        scrub(&trusted.stdout, &c.sb),
        format!(
            "[work] is trusted: its .panto/config.toml may set provider, base_url, max_response_mib, store (recorded in [sandbox]/user-config/trusted.toml)\n  it sets provider = openai\n  it sets base_url = {}/v1\n",
            attacker.uri()
        )
    );
    let record = c.sb.user_config.join("trusted.toml");
    let mode = std::fs::metadata(&record).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let run = c.run(&["send", fresh, "again"]);
    run.expect_code(0);
    assert!(!run.stderr.contains("note:"), "{}", run.stderr);
    assert_eq!(keys_seen(&attacker).await, [format!("Bearer {KEY}")]);

    // Revoked, the project is back to its other settings.
    c.run(&["trust", "--revoke"]).expect_code(0);
    c.run(&["send", fresh, "once more"]).expect_code(0);
    assert_eq!(keys_seen(&attacker).await.len(), 1);
    assert_eq!(keys_seen(&user).await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_and_the_environment_still_route_in_an_untrusted_project() {
    let (user, attacker, flagged) = (server().await, server().await, server().await);
    let c = Clone::new(&user.uri(), &attacker.uri());
    let fresh = c.sb.work().join("new.jsonl");
    let base = format!("{}/v1", flagged.uri());
    c.run(&["send", fresh.to_str().unwrap(), "hi", "--base-url", &base])
        .expect_code(0);
    assert_eq!(keys_seen(&flagged).await.len(), 1);
    assert!(keys_seen(&attacker).await.is_empty());
}

#[test]
fn config_shows_whether_the_project_is_trusted_and_what_it_was_refused() {
    let sb = Sandbox::new();
    sb.write(
        ".panto/config.toml",
        "provider = \"anthropic\"\nbase_url = \"http://127.0.0.1:9\"\nmax_response_mib = 4096\nmodel = \"m\"\n",
    );
    let run = sb.run(&["config"]);
    run.expect_code(0);
    insta::assert_snapshot!("untrusted", scrub(&run.stdout, &sb));
    sb.run(&["trust"]).expect_code(0);
    let run = sb.run(&["config"]);
    run.expect_code(0);
    insta::assert_snapshot!("trusted", scrub(&run.stdout, &sb));
}

#[test]
fn a_trust_file_that_cannot_be_parsed_is_reported_and_never_overwritten() {
    let sb = Sandbox::new();
    sb.write(".panto/config.toml", "model = \"m\"\n");
    let record = sb.user_config.join("trusted.toml");
    let broken = "trusted = [\"/somewhere\",\n# unfinished\n";
    std::fs::write(&record, broken).unwrap();
    let run = sb.run(&["trust"]);
    run.expect_code(2);
    assert!(
        scrub(&run.stderr, &sb).starts_with("panto: [sandbox]/user-config/trusted.toml: line 3"),
        "{}",
        run.stderr
    );
    assert_eq!(std::fs::read_to_string(&record).unwrap(), broken);
    // Every command reports it: a trust decision cannot be made without the record.
    sb.run(&["config"]).expect_code(2);
}

#[test]
fn trust_outside_a_project_and_in_a_new_user_folder() {
    let sb = Sandbox::new();
    let run = sb.run(&["trust"]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("no .panto folder here or above"),
        "{}",
        run.stderr
    );

    // The user folder does not exist yet: it is created private, then the record in it.
    sb.write(".panto/config.toml", "");
    let folder = sb.dir.path().join("fresh/panto");
    let mut cmd = sb.command(&["trust", "."]);
    cmd.env("PANTO_CONFIG_DIR", &folder);
    sb.run_with(cmd).expect_code(0);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&folder), 0o700);
    assert_eq!(mode(&folder.join("trusted.toml")), 0o600);
    let text = std::fs::read_to_string(folder.join("trusted.toml")).unwrap();
    let real = std::fs::canonicalize(sb.work()).unwrap();
    assert!(
        text.contains(&format!("    \"{}\",\n", real.display())),
        "{text}"
    );
}
