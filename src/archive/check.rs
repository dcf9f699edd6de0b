//! Checking a `tar.gz` against the extraction rules without extracting it: what [`super::Unpacker`] would refuse is refused here, with nothing written, so an archive uploaded as a Fileset's content is vetted while it streams into the store.
//!
//! The tree the archive would make is modelled in memory (one small entry per path, no
//! content) and the rules of [`super::rules`] are applied to it in archive order, as the
//! unpacker applies them to the disk: the same entry types, paths and lexical link checks, the
//! same [`ExtractLimits`] counted the same way, nothing created through a link or over a
//! directory, hard links only to a regular file already in the tree, and at the end every link
//! resolved over the finished tree by the same [`LinkCheck`].

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use super::links::{Kind, LinkCheck, TreeView};
use super::rules::{self, EntryAction, ExtractLimits, Limit, RefusedEntry, archive_components};
use super::{ArchiveError, UnpackStats};

/// What the checked archive would make.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckStats {
    /// What extraction would write, counted as the unpacker counts it against its limits.
    pub extracted: UnpackStats,
    /// Regular files in the finished tree (hard links included, overwritten files not).
    pub files: u64,
    /// Every path of the finished tree, directories with a trailing `/`: its path index.
    pub paths: Vec<String>,
}

/// What stands at a path of the modelled tree.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir,
    File,
    Link(Vec<u8>),
}

/// The tree an archive would make, by path relative to the root, and what making it cost.
struct Tree {
    nodes: HashMap<PathBuf, Node>,
    /// Every link created, for the final check along chains.
    links: Vec<Vec<OsString>>,
    stats: UnpackStats,
    limits: ExtractLimits,
}

/// Why one entry would not be extracted.
enum Refused {
    Rule(String),
    Limit(Limit),
}

impl From<RefusedEntry> for Refused {
    fn from(reason: RefusedEntry) -> Self {
        Refused::Rule(reason.to_string())
    }
}

/// Reads the whole `tar.gz` from `reader` and refuses it as extraction within `limits` would,
/// naming the entry; `archive` says what it is in errors.
pub fn check_tar_gz(
    reader: impl Read,
    archive: &str,
    limits: ExtractLimits,
) -> Result<CheckStats, ArchiveError> {
    let read_err = |source| ArchiveError::ReadArchive {
        archive: archive.to_owned(),
        source,
    };
    let mut tar = tar::Archive::new(MultiGzDecoder::new(BufReader::with_capacity(
        256 * 1024,
        reader,
    )));
    let mut tree = Tree {
        nodes: HashMap::new(),
        links: Vec::new(),
        stats: UnpackStats::default(),
        limits,
    };
    for entry in tar.entries().map_err(read_err)? {
        let entry = entry.map_err(read_err)?;
        let raw = entry.path_bytes().into_owned();
        let refuse = |reason: String| ArchiveError::UnsafeEntry {
            archive: archive.to_owned(),
            entry: String::from_utf8_lossy(&raw).into_owned(),
            reason,
        };
        let action =
            rules::entry_action(entry.header().entry_type()).map_err(|e| refuse(e.to_string()))?;
        if action == EntryAction::Skip {
            continue;
        }
        let path = archive_components(&raw).map_err(|e| refuse(e.to_string()))?;
        let header = entry.header();
        header.mode().map_err(read_err)?;
        header.mtime().map_err(read_err)?;
        let link = || entry.link_name_bytes().unwrap_or_default().into_owned();
        let result = match action {
            EntryAction::Skip => Ok(()),
            EntryAction::Dir => tree.ensure_dirs(&path),
            EntryAction::File => tree.file(&path, entry.size()),
            EntryAction::Symlink => tree.symlink(&path, &link()),
            EntryAction::HardLink => match archive_components(&link()) {
                Err(why) => Err(Refused::Rule(format!("hard link target: {why}"))),
                Ok(target) => tree.hard_link(&path, &target),
            },
        };
        match result {
            Ok(()) => {}
            Err(Refused::Rule(reason)) => return Err(refuse(reason)),
            Err(Refused::Limit(limit)) => {
                return Err(ArchiveError::LimitExceeded {
                    archive: archive.to_owned(),
                    entry: String::from_utf8_lossy(&raw).into_owned(),
                    limit,
                    entries: tree.stats.entries(),
                    bytes: tree.stats.bytes,
                });
            }
        }
    }
    // Read to the end so the checksum of the last gzip member is verified too.
    io::copy(tar.into_inner().by_ref(), &mut io::sink()).map_err(read_err)?;
    let links = std::mem::take(&mut tree.links);
    let mut check = LinkCheck::new(&tree);
    for link in &links {
        if let Err(reason) = check.check(link) {
            return Err(ArchiveError::UnsafeEntry {
                archive: archive.to_owned(),
                entry: joined(link).display().to_string(),
                reason: reason.to_string(),
            });
        }
    }
    drop(check);
    Ok(tree.into_stats())
}

fn joined(parts: &[OsString]) -> PathBuf {
    parts.iter().collect()
}

impl Tree {
    /// Counts `entries` more entries and `bytes` more bytes against the limits, or refuses.
    fn charge(&mut self, entries: u64, bytes: u64) -> Result<(), Refused> {
        if self.stats.entries().saturating_add(entries) > self.limits.max_entries {
            return Err(Refused::Limit(Limit::Entries(self.limits.max_entries)));
        }
        if self.stats.bytes.saturating_add(bytes) > self.limits.max_bytes {
            return Err(Refused::Limit(Limit::Bytes(self.limits.max_bytes)));
        }
        Ok(())
    }

    /// Makes every component of `rel` a directory, refusing to pass through a link or a file.
    fn ensure_dirs(&mut self, rel: &[OsString]) -> Result<(), Refused> {
        let mut current = PathBuf::new();
        for part in rel {
            current.push(part);
            match self.nodes.get(&current) {
                Some(Node::Dir) => {}
                Some(Node::Link(_)) => {
                    return Err(Refused::Rule(format!(
                        "{} is a symbolic link; nothing is extracted through links",
                        current.display()
                    )));
                }
                Some(Node::File) => {
                    return Err(Refused::Rule(format!(
                        "{} exists and is not a directory",
                        current.display()
                    )));
                }
                None => {
                    self.charge(1, 0)?;
                    self.nodes.insert(current.clone(), Node::Dir);
                    self.stats.dirs += 1;
                }
            }
        }
        Ok(())
    }

    /// The parents of `dest` made directories and what stands at `dest` cleared for a new
    /// entry: a file or link gives way, a directory does not.
    fn prepare_leaf(&mut self, dest: &[OsString]) -> Result<PathBuf, Refused> {
        let Some((_, parent)) = dest.split_last() else {
            return Err(Refused::Rule(
                "only a directory can be extracted at the root".into(),
            ));
        };
        self.ensure_dirs(parent)?;
        let path = joined(dest);
        if self.nodes.get(&path) == Some(&Node::Dir) {
            return Err(Refused::Rule("a directory exists at this path".into()));
        }
        Ok(path)
    }

    fn file(&mut self, dest: &[OsString], size: u64) -> Result<(), Refused> {
        // Sparse entries count at their logical size, which is what `size` is.
        self.charge(1, size)?;
        let path = self.prepare_leaf(dest)?;
        self.nodes.insert(path, Node::File);
        self.stats.files += 1;
        self.stats.bytes += size;
        Ok(())
    }

    fn symlink(&mut self, dest: &[OsString], target: &[u8]) -> Result<(), Refused> {
        rules::check_link_target(dest.len().saturating_sub(1), target)?;
        self.charge(1, 0)?;
        let path = self.prepare_leaf(dest)?;
        self.nodes.insert(path, Node::Link(target.to_vec()));
        self.links.push(dest.to_vec());
        self.stats.symlinks += 1;
        Ok(())
    }

    fn hard_link(&mut self, dest: &[OsString], target: &[OsString]) -> Result<(), Refused> {
        if dest == target {
            return Ok(());
        }
        let not_file = || {
            Refused::Rule(format!(
                "hard link target {} is not a regular file extracted before it",
                joined(target).display()
            ))
        };
        let (_, target_parent) = target.split_last().ok_or_else(not_file)?;
        let mut current = PathBuf::new();
        for part in target_parent {
            current.push(part);
            if self.nodes.get(&current) != Some(&Node::Dir) {
                return Err(not_file());
            }
        }
        if self.nodes.get(&joined(target)) != Some(&Node::File) {
            return Err(not_file());
        }
        self.charge(1, 0)?;
        let path = self.prepare_leaf(dest)?;
        self.nodes.insert(path, Node::File);
        self.stats.hard_links += 1;
        Ok(())
    }

    fn into_stats(self) -> CheckStats {
        let mut files = 0;
        let mut paths = Vec::with_capacity(self.nodes.len());
        for (path, node) in self.nodes {
            if node == Node::File {
                files += 1;
            }
            // As packing indexes: names that are not UTF-8 are left out.
            if let Some(path) = path.to_str() {
                paths.push(match node {
                    Node::Dir => format!("{path}/"),
                    _ => path.to_owned(),
                });
            }
        }
        CheckStats {
            extracted: self.stats,
            files,
            paths,
        }
    }
}

/// The modelled tree as the link check reads it.
impl TreeView for &Tree {
    fn kind(&mut self, path: &Path) -> io::Result<Kind> {
        Ok(match self.nodes.get(path) {
            Some(Node::Dir) => Kind::Dir,
            Some(Node::File) => Kind::Other,
            Some(Node::Link(target)) => Kind::Link(target.clone()),
            None => Kind::Missing,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::Compression;
    use flate2::write::GzEncoder;
    use tar::{Builder, EntryType, Header};

    use super::*;
    use crate::archive::{PathIndex, Selection, Unpacker};

    /// One tar entry: path, type, link target, content.
    type Entry<'a> = (&'a str, EntryType, &'a str, &'a [u8]);

    fn tar_gz(entries: &[Entry<'_>]) -> Vec<u8> {
        let mut builder = Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
        for (path, kind, link, data) in entries {
            let mut header = Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_mode(if *kind == EntryType::Directory {
                0o755
            } else {
                0o644
            });
            header.set_size(data.len() as u64);
            // Written raw, so hostile paths reach the archive as they are.
            let name = &mut header.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            if !link.is_empty() {
                header.set_link_name(link).unwrap();
            }
            header.set_cksum();
            builder.append(&header, *data).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap()
    }

    fn check(bytes: &[u8]) -> Result<CheckStats, ArchiveError> {
        check_tar_gz(bytes, "upload", ExtractLimits::DEFAULT)
    }

    /// What extraction into an empty directory says of the same archive.
    fn unpack(bytes: &[u8]) -> Result<(), ArchiveError> {
        let dir = tempfile::tempdir().unwrap();
        let mut unpacker = Unpacker::new(&dir.path().join("root")).unwrap();
        let reader = std::io::Cursor::new(bytes.to_vec());
        unpacker.unpack_tar_gz(reader, &Selection::default(), "upload")?;
        unpacker.finish().map(|_| ())
    }

    fn refused_entry(result: Result<CheckStats, ArchiveError>) -> (String, String) {
        match result {
            Err(ArchiveError::UnsafeEntry { entry, reason, .. }) => (entry, reason),
            other => panic!("expected a refused entry, got {other:?}"),
        }
    }

    #[test]
    fn a_plain_tree_passes_and_is_counted() {
        let bytes = tar_gz(&[
            ("src/", EntryType::Directory, "", b""),
            ("src/main.py", EntryType::Regular, "", b"print(1)\n"),
            ("README.md", EntryType::Regular, "", b"hi\n"),
            ("docs/readme", EntryType::Symlink, "../README.md", b""),
            ("src/copy.py", EntryType::Link, "src/main.py", b""),
        ]);
        let stats = check(&bytes).unwrap();
        assert_eq!(stats.files, 3);
        // docs/ is made for the link: six entries, as the unpacker counts them.
        assert_eq!(stats.extracted.entries(), 6);
        assert_eq!(stats.extracted.bytes, 12);
        let index = PathIndex::new(stats.paths);
        for path in ["src/", "src/main.py", "docs/readme", "docs", "README.md"] {
            assert!(index.contains(path), "{path}");
        }
        unpack(&bytes).unwrap();
    }

    #[test]
    fn every_hostile_archive_is_refused_naming_its_entry_as_extraction_refuses_it() {
        let cases: Vec<(Vec<u8>, &str, &str)> = vec![
            (
                tar_gz(&[("../escape", EntryType::Regular, "", b"x")]),
                "../escape",
                "'..'",
            ),
            (
                tar_gz(&[("/etc/passwd", EntryType::Regular, "", b"x")]),
                "/etc/passwd",
                "absolute",
            ),
            (
                tar_gz(&[("out", EntryType::Symlink, "/etc", b"")]),
                "out",
                "absolute",
            ),
            (
                tar_gz(&[("a/out", EntryType::Symlink, "../../etc", b"")]),
                "a/out",
                "outside",
            ),
            (
                tar_gz(&[
                    ("dir", EntryType::Symlink, ".", b""),
                    ("dir/x", EntryType::Regular, "", b"through"),
                ]),
                "dir/x",
                "through links",
            ),
            (
                // Each link is harmless alone; the chain leads out.
                tar_gz(&[
                    ("a/", EntryType::Directory, "", b""),
                    ("a/up", EntryType::Symlink, "..", b""),
                    ("b", EntryType::Symlink, "a/up/..", b""),
                ]),
                "b",
                "resolves outside",
            ),
            (
                tar_gz(&[("dev", EntryType::Char, "", b"")]),
                "dev",
                "device",
            ),
            (
                tar_gz(&[("pipe", EntryType::Fifo, "", b"")]),
                "pipe",
                "fifo",
            ),
            (
                tar_gz(&[("hard", EntryType::Link, "/etc/shadow", b"")]),
                "hard",
                "hard link target",
            ),
            (
                tar_gz(&[("hard", EntryType::Link, "missing", b"")]),
                "hard",
                "not a regular file",
            ),
            (
                tar_gz(&[
                    ("d/", EntryType::Directory, "", b""),
                    ("d", EntryType::Regular, "", b"over a directory"),
                ]),
                "d",
                "a directory exists",
            ),
            (
                tar_gz(&[
                    ("f", EntryType::Regular, "", b"file"),
                    ("f/x", EntryType::Regular, "", b"under a file"),
                ]),
                "f/x",
                "not a directory",
            ),
        ];
        for (bytes, entry, reason) in cases {
            let (refused, why) = refused_entry(check(&bytes));
            assert_eq!(refused, entry);
            assert!(why.contains(reason), "{entry}: {why}");
            assert!(
                matches!(unpack(&bytes), Err(ArchiveError::UnsafeEntry { .. })),
                "{entry}: extraction refuses it too"
            );
        }
    }

    #[test]
    fn a_link_replaced_by_a_file_is_not_followed_and_a_dangling_link_passes() {
        let bytes = tar_gz(&[
            ("l", EntryType::Symlink, "nowhere", b""),
            ("m", EntryType::Symlink, "n", b""),
            ("m", EntryType::Regular, "", b"now a file"),
        ]);
        assert_eq!(check(&bytes).unwrap().files, 1);
    }

    #[test]
    fn corrupt_truncated_and_oversized_archives_are_refused() {
        let bytes = tar_gz(&[("a", EntryType::Regular, "", &[7u8; 4096])]);
        assert!(matches!(
            check(&bytes[..bytes.len() / 2]),
            Err(ArchiveError::ReadArchive { .. })
        ));
        assert!(matches!(
            check(b"not gzip at all"),
            Err(ArchiveError::ReadArchive { .. })
        ));
        let mut corrupted = bytes.clone();
        let at = corrupted.len() - 6;
        corrupted[at] ^= 0xff;
        assert!(check(&corrupted).is_err(), "the gzip checksum is verified");
        let small = ExtractLimits {
            max_entries: 1,
            max_bytes: 1024,
        };
        let limited = |bytes: &[u8]| match check_tar_gz(bytes, "upload", small) {
            Err(ArchiveError::LimitExceeded { entry, limit, .. }) => (entry, limit),
            other => panic!("expected a limit, got {other:?}"),
        };
        assert_eq!(limited(&bytes), ("a".to_owned(), Limit::Bytes(1024)));
        let two = tar_gz(&[
            ("a", EntryType::Regular, "", b""),
            ("b", EntryType::Regular, "", b""),
        ]);
        assert_eq!(limited(&two), ("b".to_owned(), Limit::Entries(1)));
    }

    #[test]
    fn a_packed_directory_passes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/c.txt"), "c").unwrap();
        std::os::unix::fs::symlink("b/c.txt", dir.path().join("a/link")).unwrap();
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        {
            let mut builder = Builder::new(&mut gz);
            builder.follow_symlinks(false);
            builder.append_dir_all(".", dir.path()).unwrap();
            builder.finish().unwrap();
        }
        gz.flush().unwrap();
        let bytes = gz.finish().unwrap();
        assert_eq!(check(&bytes).unwrap().files, 1);
    }
}
