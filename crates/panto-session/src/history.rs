//! Streaming the full history forwards: every entry with its line number, in constant memory.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use panto_model::Entry;

use crate::error::{Result, SessionError};
use crate::lines::{After, Line, LineNumber, Run, Verdict, classify, has_bom, judge};
use panto_store::{Warning, WarningKind};

/// Iterator over every entry of a session file with its 1-based line number, returned by
/// [`crate::Session::history`].
///
/// It holds one line in memory at a time (plus the warnings). Valid `torn_write` records and
/// skipped debris are not entries and are not yielded; [`History::warnings`] reports what was
/// skipped so far. After an error the iterator ends.
#[derive(Debug)]
pub struct History {
    path: PathBuf,
    reader: BufReader<File>,
    buf: Vec<u8>,
    offset: u64,
    line: usize,
    run: Option<Run<LineNumber>>,
    warnings: Vec<Warning>,
    done: bool,
    /// Whether a line held more than whitespace (a file of blank lines is empty).
    content: bool,
}

impl History {
    pub(crate) fn new(path: PathBuf, file: File) -> History {
        History {
            path,
            reader: BufReader::with_capacity(64 * 1024, file),
            buf: Vec::new(),
            offset: 0,
            line: 0,
            run: None,
            warnings: Vec::new(),
            done: false,
            content: false,
        }
    }

    /// A reader of the file from byte `offset`, a line start (a position an earlier read
    /// ended at). Its line numbers count from that line; a caller that reports them adds the
    /// lines before it.
    pub(crate) fn starting_at(
        path: PathBuf,
        mut file: File,
        offset: u64,
    ) -> std::io::Result<History> {
        use std::io::{Seek, SeekFrom};
        file.seek(SeekFrom::Start(offset))?;
        let mut history = History::new(path, file);
        history.offset = offset;
        // What came before had content (or the caller would have started at 0).
        history.content = offset > 0;
        Ok(history)
    }

    /// The next entry's line number, exact text (without the newline) and the position after
    /// its line, or `None` at the end.
    pub(crate) fn next_raw(&mut self) -> Result<Option<(usize, &[u8], u64)>> {
        if self.done {
            return Ok(None);
        }
        match self.step() {
            Ok(Some((line, _))) => {
                let raw = self.buf.strip_suffix(b"\n").unwrap_or(&self.buf);
                let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
                Ok(Some((line, raw, self.offset)))
            }
            Ok(None) => {
                self.done = true;
                Ok(None)
            }
            Err(e) => {
                self.done = true;
                Err(e)
            }
        }
    }

    /// What was skipped so far (all of it once the iterator has ended), in file order.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// Applies the run rule to the pending run, if any.
    fn close_run(&mut self, after: After) -> Result<()> {
        let Some(run) = self.run.take() else {
            return Ok(());
        };
        match judge(&run, after) {
            Verdict::Skip { acknowledged } => {
                self.warnings.push(Warning::at_line(
                    self.path.display().to_string(),
                    run.start,
                    Some(run.first.0 as usize),
                    WarningKind::Debris {
                        len: run.end - run.start,
                        acknowledged,
                    },
                ));
                Ok(())
            }
            Verdict::Fail => {
                let mut source = run.error;
                source.line = run.first.0 as usize;
                Err(SessionError::Malformed {
                    path: self.path.clone(),
                    source,
                })
            }
        }
    }

    fn warn(&mut self, offset: u64, kind: WarningKind) {
        self.warnings.push(Warning::at_line(
            self.path.display().to_string(),
            offset,
            Some(self.line),
            kind,
        ));
    }

    /// The end of the file: the pending run is at the end, and a file without content is empty.
    fn end(&mut self) -> Result<Option<(usize, Entry)>> {
        self.close_run(After::Nothing)?;
        if !self.content {
            return Err(SessionError::Empty {
                path: self.path.clone(),
            });
        }
        Ok(None)
    }

    fn step(&mut self) -> Result<Option<(usize, Entry)>> {
        loop {
            self.buf.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| SessionError::io(&self.path, "read", e))?;
            if n == 0 {
                return self.end();
            }
            let start = self.offset;
            self.offset += n as u64;
            self.line += 1;
            let tail = self.buf.last() != Some(&b'\n');
            let len = if tail { n } else { n - 1 };
            if has_bom(&self.buf[..len], start) {
                self.warn(0, WarningKind::ByteOrderMark);
            }
            let end = start + len as u64;
            let line = classify(&self.buf[..len], start);
            self.content |= !line.is_blank();
            match line {
                Line::Blank => {}
                Line::Bad {
                    mut error, cr_only, ..
                } if tail => {
                    if cr_only {
                        error.line = self.line;
                        return Err(SessionError::Malformed {
                            path: self.path.clone(),
                            source: error,
                        });
                    }
                    // A tail that is not a whole entry: kept, reported, never parsed.
                    // Whatever run precedes it is at the end of the file.
                    self.close_run(After::Nothing)?;
                    self.warn(start, WarningKind::TornTail { len: n as u64 });
                    return self.end();
                }
                Line::Bad { error, torn, .. } => match &mut self.run {
                    Some(run) => {
                        run.end = end;
                        run.all_torn &= torn;
                    }
                    None => {
                        self.run = Some(Run {
                            start,
                            end,
                            error,
                            first: LineNumber(self.line as u64),
                            all_torn: torn,
                        });
                    }
                },
                Line::Marker { covers_from } => self.close_run(After::Marker(covers_from))?,
                Line::Entry { entry, replaced } => {
                    self.close_run(After::Entry)?;
                    if replaced {
                        self.warn(start, WarningKind::LoneSurrogate);
                    }
                    return Ok(Some((self.line, entry)));
                }
            }
        }
    }
}

impl Iterator for History {
    type Item = Result<(usize, Entry)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(item)) => Some(Ok(item)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
