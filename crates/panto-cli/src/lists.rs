//! Lists in words, the one way panto joins the items of a list it shows: providers, stores,
//! key variables. The lists themselves are each defined once elsewhere (`ProviderKind`,
//! `store_value::KINDS`); this module only words them, so it uses no other module.

/// Items of a list in words: joined by `, `, with `last` (`" or "`, `", "`) before the last
/// one: `anthropic, openai or gemini`. Every list panto shows (providers, stores, variables) is
/// joined here.
pub(crate) fn listed<S: AsRef<str>>(items: &[S], last: &str) -> String {
    match items.split_last() {
        Some((tail, rest)) if !rest.is_empty() => {
            let rest: Vec<&str> = rest.iter().map(AsRef::as_ref).collect();
            format!("{}{last}{}", rest.join(", "), tail.as_ref())
        }
        Some((only, _)) => only.as_ref().to_owned(),
        None => String::new(),
    }
}
