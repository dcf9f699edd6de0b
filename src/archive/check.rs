//! Checking a `tar.gz` against the extraction rules without extracting it: what [`super::Unpacker`] would refuse is refused here, with nothing written, so an archive uploaded as a Fileset's content is vetted while it streams into the store.
//!
//! The tree the archive would make is modelled in memory (one small entry per path, no
//! content), and every rule is applied to the model in archive order, as extraction applies it
//! to the disk: entry paths relative without `..`; no devices or fifos; nothing created through
//! a symbolic link or over a directory; links whose targets stay inside the root, lexically and,
//! at the end, along every chain of links; hard links only to a regular file already in the
//! tree. A limit on entries and on content bytes bounds what one check may cost.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;
use tar::EntryType;

use super::ArchiveError;
use super::unpack::{archive_components, check_link_target, skip_entry_type, walk_link};

/// What one check may cost: entries and bytes of file content, the same bounds staging
/// extracts within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckLimits {
    /// Entries (files, directories, links).
    pub max_entries: u64,
    /// Bytes of file content.
    pub max_bytes: u64,
}

impl Default for CheckLimits {
    /// A million entries and 16 GiB of content.
    fn default() -> Self {
        CheckLimits {
            max_entries: 1_000_000,
            max_bytes: 16 * 1024 * 1024 * 1024,
        }
    }
}

/// What the checked archive holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckStats {
    /// Regular files in the tree it makes (hard links included, overwritten files not).
    pub files: u64,
    /// Entries read.
    pub entries: u64,
    /// Bytes of file content.
    pub bytes: u64,
}

/// What stands at a path of the modelled tree.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir,
    File,
    Link(Vec<u8>),
}

/// The tree an archive would make, by path relative to the root.
#[derive(Default)]
struct Tree {
    nodes: HashMap<PathBuf, Node>,
    /// Every link created, for the final check along chains.
    links: Vec<PathBuf>,
}

/// Reads the whole `tar.gz` from `reader` and refuses it as extraction would, naming the entry;
/// `archive` says what it is in errors.
pub fn check_tar_gz(
    reader: impl Read,
    archive: &str,
    limits: CheckLimits,
) -> Result<CheckStats, ArchiveError> {
    let read_err = |source| ArchiveError::ReadArchive {
        archive: archive.to_owned(),
        source,
    };
    let mut tar = tar::Archive::new(MultiGzDecoder::new(BufReader::with_capacity(
        256 * 1024,
        reader,
    )));
    let mut tree = Tree::default();
    let mut stats = CheckStats::default();
    for entry in tar.entries().map_err(read_err)? {
        let entry = entry.map_err(read_err)?;
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
        stats.entries += 1;
        stats.bytes += entry.size();
        if stats.entries > limits.max_entries {
            return Err(refuse(format!(
                "the archive has more than {} entries, more than staging extracts",
                limits.max_entries
            )));
        }
        if stats.bytes > limits.max_bytes {
            return Err(refuse(format!(
                "the archive holds more than {} bytes of content, more than staging extracts",
                limits.max_bytes
            )));
        }
        let path = archive_components(&raw).map_err(refuse)?;
        let result = match kind {
            EntryType::Directory => tree.ensure_dirs(&path),
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                tree.leaf(&path, Node::File)
            }
            EntryType::Symlink => {
                let target = entry.link_name_bytes().unwrap_or_default().into_owned();
                check_link_target(path.len().saturating_sub(1), &target)
                    .and_then(|()| tree.leaf(&path, Node::Link(target)))
            }
            EntryType::Link => {
                let target = entry.link_name_bytes().unwrap_or_default().into_owned();
                match archive_components(&target) {
                    Err(why) => Err(format!("hard link target: {why}")),
                    Ok(target) => tree.hard_link(&path, &target),
                }
            }
            other => Err(format!("unsupported entry type {other:?}")),
        };
        result.map_err(refuse)?;
    }
    // Read to the end so the checksum of the last gzip member is verified too.
    io::copy(tar.into_inner().by_ref(), &mut io::sink()).map_err(read_err)?;
    for link in &tree.links {
        if let Err(reason) = tree.resolves_inside(link) {
            return Err(ArchiveError::UnsafeEntry {
                archive: archive.to_owned(),
                entry: link.display().to_string(),
                reason,
            });
        }
    }
    stats.files = tree.nodes.values().filter(|n| **n == Node::File).count() as u64;
    Ok(stats)
}

fn joined(parts: &[OsString]) -> PathBuf {
    parts.iter().collect()
}

impl Tree {
    /// Makes every component of `rel` a directory, refusing to pass through a link or a file.
    fn ensure_dirs(&mut self, rel: &[OsString]) -> Result<(), String> {
        let mut current = PathBuf::new();
        for part in rel {
            current.push(part);
            match self.nodes.get(&current) {
                Some(Node::Dir) => {}
                Some(Node::Link(_)) => {
                    return Err(format!(
                        "{} is a symbolic link; nothing is extracted through links",
                        current.display()
                    ));
                }
                Some(Node::File) => {
                    return Err(format!(
                        "{} exists and is not a directory",
                        current.display()
                    ));
                }
                None => {
                    self.nodes.insert(current.clone(), Node::Dir);
                }
            }
        }
        Ok(())
    }

    /// Puts `node` at `dest`, replacing a file or link but never a directory.
    fn leaf(&mut self, dest: &[OsString], node: Node) -> Result<(), String> {
        let Some((_, parent)) = dest.split_last() else {
            return Err("only a directory can be extracted at the root".into());
        };
        self.ensure_dirs(parent)?;
        let path = joined(dest);
        if self.nodes.get(&path) == Some(&Node::Dir) {
            return Err("a directory exists at this path".into());
        }
        if matches!(node, Node::Link(_)) {
            self.links.push(path.clone());
        }
        self.nodes.insert(path, node);
        Ok(())
    }

    fn hard_link(&mut self, dest: &[OsString], target: &[OsString]) -> Result<(), String> {
        if dest == target {
            return Ok(());
        }
        let not_file = || {
            format!(
                "hard link target {} is not a regular file extracted before it",
                joined(target).display()
            )
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
        self.leaf(dest, Node::File)
    }

    /// Follows the link at `link` (if one still stands there) through the tree; fails if the
    /// walk leaves the root or passes more than 40 links (as extraction).
    fn resolves_inside(&self, link: &Path) -> Result<(), String> {
        let Some(Node::Link(target)) = self.nodes.get(link) else {
            return Ok(());
        };
        walk_link(link, Path::new(OsStr::from_bytes(target)), |here| {
            Ok(match self.nodes.get(here) {
                Some(Node::Link(next)) => Some(PathBuf::from(OsStr::from_bytes(next))),
                _ => None,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::Compression;
    use flate2::write::GzEncoder;
    use tar::{Builder, Header};

    use super::*;
    use crate::archive::{Selection, Unpacker};

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
        check_tar_gz(bytes, "upload", CheckLimits::default())
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
        assert_eq!(stats.entries, 5);
        assert_eq!(stats.bytes, 12);
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
        let small = CheckLimits {
            max_entries: 1,
            max_bytes: 1024,
        };
        let (_, why) = refused_entry(check_tar_gz(bytes.as_slice(), "upload", small));
        assert!(why.contains("1024 bytes"), "{why}");
        let two = tar_gz(&[
            ("a", EntryType::Regular, "", b""),
            ("b", EntryType::Regular, "", b""),
        ]);
        let (entry, why) = refused_entry(check_tar_gz(two.as_slice(), "upload", small));
        assert_eq!(entry, "b");
        assert!(why.contains("more than 1 entries"), "{why}");
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
