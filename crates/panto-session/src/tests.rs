//! Unit tests of the line framing and the backwards reader.

use std::io::Write;

use crate::lines::{After, BackLines, Line, LineNumber, Run, Verdict, classify, judge, looks_torn};

fn back_segments(content: &[u8], chunk: usize) -> Vec<(u64, Vec<u8>)> {
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(content).unwrap();
    let mut back = BackLines::new(&f, content.len() as u64, chunk);
    let mut out = Vec::new();
    while let Some(seg) = back.prev().unwrap() {
        out.push((seg.start, back.bytes()[seg.lo..seg.hi].to_vec()));
    }
    out
}

#[test]
fn backwards_segments_are_the_tail_then_lines_from_the_last() {
    let content = b"one\n\ntwo\nthree\ntail";
    for chunk in [1, 2, 3, 5, 64 * 1024] {
        let got = back_segments(content, chunk);
        let want: Vec<(u64, Vec<u8>)> = vec![
            (15, b"tail".to_vec()),
            (9, b"three".to_vec()),
            (5, b"two".to_vec()),
            (4, b"".to_vec()),
            (0, b"one".to_vec()),
        ];
        assert_eq!(got, want, "chunk {chunk}");
    }
}

proptest::proptest! {
    /// Whatever the chunk, the segments read backwards are the file's lines from the last,
    /// each at its offset: a buffer reused from a longer step holds no stale byte.
    #[test]
    fn backwards_segments_are_the_lines_whatever_the_chunk(
        content in proptest::collection::vec(proptest::sample::select(b"ab\n".to_vec()), 0..200),
        chunk in 1usize..40,
    ) {
        let mut want = Vec::new();
        let mut start = 0u64;
        for line in content.split(|b| *b == b'\n') {
            want.push((start, line.to_vec()));
            start += line.len() as u64 + 1;
        }
        want.reverse();
        proptest::prop_assert_eq!(back_segments(&content, chunk), want);
    }
}

#[test]
fn backwards_segments_of_edge_files() {
    assert_eq!(back_segments(b"", 4), vec![(0, Vec::new())]);
    assert_eq!(
        back_segments(b"\n", 4),
        vec![(1, Vec::new()), (0, Vec::new())]
    );
    assert_eq!(back_segments(b"abc", 2), vec![(0, b"abc".to_vec())]);
}

#[test]
fn a_long_line_is_read_in_growing_steps() {
    let long = vec![b'x'; 100_000];
    let mut content = b"first\n".to_vec();
    content.extend_from_slice(&long);
    content.push(b'\n');
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(&content).unwrap();
    let mut back = BackLines::new(&f, content.len() as u64, 16);
    let tail = back.prev().unwrap().unwrap();
    assert_eq!(tail.hi - tail.lo, 0);
    let line = back.prev().unwrap().unwrap();
    assert_eq!(back.bytes()[line.lo..line.hi], long[..]);
    // Doubling steps: reading 100 kB in 16-byte chunks must not read 100 kB many times over.
    assert!(
        back.bytes_read < 2 * content.len() as u64,
        "{}",
        back.bytes_read
    );
}

#[test]
fn cut_off_json_looks_torn_and_other_garbage_does_not() {
    let full = "{\"type\":\"message\",\"content\":[{\"text\":\"h\\u00e9 \\\" \u{e9} \u{1f600}\",\"n\":-12.5e-3,\"m\":0,\"f\":false,\"b\":true,\"z\":null}]}".as_bytes();
    for cut in 1..full.len() {
        assert!(looks_torn(&full[..cut]), "cut at {cut}");
    }
    assert!(!looks_torn(full));
    assert!(looks_torn(b"{\"type\":\"mess\0\0\0\0"));
    assert!(looks_torn(b"\0\0\0"));
    assert!(!looks_torn(b"garbage"));
    assert!(!looks_torn(b"{\"a\":1}}"));
    assert!(!looks_torn(b"{\"a\":1}x"));
    assert!(!looks_torn(b"{\"a\":1-"));
    assert!(!looks_torn(b"{\"a\":tru e"));
}

#[test]
fn a_multibyte_character_cut_in_half_looks_torn() {
    let line = "{\"type\":\"message\",\"text\":\"caf\u{e9}".as_bytes();
    assert!(looks_torn(&line[..line.len() - 1]));
    assert!(matches!(
        classify(&line[..line.len() - 1], 0),
        Line::Bad { torn: true, .. }
    ));
}

#[test]
fn torn_write_record_is_a_marker_only_at_its_own_position() {
    let record = crate::lines::torn_write_record(10, 5);
    let line = record.trim_end().as_bytes();
    assert!(matches!(
        classify(line, 16),
        Line::Marker { covers_from: 10 }
    ));
    assert!(matches!(classify(line, 17), Line::Entry { .. }));
    let negative = br#"{"type":"torn_write","offset":-1,"length":5}"#;
    assert!(matches!(classify(negative, 5), Line::Entry { .. }));
}

#[test]
fn classify_blank_crlf_and_bad_utf8() {
    assert!(matches!(classify(b"  \t\r", 0), Line::Blank));
    let msg = br#"{"type":"message","role":"user","content":[]}"#;
    let mut crlf = msg.to_vec();
    crlf.push(b'\r');
    assert!(matches!(classify(&crlf, 0), Line::Entry { .. }));
    match classify(b"{\"a\xff\":1}", 0) {
        Line::Bad { error, torn, .. } => {
            assert_eq!(error.column, 4);
            assert_eq!(error.message, "not valid UTF-8");
            assert!(!torn);
        }
        _ => panic!("expected a bad line"),
    }
}

#[test]
fn the_run_rule() {
    let run = |all_torn| Run {
        start: 7,
        end: 9,
        error: panto_model::DecodeError::new(0, 1, "", "x"),
        first: LineNumber(1),
        all_torn,
    };
    let skip = |v| matches!(v, Verdict::Skip { .. });
    assert!(skip(judge(&run(true), After::Nothing)));
    assert!(!skip(judge(&run(false), After::Nothing)));
    assert!(skip(judge(&run(false), After::Marker(7))));
    assert!(!skip(judge(&run(true), After::Marker(6))));
    assert!(!skip(judge(&run(true), After::Entry)));
}
