//! Many processes appending to one session at once: nothing lost, nothing interleaved.
//!
//! The writers are this test binary run again with `PANTO_SESSION_WRITER` set, executing the
//! ignored `writer_process` test, so they are real, separate processes contending for the lock.

use std::collections::HashSet;
use std::process::Command;

use panto_model::{Entry, decode_line};
use panto_session::Session;

use crate::{opts, temp_session, user};

const WRITERS: usize = 4;
const PER_WRITER: usize = 1000;
const ENV: &str = "PANTO_SESSION_WRITER";

#[test]
fn concurrent_processes_never_lose_or_interleave_entries() {
    let (_dir, path) = temp_session();
    Session::create(&path, opts()).unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..WRITERS)
        .map(|w| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "concurrent::writer_process",
                    "--ignored",
                    "--nocapture",
                ])
                .env(ENV, format!("{}|{w}", path.display()))
                // The child's test harness prints its own summary; keep it out of ours.
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }

    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'));
    let mut seen = HashSet::new();
    let mut last_seq = [None::<usize>; WRITERS];
    let mut ids = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let entry = decode_line(line.as_bytes(), i + 1).unwrap_or_else(|e| panic!("{e}"));
        let Entry::Message(m) = &entry else {
            panic!("line {} is not a message", i + 1)
        };
        let label = m.text();
        let (w, seq) = label.split_once(':').unwrap();
        let (w, seq): (usize, usize) = (w.parse().unwrap(), seq.parse().unwrap());
        assert!(seen.insert((w, seq)), "({w}, {seq}) appears twice");
        // Each writer appends in order, so its entries appear in order.
        assert!(
            last_seq[w].is_none_or(|p| p < seq),
            "writer {w} out of order at {seq}"
        );
        last_seq[w] = Some(seq);
        assert!(
            ids.insert(m.id.clone().unwrap()),
            "duplicate id on line {}",
            i + 1
        );
    }
    assert_eq!(seen.len(), WRITERS * PER_WRITER);
    let s = Session::open(&path, opts()).unwrap();
    assert_eq!(
        s.load_context().unwrap().context.messages.len(),
        WRITERS * PER_WRITER
    );
}

/// One writer process: appends `PER_WRITER` messages `w:seq`, in batches of 1 to 3, each
/// batch one append, with random ids (the test checks they are unique across processes).
#[test]
#[ignore = "helper process of concurrent_processes_never_lose_or_interleave_entries"]
fn writer_process() {
    let Ok(spec) = std::env::var(ENV) else { return };
    let (path, w) = spec.rsplit_once('|').unwrap();
    let s = Session::open(
        path,
        panto_session::SessionOptions::default()
            .fsync(false)
            .lock_timeout(std::time::Duration::from_secs(60)),
    )
    .unwrap();
    let mut seq = 0;
    while seq < PER_WRITER {
        let n = (1 + seq % 3).min(PER_WRITER - seq);
        let batch: Vec<Entry> = (seq..seq + n).map(|k| user(&format!("{w}:{k}"))).collect();
        s.append(&batch).unwrap();
        seq += n;
    }
}
