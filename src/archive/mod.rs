//! Directory trees as `tar.gz`: deterministic, parallel, streaming packing, extraction that
//! never writes outside its root, and the same rules checked without extracting.

mod check;
mod chunks;
mod gzip;
mod pack;
mod readahead;
mod unpack;

use std::io;
use std::path::PathBuf;

use bytes::Bytes;
use futures::stream::BoxStream;

pub use check::{CheckLimits, CheckStats, check_tar_gz};
pub use chunks::ChunkReader;
pub use pack::{PackDone, PackItem, PackStats, Packing, list_dir, pack_dir, pack_items};
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
    /// An archive entry would be unsafe to extract.
    #[error("archive {archive}: entry {entry:?} is refused: {reason}")]
    UnsafeEntry {
        /// The archive (its store key).
        archive: String,
        /// The entry's path as written in the archive.
        entry: String,
        /// What makes it unsafe.
        reason: String,
    },
    /// The archive is corrupt or could not be read.
    #[error("reading archive {archive}: {source}")]
    ReadArchive {
        /// The archive (its store key).
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
    #[error("archive {archive} has nothing under {subpath:?}")]
    SubpathNotFound {
        /// The archive (its store key).
        archive: String,
        /// The subpath asked for.
        subpath: String,
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
