//! Decoding never panics, and every error names its line.

use panto_model::arbitrary::session;
use panto_model::{Entry, encode_lines, read_entries_lossy};
use proptest::prelude::*;

proptest! {
    #[test]
    fn mutated_sessions_never_panic_and_errors_name_lines(
        s in session(3),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
    ) {
        let entries: Vec<Entry> = s.messages.into_iter().map(Entry::Message).collect();
        let mut bytes = encode_lines(&entries).into_bytes();
        for (at, byte, op) in edits {
            if bytes.is_empty() { break; }
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = byte,
                1 => { bytes.remove(i); }
                _ => bytes.insert(i, byte),
            }
        }
        let lines = bytes.split(|&b| b == b'\n').count();
        let (_, errors) = read_entries_lossy(&bytes);
        for e in errors {
            prop_assert!(e.line >= 1 && e.line <= lines, "line {} of {}", e.line, lines);
            let prefix = format!("line {}", e.line);
            prop_assert!(e.to_string().starts_with(&prefix));
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = read_entries_lossy(&bytes);
    }
}
