//! Finding a store URL's secrets without trusting it to parse, and showing it without them.
//!
//! A password may sit in the user part (`user:PASSWORD@`), possibly holding an unencoded `/`,
//! `?`, `@` or `#` that makes the URL mean something else, or in the query (`password=`). What
//! a person sees of a URL that may not even be one is decided here, conservatively: everything
//! that could be a password is replaced, even when that hides more than the password.

/// The replacement of a password in every text panto shows.
pub(crate) const REDACTED: &str = "<redacted>";

/// The text after `scheme://`, and where it starts.
fn after_scheme(url: &str) -> Option<(usize, &str)> {
    let at = url.find("://")? + 3;
    Some((at, &url[at..]))
}

/// Where the user part's password lies in `url`, read conservatively: from the first `:` after
/// `scheme://` to the last `@` of the URL, when the `:` comes first. A password holding an
/// unencoded `/`, `?` or `@` is covered whole; a URL with an `@` in its query and a port may be
/// covered further than its password, which only hides more.
fn user_password_span(url: &str) -> Option<(usize, usize)> {
    let (start, rest) = after_scheme(url)?;
    let last_at = rest.rfind('@')?;
    let colon = rest[..last_at].find(':')?;
    Some((start + colon + 1, start + last_at))
}

/// Where the values of secret query parameters lie: from after the first `password=` (any
/// key ending so, in any case, wherever it is: a password holding an unencoded `?` may hide
/// where the query starts) to the end of the URL (a value holding an unencoded `&` is covered
/// whole).
fn query_secret_span(url: &str) -> Option<(usize, usize)> {
    let (start, rest) = after_scheme(url)?;
    let at = rest.to_ascii_lowercase().find("password=")?;
    Some((start + at + "password=".len(), url.len()))
}

/// The secrets of a raw URL: what [`redact`] replaces, as written and percent-decoded, and
/// each piece of them between the characters that could have cut a URL apart (so that a
/// parser's message quoting a piece of a password is scrubbed too). Pieces shorter than 4
/// bytes are left out: they would turn every message into noise.
pub(crate) fn raw_secrets(url: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    for (from, to) in [user_password_span(url), query_secret_span(url)]
        .into_iter()
        .flatten()
    {
        let raw = &url[from..to];
        if raw.is_empty() {
            continue;
        }
        secrets.push(raw.to_owned());
        secrets.push(percent_decode(raw));
        for piece in raw.split(['/', '?', '@', '#', '&', '=', ':']) {
            if piece.len() >= 4 {
                secrets.push(piece.to_owned());
                secrets.push(percent_decode(piece));
            }
        }
    }
    secrets
}

/// `url` with every place a password could be replaced by `<redacted>`, without parsing it:
/// what to show of a store URL that may not even be one (`panto config`, an error about a URL
/// that does not parse). The user part's password is taken to run from the first `:` after
/// `scheme://` to the last `@`, and a query's from `password=` to the end, so a password holding
/// an unencoded `/`, `?`, `@`, `#` or `&` is hidden whole (and sometimes more than it).
pub fn redact(url: &str) -> String {
    let mut spans: Vec<(usize, usize)> = [user_password_span(url), query_secret_span(url)]
        .into_iter()
        .flatten()
        .collect();
    spans.sort_unstable();
    let mut out = String::with_capacity(url.len());
    let mut at = 0;
    for (from, to) in spans {
        if from < at {
            // Overlapping spans: the earlier one already hid this part.
            at = at.max(to);
            continue;
        }
        out.push_str(&url[at..from]);
        out.push_str(REDACTED);
        at = to;
    }
    out.push_str(&url[at.min(url.len())..]);
    out
}

/// Decodes `%XX` escapes (what the URL parser does to a password).
pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Replaces every secret in `text` (the longest first, so that a secret holding another is
/// replaced whole).
pub(crate) fn scrub_with(secrets: &[String], text: &str) -> String {
    let mut out = text.to_owned();
    for s in secrets {
        if !s.is_empty() && out.contains(s.as_str()) {
            out = out.replace(s.as_str(), REDACTED);
        }
    }
    out
}

/// Sorts secrets longest first and drops repeats and empty ones.
pub(crate) fn tidy(secrets: &mut Vec<String>) {
    secrets.retain(|s| !s.is_empty());
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
}
