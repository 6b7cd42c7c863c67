//! The binary against servers that misbehave the way real ones do (issue 14), with small
//! timeouts: each fault ends with exit 1 and a message naming the wait and its setting, within
//! loose bounds in seconds; retries are shown as they happen; Ctrl-C cancels cleanly; and two
//! writers of one session never wait on each other's model call. The session file stays valid
//! in every case.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::raw_http::{read_request, write_chat_reply};
use crate::support::{Run, Sandbox};

/// How a server answers one connection, after reading its request.
type Answer = fn(&mut TcpStream);

/// A loopback HTTP server that reads each request and hands the connection to `answer`, on a
/// thread of its own. Counts the requests read.
struct RawServer {
    base: String,
    requests: Arc<AtomicUsize>,
}

impl RawServer {
    fn start(answer: Answer) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicUsize::new(0));
        let count = requests.clone();
        std::thread::spawn(move || {
            for socket in listener.incoming() {
                let Ok(mut socket) = socket else { return };
                let count = count.clone();
                std::thread::spawn(move || {
                    if read_request(&mut socket) {
                        count.fetch_add(1, Ordering::SeqCst);
                        answer(&mut socket);
                    }
                });
            }
        });
        RawServer { base, requests }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

fn silent(_: &mut TcpStream) {
    std::thread::sleep(Duration::from_secs(60));
}

fn head_then_silence(socket: &mut TcpStream) {
    let _ = socket.write_all(SSE_HEAD);
    std::thread::sleep(Duration::from_secs(60));
}

fn pings_only(socket: &mut TcpStream) {
    let _ = socket.write_all(SSE_HEAD);
    let ping = b"8\r\n: ping\n\n\r\n";
    for _ in 0..60 {
        if socket.write_all(ping).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn rate_limited(socket: &mut TcpStream, retry_after: &str) {
    let body = r#"{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}"#;
    let answer = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: {retry_after}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = socket.write_all(answer.as_bytes());
}

/// `OpenAI`'s answer to an account without credit (tests/fixtures/overflow.jsonl of
/// panto-providers names where it was seen).
fn out_of_quota(socket: &mut TcpStream) {
    let body = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
    let answer = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = socket.write_all(answer.as_bytes());
}

fn an_hour(socket: &mut TcpStream) {
    rate_limited(socket, "3600");
}

fn two_hours_as_a_date(socket: &mut TcpStream) {
    let date = httpdate_in(7200);
    rate_limited(socket, &date);
}

/// An HTTP date `secs` from now (IMF-fixdate), written by hand to need no dependency.
fn httpdate_in(secs: u64) -> String {
    let t = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + secs;
    let (days, rem) = (t / 86_400, t % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{weekday}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        months[(month - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `panto send` against `base` with the `OpenAI` protocol and extra `args`.
fn send_command(sb: &Sandbox, base: &str, session: &str, prompt: &str, args: &[&str]) -> Command {
    let mut all = vec![
        "send",
        session,
        prompt,
        "--provider",
        "openai",
        "--model",
        "m",
        "--base-url",
        base,
    ];
    all.extend_from_slice(args);
    let mut cmd = sb.command(&all);
    cmd.env("OPENAI_API_KEY", "test-key-123");
    cmd
}

fn timed(sb: &Sandbox, cmd: Command) -> (Run, Duration) {
    let started = Instant::now();
    let run = sb.run_with(cmd);
    (run, started.elapsed())
}

/// Every line of the session parses as a JSON object; returns them.
#[track_caller]
fn valid_entries(sb: &Sandbox, name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(sb.work().join(name)).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "torn file: {text}");
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn roles(entries: &[Value]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e["role"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// After a failed send: the prompt is the whole session.
#[track_caller]
fn only_the_prompt_stayed(sb: &Sandbox, name: &str, prompt: &str) {
    let entries = valid_entries(sb, name);
    assert_eq!(roles(&entries), ["user"]);
    assert!(entries[0].to_string().contains(prompt));
}

#[track_caller]
fn assert_between(elapsed: Duration, low: u64, high: u64) {
    assert!(
        elapsed >= Duration::from_secs(low) && elapsed < Duration::from_secs(high),
        "took {elapsed:?}, expected {low} to {high} s"
    );
}

#[test]
fn silent_servers_end_within_the_request_deadline_naming_it() {
    let faults: [(Answer, &str); 3] = [
        (silent, "the server accepted the request but sent no answer"),
        (head_then_silence, "the stream went silent"),
        (pings_only, "only keep-alive pings arrived"),
    ];
    for (answer, what) in faults {
        let server = RawServer::start(answer);
        let sb = Sandbox::new();
        sb.write(".panto/config.toml", "timeout_secs = 5\n");
        let cmd = send_command(&sb, &server.base, "s.jsonl", "Are you there?", &[]);
        let (run, elapsed) = timed(&sb, cmd);
        run.expect_code(1);
        assert_between(elapsed, 4, 20);
        assert!(run.stderr.contains("timed out"), "{}", run.stderr);
        assert!(run.stderr.contains(what), "{}", run.stderr);
        assert!(run.stderr.contains("(request wait, 5 s)"), "{}", run.stderr);
        assert!(
            run.stderr
                .contains("hint: `timeout_secs` (5 s) bounds the whole request, retries included"),
            "{}",
            run.stderr
        );
        assert_eq!(server.requests(), 1, "retried: {}", run.stderr);
        only_the_prompt_stayed(&sb, "s.jsonl", "Are you there?");
    }
}

#[test]
fn the_flag_sets_the_deadline_and_the_idle_wait_names_its_own_key() {
    let server = RawServer::start(head_then_silence);
    let sb = Sandbox::new();
    let cmd = send_command(
        &sb,
        &server.base,
        "s.jsonl",
        "Hello?",
        &["--timeout-secs", "3"],
    );
    let (run, elapsed) = timed(&sb, cmd);
    run.expect_code(1);
    assert_between(elapsed, 2, 15);
    assert!(run.stderr.contains("(request wait, 3 s)"), "{}", run.stderr);

    sb.write(".panto/config.toml", "idle_timeout_secs = 2\n");
    let cmd = send_command(&sb, &server.base, "t.jsonl", "Hello?", &[]);
    let (run, elapsed) = timed(&sb, cmd);
    run.expect_code(1);
    assert_between(elapsed, 1, 15);
    assert!(run.stderr.contains("(idle wait, 2 s)"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("hint: `idle_timeout_secs` (2 s) bounds the silence between stream events"),
        "{}",
        run.stderr
    );
    only_the_prompt_stayed(&sb, "t.jsonl", "Hello?");
}

#[test]
fn a_long_retry_after_stops_at_once_saying_when_to_retry() {
    let cases: [(Answer, &str); 2] = [
        (an_hour, "retry in about 60 min"),
        (two_hours_as_a_date, "retry in about 2 h"),
    ];
    for (answer, when) in cases {
        let server = RawServer::start(answer);
        let sb = Sandbox::new();
        let cmd = send_command(&sb, &server.base, "s.jsonl", "Quick one.", &[]);
        let (run, elapsed) = timed(&sb, cmd);
        run.expect_code(1);
        assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
        assert!(
            run.stderr
                .contains(&format!("rate limited; {when}: Rate limit reached")),
            "{}",
            run.stderr
        );
        assert!(
            run.stderr
                .contains("longer than panto waits (`max_retry_wait_secs` = 60 s)"),
            "{}",
            run.stderr
        );
        assert!(!run.stderr.contains("retrying"), "{}", run.stderr);
        assert_eq!(server.requests(), 1);
        only_the_prompt_stayed(&sb, "s.jsonl", "Quick one.");
    }
}

#[test]
fn an_account_out_of_quota_is_asked_once_and_told_to_check_its_billing() {
    let server = RawServer::start(out_of_quota);
    let sb = Sandbox::new();
    let cmd = send_command(&sb, &server.base, "s.jsonl", "Quick one.", &[]);
    let (run, elapsed) = timed(&sb, cmd);
    run.expect_code(1);
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert!(
        run.stderr.contains(
            "quota or billing limit reached: You exceeded your current quota, please check your plan and billing details."
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(
            "hint: the provider's account has no quota or credit left for this request: check the account's plan and billing"
        ),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("wait a moment"), "{}", run.stderr);
    assert!(!run.stderr.contains("retrying"), "{}", run.stderr);
    assert_eq!(server.requests(), 1);
    only_the_prompt_stayed(&sb, "s.jsonl", "Quick one.");
}

#[test]
fn a_refused_connection_shows_each_retry_as_it_happens() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let sb = Sandbox::new();
    let cmd = send_command(&sb, &base, "s.jsonl", "Anyone?", &[]);
    let (run, elapsed) = timed(&sb, cmd);
    run.expect_code(1);
    assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");
    let retries: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("panto: retrying "))
        .collect();
    assert_eq!(retries.len(), 3, "{}", run.stderr);
    for (i, line) in retries.iter().enumerate() {
        assert!(
            line.starts_with(&format!("panto: retrying {}/3 in ", i + 1)),
            "{line}"
        );
        assert!(line.contains(" s: connection failed: "), "{line}");
        assert!(line.to_lowercase().contains("connection refused"), "{line}");
    }
    assert!(
        run.stderr.contains("hint: check that the server at "),
        "{}",
        run.stderr
    );
    only_the_prompt_stayed(&sb, "s.jsonl", "Anyone?");
}

/// Waits for `child` to exit, for at most `limit`.
fn wait_for(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(started.elapsed() < limit, "still running after {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(unix)]
#[test]
fn ctrl_c_during_a_wait_cancels_and_keeps_the_prompt() {
    let server = RawServer::start(silent);
    let sb = Sandbox::new();
    let mut cmd = send_command(&sb, &server.base, "s.jsonl", "Take your time.", &[]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let started = Instant::now();
    while server.requests() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no request arrived"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = wait_for(&mut child, Duration::from_secs(10));
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("cancelled: no reply was appended; your message stays in"),
        "{stderr}"
    );
    only_the_prompt_stayed(&sb, "s.jsonl", "Take your time.");
}

/// A model that answers after `delay`, with a whole JSON answer (which a streaming request
/// accepts too).
fn slow_model(socket: &mut TcpStream) {
    std::thread::sleep(Duration::from_secs(3));
    write_chat_reply(socket, "Slow reply.");
}

#[test]
fn two_sends_on_one_session_never_wait_for_each_other() {
    let server = RawServer::start(slow_model);
    let sb = Sandbox::new();
    let spawn = |prompt: &str| {
        let mut cmd = send_command(&sb, &server.base, "s.jsonl", prompt, &[]);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.spawn().unwrap()
    };
    let started = Instant::now();
    let children = [spawn("First writer."), spawn("Second writer.")];
    let outputs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let elapsed = started.elapsed();
    // One 3 s model call each, side by side: waiting in turn would take 6 s or more.
    assert!(elapsed < Duration::from_millis(5500), "{elapsed:?}");
    let codes: Vec<i32> = outputs.iter().map(|o| o.status.code().unwrap()).collect();
    let stderr: Vec<String> = outputs
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .collect();
    let entries = valid_entries(&sb, "s.jsonl");
    let texts: Vec<String> = entries.iter().map(Value::to_string).collect();
    for prompt in ["First writer.", "Second writer."] {
        assert_eq!(
            texts.iter().filter(|t| t.contains(prompt)).count(),
            1,
            "{texts:#?}\n{stderr:#?}"
        );
    }
    if codes.contains(&0) && codes.contains(&1) {
        // Both prompts went in before either reply: the second reply would have answered a
        // conversation it never saw, so it was refused.
        let loser = &stderr[codes.iter().position(|&c| c == 1).unwrap()];
        assert!(loser.contains("the session changed"), "{loser}");
        assert!(
            loser.contains("hint: another writer appended to this session"),
            "{loser}"
        );
        assert_eq!(roles(&entries), ["user", "user", "assistant"], "{texts:#?}");
    } else {
        // One turn ended before the other began (possible on a slow machine): both replied.
        assert_eq!(codes, [0, 0], "{stderr:?}");
        assert_eq!(roles(&entries), ["user", "assistant", "user", "assistant"]);
    }
}

#[test]
fn an_open_chat_does_not_block_a_send_and_catches_up_with_it() {
    let server = RawServer::start(slow_model);
    let sb = Sandbox::new();
    let mut chat = sb.command(&[
        "chat",
        "s.jsonl",
        "--provider",
        "openai",
        "--model",
        "m",
        "--base-url",
        &server.base,
    ]);
    chat.env("OPENAI_API_KEY", "k")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut chat = chat.spawn().unwrap();
    // The chat has opened the session before the send starts.
    let started = Instant::now();
    while !sb.work().join("s.jsonl").exists() {
        assert!(started.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let cmd = send_command(&sb, &server.base, "s.jsonl", "From send.", &[]);
    let (run, elapsed) = timed(&sb, cmd);
    run.expect_code(0);
    assert!(elapsed < Duration::from_secs(8), "{elapsed:?}");
    let mut stdin = chat.stdin.take().unwrap();
    stdin.write_all(b"From chat.\n").unwrap();
    drop(stdin);
    let output = chat.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "changed (another writer appended); continuing from it as it is now (2 messages)"
        ),
        "{stderr}"
    );
    let entries = valid_entries(&sb, "s.jsonl");
    assert_eq!(roles(&entries), ["user", "assistant", "user", "assistant"]);
    assert!(entries[0].to_string().contains("From send."));
    assert!(entries[2].to_string().contains("From chat."));
}

#[test]
fn a_held_lock_fails_after_the_configured_lock_timeout_naming_the_holder() {
    use panto_session::{Session, SessionOptions};

    let server = RawServer::start(slow_model);
    let sb = Sandbox::new();
    let path = sb.work().join("s.jsonl");
    let session = Session::create(&path, SessionOptions::default()).unwrap();
    // Another program holds the append lock the whole time.
    let writer = session.lock().unwrap();
    sb.write(".panto/config.toml", "lock_timeout_secs = 1\n");
    let cmd = send_command(&sb, &server.base, "s.jsonl", "Blocked?", &[]);
    let (run, elapsed) = timed(&sb, cmd);
    drop(writer);
    run.expect_code(1);
    assert_between(elapsed, 1, 10);
    assert!(
        run.stderr
            .contains(&format!("locked by process {}", std::process::id())),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("gave up after 1s"), "{}", run.stderr);
    assert_eq!(
        server.requests(),
        0,
        "the request went out without its prompt stored"
    );
    assert!(valid_entries(&sb, "s.jsonl").is_empty());
}
