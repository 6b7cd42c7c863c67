//! The fault suite of the PostgreSQL store, against a real server of the tests' own
//! (`PANTO_TEST_POSTGRES_FAULTS`, which `.ci/postgres` starts with a control script; skipped
//! with a line without it, a failure in CI): while the model answers a `panto send`, the server
//! restarts, panto's backend is killed, a lock is held on its table, the server stops, the
//! server freezes. Each ends with nothing lost (the prompt in the session once; the reply in it
//! once, or printed and said not to be written), one clear message naming what ran out, and
//! the documented exit code. Faults one at a time: the tests share the server.

use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use panto_store_postgres::testing;

use crate::raw_http::{read_request, write_chat_reply};
use crate::support::Sandbox;

/// One fault at a time on the shared server.
static SERVER: Mutex<()> = Mutex::new(());

/// An OpenAI-compatible model on loopback whose answer waits for the test: each request is
/// announced on `asked` and answered (`Reply N.`) when the test says so on `answer`.
struct GatedModel {
    base: String,
    asked: mpsc::Receiver<()>,
    answer: mpsc::Sender<()>,
}

fn gated_model() -> GatedModel {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let (asked_tx, asked) = mpsc::channel();
    let (answer, answer_rx) = mpsc::channel::<()>();
    let answer_rx = Arc::new(Mutex::new(answer_rx));
    std::thread::spawn(move || {
        for (n, socket) in listener.incoming().enumerate() {
            let Ok(mut socket) = socket else { return };
            let (asked_tx, answer_rx) = (asked_tx.clone(), answer_rx.clone());
            std::thread::spawn(move || {
                if !read_request(&mut socket) {
                    return;
                }
                let _ = asked_tx.send(());
                let _ = answer_rx.lock().unwrap().recv();
                write_chat_reply(&mut socket, &format!("Reply {n}."));
            });
        }
    });
    GatedModel {
        base,
        asked,
        answer,
    }
}

/// The fault server: a URL of a fresh schema on it (named `app` for `pg_stat_activity`), and
/// its control script.
struct Server {
    url: String,
    ctl: String,
}

impl Server {
    fn new(test: &str, app: &str) -> Option<Server> {
        let base = testing::variable(testing::FAULTS_ENV, test)?;
        let ctl = testing::variable(testing::FAULTS_CTL_ENV, test)?;
        let runtime = runtime();
        let url = runtime.block_on(testing::fresh_url(&format!(
            "{base}&application_name={app}"
        )));
        Some(Server { url, ctl })
    }

    fn ctl(&self, action: &str) {
        let status = Command::new(&self.ctl).arg(action).status().unwrap();
        assert!(status.success(), "{} {action}", self.ctl);
    }

    /// Runs `sql` on a connection of the test's own.
    fn sql(&self, sql: &str) {
        runtime().block_on(async {
            testing::client(&self.url)
                .await
                .batch_execute(sql)
                .await
                .unwrap();
        });
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A sandbox whose project configuration sets the store's limits (small, for quick faults).
fn sandbox(limits: &str) -> Sandbox {
    let sb = Sandbox::new();
    sb.write(".panto/config.toml", limits);
    sb
}

/// `panto send s "Question."` to `model` on `server`, with `fault` done while the model
/// answers; returns what the command printed and how it exited, and how long it took after the
/// model answered.
fn send_with_fault(
    sb: &Sandbox,
    server: &Server,
    model: &GatedModel,
    fault: impl FnOnce(),
) -> (Output, Duration) {
    let mut cmd = sb.openai(
        &["send", "s", "Question.", "--store", &server.url],
        &model.base,
    );
    cmd.env("OPENAI_API_KEY", "k")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    model
        .asked
        .recv_timeout(Duration::from_secs(60))
        .expect("the model was asked (the prompt is appended first)");
    fault();
    let answered = Instant::now();
    model.answer.send(()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out, answered.elapsed())
}

/// The session's history, as `panto export` gives it.
fn export(sb: &Sandbox, server: &Server) -> String {
    let export = sb.run(&["export", "s", "--store", &server.url]);
    export.expect_code(0);
    export.stdout
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The prompt is in the session once; the reply `Reply 0.` once or not at all.
fn count(export: &str, needle: &str) -> usize {
    export.lines().filter(|l| l.contains(needle)).count()
}

#[test]
fn a_restart_while_the_model_answers_loses_nothing() {
    let _one = SERVER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(server) = Server::new("a_restart_while_the_model_answers_loses_nothing", "restart")
    else {
        return;
    };
    let sb = sandbox("store_reconnect_secs = 60\n");
    let model = gated_model();
    let (out, _) = send_with_fault(&sb, &server, &model, || server.ctl("restart"));
    let export = export(&sb, &server);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("Reply 0."), "{stdout}");
    assert_eq!(count(&export, "Question."), 1, "{export}");
    assert_eq!(
        count(&export, "Reply 0."),
        1,
        "the reply appended once: {export}"
    );
}

#[test]
fn a_killed_backend_while_the_model_answers_loses_nothing() {
    let _one = SERVER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(server) = Server::new("a_killed_backend_loses_nothing", "killed") else {
        return;
    };
    let sb = sandbox("");
    let model = gated_model();
    let (out, _) = send_with_fault(&sb, &server, &model, || {
        server.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = 'killed' AND pid <> pg_backend_pid()",
        );
    });
    let export = export(&sb, &server);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(count(&export, "Question."), 1, "{export}");
    assert_eq!(count(&export, "Reply 0."), 1, "{export}");
}

#[test]
fn a_held_lock_ends_the_append_at_the_lock_timeout_and_the_reply_is_printed() {
    let _one = SERVER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(server) = Server::new("a_held_lock_ends_the_append", "locked") else {
        return;
    };
    let sb = sandbox("lock_timeout_secs = 2\n");
    let model = gated_model();
    // Another session locks panto's table while the model answers, and holds it.
    let (release, hold) = mpsc::channel::<()>();
    let (held_tx, held) = mpsc::channel::<()>();
    let url = server.url.clone();
    let mut holder = None;
    let (out, took) = send_with_fault(&sb, &server, &model, || {
        holder = Some(std::thread::spawn(move || {
            runtime().block_on(async {
                let client = testing::client(&url).await;
                client
                    .batch_execute("BEGIN; LOCK TABLE panto_entries IN ACCESS EXCLUSIVE MODE")
                    .await
                    .unwrap();
                held_tx.send(()).unwrap();
                let _ = tokio::task::spawn_blocking(move || hold.recv()).await;
                client.batch_execute("ROLLBACK").await.unwrap();
            });
        }));
        held.recv().unwrap();
    });
    let _ = release.send(());
    holder.unwrap().join().unwrap();
    let export = export(&sb, &server);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Reply 0."),
        "the reply is printed: {stdout}"
    );
    assert!(
        stderr.contains("the reply could not be written to the session")
            && stderr.contains("lock timeout (2 s)")
            && stderr.contains("hint: `lock_timeout_secs`"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(30), "it waited {took:?}");
    assert_eq!(count(&export, "Question."), 1, "{export}");
    assert_eq!(count(&export, "Reply 0."), 0, "{export}");
}

#[test]
fn a_stopped_server_ends_the_append_after_the_reconnect_time_and_the_reply_is_printed() {
    let _one = SERVER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(server) = Server::new("a_stopped_server_ends_the_append", "stopped") else {
        return;
    };
    let sb = sandbox("store_reconnect_secs = 3\n");
    let model = gated_model();
    let (out, took) = send_with_fault(&sb, &server, &model, || server.ctl("stop"));
    let (stdout, stderr) = text(&out);
    server.ctl("start");
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Reply 0."),
        "the reply is printed: {stdout}"
    );
    assert!(
        stderr.contains("no new one could be made within the reconnect time (3 s)")
            && stderr.contains("hint: `store_reconnect_secs`"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(30), "it waited {took:?}");
    let export = export(&sb, &server);
    assert_eq!(count(&export, "Question."), 1, "{export}");
    assert_eq!(count(&export, "Reply 0."), 0, "{export}");
}

#[test]
fn a_frozen_server_ends_the_command_at_the_statement_and_connect_timeouts() {
    let _one = SERVER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(server) = Server::new("a_frozen_server_ends_the_command", "frozen") else {
        return;
    };
    let sb = sandbox("store_statement_timeout_secs = 2\n");
    let model = gated_model();
    let (out, took) = send_with_fault(&sb, &server, &model, || server.ctl("freeze"));
    let (stdout, stderr) = text(&out);
    let connect = Instant::now();
    let url_timeout = format!("{}&connect_timeout=2", server.url);
    let context = sb.run(&["context", "s", "--store", &url_timeout]);
    let connect = connect.elapsed();
    server.ctl("thaw");
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Reply 0."),
        "the reply is printed: {stdout}"
    );
    assert!(
        stderr.contains("no answer within the statement timeout (2 s)")
            && stderr.contains("hint: `store_statement_timeout_secs`"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(30), "it waited {took:?}");
    context.expect_code(1);
    assert!(
        context
            .stderr
            .contains("no connection within the URL's connect_timeout (2 s)")
            && context
                .stderr
                .contains("hint: the store URL's `connect_timeout`"),
        "{}",
        context.stderr
    );
    assert!(connect < Duration::from_secs(30), "it waited {connect:?}");
    let export = export(&sb, &server);
    assert_eq!(count(&export, "Question."), 1, "{export}");
}

#[test]
fn a_chat_goes_on_when_the_store_is_out_of_reach() {
    let _one = SERVER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(server) = Server::new("a_chat_goes_on_when_the_store_is_out_of_reach", "chat") else {
        return;
    };
    let sb = sandbox("store_reconnect_secs = 2\n");
    let model = gated_model();
    let mut cmd = sb.openai(&["chat", "s", "--store", &server.url], &model.base);
    cmd.env("OPENAI_API_KEY", "k")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"First.\nSecond.\n").unwrap();
    drop(stdin);
    let chat = std::thread::spawn(move || child.wait_with_output().unwrap());
    model
        .asked
        .recv_timeout(Duration::from_secs(60))
        .expect("the model was asked");
    server.ctl("stop");
    model.answer.send(()).unwrap();
    let out = chat.join().unwrap();
    server.ctl("start");
    let (stdout, stderr) = text(&out);
    // The reply was printed, the chat told why it was not written, and went on to the next
    // message (whose own append then said the store was still out of reach) until its input
    // ended.
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("Reply 0."), "{stdout}");
    assert!(
        stderr.matches("within the reconnect time (2 s)").count() >= 2,
        "{stderr}"
    );
    let export = export(&sb, &server);
    assert_eq!(count(&export, "First."), 1, "{export}");
    assert_eq!(count(&export, "Reply 0."), 0, "{export}");
}
