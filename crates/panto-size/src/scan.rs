//! The byte scans behind the heuristic, shaped so that the compiler vectorises them: text costed
//! by counting byte classes in short fixed-width lanes, and JSON text walked 64 bytes at a time
//! with bit masks of its quotes, backslashes and whitespace.
//!
//! Both give exactly what a byte-at-a-time walk over the cost table gives (the tests compare
//! them with one). Plain Rust: no `unsafe`, no target-specific intrinsics.

use crate::cost::{COST, DIGIT, LETTER, NON_ASCII, SPACE, SYMBOL};

/// Bytes costed side by side: one 16-byte vector register on every common target.
const LANES: usize = 16;

/// Rows of [`LANES`] bytes counted before the per-lane counters are summed: each row adds at most
/// one to a counter, so a `u8` counter cannot overflow.
const ROWS: usize = u8::MAX as usize;

/// Whether `b` is an ASCII letter, without a branch.
#[inline(always)]
fn is_letter(b: u8) -> bool {
    // Setting bit 5 folds upper case onto lower case; no other byte lands on a lower-case letter.
    // Shifting the range to start at -128 turns the range check into one signed comparison.
    ((b | 0x20).wrapping_add(0x80 - b'a') as i8) < i8::MIN + 26
}

/// Whether `b` is an ASCII digit, without a branch.
#[inline(always)]
fn is_digit(b: u8) -> bool {
    (b.wrapping_add(0x80 - b'0') as i8) < i8::MIN + 10
}

/// Whether `b` is a space, tab, newline or carriage return (the bytes that cost [`SPACE`]).
#[inline(always)]
fn is_space(b: u8) -> bool {
    (b == b' ') | (b == b'\t') | (b == b'\n') | (b == b'\r')
}

/// Whether `b` is a byte of a multi-byte UTF-8 character.
#[inline(always)]
fn is_non_ascii(b: u8) -> bool {
    (b as i8) < 0
}

/// The cost of a few bytes by table lookup: for the bytes that do not fill a row.
fn table_tenths(bytes: &[u8]) -> u64 {
    bytes.iter().map(|&b| u64::from(COST[usize::from(b)])).sum()
}

/// The cost of `bytes` in tenths of a token, as [`COST`] gives it byte by byte.
///
/// Every byte is first taken to cost [`SYMBOL`], the dearest class; each of the four other
/// classes is counted per lane, and its count times what its bytes cost less than a symbol is
/// subtracted once per block of [`ROWS`] rows.
pub(crate) fn tenths(bytes: &[u8]) -> u64 {
    let (rows, tail) = bytes.as_chunks::<LANES>();
    let mut total = 0;
    for block in rows.chunks(ROWS) {
        let mut letters = [0u8; LANES];
        let mut digits = [0u8; LANES];
        let mut spaces = [0u8; LANES];
        let mut non_ascii = [0u8; LANES];
        for row in block {
            for (j, &b) in row.iter().enumerate() {
                letters[j] += u8::from(is_letter(b));
                digits[j] += u8::from(is_digit(b));
                spaces[j] += u8::from(is_space(b));
                non_ascii[j] += u8::from(is_non_ascii(b));
            }
        }
        // A lane's discount is at most ROWS * (SYMBOL - SPACE) = 2295, and the sixteen lanes'
        // at most 36,720: both fit a u16.
        let discount = |j: usize| {
            u16::from(letters[j]) * u16::from(SYMBOL - LETTER)
                + u16::from(digits[j]) * u16::from(SYMBOL - DIGIT)
                + u16::from(spaces[j]) * u16::from(SYMBOL - SPACE)
                + u16::from(non_ascii[j]) * u16::from(SYMBOL - NON_ASCII)
        };
        let discount: u16 = (0..LANES).map(discount).sum();
        total += u64::from(SYMBOL) * (block.len() * LANES) as u64 - u64::from(discount);
    }
    // The tail last, so that the bytes are read in order.
    total + table_tenths(tail)
}

/// The bytes of JSON text looked at together: one bit each in a `u64` mask.
const CHUNK: usize = 64;

/// Bits at even positions.
const EVEN: u64 = 0x5555_5555_5555_5555;

/// Class bits of one byte, as [`classify`] sets them.
const QUOTE_BIT: u32 = 0;
const BACKSLASH_BIT: u32 = 1;
const SPACE_BIT: u32 = 2;

/// One class byte per byte of `chunk`: which of quote, backslash and whitespace it is.
#[inline(always)]
fn classify(chunk: &[u8; CHUNK]) -> [u8; CHUNK] {
    let mut classes = [0u8; CHUNK];
    for (class, &b) in classes.iter_mut().zip(chunk) {
        *class = u8::from(b == b'"') << QUOTE_BIT
            | u8::from(b == b'\\') << BACKSLASH_BIT
            | u8::from(is_space(b)) << SPACE_BIT;
    }
    classes
}

/// The mask of the bytes whose class has `bit` set: bit `j` for byte `j`.
#[inline(always)]
fn mask(classes: &[u8; CHUNK], bit: u32) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    // Multiplying eight bytes of 0 or 1 by this moves byte j's bit to bit 56 + j, and no other
    // partial product reaches the top byte or carries into it.
    const GATHER: u64 = 0x0102_0408_1020_4080;
    let (words, _) = classes.as_chunks::<8>();
    let mut mask = 0;
    for (k, word) in words.iter().enumerate() {
        let bits = (u64::from_le_bytes(*word) >> bit) & ONES;
        mask |= (bits.wrapping_mul(GATHER) >> 56) << (8 * k);
    }
    mask
}

/// Each bit set to the parity of the bits at and below it.
fn prefix_xor(mut x: u64) -> u64 {
    for shift in [1, 2, 4, 8, 16, 32] {
        x ^= x << shift;
    }
    x
}

/// What one chunk of JSON text adds to [`json_tenths`], on top of what its bytes cost as text.
struct Step {
    /// Tenths to add.
    plus: u64,
    /// Tenths to take away.
    minus: u64,
    /// Bytes of the chunk accounted for.
    len: usize,
    /// Whether the byte after them is inside a string.
    in_string: bool,
}

/// [`ESCAPE_KIND`] of `n`, `t` and `r`: escapes that cost a space instead of a letter.
const LETTER_ESCAPE: u8 = 1;
/// [`ESCAPE_KIND`] of `b` and `f`: escapes that cost a symbol instead of a letter.
const CONTROL_ESCAPE: u8 = 2;
/// [`ESCAPE_KIND`] of `u`: an escape whose cost depends on the bytes after it.
const UNICODE_ESCAPE: u8 = 4;

/// What a byte after a backslash makes of the escape, for a count without a branch; 0 when the
/// escape costs what the byte costs.
static ESCAPE_KIND: [u8; 256] = {
    let mut kinds = [0; 256];
    kinds[b'n' as usize] = LETTER_ESCAPE;
    kinds[b't' as usize] = LETTER_ESCAPE;
    kinds[b'r' as usize] = LETTER_ESCAPE;
    kinds[b'b' as usize] = CONTROL_ESCAPE;
    kinds[b'f' as usize] = CONTROL_ESCAPE;
    kinds[b'u' as usize] = UNICODE_ESCAPE;
    kinds
};

/// The correction of the first `len` bytes (1 to [`CHUNK`]) of `chunk`, entered inside a string
/// or not and never inside an escape. `None` when they hold a `\u` escape, a backslash outside a
/// string or nothing but a backslash that ends the text: [`walk`] takes those bytes instead.
///
/// The masks take every backslash to escape the byte after it, so the escaped bytes are found as
/// in simdjson: a run of backslashes escapes every other byte from its second on, and the byte
/// after it when its length is odd. The quotes that are not escaped open and close strings, and
/// the parity of those up to a byte says whether it lies inside one. That is the walk exactly
/// until the first backslash outside a string (which escapes nothing) or the first `\u` (which
/// takes four more bytes, whatever they are); so finding one of those is enough to hand the
/// chunk over.
#[inline(always)]
fn chunk_step(chunk: &[u8; CHUNK], len: usize, in_string: bool) -> Option<Step> {
    let classes = classify(chunk);
    let quotes = mask(&classes, QUOTE_BIT);
    let backslashes = mask(&classes, BACKSLASH_BIT);
    let follows = backslashes << 1;
    let odd_starts = backslashes & !EVEN & !follows;
    let escaped = (EVEN ^ (odd_starts.wrapping_add(backslashes) << 1)) & follows;
    let escaping = backslashes & !escaped;
    // Bit j says whether the text just after byte j is inside a string.
    let inside = prefix_xor(quotes & !escaped) ^ if in_string { !0 } else { 0 };
    let mut valid = u64::MAX >> (CHUNK - len);
    let mut len = len;
    let last = 1 << (len - 1);
    if escaping & last != 0 {
        // The escaped byte is in the next chunk: leave the backslash to it.
        if len == 1 {
            return None;
        }
        len -= 1;
        valid ^= last;
    }
    if backslashes & !inside & valid != 0 {
        return None;
    }
    let (mut letter_escapes, mut control_escapes, mut unicode) = (0, 0, 0);
    let mut rest = escaped & valid;
    while rest != 0 {
        let kind = ESCAPE_KIND[usize::from(chunk[rest.trailing_zeros() as usize])];
        rest &= rest - 1;
        letter_escapes += u64::from(kind & LETTER_ESCAPE);
        control_escapes += u64::from((kind & CONTROL_ESCAPE) >> 1);
        unicode |= kind & UNICODE_ESCAPE;
    }
    if unicode != 0 {
        return None;
    }
    let outside = !inside & valid;
    let spaces = if outside == 0 {
        0
    } else {
        (mask(&classes, SPACE_BIT) & outside).count_ones()
    };
    // An escape costs the character it stands for: the backslash is free, and `\n`, `\t` and `\r`
    // cost a space rather than a letter, `\b` and `\f` a symbol rather than a letter.
    let minus = u64::from(SYMBOL) * u64::from((escaping & valid).count_ones())
        + u64::from(LETTER - SPACE) * letter_escapes
        + u64::from(SPACE) * u64::from(spaces);
    let plus = u64::from(SYMBOL - LETTER) * control_escapes;
    Some(Step {
        plus,
        minus,
        len,
        in_string: (inside >> (len - 1)) & 1 == 1,
    })
}

/// The cost of a JSON value given as its text, as [`crate::heuristic`] documents it.
///
/// The bytes are costed as text, then each chunk corrects that for what JSON makes of them:
/// whitespace outside strings is free, and an escape costs the character it stands for.
pub(crate) fn json_tenths(json: &str) -> u64 {
    let bytes = json.as_bytes();
    if bytes.len() < CHUNK {
        // Too short for the masks to pay for themselves.
        return walk(json, &mut 0, &mut false, bytes.len());
    }
    let mut plus = tenths(bytes);
    let mut minus = 0;
    let mut at = 0;
    let mut in_string = false;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let step = if let Some(chunk) = rest.first_chunk::<CHUNK>() {
            chunk_step(chunk, CHUNK, in_string)
        } else {
            let mut chunk = [0; CHUNK];
            chunk[..rest.len()].copy_from_slice(rest);
            chunk_step(&chunk, rest.len(), in_string)
        };
        if let Some(step) = step {
            plus += step.plus;
            minus += step.minus;
            at += step.len;
            in_string = step.in_string;
        } else {
            let start = at;
            plus += walk(json, &mut at, &mut in_string, start + CHUNK);
            minus += table_tenths(&bytes[start..at.min(bytes.len())]);
        }
    }
    plus - minus
}

/// The byte-at-a-time walk: costs the bytes from `*at`, which is not inside an escape, until
/// `*at` reaches `stop` or the end, and leaves `*at` and `*in_string` where it stopped (`*at` may
/// pass `stop`, and the end, to finish an escape).
fn walk(json: &str, at: &mut usize, in_string: &mut bool, stop: usize) -> u64 {
    let b = json.as_bytes();
    let cost = |byte: u8| u64::from(COST[usize::from(byte)]);
    let hex = |i: usize| {
        json.get(i..i + 4)
            .and_then(|h| u32::from_str_radix(h, 16).ok())
    };
    let stop = stop.min(b.len());
    let mut total = 0;
    let mut i = *at;
    while i < stop {
        let byte = b[i];
        i += 1;
        if !*in_string {
            if !is_space(byte) {
                *in_string = byte == b'"';
                total += cost(byte);
            }
            continue;
        }
        if byte != b'\\' {
            *in_string = byte != b'"';
            total += cost(byte);
            continue;
        }
        let escaped = b.get(i).copied().unwrap_or(b'\\');
        i += 1;
        total += match escaped {
            b'n' => cost(b'\n'),
            b't' => cost(b'\t'),
            b'r' => cost(b'\r'),
            b'b' => cost(0x08),
            b'f' => cost(0x0c),
            b'u' => {
                let n = hex(i).unwrap_or(0xFFFD);
                i += 4;
                let pair = (0xD800..0xDC00).contains(&n)
                    && b.get(i) == Some(&b'\\')
                    && b.get(i + 1) == Some(&b'u')
                    && hex(i + 2).is_some_and(|m| (0xDC00..0xE000).contains(&m));
                if pair {
                    i += 6;
                    4 * u64::from(NON_ASCII)
                } else {
                    match char::from_u32(n) {
                        Some(c) if c.is_ascii() => cost(c as u8),
                        Some(c) => c.len_utf8() as u64 * u64::from(NON_ASCII),
                        // A lone surrogate reads as U+FFFD.
                        None => 3 * u64::from(NON_ASCII),
                    }
                }
            }
            other => cost(other),
        };
    }
    *at = i;
    total
}
