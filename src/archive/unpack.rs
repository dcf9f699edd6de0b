//! Safe extraction of `tar.gz` archives into a root directory.
//!
//! Every file system call goes through a [`cap_std::fs::Dir`] of the root, which resolves
//! each path beneath the root by construction (`openat2` with `RESOLVE_BENEATH`), so no entry
//! can be written outside it whatever the archive holds. On top of that: entry paths must be
//! relative without `..`; symbolic links must point inside the root (checked lexically per
//! entry, and over the finished tree in [`super::links`], since a chain of individually
//! harmless links can still lead out); hard links must name a regular file already extracted;
//! device, fifo and other unsupported entries are refused wherever they are in the archive
//! ([`super::rules::entry_action`]); nothing is created *through* a symbolic link or over a
//! directory, and files are created with `O_EXCL`, so an existing link at the destination is
//! replaced, not followed. An artifact mount wins over whatever stood at its mount path.
//!
//! Extraction stops at the [`ExtractLimits`], and within one chunk of the cancellation token.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs::Permissions;
use std::io::{self, BufReader, Read, Seek, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use flate2::read::MultiGzDecoder;
use tokio_util::sync::CancellationToken;

use super::ArchiveError;
use super::links::{Kind, LinkCheck, TreeView};
use super::readahead::ReadAhead;
use super::rules::{self, EntryAction, ExtractLimits, Limit, archive_components};

/// Which part of an archive to extract, and where under the root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    subpath: Vec<OsString>,
    dest: Vec<OsString>,
}

impl Selection {
    /// Entries under `subpath` (or the whole archive), re-rooted at `dest` (or the root).
    ///
    /// When `subpath` names a file rather than a directory, that file is written at `dest`.
    pub fn new(subpath: Option<&str>, dest: Option<&str>) -> Result<Selection, ArchiveError> {
        Ok(Selection {
            subpath: relative_components("subpath", subpath.unwrap_or_default())?,
            dest: relative_components("mount path", dest.unwrap_or_default())?,
        })
    }

    /// Where the archive entry at `path` goes, relative to the root, and whether it is the
    /// selected directory itself; `None` when the entry is outside the selection.
    fn map(&self, path: &[OsString]) -> Option<(Vec<OsString>, bool)> {
        let rest = path.strip_prefix(self.subpath.as_slice())?;
        let mut dest = self.dest.clone();
        dest.extend_from_slice(rest);
        Some((dest, rest.is_empty()))
    }
}

fn relative_components(what: &'static str, value: &str) -> Result<Vec<OsString>, ArchiveError> {
    let invalid = |reason| ArchiveError::InvalidPath {
        what,
        value: value.to_owned(),
        reason,
    };
    if value.starts_with('/') {
        return Err(invalid("must be a relative path"));
    }
    archive_components(value.as_bytes())
        .map_err(|_| invalid("must not contain '..' and must fit in 4095 bytes"))
}

fn display(parts: &[OsString]) -> String {
    parts.iter().collect::<PathBuf>().display().to_string()
}

fn rel(parts: &[OsString]) -> PathBuf {
    parts.iter().collect()
}

/// What extraction wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnpackStats {
    /// Regular files written.
    pub files: u64,
    /// Directories created or updated.
    pub dirs: u64,
    /// Symbolic links created.
    pub symlinks: u64,
    /// Hard links created.
    pub hard_links: u64,
    /// Bytes of file content written.
    pub bytes: u64,
}

impl UnpackStats {
    /// Files, directories and links created.
    pub fn entries(&self) -> u64 {
        self.files + self.dirs + self.symlinks + self.hard_links
    }
}

/// Why one entry could not be extracted.
enum EntryError {
    Refused(String),
    /// Reading the archive failed (corrupt or truncated data).
    Read(io::Error),
    /// Writing the tree failed.
    Io(io::Error),
    /// A limit would be passed.
    Limit(Limit),
    /// The cancellation token fired.
    Cancelled,
}

impl From<io::Error> for EntryError {
    fn from(e: io::Error) -> Self {
        EntryError::Io(e)
    }
}

/// Extracts one or more archives into one root, so later archives (artifact mounts) overwrite
/// files of earlier ones (the base), and checks and finalizes the tree once at the end.
pub struct Unpacker {
    root: Dir,
    root_path: PathBuf,
    /// Relative paths known to be real directories: checked once, never replaced afterwards
    /// (except by a mount, which forgets what it replaced).
    dirs: HashSet<PathBuf>,
    /// Directory permissions and mtimes, applied at the end so that a read-only directory
    /// does not block its own contents.
    dir_meta: Vec<(PathBuf, u32, u64)>,
    /// Every link created, with the archive it came from, for the final check.
    symlinks: Vec<(Vec<OsString>, String)>,
    buf: Vec<u8>,
    stats: UnpackStats,
    limits: ExtractLimits,
    cancel: CancellationToken,
}

impl Unpacker {
    /// Extraction into `root`, which is created if missing, with the default
    /// [`ExtractLimits`] and no cancellation.
    pub fn new(root: &Path) -> Result<Unpacker, ArchiveError> {
        let io_err = |source| ArchiveError::Write {
            path: root.to_owned(),
            source,
        };
        std::fs::create_dir_all(root).map_err(io_err)?;
        Ok(Unpacker {
            root: Dir::open_ambient_dir(root, ambient_authority()).map_err(io_err)?,
            root_path: root.to_owned(),
            dirs: HashSet::new(),
            dir_meta: Vec::new(),
            symlinks: Vec::new(),
            buf: vec![0; 256 * 1024],
            stats: UnpackStats::default(),
            limits: ExtractLimits::DEFAULT,
            cancel: CancellationToken::new(),
        })
    }

    /// Stops with [`ArchiveError::LimitExceeded`] rather than pass `limits` (counted over
    /// everything this unpacker extracts).
    pub fn with_limits(mut self, limits: ExtractLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Stops with [`ArchiveError::Cancelled`] within one entry or chunk once `cancel` fires.
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// What has been extracted so far.
    pub fn stats(&self) -> &UnpackStats {
        &self.stats
    }

    /// Extracts the selected part of the `tar.gz` read from `reader`. `archive` names it in
    /// errors. Decompression runs on its own thread, ahead of the file writes.
    pub fn unpack_tar_gz(
        &mut self,
        reader: impl Read + Send + 'static,
        selection: &Selection,
        archive: &str,
    ) -> Result<(), ArchiveError> {
        let tar = ReadAhead::spawn(MultiGzDecoder::new(BufReader::with_capacity(
            1024 * 1024,
            reader,
        )));
        self.unpack_tar(tar, selection, archive)
    }

    fn unpack_tar(
        &mut self,
        tar: impl Read + Seek,
        selection: &Selection,
        archive: &str,
    ) -> Result<(), ArchiveError> {
        let read_err = |source| ArchiveError::ReadArchive {
            archive: archive.to_owned(),
            source,
        };
        let mut tar = tar::Archive::new(tar);
        let mut matched = false;
        for entry in tar.entries_with_seek().map_err(read_err)? {
            if self.cancel.is_cancelled() {
                return Err(self.cancelled(archive));
            }
            let mut entry = entry.map_err(read_err)?;
            let raw = entry.path_bytes().into_owned();
            let refuse = |reason: String| ArchiveError::UnsafeEntry {
                archive: archive.to_owned(),
                entry: String::from_utf8_lossy(&raw).into_owned(),
                reason,
            };
            let action = rules::entry_action(entry.header().entry_type())
                .map_err(|e| refuse(e.to_string()))?;
            if action == EntryAction::Skip {
                continue;
            }
            let path = archive_components(&raw).map_err(|e| refuse(e.to_string()))?;
            let Some((dest, selection_root)) = selection.map(&path) else {
                continue;
            };
            rules::check_length(&dest).map_err(|e| refuse(e.to_string()))?;
            matched = true;
            let header = entry.header();
            let mode = header.mode().map_err(read_err)? & 0o777;
            let mtime = header.mtime().map_err(read_err)?;
            // A mount owns its mount path: whatever stood there or on the way gives way.
            let owned = selection.dest.len();
            let result = match action {
                EntryAction::Skip => Ok(()),
                EntryAction::Dir => {
                    self.dir(&dest, owned, (!selection_root).then_some((mode, mtime)))
                }
                EntryAction::File => {
                    let size = entry.size();
                    self.file(&dest, owned, selection_root, &mut entry, size, mode, mtime)
                }
                EntryAction::Symlink => {
                    let target = entry.link_name_bytes().unwrap_or_default().into_owned();
                    self.symlink(&dest, owned, selection_root, &target, archive)
                }
                EntryAction::HardLink => {
                    let target = entry.link_name_bytes().unwrap_or_default().into_owned();
                    match archive_components(&target) {
                        Err(why) => Err(EntryError::Refused(format!("hard link target: {why}"))),
                        Ok(target) => match selection.map(&target) {
                            None => Err(EntryError::Refused(format!(
                                "hard link target {} is outside the extracted part",
                                display(&target)
                            ))),
                            Some((target, _)) => {
                                self.hard_link(&dest, owned, selection_root, &target)
                            }
                        },
                    }
                }
            };
            match result {
                Ok(()) => {}
                Err(EntryError::Refused(reason)) => return Err(refuse(reason)),
                Err(EntryError::Read(source)) => return Err(read_err(source)),
                Err(EntryError::Limit(limit)) => {
                    return Err(ArchiveError::LimitExceeded {
                        archive: archive.to_owned(),
                        entry: String::from_utf8_lossy(&raw).into_owned(),
                        limit,
                        entries: self.stats.entries(),
                        bytes: self.stats.bytes,
                    });
                }
                Err(EntryError::Cancelled) => return Err(self.cancelled(archive)),
                Err(EntryError::Io(source)) => {
                    return Err(ArchiveError::Write {
                        path: self.root_path.join(rel(&dest)),
                        source,
                    });
                }
            }
        }
        // Read to the end so the checksum of the last gzip member is verified too.
        io::copy(tar.into_inner().by_ref(), &mut io::sink()).map_err(read_err)?;
        if !matched && !selection.subpath.is_empty() {
            return Err(ArchiveError::SubpathNotFound {
                archive: archive.to_owned(),
                subpath: display(&selection.subpath),
            });
        }
        Ok(())
    }

    fn cancelled(&self, archive: &str) -> ArchiveError {
        ArchiveError::Cancelled {
            archive: archive.to_owned(),
            entries: self.stats.entries(),
            bytes: self.stats.bytes,
        }
    }

    /// Checks every extracted link against the finished tree and applies directory metadata.
    pub fn finish(mut self) -> Result<UnpackStats, ArchiveError> {
        let mut links = LinkCheck::new(DirView(&self.root));
        for (link, archive) in &self.symlinks {
            if let Err(reason) = links.check(link) {
                return Err(ArchiveError::UnsafeEntry {
                    archive: archive.clone(),
                    entry: display(link),
                    reason: reason.to_string(),
                });
            }
        }
        drop(links);
        // Deepest first, so no directory is made read-only before its children are done.
        self.dir_meta
            .sort_by_key(|(path, _, _)| std::cmp::Reverse(path.components().count()));
        for (rel, mode, mtime) in &self.dir_meta {
            let apply = || -> io::Result<()> {
                if !self.root.symlink_metadata(rel)?.is_dir() {
                    // A later layer put something else here.
                    return Ok(());
                }
                let mut options = OpenOptions::new();
                options
                    .read(true)
                    .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW);
                let dir = self.root.open_with(rel, &options)?.into_std();
                dir.set_modified(rules::mtime(*mtime))?;
                dir.set_permissions(Permissions::from_mode(*mode))
            };
            apply().map_err(|source| ArchiveError::Write {
                path: self.root_path.join(rel),
                source,
            })?;
        }
        Ok(self.stats)
    }

    /// Counts `entries` more entries and `bytes` more bytes against the limits, or refuses.
    fn charge(&mut self, entries: u64, bytes: u64) -> Result<(), EntryError> {
        if self.stats.entries().saturating_add(entries) > self.limits.max_entries {
            return Err(EntryError::Limit(Limit::Entries(self.limits.max_entries)));
        }
        if self.stats.bytes.saturating_add(bytes) > self.limits.max_bytes {
            return Err(EntryError::Limit(Limit::Bytes(self.limits.max_bytes)));
        }
        Ok(())
    }

    /// Makes sure every component of `dest` is a real directory, creating missing ones. The
    /// first `owned` components belong to a mount path: whatever else stands there is removed.
    fn ensure_dirs(&mut self, dest: &[OsString], owned: usize) -> Result<(), EntryError> {
        let mut current = PathBuf::new();
        for (index, part) in dest.iter().enumerate() {
            current.push(part);
            if self.dirs.contains(&current) {
                continue;
            }
            match self.root.symlink_metadata(&current) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) if index < owned => {
                    self.root.remove_file(&current)?;
                    self.create_dir(&current)?;
                }
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(EntryError::Refused(format!(
                        "{} is a symbolic link; nothing is extracted through links",
                        current.display()
                    )));
                }
                Ok(_) => {
                    return Err(EntryError::Refused(format!(
                        "{} exists and is not a directory",
                        current.display()
                    )));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => self.create_dir(&current)?,
                Err(e) => return Err(e.into()),
            }
            self.dirs.insert(current.clone());
        }
        Ok(())
    }

    fn create_dir(&mut self, path: &Path) -> Result<(), EntryError> {
        self.charge(1, 0)?;
        self.root.create_dir(path)?;
        self.stats.dirs += 1;
        Ok(())
    }

    fn dir(
        &mut self,
        dest: &[OsString],
        owned: usize,
        meta: Option<(u32, u64)>,
    ) -> Result<(), EntryError> {
        self.ensure_dirs(dest, owned)?;
        if let Some((mode, mtime)) = meta {
            self.dir_meta.push((rel(dest), mode, mtime));
        }
        Ok(())
    }

    /// The parent components of `dest`, created; refuses `dest` being the root itself. When
    /// `replace` (the entry is a mount's own root), whatever stands at `dest` is removed, a
    /// directory tree included; otherwise only a file or link is.
    fn prepare_leaf(
        &mut self,
        dest: &[OsString],
        owned: usize,
        replace: bool,
    ) -> Result<PathBuf, EntryError> {
        let Some((_, parent)) = dest.split_last() else {
            return Err(EntryError::Refused(
                "only a directory can be extracted at the root".into(),
            ));
        };
        self.ensure_dirs(parent, owned)?;
        let path = rel(dest);
        self.clear(&path, replace && owned > 0)?;
        Ok(path)
    }

    /// Removes what is at `path` so a new entry can take its place (later archives win); a
    /// directory only when `replace_dir` (a mount's own path).
    fn clear(&mut self, path: &Path, replace_dir: bool) -> Result<(), EntryError> {
        match self.root.symlink_metadata(path) {
            Ok(meta) if meta.is_dir() && replace_dir => {
                self.root.remove_dir_all(path)?;
                self.dirs.retain(|d| !d.starts_with(path));
                self.dir_meta.retain(|(d, _, _)| !d.starts_with(path));
                Ok(())
            }
            Ok(meta) if meta.is_dir() => Err(EntryError::Refused(
                "a directory exists at this path".into(),
            )),
            Ok(_) => Ok(self.root.remove_file(path)?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn file(
        &mut self,
        dest: &[OsString],
        owned: usize,
        replace: bool,
        data: &mut impl Read,
        size: u64,
        mode: u32,
        mtime: u64,
    ) -> Result<(), EntryError> {
        // Sparse entries count at their logical size, which is what `size` is.
        self.charge(1, size)?;
        let path = self.prepare_leaf(dest, owned, replace)?;
        // O_EXCL never follows a link at the destination; `clear` removed what stood there.
        let mut options = OpenOptions::new();
        options.write(true).create_new(true).mode(0o600);
        let mut file = self.root.open_with(&path, &options)?.into_std();
        loop {
            if self.cancel.is_cancelled() {
                return Err(EntryError::Cancelled);
            }
            let n = match data.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(EntryError::Read(e)),
            };
            file.write_all(&self.buf[..n])?;
            self.stats.bytes += n as u64;
        }
        file.set_permissions(Permissions::from_mode(mode))?;
        file.set_modified(rules::mtime(mtime))?;
        self.stats.files += 1;
        Ok(())
    }

    fn symlink(
        &mut self,
        dest: &[OsString],
        owned: usize,
        replace: bool,
        target: &[u8],
        archive: &str,
    ) -> Result<(), EntryError> {
        rules::check_link_target(dest.len().saturating_sub(1), target)
            .map_err(|e| EntryError::Refused(e.to_string()))?;
        self.charge(1, 0)?;
        let path = self.prepare_leaf(dest, owned, replace)?;
        self.root.symlink(OsStr::from_bytes(target), &path)?;
        self.symlinks.push((dest.to_vec(), archive.to_owned()));
        self.stats.symlinks += 1;
        Ok(())
    }

    fn hard_link(
        &mut self,
        dest: &[OsString],
        owned: usize,
        replace: bool,
        target: &[OsString],
    ) -> Result<(), EntryError> {
        if dest == target {
            return Ok(());
        }
        let not_file = || {
            EntryError::Refused(format!(
                "hard link target {} is not a regular file extracted before it",
                display(target)
            ))
        };
        let (_, target_parent) = target.split_last().ok_or_else(not_file)?;
        let mut current = PathBuf::new();
        for part in target_parent {
            current.push(part);
            if !self.dirs.contains(&current) {
                return Err(not_file());
            }
        }
        let target_path = rel(target);
        match self.root.symlink_metadata(&target_path) {
            Ok(meta) if meta.is_file() => {}
            _ => return Err(not_file()),
        }
        self.charge(1, 0)?;
        let path = self.prepare_leaf(dest, owned, replace)?;
        self.root.hard_link(&target_path, &self.root, &path)?;
        self.stats.hard_links += 1;
        Ok(())
    }
}

/// A tree as the link check reads it, through the capability of its root.
pub(super) struct DirView<'a>(pub(super) &'a Dir);

impl TreeView for DirView<'_> {
    fn kind(&mut self, path: &Path) -> io::Result<Kind> {
        match self.0.symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => Ok(Kind::Link(
                self.0.read_link_contents(path)?.into_os_string().into_vec(),
            )),
            Ok(meta) if meta.is_dir() => Ok(Kind::Dir),
            Ok(_) => Ok(Kind::Other),
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(nix::libc::ENOTDIR) =>
            {
                Ok(Kind::Missing)
            }
            Err(e) => Err(e),
        }
    }
}
