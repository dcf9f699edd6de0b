//! Directory trees as `tar.gz`: deterministic, parallel, streaming packing, extraction that
//! never writes outside its root, and the same rules checked without extracting.

mod check;
mod chunks;
mod gzip;
mod index;
mod links;
mod pack;
mod readahead;
mod rules;
mod unpack;

use std::io;
use std::path::PathBuf;

use bytes::Bytes;
use futures::stream::BoxStream;

pub use check::{CheckStats, check_tar_gz};
pub use chunks::ChunkReader;
pub use index::PathIndex;
pub use pack::{
    PackDone, PackItem, PackOptions, PackStats, Packing, SkippedEntry, list_dir, pack_dir,
    pack_items,
};
pub use rules::{ExtractLimits, Limit, entry_type_name};
pub use unpack::{Selection, UnpackStats, Unpacker};

/// A stream of bytes: a packed archive on its way out, or a blob or result on its way into or
/// out of the store.
pub type ByteStream = BoxStream<'static, io::Result<Bytes>>;

/// What went wrong packing or extracting an archive.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The directory to pack is not a directory.
    #[error("{path} is not a directory")]
    NotADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// The directory to pack could not be read.
    #[error("reading {path}: {source}")]
    ReadTree {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Packing stopped because the consumer of the stream went away.
    #[error("packing stopped before the end: the upload ended early")]
    Interrupted,
    /// Packing stopped because it was cancelled.
    #[error("packing was cancelled")]
    PackingCancelled,
    /// A file would be refused when the archive is staged, so it is refused now.
    #[error("{path}: {reason}; staging would refuse it, so nothing was stored")]
    Unstageable {
        /// The file, relative to the directory packed.
        path: String,
        /// What staging would refuse.
        reason: String,
    },
    /// A push cannot pack an entry of the tree, so it refuses the whole tree.
    #[error("{path}: {reason}; a push stores the whole tree or nothing, so nothing was stored")]
    Unpackable {
        /// The entry, relative to the directory packed.
        path: String,
        /// Why it cannot be packed.
        reason: String,
    },
    /// An archive entry would be unsafe to extract.
    #[error("{archive}: entry {entry:?} is refused: {reason}")]
    UnsafeEntry {
        /// What the archive is (a Fileset, a directory being pushed).
        archive: String,
        /// The entry's path as written in the archive.
        entry: String,
        /// What makes it unsafe.
        reason: String,
    },
    /// The archive is corrupt or could not be read.
    #[error("reading {archive}: {source}")]
    ReadArchive {
        /// What the archive is.
        archive: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Writing an extracted entry failed.
    #[error("extracting to {path}: {source}")]
    Write {
        /// The path being written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The selected subpath is not in the archive.
    #[error("{archive} has nothing under {subpath:?}")]
    SubpathNotFound {
        /// What the archive is.
        archive: String,
        /// The subpath asked for.
        subpath: String,
    },
    /// Extraction stopped before it would pass a limit.
    #[error(
        "{archive}: extraction stopped at entry {entry:?}, which would pass the limit of {limit}; {entries} entries and {bytes} bytes had been extracted"
    )]
    LimitExceeded {
        /// What the archive is.
        archive: String,
        /// The entry that would have passed the limit.
        entry: String,
        /// The limit.
        limit: Limit,
        /// Entries extracted before it.
        entries: u64,
        /// Bytes extracted before it.
        bytes: u64,
    },
    /// Extraction was cancelled.
    #[error("{archive}: extraction was cancelled after {entries} entries and {bytes} bytes")]
    Cancelled {
        /// What the archive is.
        archive: String,
        /// Entries extracted before the stop.
        entries: u64,
        /// Bytes extracted before the stop.
        bytes: u64,
    },
    /// A subpath or mount path is not a safe relative path.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidPath {
        /// Which path (subpath, mount path).
        what: &'static str,
        /// The value given.
        value: String,
        /// Why it was rejected.
        reason: &'static str,
    },
}

impl ArchiveError {
    /// Whether the error refuses what the user gave (a tree errand cannot take whole, a bad
    /// path) rather than reports a failure of errand or of the store.
    pub fn refuses_input(&self) -> bool {
        matches!(
            self,
            ArchiveError::NotADirectory { .. }
                | ArchiveError::ReadTree { .. }
                | ArchiveError::Unstageable { .. }
                | ArchiveError::Unpackable { .. }
                | ArchiveError::InvalidPath { .. }
        )
    }
}

/// An I/O error in words for a message to the user: a path longer than Linux resolves, a
/// missing file or a directory named as such, any other error without Rust's `(os error N)`.
pub fn io_words(error: &io::Error) -> String {
    if error.raw_os_error() == Some(nix::libc::ENAMETOOLONG) {
        return format!(
            "its path on disk is longer than the {} bytes Linux can resolve",
            rules::MAX_PATH_BYTES
        );
    }
    match error.kind() {
        io::ErrorKind::NotFound => "no such file or directory".to_owned(),
        io::ErrorKind::IsADirectory => "is a directory, not a file".to_owned(),
        io::ErrorKind::NotADirectory => "not a directory".to_owned(),
        io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        io::ErrorKind::InvalidData => "not UTF-8 text".to_owned(),
        _ => {
            let text = error.to_string();
            text.find(" (os error")
                .map_or(text.clone(), |at| text[..at].to_owned())
        }
    }
}
