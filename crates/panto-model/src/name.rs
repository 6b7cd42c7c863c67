//! [`Name`]: a short string (an entry id, a model, a stop reason, a tool's name) stored in
//! place when it fits, so that a long conversation does not hold a separate allocation for each
//! of the hundreds of thousands of them.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// The longest string kept in place, without an allocation.
const INLINE: usize = 22;

/// An immutable string for the short names of a conversation: entry ids, model names, stop
/// reasons, tool names. Up to 22 bytes are stored in the value itself (no allocation, the same
/// 24 bytes as a `String`); a longer one is one exact-length allocation. It reads as a `str`
/// (`Deref`, `AsRef`, `Borrow`, `Display`) and compares, orders and hashes as its text, so
/// `name == "end_turn"` and `map.get("m1")` work as with a `String`.
///
/// ```
/// use panto_model::Name;
///
/// let model = Name::from("claude-sonnet-4-5");
/// assert_eq!(model, "claude-sonnet-4-5");
/// assert_eq!(model.len(), 17);
/// assert_eq!(String::from(model), "claude-sonnet-4-5");
/// ```
#[derive(Clone)]
pub struct Name(Repr);

#[derive(Clone)]
enum Repr {
    /// The first `len` bytes of `bytes`, valid UTF-8 (checked when it was made).
    Inline { len: u8, bytes: [u8; INLINE] },
    /// Longer than [`INLINE`].
    Heap(Box<str>),
}

impl Name {
    /// The empty name.
    pub const fn empty() -> Name {
        Name(Repr::Inline {
            len: 0,
            bytes: [0; INLINE],
        })
    }

    /// A name holding a copy of `text`.
    pub fn new(text: &str) -> Name {
        if text.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..text.len()].copy_from_slice(text.as_bytes());
            Name(Repr::Inline {
                len: text.len() as u8,
                bytes,
            })
        } else {
            Name(Repr::Heap(text.into()))
        }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // The bytes were copied from a `str` and the cut is at its end, so this never
            // fails; no `unsafe` is needed to say so, and the check costs a few nanoseconds.
            Repr::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Repr::Heap(s) => s,
        }
    }

    /// The text's bytes, read without checking them again: what a comparison needs.
    fn text_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Heap(s) => s.as_bytes(),
        }
    }

    /// Whether the text is stored in place (22 bytes or fewer).
    pub fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline { .. })
    }
}

impl Default for Name {
    fn default() -> Name {
        Name::empty()
    }
}

impl Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl From<&str> for Name {
    fn from(text: &str) -> Name {
        Name::new(text)
    }
}

impl From<&String> for Name {
    fn from(text: &String) -> Name {
        Name::new(text)
    }
}

impl From<String> for Name {
    /// Keeps a long string's allocation (shrunk to its length); a short one is copied in place.
    fn from(text: String) -> Name {
        if text.len() <= INLINE {
            Name::new(&text)
        } else {
            Name(Repr::Heap(text.into_boxed_str()))
        }
    }
}

impl From<Box<str>> for Name {
    fn from(text: Box<str>) -> Name {
        if text.len() <= INLINE {
            Name::new(&text)
        } else {
            Name(Repr::Heap(text))
        }
    }
}

impl From<std::borrow::Cow<'_, str>> for Name {
    fn from(text: std::borrow::Cow<'_, str>) -> Name {
        match text {
            std::borrow::Cow::Borrowed(s) => Name::new(s),
            std::borrow::Cow::Owned(s) => Name::from(s),
        }
    }
}

impl From<Name> for String {
    fn from(name: Name) -> String {
        match name.0 {
            Repr::Heap(s) => s.into_string(),
            Repr::Inline { .. } => name.as_str().to_owned(),
        }
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        // Two texts are equal when their bytes are: no need to check them as text again.
        self.text_bytes() == other.text_bytes()
    }
}

impl Eq for Name {}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Name) -> Ordering {
        // `str` orders by its bytes.
        self.text_bytes().cmp(other.text_bytes())
    }
}

impl Hash for Name {
    /// Hashes as the `str` does, as [`Borrow<str>`] requires.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<Name> for str {
    fn eq(&self, other: &Name) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Name> for &str {
    fn eq(&self, other: &Name) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, other: &Name) -> bool {
        self.as_str() == other.as_str()
    }
}

impl serde::Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_stored_in_place_and_long_ones_are_not() {
        for text in [
            "",
            "m1",
            "end_turn",
            "claude-sonnet-4-5",
            "exactly-twenty-two-b..",
        ] {
            let name = Name::from(text);
            assert!(name.is_inline(), "{text:?}");
            assert_eq!(name, text);
            assert_eq!(String::from(name.clone()), text);
            assert_eq!(Name::from(text.to_owned()), name);
        }
        let long = "toolu_017qEkVzzPb7b7o4FkgJLF23";
        let name = Name::from(long.to_owned());
        assert!(!name.is_inline());
        assert_eq!(name.as_str(), long);
        assert_eq!(String::from(name), long);
        // A multi-byte character that ends exactly at the in-place limit.
        let edge = "aaaaaaaaaaaaaaaaaaaé";
        assert_eq!(edge.len(), 21);
        assert_eq!(Name::from(edge).as_str(), edge);
    }

    #[test]
    fn a_name_compares_orders_and_hashes_as_its_text() {
        use std::collections::HashSet;
        let a = Name::from("toolu_017qEkVzzPb7b7o4FkgJLF23");
        let b = Name::from("m2");
        assert!(b < a, "ordered as text: \"m2\" < \"toolu_...\"");
        assert_eq!(b.cmp(&Name::from("m2")), Ordering::Equal);
        let set: HashSet<Name> = [a.clone(), b.clone()].into_iter().collect();
        assert!(set.contains("m2"));
        assert!(set.contains(a.as_str()));
        assert!(!set.contains("m3"));
        assert_eq!(format!("{b} {b:?}"), "m2 \"m2\"");
        assert_eq!(size_of::<Name>(), 24);
        assert_eq!(size_of::<Option<Name>>(), 24);
    }

    proptest::proptest! {
        /// Any text survives a name whole, and a name compares, orders and hashes exactly as
        /// its text, whichever way each was stored.
        #[test]
        fn a_name_is_its_text(a in ".{0,40}", b in ".{0,40}") {
            use std::collections::hash_map::DefaultHasher;
            let hash = |h: &dyn Fn(&mut DefaultHasher)| {
                let mut state = DefaultHasher::new();
                h(&mut state);
                state.finish()
            };
            let (na, nb) = (Name::from(a.as_str()), Name::from(b.clone()));
            proptest::prop_assert_eq!(na.as_str(), a.as_str());
            proptest::prop_assert_eq!(nb.as_str(), b.as_str());
            proptest::prop_assert_eq!(na.is_inline(), a.len() <= INLINE);
            proptest::prop_assert_eq!(na == nb, a == b);
            proptest::prop_assert_eq!(na.cmp(&nb), a.cmp(&b));
            proptest::prop_assert_eq!(
                hash(&|s| na.hash(s)),
                hash(&|s| a.as_str().hash(s))
            );
            proptest::prop_assert_eq!(String::from(na), a);
        }
    }
}
