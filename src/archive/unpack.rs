//! Safe extraction of `tar.gz` archives into a root directory.
//!
//! Nothing is ever written outside the root: entry paths must be relative without `..`;
//! symbolic links must point inside the root (checked lexically per entry, and again against
//! the extracted tree at the end, since a chain of individually harmless links can still lead
//! out); hard links must name a regular file already extracted; device and fifo entries are
//! refused; no path is ever created *through* a symbolic link or over a directory, and files
//! are created with `O_EXCL`, so an existing link at the destination is replaced, not followed.

use std::collections::{HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use flate2::read::MultiGzDecoder;
use tar::EntryType;

use super::ArchiveError;
use super::readahead::ReadAhead;

/// Symbolic links followed while checking where a link leads, as Linux's own limit.
const MAX_LINK_HOPS: usize = 40;

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
    archive_components(value.as_bytes()).map_err(|_| invalid("must not contain '..'"))
}

/// Follows the symbolic link at `link` (relative to the root) to `target`, and on through every
/// link on the way, whose target `read_link` gives for a path relative to the root (`None`:
/// not a link); fails if the walk leaves the root or passes more than [`MAX_LINK_HOPS`] links.
pub(super) fn walk_link(
    link: &Path,
    target: &Path,
    mut read_link: impl FnMut(&Path) -> Result<Option<PathBuf>, String>,
) -> Result<(), String> {
    let escape = || {
        format!(
            "symbolic link {} resolves outside the extraction root",
            link.display()
        )
    };
    let mut resolved: Vec<OsString> = link
        .parent()
        .into_iter()
        .flat_map(Path::components)
        .map(|c| c.as_os_str().to_owned())
        .collect();
    let mut queue: VecDeque<OsString> = target
        .components()
        .map(|c| c.as_os_str().to_owned())
        .collect();
    let mut hops = 0;
    while let Some(part) = queue.pop_front() {
        match part.as_bytes() {
            b"/" => return Err(escape()),
            b"" | b"." => {}
            b".." => {
                if resolved.pop().is_none() {
                    return Err(escape());
                }
            }
            _ => {
                resolved.push(part);
                let here: PathBuf = resolved.iter().collect();
                if let Some(next) = read_link(&here)? {
                    hops += 1;
                    if hops > MAX_LINK_HOPS {
                        return Err(format!(
                            "symbolic link {} has too many levels of links",
                            link.display()
                        ));
                    }
                    resolved.pop();
                    for c in next.components().rev() {
                        queue.push_front(c.as_os_str().to_owned());
                    }
                }
            }
        }
    }
    Ok(())
}

/// Whether an entry of type `kind` is skipped (a pax global header carries only metadata
/// defaults); devices and fifos are refused.
pub(super) fn skip_entry_type(kind: EntryType) -> Result<bool, String> {
    match kind {
        EntryType::XGlobalHeader => Ok(true),
        EntryType::Char | EntryType::Block => Err("device nodes are not allowed".into()),
        EntryType::Fifo => Err("fifos are not allowed".into()),
        _ => Ok(false),
    }
}

/// Refuses a symbolic link target that is empty, absolute, or leads above the root from a link
/// `depth` directories below it (checked lexically; chains are checked over the finished tree).
pub(super) fn check_link_target(depth: usize, target: &[u8]) -> Result<(), String> {
    if target.is_empty() {
        return Err("symbolic link with an empty target".into());
    }
    if target[0] == b'/' {
        return Err(format!(
            "symbolic link target {} is absolute",
            String::from_utf8_lossy(target)
        ));
    }
    let mut depth = depth;
    for part in target.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." if depth == 0 => {
                return Err(format!(
                    "symbolic link target {} leads outside the extraction root",
                    String::from_utf8_lossy(target)
                ));
            }
            b".." => depth -= 1,
            _ => depth += 1,
        }
    }
    Ok(())
}

/// The components of an archive path; refuses absolute paths and `..`.
pub(super) fn archive_components(raw: &[u8]) -> Result<Vec<OsString>, String> {
    if raw.first() == Some(&b'/') {
        return Err("absolute paths are not allowed".into());
    }
    let mut parts = Vec::new();
    for part in raw.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err("'..' path components are not allowed".into()),
            name => parts.push(OsStr::from_bytes(name).to_owned()),
        }
    }
    Ok(parts)
}

fn display(parts: &[OsString]) -> String {
    parts.iter().collect::<PathBuf>().display().to_string()
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

/// Why one entry could not be extracted.
enum EntryError {
    Refused(String),
    /// Reading the archive failed (corrupt or truncated data).
    Read(io::Error),
    /// Writing the tree failed.
    Io(io::Error),
}

impl From<io::Error> for EntryError {
    fn from(e: io::Error) -> Self {
        EntryError::Io(e)
    }
}

/// Extracts one or more archives into one root, so later archives (artifact mounts) overwrite
/// files of earlier ones (the base), and checks and finalizes the tree once at the end.
pub struct Unpacker {
    root: PathBuf,
    /// Relative paths known to be real directories: checked once, never replaced afterwards.
    dirs: HashSet<PathBuf>,
    /// Directory permissions and mtimes, applied at the end so that a read-only directory
    /// does not block its own contents.
    dir_meta: Vec<(PathBuf, u32, u64)>,
    /// Every link created, with the archive it came from, for the final check.
    symlinks: Vec<(PathBuf, String)>,
    buf: Vec<u8>,
    stats: UnpackStats,
}

impl Unpacker {
    /// Extraction into `root`, which is created if missing.
    pub fn new(root: &Path) -> Result<Unpacker, ArchiveError> {
        let io_err = |source| ArchiveError::Write {
            path: root.to_owned(),
            source,
        };
        fs::create_dir_all(root).map_err(io_err)?;
        Ok(Unpacker {
            root: root.canonicalize().map_err(io_err)?,
            dirs: HashSet::new(),
            dir_meta: Vec::new(),
            symlinks: Vec::new(),
            buf: vec![0; 256 * 1024],
            stats: UnpackStats::default(),
        })
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
        tar: impl Read,
        selection: &Selection,
        archive: &str,
    ) -> Result<(), ArchiveError> {
        let read_err = |source| ArchiveError::ReadArchive {
            archive: archive.to_owned(),
            source,
        };
        let mut tar = tar::Archive::new(tar);
        let mut matched = false;
        for entry in tar.entries().map_err(read_err)? {
            let mut entry = entry.map_err(read_err)?;
            let raw = entry.path_bytes().into_owned();
            let refuse = |reason: String| ArchiveError::UnsafeEntry {
                archive: archive.to_owned(),
                entry: String::from_utf8_lossy(&raw).into_owned(),
                reason,
            };
            let kind = entry.header().entry_type();
            if skip_entry_type(kind).map_err(refuse)? {
                continue;
            }
            let path = archive_components(&raw).map_err(refuse)?;
            let Some((dest, selection_root)) = selection.map(&path) else {
                continue;
            };
            matched = true;
            let header = entry.header();
            let mode = header.mode().map_err(read_err)? & 0o777;
            let mtime = header.mtime().map_err(read_err)?;
            let result = match kind {
                EntryType::Directory => self.dir(&dest, (!selection_root).then_some((mode, mtime))),
                EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                    self.file(&dest, &mut entry, mode, mtime)
                }
                EntryType::Symlink => {
                    let target = entry.link_name_bytes().unwrap_or_default().into_owned();
                    self.symlink(&dest, &target, archive)
                }
                EntryType::Link => {
                    let target = entry.link_name_bytes().unwrap_or_default().into_owned();
                    match archive_components(&target) {
                        Err(why) => Err(EntryError::Refused(format!("hard link target: {why}"))),
                        Ok(target) => match selection.map(&target) {
                            None => Err(EntryError::Refused(format!(
                                "hard link target {} is outside the extracted part",
                                display(&target)
                            ))),
                            Some((target, _)) => self.hard_link(&dest, &target),
                        },
                    }
                }
                other => Err(EntryError::Refused(format!(
                    "unsupported entry type {other:?}"
                ))),
            };
            match result {
                Ok(()) => {}
                Err(EntryError::Refused(reason)) => return Err(refuse(reason)),
                Err(EntryError::Read(source)) => return Err(read_err(source)),
                Err(EntryError::Io(source)) => {
                    return Err(ArchiveError::Write {
                        path: self.root.join(dest.iter().collect::<PathBuf>()),
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

    /// Checks every extracted link against the finished tree and applies directory metadata.
    pub fn finish(mut self) -> Result<UnpackStats, ArchiveError> {
        for (link, archive) in &self.symlinks {
            if let Err(reason) = self.resolves_inside(link) {
                return Err(ArchiveError::UnsafeEntry {
                    archive: archive.clone(),
                    entry: link.display().to_string(),
                    reason,
                });
            }
        }
        // Deepest first, so no directory is made read-only before its children are done.
        self.dir_meta
            .sort_by_key(|(path, _, _)| std::cmp::Reverse(path.components().count()));
        for (rel, mode, mtime) in &self.dir_meta {
            let path = self.root.join(rel);
            let apply = || -> io::Result<()> {
                File::open(&path)?.set_modified(UNIX_EPOCH + Duration::from_secs(*mtime))?;
                fs::set_permissions(&path, Permissions::from_mode(*mode))
            };
            apply().map_err(|source| ArchiveError::Write { path, source })?;
        }
        Ok(self.stats)
    }

    /// Makes sure every component of `rel` is a real directory, creating missing ones.
    fn ensure_dirs(&mut self, rel: &[OsString]) -> Result<(), EntryError> {
        let mut current = PathBuf::new();
        for part in rel {
            current.push(part);
            if self.dirs.contains(&current) {
                continue;
            }
            let path = self.root.join(&current);
            match fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() => {}
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
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::create_dir(&path)?;
                    self.stats.dirs += 1;
                }
                Err(e) => return Err(e.into()),
            }
            self.dirs.insert(current.clone());
        }
        Ok(())
    }

    fn dir(&mut self, dest: &[OsString], meta: Option<(u32, u64)>) -> Result<(), EntryError> {
        self.ensure_dirs(dest)?;
        if let Some((mode, mtime)) = meta {
            self.dir_meta.push((dest.iter().collect(), mode, mtime));
        }
        Ok(())
    }

    /// The parent components of `dest`, created; refuses `dest` being the root itself.
    fn prepare_leaf(&mut self, dest: &[OsString]) -> Result<PathBuf, EntryError> {
        let Some((_, parent)) = dest.split_last() else {
            return Err(EntryError::Refused(
                "only a directory can be extracted at the root".into(),
            ));
        };
        self.ensure_dirs(parent)?;
        Ok(self.root.join(dest.iter().collect::<PathBuf>()))
    }

    /// Removes what is at `path` so a new entry can take its place (later archives win), but
    /// never a directory.
    fn clear(&self, path: &Path) -> Result<(), EntryError> {
        match fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => Err(EntryError::Refused(
                "a directory exists at this path".into(),
            )),
            Ok(_) => Ok(fs::remove_file(path)?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn file(
        &mut self,
        dest: &[OsString],
        data: &mut impl Read,
        mode: u32,
        mtime: u64,
    ) -> Result<(), EntryError> {
        let path = self.prepare_leaf(dest)?;
        // O_EXCL never follows a link at the destination; an existing entry is removed first.
        let create = || {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
        };
        let mut file = match create() {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                self.clear(&path)?;
                create()?
            }
            other => other?,
        };
        loop {
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
        file.set_modified(UNIX_EPOCH + Duration::from_secs(mtime))?;
        self.stats.files += 1;
        Ok(())
    }

    fn symlink(
        &mut self,
        dest: &[OsString],
        target: &[u8],
        archive: &str,
    ) -> Result<(), EntryError> {
        check_link_target(dest.len().saturating_sub(1), target).map_err(EntryError::Refused)?;
        let path = self.prepare_leaf(dest)?;
        self.clear(&path)?;
        std::os::unix::fs::symlink(OsStr::from_bytes(target), &path)?;
        self.symlinks
            .push((dest.iter().collect(), archive.to_owned()));
        self.stats.symlinks += 1;
        Ok(())
    }

    fn hard_link(&mut self, dest: &[OsString], target: &[OsString]) -> Result<(), EntryError> {
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
        let target_path = self.root.join(target.iter().collect::<PathBuf>());
        match fs::symlink_metadata(&target_path) {
            Ok(meta) if meta.is_file() => {}
            _ => return Err(not_file()),
        }
        let path = self.prepare_leaf(dest)?;
        self.clear(&path)?;
        fs::hard_link(&target_path, &path)?;
        self.stats.hard_links += 1;
        Ok(())
    }

    /// Follows the link at `link` through the extracted tree; fails if the walk leaves the root.
    fn resolves_inside(&self, link: &Path) -> Result<(), String> {
        let target = fs::read_link(self.root.join(link)).map_err(|e| e.to_string())?;
        walk_link(link, &target, |here| {
            let here = self.root.join(here);
            let is_link = fs::symlink_metadata(&here)
                .map(|m| m.file_type().is_symlink())
                .unwrap_or(false);
            if !is_link {
                return Ok(None);
            }
            fs::read_link(&here).map(Some).map_err(|e| e.to_string())
        })
    }
}
