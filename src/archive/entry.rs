//! The first look at each entry of a tar stream, shared by checking ([`super::check_tar_gz`]) and unpacking ([`super::Unpacker`]): what extraction does with it, its path inside the root, and the errors that name the archive and the entry.

use std::ffi::OsString;
use std::io::{self, Read};

use super::rules::{self, EntryAction, Limit, archive_components};
use super::{ArchiveError, UnpackStats};

/// An entry extraction acts on: its name as the archive writes it, what is done with it and
/// its path's components inside the root.
pub(super) struct Looked<'a> {
    archive: &'a str,
    raw: Vec<u8>,
    pub action: EntryAction,
    pub path: Vec<OsString>,
}

/// The error for a failed read of `archive`.
pub(super) fn read_error(archive: &str) -> impl Fn(io::Error) -> ArchiveError + '_ {
    move |source| ArchiveError::ReadArchive {
        archive: archive.to_owned(),
        source,
    }
}

/// Looks at `entry` of `archive`: `None` for an entry extraction skips, else what extraction
/// does with it, or the refusal of an unsupported type or an unsafe path, naming the entry.
pub(super) fn look<'a, R: Read>(
    entry: &tar::Entry<'_, R>,
    archive: &'a str,
) -> Result<Option<Looked<'a>>, ArchiveError> {
    let mut looked = Looked {
        archive,
        raw: entry.path_bytes().into_owned(),
        action: EntryAction::Skip,
        path: Vec::new(),
    };
    looked.action =
        rules::entry_action(entry.header().entry_type()).map_err(|r| looked.refuse(r))?;
    if looked.action == EntryAction::Skip {
        return Ok(None);
    }
    looked.path = archive_components(&looked.raw).map_err(|r| looked.refuse(r))?;
    Ok(Some(looked))
}

impl Looked<'_> {
    /// The refusal of this entry for `reason`.
    pub fn refuse(&self, reason: String) -> ArchiveError {
        ArchiveError::UnsafeEntry {
            archive: self.archive.to_owned(),
            entry: self.name(),
            reason,
        }
    }

    /// The refusal of this entry for passing `limit`, with what was extracted before it.
    pub fn over(&self, limit: Limit, stats: &UnpackStats) -> ArchiveError {
        ArchiveError::LimitExceeded {
            archive: self.archive.to_owned(),
            entry: self.name(),
            limit,
            entries: stats.entries(),
            bytes: stats.bytes,
        }
    }

    fn name(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }
}
