//! What extraction accepts, as pure functions shared by the unpacker and by packing for a push: entry paths, link targets, entry types in words, timestamps, and the limits on what one staging may write.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tar::EntryType;

/// The longest path Linux accepts (`PATH_MAX` less its terminating NUL).
pub const MAX_PATH_BYTES: usize = 4095;
/// The longest name of one path component Linux file systems accept (`NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;
/// The latest modification time kept (9999-12-31T23:59:59Z); later ones are clamped to it.
const MAX_MTIME_SECONDS: u64 = 253_402_300_799;

/// How much one staging may write: bytes of file content (sparse files at their logical size)
/// and entries (files, directories, links) created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtractLimits {
    /// Bytes of file content.
    pub max_bytes: u64,
    /// Files, directories and links created.
    pub max_entries: u64,
}

impl ExtractLimits {
    /// 16 GiB of content in at most a million entries: well above a source tree with its
    /// dependencies, well below what fills a node's disk or inode table.
    pub const DEFAULT: ExtractLimits = ExtractLimits {
        max_bytes: 16 * 1024 * 1024 * 1024,
        max_entries: 1_000_000,
    };
}

impl Default for ExtractLimits {
    fn default() -> Self {
        ExtractLimits::DEFAULT
    }
}

/// Which limit an extraction reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`ExtractLimits::max_bytes`].
    Bytes(u64),
    /// [`ExtractLimits::max_entries`].
    Entries(u64),
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Bytes(n) => write!(f, "{n} bytes of extracted content (max-extract-bytes)"),
            Limit::Entries(n) => write!(f, "{n} extracted entries (max-extract-entries)"),
        }
    }
}

/// Paths longer than this are shown shortened in messages.
const SHOWN_PATH_BYTES: usize = 160;

/// An archive path for a message: as it is when short, else its start and end around `…`
/// with its length, so a 4 KiB path does not fill the screen.
pub fn shown_path(raw: &[u8]) -> String {
    if raw.len() <= SHOWN_PATH_BYTES {
        return String::from_utf8_lossy(raw).into_owned();
    }
    let half = SHOWN_PATH_BYTES / 2;
    format!(
        "{}…{} ({} bytes)",
        String::from_utf8_lossy(&raw[..half]),
        String::from_utf8_lossy(&raw[raw.len() - half..]),
        raw.len()
    )
}

/// The components of an archive path; refuses absolute paths, `..`, and paths or names longer
/// than Linux accepts.
pub fn archive_components(raw: &[u8]) -> Result<Vec<OsString>, RefusedEntry> {
    if raw.first() == Some(&b'/') {
        return Err(RefusedEntry::AbsolutePath);
    }
    let mut parts = Vec::new();
    for part in raw.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err(RefusedEntry::ParentComponent),
            name => parts.push(OsStr::from_bytes(name).to_owned()),
        }
    }
    check_length(&parts)?;
    Ok(parts)
}

/// Refuses a path Linux could not create: longer than [`MAX_PATH_BYTES`] in all, or with a
/// name longer than [`MAX_NAME_BYTES`].
pub fn check_length(parts: &[OsString]) -> Result<(), RefusedEntry> {
    if let Some(long) = parts.iter().find(|p| p.len() > MAX_NAME_BYTES) {
        return Err(RefusedEntry::LongName {
            start: String::from_utf8_lossy(&long.as_bytes()[..32]).into_owned(),
            bytes: long.len(),
        });
    }
    let total = parts
        .iter()
        .map(|p| p.len() + 1)
        .sum::<usize>()
        .saturating_sub(1);
    if total > MAX_PATH_BYTES {
        return Err(RefusedEntry::LongPath { bytes: total });
    }
    Ok(())
}

/// Refuses a symbolic link target that is empty, absolute, too long, or leads above the root
/// from a link `depth` directories below it (checked lexically; chains are checked over the
/// finished tree).
pub fn check_link_target(depth: usize, target: &[u8]) -> Result<(), RefusedEntry> {
    let shown = || String::from_utf8_lossy(target).into_owned();
    if target.is_empty() {
        return Err(RefusedEntry::EmptyLinkTarget);
    }
    if target[0] == b'/' {
        return Err(RefusedEntry::AbsoluteLinkTarget { target: shown() });
    }
    if target.len() > MAX_PATH_BYTES {
        return Err(RefusedEntry::LongLinkTarget {
            bytes: target.len(),
        });
    }
    // One pass over the bytes, tracking the length of the current component and whether it is
    // all dots so far: a target can be 4 KiB of `d/../`, which an iterator of parts walks
    // several times slower.
    let outside = || RefusedEntry::LinkLeadsOutside { target: shown() };
    let (mut depth, mut len, mut dots) = (depth, 0usize, true);
    for &byte in target {
        if byte == b'/' {
            depth = step(depth, len, dots).ok_or_else(outside)?;
            (len, dots) = (0, true);
        } else {
            len += 1;
            dots &= byte == b'.';
        }
    }
    step(depth, len, dots).ok_or_else(outside)?;
    Ok(())
}

/// The depth after a component of `len` bytes, all of them dots when `dots`; `None` above the
/// root.
fn step(depth: usize, len: usize, dots: bool) -> Option<usize> {
    match (len, dots) {
        (0, _) | (1, true) => Some(depth),
        (2, true) => depth.checked_sub(1),
        _ => Some(depth + 1),
    }
}

/// What extraction does with an entry of one tar type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryAction {
    /// Nothing: a pax global header carries only metadata defaults.
    Skip,
    /// Makes a directory.
    Dir,
    /// Writes a regular file (sparse and contiguous files too).
    File,
    /// Makes a symbolic link.
    Symlink,
    /// Makes a hard link to a regular file extracted before it.
    HardLink,
}

/// What extraction does with an entry of type `kind`; devices, fifos and every other type are
/// refused, naming the type.
pub fn entry_action(kind: EntryType) -> Result<EntryAction, RefusedEntry> {
    match kind {
        EntryType::XGlobalHeader => Ok(EntryAction::Skip),
        EntryType::Char | EntryType::Block | EntryType::Fifo => Err(RefusedEntry::NotAllowedType {
            name: entry_type_name(kind.as_byte()),
        }),
        EntryType::Directory => Ok(EntryAction::Dir),
        EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => Ok(EntryAction::File),
        EntryType::Symlink => Ok(EntryAction::Symlink),
        EntryType::Link => Ok(EntryAction::HardLink),
        other => Err(RefusedEntry::UnsupportedType {
            name: entry_type_name(other.as_byte()),
        }),
    }
}

/// Why extraction refuses an entry by its path, its link target or its type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RefusedEntry {
    /// A path starting at `/`.
    #[error("absolute paths are not allowed")]
    AbsolutePath,
    /// A path with a `..` component.
    #[error("'..' path components are not allowed")]
    ParentComponent,
    /// A component longer than [`MAX_NAME_BYTES`].
    #[error(
        "the name {start:?}… is {bytes} bytes long; the longest name allowed is {MAX_NAME_BYTES} bytes"
    )]
    LongName {
        /// The name's first 32 bytes.
        start: String,
        /// Its length.
        bytes: usize,
    },
    /// A path longer than [`MAX_PATH_BYTES`].
    #[error("the path is {bytes} bytes long; the longest path allowed is {MAX_PATH_BYTES} bytes")]
    LongPath {
        /// Its length.
        bytes: usize,
    },
    /// A symbolic link to the empty path.
    #[error("symbolic link with an empty target")]
    EmptyLinkTarget,
    /// A symbolic link to an absolute path.
    #[error("symbolic link target {target} is absolute")]
    AbsoluteLinkTarget {
        /// The target.
        target: String,
    },
    /// A symbolic link target longer than [`MAX_PATH_BYTES`].
    #[error(
        "symbolic link target is {bytes} bytes long; the longest allowed is {MAX_PATH_BYTES} bytes"
    )]
    LongLinkTarget {
        /// Its length.
        bytes: usize,
    },
    /// A symbolic link target that climbs above the root.
    #[error("symbolic link target {target} leads outside the extraction root")]
    LinkLeadsOutside {
        /// The target.
        target: String,
    },
    /// A device or fifo.
    #[error("{name} entries are not allowed")]
    NotAllowedType {
        /// The type in words.
        name: String,
    },
    /// A type extraction does not know.
    #[error("unsupported entry type: {name}")]
    UnsupportedType {
        /// The type in words.
        name: String,
    },
}

/// A tar entry type in words, for refusals.
pub fn entry_type_name(byte: u8) -> String {
    let name = match byte {
        b'0' | b'\0' => "regular file",
        b'1' => "hard link",
        b'2' => "symbolic link",
        b'3' => "character device",
        b'4' => "block device",
        b'5' => "directory",
        b'6' => "fifo",
        b'7' => "contiguous file",
        b'x' => "pax extended header",
        b'g' => "pax global header",
        b'L' => "GNU long name",
        b'K' => "GNU long link name",
        b'S' => "GNU sparse file",
        b'V' => "GNU volume label",
        b'M' => "GNU multi-volume continuation",
        b'D' => "GNU directory dump",
        b'N' => "GNU old long name",
        b'A' => "Solaris access control list",
        b'E' => "Solaris extended attributes",
        b'X' => "POSIX.1-2001 extended header (old)",
        other if other.is_ascii_graphic() => {
            return format!("unknown entry type '{}'", other as char);
        }
        other => return format!("unknown entry type byte {other:#04x}"),
    };
    format!("{name} ('{}')", (byte.max(b'0')) as char)
}

/// The modification time a tar header's seconds stand for, clamped to what a file system can
/// hold.
pub fn mtime(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds.min(MAX_MTIME_SECONDS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_names_longer_than_linux_allows_are_refused() {
        let long_path = "d/".repeat(2500);
        let err = archive_components(long_path.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("4999 bytes long"), "{err}");
        let long_name = format!("dir/{}", "n".repeat(300));
        let err = archive_components(long_name.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("300 bytes long"), "{err}");
        let fits = format!("{}/{}", "a".repeat(255), "b".repeat(255));
        assert_eq!(archive_components(fits.as_bytes()).unwrap().len(), 2);
    }

    #[test]
    fn link_targets_are_checked_lexically_from_the_links_depth() {
        assert!(check_link_target(0, b"a/../b").is_ok());
        assert!(check_link_target(1, b"../x").is_ok());
        assert!(check_link_target(0, b"./.../..x/./a//..").is_ok());
        assert!(
            check_link_target(0, b"a/./../..")
                .unwrap_err()
                .to_string()
                .contains("outside")
        );
        assert!(check_link_target(2, b"a/../../..").is_ok());
        assert!(
            check_link_target(2, b"a/../../../..")
                .unwrap_err()
                .to_string()
                .contains("outside")
        );
        assert!(
            check_link_target(0, b"../x")
                .unwrap_err()
                .to_string()
                .contains("outside")
        );
        assert!(
            check_link_target(0, b"/usr/bin/python3")
                .unwrap_err()
                .to_string()
                .contains("absolute")
        );
        assert!(
            check_link_target(0, b"")
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        let long = vec![b'a'; 5000];
        assert!(
            check_link_target(0, &long)
                .unwrap_err()
                .to_string()
                .contains("5000 bytes")
        );
    }

    #[test]
    fn entry_types_are_named_in_words() {
        assert_eq!(entry_type_name(b'V'), "GNU volume label ('V')");
        assert_eq!(entry_type_name(b'0'), "regular file ('0')");
        assert_eq!(entry_type_name(0), "regular file ('0')");
        assert_eq!(entry_type_name(b'q'), "unknown entry type 'q'");
        assert_eq!(entry_type_name(0x99), "unknown entry type byte 0x99");
    }

    #[test]
    fn far_future_mtimes_are_clamped_not_a_panic() {
        let latest = mtime(MAX_MTIME_SECONDS);
        assert_eq!(mtime(u64::MAX), latest);
        assert_eq!(mtime(1 << 63), latest);
        assert_eq!(mtime(60), UNIX_EPOCH + Duration::from_secs(60));
    }
}
