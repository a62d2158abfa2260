//! Event-field spellings that differ from a type's own serde. A sandbox
//! mode is written in events as the word workflows and flags use
//! ([`Mode::as_str`](crate::mode::Mode::as_str): `""` for inherit), while
//! `Mode`'s derived serde says `inherit`; the events have always carried
//! the word, so their fields go through it, both ways, and stored events
//! read back as they were written.

/// `#[serde(with = "wire::mode_word")]`: a [`Mode`](crate::mode::Mode) as
/// its word.
pub mod mode_word {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::mode::Mode;

    /// The word ([`Mode::as_str`]).
    pub fn serialize<S: Serializer>(mode: &Mode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(mode.as_str())
    }

    /// The one parser of the word ([`Mode`]'s `FromStr`).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Mode, D::Error> {
        let word = String::deserialize(d)?;
        word.parse().map_err(serde::de::Error::custom)
    }
}
