//! What each byte of text costs, in tenths of a token, by its class: the definition that the
//! heuristic (`heuristic.rs`) documents and the byte scans (`scan.rs`) compute fast.

/// Cost in tenths of a token of an ASCII letter.
pub(crate) const LETTER: u8 = 3;
/// Cost in tenths of a token of an ASCII digit.
pub(crate) const DIGIT: u8 = 8;
/// Cost in tenths of a token of a space, tab, newline or carriage return.
pub(crate) const SPACE: u8 = 2;
/// Cost in tenths of a token of any other ASCII byte: punctuation, symbols, control characters.
pub(crate) const SYMBOL: u8 = 11;
/// Cost in tenths of a token of a byte of a multi-byte UTF-8 character.
pub(crate) const NON_ASCII: u8 = 5;

/// The cost of every byte value, in tenths of a token: the definition the scans in
/// `scan.rs` compute by byte class.
pub(crate) static COST: [u8; 256] = cost_table();

const fn cost_table() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        table[i] = if b.is_ascii_alphabetic() {
            LETTER
        } else if b.is_ascii_digit() {
            DIGIT
        } else if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            SPACE
        } else if b.is_ascii() {
            SYMBOL
        } else {
            NON_ASCII
        };
        i += 1;
    }
    table
}
