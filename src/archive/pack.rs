//! Packing a directory tree into a deterministic tar stream that feeds the parallel gzip
//! pipeline, on dedicated threads, so the caller only sees a stream of compressed bytes.
//!
//! Packing stops within one entry or chunk of its cancellation token, and for a push refuses
//! what staging would refuse, both by ending the stream with an error so that no upload
//! completes.

use std::ffi::OsString;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::thread;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use futures::StreamExt;
use tar::{EntryType, Header};
use tokio_util::sync::CancellationToken;

use super::gzip::{self, CHUNK, Chunker, Closed};
use super::links::LinkCheck;
use super::rules;
use super::unpack::DirView;
use super::{ArchiveError, ByteStream, io_words};

/// Left-out entries listed by name; more are only counted.
const MAX_LISTED_SKIPPED: usize = 1000;

/// One top-level entry of an archive: `name` in the archive, `path` on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackItem {
    /// Name at the top of the archive (one path component).
    pub name: OsString,
    /// What to pack under that name: a file, directory or symbolic link.
    pub path: PathBuf,
}

/// What a finished packing contained.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackStats {
    /// Regular files packed.
    pub files: u64,
    /// Directories packed.
    pub dirs: u64,
    /// Symbolic links packed.
    pub symlinks: u64,
    /// Bytes of regular file content.
    pub bytes: u64,
    /// Entries left out (unreadable, vanished, sockets, fifos, devices), each logged; the
    /// first thousand are listed in [`PackStats::skipped_entries`].
    pub skipped: u64,
    /// The entries left out and why, up to a thousand.
    pub skipped_entries: Vec<SkippedEntry>,
    /// Every path packed, directories with a trailing `/`, when [`PackOptions::index`] asks.
    pub paths: Vec<String>,
}

/// An entry left out of an archive.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SkippedEntry {
    /// Its path in the archive.
    pub path: String,
    /// Why it was left out.
    pub reason: String,
}

/// How to pack.
#[derive(Debug, Clone, Default)]
pub struct PackOptions {
    /// Stop within one entry or chunk once this fires; the stream then ends with an error.
    pub cancel: CancellationToken,
    /// Refuse, naming the file, what staging would refuse (absolute links, links leading out of
    /// the tree, paths too long) and anything that would be left out (fifos, sockets, devices,
    /// unreadable or unreachable entries): for a push, whose archive must hold the whole tree
    /// because it is staged later.
    pub stageable: bool,
    /// List every path packed in [`PackStats::paths`] (a Fileset's path index).
    pub index: bool,
}

/// A packing in progress: the compressed bytes, and how it ended.
pub struct Packing {
    /// The `tar.gz` bytes; ends with an error item if packing fails.
    pub stream: ByteStream,
    /// Resolves once packing has ended.
    pub done: PackDone,
}

/// The outcome of a [`Packing`].
pub struct PackDone(tokio::sync::oneshot::Receiver<Result<PackStats, ArchiveError>>);

impl PackDone {
    /// Waits for the packing threads to finish and returns what they packed.
    pub async fn wait(self) -> Result<PackStats, ArchiveError> {
        self.0.await.unwrap_or(Err(ArchiveError::Interrupted))
    }
}

/// The entries directly inside `dir`, as top-level archive items.
pub fn list_dir(dir: &Path) -> Result<Vec<PackItem>, ArchiveError> {
    let not_dir = |source| ArchiveError::ReadTree {
        path: dir.to_owned(),
        source,
    };
    if !fs::metadata(dir).map_err(not_dir)?.is_dir() {
        return Err(ArchiveError::NotADirectory {
            path: dir.to_owned(),
        });
    }
    fs::read_dir(dir)
        .and_then(|entries| {
            entries
                .map(|e| {
                    e.map(|e| PackItem {
                        name: e.file_name(),
                        path: e.path(),
                    })
                })
                .collect()
        })
        .map_err(not_dir)
}

/// Packs the contents of `dir` (not `dir` itself) as a `tar.gz` stream.
pub fn pack_dir(dir: &Path, options: PackOptions) -> Result<Packing, ArchiveError> {
    let items = list_dir(dir)?;
    let links = if options.stageable {
        let root = Dir::open_ambient_dir(dir, ambient_authority()).map_err(|source| {
            ArchiveError::ReadTree {
                path: dir.to_owned(),
                source,
            }
        })?;
        Some((dir.to_owned(), root))
    } else {
        None
    };
    Ok(pack(items, options, links))
}

/// Packs `items` as the top level of a `tar.gz` stream.
///
/// Entries are written in byte order of their names, depth first, with permissions, mtimes
/// and symbolic links as they are and owners reset to 0, so the same tree always gives the
/// same bytes. The stream is produced by background threads with a bounded amount of data in
/// flight; dropping the stream stops them.
pub fn pack_items(items: Vec<PackItem>, options: PackOptions) -> Packing {
    pack(items, options, None)
}

/// Packs `items`; `links` is the root the items are in and its capability, when the archive
/// must be stageable and its links are checked over that tree at the end.
fn pack(items: Vec<PackItem>, options: PackOptions, links: Option<(PathBuf, Dir)>) -> Packing {
    let workers = thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    let (tx, mut rx) = tokio::sync::mpsc::channel(2);
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let mut chunker = gzip::pipeline(workers, tx);
    thread::spawn(move || {
        let packed = {
            let mut tar = TarWriter {
                out: &mut chunker,
                stats: PackStats::default(),
                options,
                links: Vec::new(),
            };
            tar.tree(items)
                .and_then(|()| tar.check_links(links))
                .and_then(|()| tar.end().map_err(ArchiveError::from))
                .map(|()| tar.stats)
        };
        let result = match packed {
            Ok(stats) => chunker.finish().map(|()| stats).map_err(ArchiveError::from),
            Err(ArchiveError::Interrupted) => Err(ArchiveError::Interrupted),
            Err(e) => {
                // End the stream with the error, so that the upload fails instead of storing a
                // truncated archive.
                chunker.abort(std::io::Error::other(e.to_string()));
                Err(e)
            }
        };
        // Nobody may be waiting for the outcome any more; that is fine.
        let _ = done_tx.send(result);
    });
    Packing {
        stream: futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed(),
        done: PackDone(done_rx),
    }
}

impl From<Closed> for ArchiveError {
    fn from(Closed: Closed) -> Self {
        ArchiveError::Interrupted
    }
}

struct TarWriter<'a> {
    out: &'a mut Chunker,
    stats: PackStats,
    options: PackOptions,
    /// The archive names of the links packed, for the final check of a stageable archive.
    links: Vec<Vec<u8>>,
}

impl TarWriter<'_> {
    fn stop_if_cancelled(&self) -> Result<(), ArchiveError> {
        if self.options.cancel.is_cancelled() {
            return Err(ArchiveError::PackingCancelled);
        }
        Ok(())
    }

    /// Refuses, for a stageable archive, what staging would refuse.
    fn check_stageable(&self, name: &[u8], link: Option<&[u8]>) -> Result<(), ArchiveError> {
        if !self.options.stageable {
            return Ok(());
        }
        let unstageable = |reason: rules::RefusedEntry| ArchiveError::Unstageable {
            path: rules::shown_path(name),
            reason: reason.to_string(),
        };
        let parts = rules::archive_components(name).map_err(unstageable)?;
        if let Some(target) = link {
            rules::check_link_target(parts.len().saturating_sub(1), target).map_err(unstageable)?;
        }
        Ok(())
    }

    /// For a stageable archive, every packed link resolved over the tree: a chain of links
    /// that leads out is refused as staging would refuse it.
    fn check_links(&mut self, links: Option<(PathBuf, Dir)>) -> Result<(), ArchiveError> {
        let Some((_, root)) = links else {
            return Ok(());
        };
        let mut check = LinkCheck::new(DirView(&root));
        for link in &self.links {
            self.stop_if_cancelled()?;
            let parts = rules::archive_components(link).unwrap_or_default();
            check
                .check(&parts)
                .map_err(|reason| ArchiveError::Unstageable {
                    path: rules::shown_path(link),
                    reason: reason.to_string(),
                })?;
        }
        Ok(())
    }

    fn tree(&mut self, mut items: Vec<PackItem>) -> Result<(), ArchiveError> {
        items.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        let mut stack: Vec<(Vec<u8>, PathBuf)> = items
            .into_iter()
            .rev()
            .map(|item| (item.name.as_bytes().to_vec(), item.path))
            .collect();
        while let Some((name, path)) = stack.pop() {
            self.stop_if_cancelled()?;
            let meta = match fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) => {
                    self.skip(&name, &path, &io_words(&e))?;
                    continue;
                }
            };
            let kind = meta.file_type();
            if kind.is_dir() {
                self.check_stageable(&name, None)?;
                let mut dir_name = name.clone();
                dir_name.push(b'/');
                self.header(&dir_name, EntryType::Directory, 0, &meta, None)?;
                self.indexed(&dir_name);
                self.stats.dirs += 1;
                match sorted_children(&path) {
                    Ok(children) => {
                        for child in children.into_iter().rev() {
                            let mut child_name = dir_name.clone();
                            child_name.extend_from_slice(child.as_bytes());
                            stack.push((child_name, path.join(&child)));
                        }
                    }
                    Err(e) => {
                        self.skip(
                            &name,
                            &path,
                            &format!("listing directory: {}", io_words(&e)),
                        )?;
                    }
                }
            } else if kind.is_file() {
                self.check_stageable(&name, None)?;
                self.file(&name, &path)?;
            } else if kind.is_symlink() {
                match fs::read_link(&path) {
                    Ok(target) => {
                        let target = target.as_os_str().as_bytes();
                        self.check_stageable(&name, Some(target))?;
                        self.header(&name, EntryType::Symlink, 0, &meta, Some(target))?;
                        self.stats.symlinks += 1;
                        self.indexed(&name);
                        if self.options.stageable {
                            self.links.push(name);
                        }
                    }
                    Err(e) => self.skip(&name, &path, &io_words(&e))?,
                }
            } else {
                self.skip(&name, &path, special_kind(&meta))?;
            }
        }
        Ok(())
    }

    fn file(&mut self, name: &[u8], path: &Path) -> Result<(), ArchiveError> {
        // O_NONBLOCK keeps a file swapped for a fifo since the lstat from blocking the open;
        // O_NOFOLLOW keeps a file swapped for a link from being followed.
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
            .open(path)
            .and_then(|file| Ok((file.metadata()?, file)));
        let (meta, mut file): (Metadata, File) = match opened {
            Ok((meta, file)) if meta.is_file() => (meta, file),
            Ok(_) => {
                return self.skip(name, path, "changed type while being packed");
            }
            Err(e) => {
                return self.skip(name, path, &io_words(&e));
            }
        };
        let size = meta.len();
        self.header(name, EntryType::Regular, size, &meta, None)?;
        // A chunk at a time, so that a cancel stops a large file too.
        let mut filled = gzip::Filled {
            bytes: 0,
            error: None,
        };
        while filled.bytes < size && filled.error.is_none() {
            self.stop_if_cancelled()?;
            let want = (size - filled.bytes).min(CHUNK as u64);
            let piece = self.out.fill_from(&mut file, want)?;
            filled.bytes += piece.bytes;
            filled.error = piece.error;
            if piece.bytes < want {
                break;
            }
        }
        if filled.bytes < size {
            // The header already promised `size` bytes; keep the archive well-formed.
            let why = filled
                .error
                .map_or_else(|| "file shrank".to_owned(), |e| e.to_string());
            tracing::warn!(path = %path.display(), expected = size, read = filled.bytes, "{why} while packing; rest filled with zeros");
            self.zeros((size - filled.bytes) as usize)?;
        }
        self.pad(size)?;
        self.indexed(name);
        self.stats.files += 1;
        self.stats.bytes += size;
        Ok(())
    }

    fn header(
        &mut self,
        name: &[u8],
        kind: EntryType,
        size: u64,
        meta: &Metadata,
        link: Option<&[u8]>,
    ) -> Result<(), Closed> {
        let mut header = Header::new_gnu();
        let fields = header.as_old_mut();
        if name.len() >= fields.name.len() {
            self.long_name(EntryType::GNULongName, name)?;
        }
        copy_truncated(&mut fields.name, name);
        if let Some(link) = link {
            if link.len() >= fields.linkname.len() {
                self.long_name(EntryType::GNULongLink, link)?;
            }
            copy_truncated(&mut fields.linkname, link);
        }
        header.set_mode(meta.mode() & 0o7777);
        header.set_uid(0);
        header.set_gid(0);
        header.set_size(size);
        header.set_mtime(u64::try_from(meta.mtime()).unwrap_or(0));
        header.set_entry_type(kind);
        header.set_cksum();
        self.out.write(header.as_bytes())
    }

    /// GNU long name or long link entry, as GNU tar writes it for names of 100 bytes or more.
    fn long_name(&mut self, kind: EntryType, name: &[u8]) -> Result<(), Closed> {
        let mut header = Header::new_gnu();
        copy_truncated(&mut header.as_old_mut().name, b"././@LongLink");
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_size(name.len() as u64 + 1);
        header.set_entry_type(kind);
        header.set_cksum();
        self.out.write(header.as_bytes())?;
        self.out.write(name)?;
        self.out.write(&[0])?;
        self.pad(name.len() as u64 + 1)
    }

    fn pad(&mut self, size: u64) -> Result<(), Closed> {
        let rem = (size % 512) as usize;
        if rem == 0 {
            Ok(())
        } else {
            self.zeros(512 - rem)
        }
    }

    fn zeros(&mut self, n: usize) -> Result<(), Closed> {
        self.out.zeros(n)
    }

    /// Two zero blocks end a tar archive.
    fn end(&mut self) -> Result<(), Closed> {
        self.zeros(1024)
    }

    fn indexed(&mut self, name: &[u8]) {
        if self.options.index
            && let Ok(name) = std::str::from_utf8(name)
        {
            self.stats.paths.push(name.to_owned());
        }
    }

    /// Leaves an entry out, or for a stageable archive refuses the whole packing: a push stores
    /// the whole tree or nothing.
    fn skip(&mut self, name: &[u8], path: &Path, why: &str) -> Result<(), ArchiveError> {
        if self.options.stageable {
            return Err(ArchiveError::Unpackable {
                path: rules::shown_path(name),
                reason: why.to_owned(),
            });
        }
        tracing::warn!(path = %path.display(), "left out of the archive: {why}");
        self.stats.skipped += 1;
        if self.stats.skipped_entries.len() < MAX_LISTED_SKIPPED {
            self.stats.skipped_entries.push(SkippedEntry {
                path: String::from_utf8_lossy(name).into_owned(),
                reason: why.to_owned(),
            });
        }
        Ok(())
    }
}

/// Why an entry that is neither a file, a directory nor a link is left out, in words.
fn special_kind(meta: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_fifo() {
        "a fifo (named pipe) cannot be packed"
    } else if kind.is_socket() {
        "a socket cannot be packed"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device node cannot be packed"
    } else {
        "not a regular file, directory or symbolic link"
    }
}

fn sorted_children(dir: &Path) -> io::Result<Vec<OsString>> {
    let mut names = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>()?;
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(names)
}

fn copy_truncated(field: &mut [u8], value: &[u8]) {
    let n = field.len().min(value.len());
    field[..n].copy_from_slice(&value[..n]);
}
