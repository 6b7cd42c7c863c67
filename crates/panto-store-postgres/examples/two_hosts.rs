//! Two processes (two hosts, as far as the database can tell) sharing one PostgreSQL session:
//! `PANTO_TEST_POSTGRES=postgres://... cargo run -p panto-store-postgres --example two_hosts`
//! (`.ci/postgres run cargo run -p panto-store-postgres --example two_hosts` starts a server).
//!
//! Each host runs an agent (panto-compact's `Driver` over a `PostgresStore`) that asks a slow toy
//! model three questions in the same session, each with `Driver::send_shared`. Their turns
//! overlap, so sometimes one host's append finds the session changed: the database refused it
//! (the unique key on `(session, seq)`), nothing of that append was written, and
//! `send_shared` catches up (`Driver::reload`) and goes on as `Conflict`'s docs say, after a
//! jittered pause that lets the host that lost go first next time. The conflict says what of
//! the turn is stored: a question that was not stored is sent again; one that is stored (the
//! reply, or a compaction, lost) is never sent again: the host asks the model about the
//! session as it is now, unless the other host's answer already covered it
//! (`Driver::awaits_reply`; the reply is then `None`). No lock is held while the model thinks.
//! In the end every question is in the session exactly once, each followed by an answer after
//! it.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    reason = "an example shows what it did, and fails loudly"
)]

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use panto_compact::{
    Compactor, Conflict, Driver, EventSink, Message, ModelRef, Provider, ProviderError, Request,
    Role, SharedTurns, Store, async_trait,
};
use panto_store_postgres::{PostgresStore, testing};

/// Which host this process is, and the URL and session it shares, when it is a child.
const ROLE: &str = "TWO_HOSTS_ROLE";

/// A model that takes a moment, and answers every question of the conversation that no answer
/// quotes yet.
struct SlowModel;

#[async_trait]
impl Provider for SlowModel {
    fn name(&self) -> &str {
        "slow"
    }

    async fn complete(
        &self,
        request: &Request,
        _events: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let answers: Vec<String> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .map(Message::text)
            .collect();
        let open: Vec<String> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::User)
            .map(|m| format!("<{}>", m.text()))
            .filter(|q| !answers.iter().any(|a| a.contains(q.as_str())))
            .collect();
        Ok(Message::assistant_text(format!(
            "answer to {}",
            open.join(" and ")
        )))
    }
}

/// One host: three questions, each a turn that `Driver::send_shared` takes with the other host.
async fn host(name: &str, url: &str, session: &str) -> Result<(), Box<dyn std::error::Error>> {
    let store = PostgresStore::connect(url).await?;
    let compactor = Compactor::new(ModelRef::new(Arc::new(SlowModel), "slow-1"));
    let (mut agent, _) = Driver::open(compactor, store, session).await?;
    let turns = SharedTurns::new();
    for i in 0..3 {
        let question = format!("host {name}, question {i}");
        let new = vec![Message::user_text(question)];
        let shared = agent
            .send_shared(new, &mut |_| {}, &turns, tokio::time::sleep)
            .await?;
        for conflict in &shared.conflicts {
            match conflict {
                // Nothing was written: send_shared caught up and asked again.
                Conflict::NotStored => {
                    println!("[{name}] the other host wrote first; caught up, asked again");
                }
                // The question was stored; the answer (or a compaction) lost: send_shared
                // never sent it again, it asked about the session as it is now.
                _ => println!("[{name}] the other host wrote while the model answered"),
            }
        }
        match shared.reply {
            Some(reply) => println!("[{name}] {}", reply.message.text()),
            None => println!("[{name}] the other host's answer covered my question"),
        }
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Ok(role) = std::env::var(ROLE) {
        let mut parts = role.splitn(3, ' ');
        let (name, session, url) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        return host(name, url, session).await;
    }
    let Some(server) = testing::server("the two_hosts example") else {
        return Ok(());
    };
    let url = testing::fresh_url(&server).await;
    let session = format!("shared-{}", std::process::id());
    // The two hosts: this program again, as a child process each (under `cargo test` the
    // arguments select this example's test, which runs `main` again).
    let hosts: Vec<_> = ["A", "B"]
        .into_iter()
        .map(|name| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "tests::the_two_hosts_share_one_session",
                    "--exact",
                    "--nocapture",
                ])
                .env(ROLE, format!("{name} {session} {url}"))
                .spawn()
                .unwrap()
        })
        .collect();
    for mut h in hosts {
        assert!(h.wait()?.success(), "a host failed");
    }

    let store = PostgresStore::connect(&url).await?;
    let messages = store.load(&session).await?.context.messages;
    println!(
        "\nthe session both hosts wrote ({} messages):",
        messages.len()
    );
    for m in &messages {
        println!("  {:?}: {}", m.role, m.text());
    }
    // Every question exactly once, and answered after it was asked.
    for name in ["A", "B"] {
        for i in 0..3 {
            let question = format!("host {name}, question {i}");
            let at: Vec<usize> = (0..messages.len())
                .filter(|&j| messages[j].text() == question)
                .collect();
            assert_eq!(at.len(), 1, "{question}");
            let answered = messages[at[0]..]
                .iter()
                .any(|m| m.role == Role::Assistant && m.text().contains(&format!("<{question}>")));
            assert!(answered, "{question} is never answered");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// `cargo test` runs the example (`test = true` in the manifest) against the test server.
    #[test]
    fn the_two_hosts_share_one_session() {
        super::main().expect("the example runs");
    }
}
