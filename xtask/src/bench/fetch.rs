//! The fetch figures of the `recall` section: on each store, `Store::fetch` of ids spread over
//! the session (a tool result by its call id, an answer by its item id) with 0 and 2 entries of
//! context, the same fetch by reading the whole history (`fetch_by_scan`, what every store did
//! before it kept an index of ids) once, and the recall tool's whole answer to a search
//! (`panto_compact::answer_recall`: the recall and the fetches of each hit's neighbours).
//! Every indexed fetch timed is checked against the scan's answer.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use panto_store::{
    Head, Loaded, Page, RecallQuery, Recalled, Record, Store, StoreError, async_trait,
    fetch_by_scan,
};

use super::{fmt_duration, time};
use crate::table::Table;

/// One store's fetch figures: median, fastest and slowest.
#[derive(Debug)]
pub(super) struct Fetches {
    /// Fetches with no context.
    pub(super) bare: [Duration; 3],
    /// Fetches with 2 entries of context each side.
    pub(super) context: [Duration; 3],
    /// One fetch with 2 entries of context by reading the whole history.
    pub(super) scan: Duration,
    /// The recall tool's answer to a search.
    pub(super) tool: [Duration; 3],
    /// The recall tool's answer to the first query with each fetch reading the whole history
    /// (what it cost before the index of ids), once.
    pub(super) tool_scan: Duration,
}

/// A store whose fetch reads the whole history (the trait's default), its other operations
/// the store's own: the recall tool as it answered before the stores kept an index of ids.
struct Scanning<'a, S>(&'a S);

#[async_trait]
impl<S: Store> Store for Scanning<'_, S> {
    fn location(&self) -> String {
        self.0.location()
    }
    async fn load(&self, session: &str) -> Result<Loaded, StoreError> {
        self.0.load(session).await
    }
    async fn head(&self, session: &str) -> Result<Head, StoreError> {
        self.0.head(session).await
    }
    async fn append_records(
        &self,
        session: &str,
        at: Head,
        records: &[Record],
    ) -> Result<Head, StoreError> {
        self.0.append_records(session, at, records).await
    }
    async fn read(&self, session: &str, from: Head, max: usize) -> Result<Page, StoreError> {
        self.0.read(session, from, max).await
    }
    async fn list(&self) -> Result<Vec<String>, StoreError> {
        self.0.list().await
    }
    async fn recall(&self, session: &str, query: &RecallQuery) -> Result<Recalled, StoreError> {
        self.0.recall(session, query).await
    }
}

/// The ids fetched: rounds at a tenth, half and nine tenths of the session's `rounds`.
fn ids(rounds: usize) -> Vec<String> {
    let mut out = Vec::new();
    for tenth in [1, 5, 9] {
        let i = rounds * tenth / 10;
        out.push(format!("toolu_{i}"));
        out.push(format!("b{i}#0"));
    }
    out
}

fn spread(mut v: Vec<Duration>) -> [Duration; 3] {
    v.sort();
    [v[v.len() / 2], v[0], v[v.len() - 1]]
}

/// Measures fetches on `session` of `store` (about `rounds` rounds of four messages), and the
/// recall tool's answer to each of `queries`.
pub(super) fn measure<S: Store>(
    runtime: &tokio::runtime::Runtime,
    store: &S,
    session: &str,
    rounds: usize,
    queries: &[&str],
) -> Result<Fetches> {
    let ids = ids(rounds);
    let started = Instant::now();
    let scanned = runtime.block_on(fetch_by_scan(store, session, &ids[2], 2))?;
    let scan = started.elapsed();
    let mut bare = Vec::new();
    let mut context = Vec::new();
    for id in &ids {
        for (n, into) in [(0, &mut bare), (2, &mut context)] {
            let (median, _, _, fetched) =
                time(2, 10, || Ok(runtime.block_on(store.fetch(session, id, n))?))?;
            if fetched.asked.is_empty() {
                bail!("fetch of {id} named nothing");
            }
            if id == &ids[2] && n == 2 && fetched != scanned {
                bail!("fetch of {id} differs from the scan's");
            }
            into.push(median);
        }
    }
    let mut tool = Vec::new();
    for q in queries {
        let input = serde_json::json!({ "query": q });
        let (median, _, _, answer) = time(1, 5, || {
            Ok(runtime.block_on(panto_compact::answer_recall(store, session, &input)))
        })?;
        if answer.is_error || answer.text.is_empty() {
            bail!("the recall tool answered nothing to {q:?}");
        }
        tool.push(median);
    }
    let input = serde_json::json!({ "query": queries[0] });
    let started = Instant::now();
    let before = runtime.block_on(panto_compact::answer_recall(
        &Scanning(store),
        session,
        &input,
    ));
    let tool_scan = started.elapsed();
    let now = runtime.block_on(panto_compact::answer_recall(store, session, &input));
    if before.text != now.text {
        bail!("the recall tool's answer differs with fetches by scan");
    }
    Ok(Fetches {
        bare: spread(bare),
        context: spread(context),
        scan,
        tool: spread(tool),
        tool_scan,
    })
}

/// The stores' fetch figures as table rows, before the rows themselves are consumed.
pub(super) fn rows(stores: &[(&str, &Fetches)]) -> Vec<[String; 6]> {
    let three = |d: [Duration; 3]| {
        format!(
            "{} ({}–{})",
            fmt_duration(d[0]),
            fmt_duration(d[1]),
            fmt_duration(d[2])
        )
    };
    stores
        .iter()
        .map(|(name, f)| {
            [
                (*name).to_owned(),
                three(f.bare),
                three(f.context),
                fmt_duration(f.scan),
                three(f.tool),
                fmt_duration(f.tool_scan),
            ]
        })
        .collect()
}

/// The table of [`rows`].
pub(super) fn table(rows: &[[String; 6]]) -> String {
    let mut table = Table::new([
        "store",
        "fetch, context 0 (median, min–max)",
        "fetch, context 2",
        "fetch by scan, context 2",
        "recall tool's answer (median, min–max)",
        "the answer with fetches by scan",
    ]);
    for r in rows {
        table.row(r.clone());
    }
    format!(
        "Fetch by id (`Store::fetch` of a call id and an item id at a tenth, half and nine \
         tenths of the session: the median of each id's median of 10, with the fastest and \
         slowest), the same fetch reading the whole history once, and the recall tool's whole \
         answer to a search (`panto_compact::answer_recall`: the recall and the fetch of each \
         hit's neighbours; each query's median of 5), and its answer to the first query once with \
         each fetch reading the whole history, as before the stores kept an index of ids:\n\n{table}"
    )
}
