//! Markdown tables: the one way xtask's reports lay out a header, its alignment row and rows.
//!
//! ```text
//! let mut t = Table::new(["file", "spans"]).right([1]);
//! t.row(["a.jsonl", "12"]);
//! print!("{t}"); // | file | spans |\n| --- | ---: |\n| a.jsonl | 12 |\n
//! ```
//!
//! Cells are any `Display` value; a `|` in a cell is escaped and a line break becomes a space,
//! so a cell (an error message, a note) can never split a row.

use std::fmt;

/// A Markdown table, printed with `Display` (every line ends with a newline).
#[derive(Clone, Debug)]
pub(crate) struct Table {
    header: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers, every column left-aligned.
    pub(crate) fn new<S: fmt::Display>(header: impl IntoIterator<Item = S>) -> Table {
        let header: Vec<String> = header.into_iter().map(|h| cell(&h)).collect();
        Table {
            right: vec![false; header.len()],
            header,
            rows: Vec::new(),
        }
    }

    /// Right-aligns the columns at these indices (numbers read better that way).
    ///
    /// # Panics
    /// When an index is not a column (a bug in the caller).
    // Only the bench's and calibrate's tables align right so far; an e2e-only build does not
    // call it.
    #[cfg_attr(not(any(feature = "bench", feature = "calibrate")), allow(dead_code))]
    pub(crate) fn right(mut self, columns: impl IntoIterator<Item = usize>) -> Table {
        for c in columns {
            assert!(c < self.right.len(), "table: no column {c}");
            self.right[c] = true;
        }
        self
    }

    /// Appends a row.
    ///
    /// # Panics
    /// When the row does not have one cell per column (a bug in the caller).
    pub(crate) fn row<S: fmt::Display>(
        &mut self,
        cells: impl IntoIterator<Item = S>,
    ) -> &mut Table {
        let row: Vec<String> = cells.into_iter().map(|c| cell(&c)).collect();
        assert_eq!(
            row.len(),
            self.header.len(),
            "table: a row of {} cells under {} columns",
            row.len(),
            self.header.len()
        );
        self.rows.push(row);
        self
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        line(f, &self.header)?;
        let rule: Vec<String> = self
            .right
            .iter()
            .map(|&r| if r { "---:" } else { "---" }.to_owned())
            .collect();
        line(f, &rule)?;
        for row in &self.rows {
            line(f, row)?;
        }
        Ok(())
    }
}

fn line(f: &mut fmt::Formatter<'_>, cells: &[String]) -> fmt::Result {
    writeln!(f, "| {} |", cells.join(" | "))
}

/// A value as the text of one cell.
fn cell(value: &dyn fmt::Display) -> String {
    value
        .to_string()
        .replace('|', "\\|")
        .replace("\r\n", " ")
        .replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_has_a_header_an_alignment_row_and_its_rows() {
        let mut t = Table::new(["file", "spans", "note"]).right([1]);
        t.row(["a.jsonl", "12", "ok"]).row(["b.jsonl", "3", ""]);
        assert_eq!(
            t.to_string(),
            "| file | spans | note |\n| --- | ---: | --- |\n| a.jsonl | 12 | ok |\n\
             | b.jsonl | 3 |  |\n"
        );
    }

    #[test]
    fn cells_take_any_display_value_and_never_split_a_row() {
        let mut t = Table::new(["what", "n"]);
        t.row(["a | b".to_owned(), 7.to_string()]);
        t.row(["line one\nline two\r\nthree".to_owned(), 1.5.to_string()]);
        assert_eq!(
            t.to_string(),
            "| what | n |\n| --- | --- |\n| a \\| b | 7 |\n| line one line two three | 1.5 |\n"
        );
    }

    #[test]
    #[should_panic(expected = "a row of 1 cells under 2 columns")]
    fn a_short_row_is_a_bug() {
        Table::new(["a", "b"]).row(["only one"]);
    }

    #[test]
    #[should_panic(expected = "no column 2")]
    fn aligning_a_missing_column_is_a_bug() {
        let _ = Table::new(["a", "b"]).right([2]);
    }
}
