//! panto's catalogue of the context windows of well-known models (`data/windows.txt`, with the
//! date it was checked against the providers' documentation): the lowest-priority window source
//! ([`WindowSource::Catalogue`](crate::WindowSource::Catalogue)).

/// The catalogue, as shipped.
const CATALOGUE: &str = include_str!("../data/windows.txt");

/// One entry: a model name, or a prefix of names (`gpt-4o*`), and its window.
struct Entry<'a> {
    name: &'a str,
    prefix: bool,
    tokens: u64,
}

impl Entry<'_> {
    /// How closely the entry names `model`: the length of the name it matches (an exact name
    /// beats every prefix), `None` when it does not.
    fn matches(&self, model: &str) -> Option<usize> {
        if self.prefix {
            model.starts_with(self.name).then_some(self.name.len())
        } else {
            (model == self.name).then_some(usize::MAX)
        }
    }
}

/// The entries of `text`: every line that is not blank, not a comment and not the `checked`
/// line; a line that is not `NAME TOKENS SOURCE` is skipped (the catalogue's tests reject it).
fn entries(text: &str) -> impl Iterator<Item = Entry<'_>> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("checked "))
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next()?;
            let tokens = fields.next()?.parse().ok()?;
            let (name, prefix) = match name.strip_suffix('*') {
                Some(stem) => (stem, true),
                None => (name, false),
            };
            Some(Entry {
                name,
                prefix,
                tokens,
            })
        })
}

/// The catalogue's window for `model` (case does not matter; a routing prefix such as
/// `openai/` is ignored): the entry that names it exactly, else the longest prefix that
/// matches. `None` when the catalogue does not know the name.
pub(crate) fn window(model: &str) -> Option<u64> {
    window_in(CATALOGUE, model)
}

fn window_in(text: &str, model: &str) -> Option<u64> {
    let model = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    entries(text)
        .filter_map(|e| e.matches(&model).map(|rank| (rank, e.tokens)))
        .max_by_key(|&(rank, _)| rank)
        .map(|(_, tokens)| tokens)
        .filter(|&t| t > 0)
}

/// The date the catalogue was last checked against the providers' documentation
/// (`YYYY-MM-DD`).
pub fn catalogue_checked() -> &'static str {
    CATALOGUE
        .lines()
        .find_map(|l| l.trim().strip_prefix("checked "))
        .map_or("", str::trim)
}

#[cfg(test)]
mod tests {
    //! The catalogue as shipped reads whole, and names resolve to the closest entry.

    use super::{CATALOGUE, catalogue_checked, entries, window, window_in};

    #[test]
    fn every_line_of_the_catalogue_is_an_entry_with_a_source() {
        for line in CATALOGUE.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with("checked ") {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields.len(), 3, "not NAME TOKENS SOURCE: {line}");
            assert!(fields[1].parse::<u64>().is_ok_and(|t| t > 0), "{line}");
            assert!(fields[2].starts_with("https://"), "{line}");
            assert_eq!(fields[0], fields[0].to_ascii_lowercase(), "{line}");
        }
        let count = entries(CATALOGUE).count();
        assert!(count >= 20, "{count} entries");
    }

    #[test]
    fn the_date_it_was_checked_is_a_date() {
        let date = catalogue_checked();
        let parts: Vec<&str> = date.split('-').collect();
        assert_eq!(parts.len(), 3, "{date}");
        assert!(parts.iter().all(|p| p.bytes().all(|b| b.is_ascii_digit())));
    }

    #[test]
    fn a_name_resolves_to_its_exact_entry_else_the_longest_prefix() {
        assert_eq!(window("gpt-4o"), Some(128_000));
        assert_eq!(window("gpt-4o-mini-2024-07-18"), Some(128_000));
        assert_eq!(window("GPT-4.1-mini"), Some(1_047_576));
        assert_eq!(window("gpt-4"), Some(8_192));
        assert_eq!(window("openai/gpt-5"), Some(400_000));
        assert_eq!(window("claude-sonnet-4-5-20250929"), Some(200_000));
        assert_eq!(window("gemini-2.5-flash-lite"), Some(1_048_576));
        // Names it does not know, and look-alikes of names it does.
        assert_eq!(window("claude-x"), None);
        assert_eq!(window("gpt-5.1-chat-latest"), None);
        assert_eq!(window("llama3"), None);
        let text = "a* 10 https://x\nab* 20 https://x\nabc 30 https://x\n";
        assert_eq!(window_in(text, "abd"), Some(20));
        assert_eq!(window_in(text, "abc"), Some(30));
        assert_eq!(window_in(text, "abcd"), Some(20));
        assert_eq!(window_in(text, "b"), None);
    }
}
