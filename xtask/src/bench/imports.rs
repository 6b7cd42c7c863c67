//! The imports of the `stores` section: `panto import` (the release binary, a process each, its
//! peak memory from the kernel) of one Contract 1 file into each store, with the throughput
//! and peak memory of each; an import streams, so its memory must not follow the file.
//!
//! The file is the section's session (about 1,000,000 messages), or, with
//! `PANTO_BENCH_IMPORT_GIB=N`, a generated file of N GiB of long tool results (the size an
//! operator imports from years of an agent's sessions).

use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use super::process::Runner;
use super::{fmt_bytes, fmt_duration};
use crate::table::Table;

/// One import's figures.
pub(super) struct Import {
    pub store: &'static str,
    pub bytes: u64,
    pub entries: usize,
    pub wall: Duration,
    pub peak: u64,
}

/// A file of about `gib` GiB: rounds of a prompt, a tool call, a tool result of 64 KiB and an
/// answer. Returns how many entries it holds.
pub(super) fn generate(path: &Path, gib: u64) -> Result<usize> {
    let target = gib << 30;
    let mut out = BufWriter::with_capacity(1 << 20, fs::File::create(path)?);
    let body = "let x = compute(y); // a line of a long file\\n".repeat(1_450);
    let (mut written, mut entries, mut i) = (0u64, 0usize, 0u64);
    while written < target {
        for line in [
            format!(
                r#"{{"type":"message","id":"u{i}","role":"user","content":[{{"type":"text","text":"read part {i}"}}]}}"#
            ),
            format!(
                r#"{{"type":"message","id":"a{i}","role":"assistant","content":[{{"type":"tool_use","id":"t{i}","name":"read","input":{{"path":"src/part{i}.rs"}}}}]}}"#
            ),
            format!(
                r#"{{"type":"message","id":"r{i}","role":"user","content":[{{"type":"tool_result","tool_use_id":"t{i}","content":"{body}"}}]}}"#
            ),
            format!(
                r#"{{"type":"message","id":"b{i}","role":"assistant","content":[{{"type":"text","text":"part {i} read"}}]}}"#
            ),
        ] {
            out.write_all(line.as_bytes())?;
            out.write_all(b"\n")?;
            written += line.len() as u64 + 1;
            entries += 1;
        }
        i += 1;
    }
    out.flush()?;
    Ok(entries)
}

/// `panto import FILE SESSION --store STORE` for each of `stores` (`(label, store value)`).
pub(super) fn run(
    runner: &Runner,
    file: &Path,
    entries: usize,
    stores: &[(&'static str, String)],
) -> Result<Vec<Import>> {
    let bytes = fs::metadata(file)?.len();
    let file = file.display().to_string();
    let mut out = Vec::new();
    for (label, store) in stores {
        let (wall, peak) = runner
            .once(&["import", &file, "imported.jsonl", "--store", store], None)
            .with_context(|| format!("the import into {label}"))?;
        out.push(Import {
            store: label,
            bytes,
            entries,
            wall,
            peak,
        });
    }
    Ok(out)
}

/// The table of the imports.
pub(super) fn print(imports: &[Import]) {
    let mut t = Table::new([
        "store",
        "file",
        "entries",
        "import time",
        "throughput",
        "entries/s",
        "peak memory",
    ])
    .right(1..7);
    for i in imports {
        let secs = i.wall.as_secs_f64();
        t.row([
            i.store.to_owned(),
            fmt_bytes(i.bytes),
            i.entries.to_string(),
            fmt_duration(i.wall),
            format!("{:.0} MiB/s", i.bytes as f64 / (1024.0 * 1024.0) / secs),
            format!("{:.0}", i.entries as f64 / secs),
            fmt_bytes(i.peak),
        ]);
    }
    print!("{t}");
}
