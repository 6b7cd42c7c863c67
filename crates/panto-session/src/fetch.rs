//! The JSONL store's fetch by id: the sidecar's ids (`panto_store_sqlite::ids`) say where the
//! id is, which entries around it hold the neighbours, and the byte where the first of them
//! starts; only those lines of the file are read.

use panto_store::Fetched;
use panto_store_sqlite::ids::{self, Stale};

use crate::history::History;
use crate::recall::{KEY, Sidecars, Unusable, catch_up};
use crate::store::Session;

/// What the sidecar answers of a fetch.
pub(crate) enum Answer {
    /// The items.
    Found(Fetched),
    /// Nothing has that id.
    None,
}

/// Fetches `id` with `context` neighbours from `session` with its sidecar, built or caught up
/// first; `None` when the sidecar cannot be used or cannot tell (the caller reads the file).
pub(crate) fn fetch(
    sidecars: &Sidecars,
    session: &Session,
    id: &str,
    context: usize,
) -> Option<Answer> {
    if !session.path().is_file() {
        return None;
    }
    sidecars
        .with(session.path(), |conn| {
            let state = catch_up(conn, session)?;
            let tx = conn.transaction()?;
            let window = match ids::window(&tx, KEY, id, context, state)? {
                Err(Stale) => return Err(Unusable),
                Ok(None) => return Ok(Answer::None),
                Ok(Some(w)) => w,
            };
            let want = window.expect[window.expect.len() - 1] - window.expect[0] + 1;
            let file = session.open_for_reading().map_err(|_| Unusable)?;
            let mut history =
                History::starting_at(session.path().to_path_buf(), file, window.at.get())?;
            let mut entries = Vec::new();
            while (entries.len() as u64) < want {
                let (line, raw, _) = history.next_raw().map_err(|_| Unusable)?.ok_or(Unusable)?;
                entries.push(panto_model::decode_line(raw, line).map_err(|_| Unusable)?);
            }
            ids::fetch_from(&tx, KEY, id, context, &window, &entries)?
                .map(Answer::Found)
                .ok_or(Unusable)
        })
        .ok()
}
