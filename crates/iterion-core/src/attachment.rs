//! Run attachments (issue 14 item 5): the files a user hands a run at
//! launch (`iterion run --attach NAME=PATH`), kept in the run store beside
//! the run so `iterion resume` provides the same bytes the launch saw.
//!
//! This module owns what an attachment *is* for every store: its name
//! ([`AttachmentName`], the one parse), the file name it keeps
//! ([`AttachmentFile`]), its record, and the size bounds every writer and
//! the CLI apply ([`ATTACHMENT_CAP`], [`ATTACHMENTS_TOTAL_CAP`],
//! [`MAX_ATTACHMENTS`]). It does not read host paths (the CLI does, through
//! its own checks) nor place them in a sandbox (the runtime does).

use std::fmt;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::store::StoreError;

/// Bytes one attachment may hold (64 MiB): an input the run reads, not a
/// data set; over it the put keeps nothing.
pub const ATTACHMENT_CAP: u64 = 64 * 1024 * 1024;
/// Bytes all attachments of one run may hold together (256 MiB).
pub const ATTACHMENTS_TOTAL_CAP: u64 = 256 * 1024 * 1024;
/// Attachments one run may have (upstream's per-run limit).
pub const MAX_ATTACHMENTS: usize = 20;

/// An attachment name: an identifier as the DSL declares it
/// (`[A-Za-z_][A-Za-z0-9_]*`, at most 64 bytes), so it is a safe single
/// path component everywhere it lands.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AttachmentName(String);

impl AttachmentName {
    /// Validate a name.
    pub fn parse(name: &str) -> Result<Self, StoreError> {
        let bad = |reason| StoreError::UnsafePath {
            path: name.to_owned(),
            reason,
        };
        let mut chars = name.chars();
        match chars.next() {
            None => return Err(bad("empty attachment name")),
            Some(c) if !(c.is_ascii_alphabetic() || c == '_') => {
                return Err(bad("an attachment name starts with a letter or '_'"));
            }
            Some(_) => {}
        }
        if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(bad("an attachment name holds letters, digits and '_' only"));
        }
        if name.len() > 64 {
            return Err(bad("an attachment name is at most 64 bytes"));
        }
        Ok(Self(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for AttachmentName {
    type Error = StoreError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<AttachmentName> for String {
    fn from(n: AttachmentName) -> Self {
        n.0
    }
}

impl fmt::Display for AttachmentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The file name an attachment keeps (the base name of the path it was
/// attached from): one component, no `/`, no NUL, not `.`/`..`, no
/// control character, at most 255 bytes. The container sees it under
/// `/run/iterion/attachments/NAME/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AttachmentFile(String);

impl AttachmentFile {
    /// Validate a file name.
    pub fn parse(name: &str) -> Result<Self, StoreError> {
        let bad = |reason| StoreError::UnsafePath {
            path: name.to_owned(),
            reason,
        };
        if name.is_empty() || name == "." || name == ".." {
            return Err(bad("an attachment file name names no file"));
        }
        if name.contains('/') || name.contains('\\') || name.contains('\0') {
            return Err(bad("an attachment file name is one path component"));
        }
        if name.chars().any(char::is_control) {
            return Err(bad("an attachment file name holds no control character"));
        }
        if name.len() > 255 {
            return Err(bad("an attachment file name is at most 255 bytes"));
        }
        Ok(Self(name.to_owned()))
    }

    /// The file name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for AttachmentFile {
    type Error = StoreError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<AttachmentFile> for String {
    fn from(n: AttachmentFile) -> Self {
        n.0
    }
}

impl fmt::Display for AttachmentFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A stored attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentRecord {
    /// Its name (what `{{attachments.NAME}}` reads).
    pub name: AttachmentName,
    /// The file name it keeps.
    pub file: AttachmentFile,
    /// Size in bytes.
    pub size: u64,
    /// Hex sha256 of the content.
    pub sha256: String,
    /// When stored.
    #[serde(with = "time::serde::rfc3339")]
    pub stored_at: OffsetDateTime,
}

impl AttachmentRecord {
    /// The container path a sandbox sees it at.
    pub fn container_path(&self) -> String {
        format!(
            "{}/{}/{}",
            crate::plan::ATTACHMENTS_CONTAINER_DIR,
            self.name,
            self.file
        )
    }
}

/// Result of a bounded attachment put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachmentPut {
    /// Stored whole (replacing an attachment of that name).
    Stored(AttachmentRecord),
    /// The stream passed the cap; nothing was kept.
    CapExceeded {
        /// Bytes read before stopping.
        read: u64,
        /// The cap.
        cap: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_identifiers_and_files_one_component() {
        for ok in ["logo", "_x", "spec_2", &"a".repeat(64)] {
            assert_eq!(AttachmentName::parse(ok).expect(ok).as_str(), ok);
        }
        for bad in ["", "2x", "a-b", "a/b", "../x", "a.b", &"a".repeat(65), "é"] {
            let e = AttachmentName::parse(bad).expect_err(bad);
            assert_eq!(e.code(), "STORE_UNSAFE_PATH");
        }
        for ok in ["spec.pdf", ".env", "a b.txt", "résumé.md"] {
            assert_eq!(AttachmentFile::parse(ok).expect(ok).as_str(), ok);
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a\\b",
            "a\0b",
            "a\nb",
            &"a".repeat(256),
        ] {
            assert!(AttachmentFile::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_record_names_its_container_path_and_round_trips() {
        let rec = AttachmentRecord {
            name: AttachmentName::parse("spec").expect("name"),
            file: AttachmentFile::parse("spec.pdf").expect("file"),
            size: 3,
            sha256: "00".into(),
            stored_at: OffsetDateTime::UNIX_EPOCH,
        };
        assert_eq!(
            rec.container_path(),
            "/run/iterion/attachments/spec/spec.pdf"
        );
        let json = serde_json::to_string(&rec).expect("encode");
        assert_eq!(
            serde_json::from_str::<AttachmentRecord>(&json).expect("decode"),
            rec
        );
        assert!(serde_json::from_str::<AttachmentName>("\"../x\"").is_err());
    }
}
