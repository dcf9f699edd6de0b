//! Packing and extraction: round trips, compatibility with GNU tar, and hostile archives that
//! must be refused without writing anything outside the extraction root.

use std::fs;
use std::io::{Cursor, Write};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use errand::archive::{ArchiveError, Selection, Unpacker, pack_dir};
use flate2::Compression;
use flate2::write::GzEncoder;
use futures::TryStreamExt;
use tar::{EntryType, Header};

/// Packs `dir` into memory.
async fn pack(dir: &Path) -> Vec<u8> {
    let packing = pack_dir(dir).unwrap();
    let chunks: Vec<bytes::Bytes> = packing.stream.try_collect().await.unwrap();
    packing.done.wait().await.unwrap();
    chunks.concat()
}

fn unpack(archive: Vec<u8>, root: &Path, selection: &Selection) -> Result<(), ArchiveError> {
    let mut unpacker = Unpacker::new(root)?;
    unpacker.unpack_tar_gz(Cursor::new(archive), selection, "test.tar.gz")?;
    unpacker.finish().map(drop)
}

/// A sample tree with nested directories, modes, a symlink, a long name and a larger file.
fn sample_tree(root: &Path) {
    fs::create_dir_all(root.join("src/nested")).unwrap();
    fs::write(root.join("README.md"), "hello\n").unwrap();
    fs::write(root.join("src/main.py"), "print(1)\n").unwrap();
    fs::write(
        root.join("src/nested/data.bin"),
        vec![7u8; 3 * 1024 * 1024 + 5],
    )
    .unwrap();
    fs::write(root.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    let long = "x".repeat(150);
    fs::write(root.join("src").join(&long), "long name\n").unwrap();
    symlink("main.py", root.join("src/link.py")).unwrap();
    fs::create_dir(root.join("empty")).unwrap();
}

/// Every path under `root` with its kind and content, for comparing trees.
fn listing(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.push(format!(
                    "{rel} -> {}",
                    fs::read_link(&path).unwrap().display()
                ));
            } else if meta.is_dir() {
                out.push(format!("{rel}/"));
                stack.push(path);
            } else {
                let data = fs::read(&path).unwrap();
                let mode = meta.permissions().mode() & 0o777;
                out.push(format!("{rel} {mode:o} {} {:x}", data.len(), crc(&data)));
            }
        }
    }
    out.sort();
    out
}

fn crc(data: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(data);
    crc.sum()
}

#[tokio::test]
async fn round_trip_keeps_contents_modes_and_links() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    sample_tree(&src);
    let archive = pack(&src).await;
    let dest = tmp.path().join("dest");
    unpack(archive, &dest, &Selection::default()).unwrap();
    assert_eq!(listing(&dest), listing(&src));
    assert!(listing(&src).iter().any(|l| l.starts_with("run.sh 755 ")));
}

#[tokio::test]
async fn packing_is_deterministic() {
    let tmp = tempfile::tempdir().unwrap();
    sample_tree(tmp.path());
    assert_eq!(pack(tmp.path()).await, pack(tmp.path()).await);
}

#[tokio::test]
async fn gnu_tar_reads_our_archives_and_we_read_its() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    sample_tree(&src);

    let ours = tmp.path().join("ours.tar.gz");
    fs::write(&ours, pack(&src).await).unwrap();
    let by_tar = tmp.path().join("by-tar");
    fs::create_dir(&by_tar).unwrap();
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(&ours)
        .arg("-C")
        .arg(&by_tar)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(listing(&by_tar), listing(&src));

    let theirs = tmp.path().join("theirs.tar.gz");
    let status = Command::new("tar")
        .arg("-czf")
        .arg(&theirs)
        .arg("-C")
        .arg(&src)
        .arg(".")
        .status()
        .unwrap();
    assert!(status.success());
    let by_us = tmp.path().join("by-us");
    unpack(fs::read(&theirs).unwrap(), &by_us, &Selection::default()).unwrap();
    assert_eq!(listing(&by_us), listing(&src));
}

#[tokio::test]
async fn subpath_selects_and_reroots() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    sample_tree(&src);
    let archive = pack(&src).await;

    let dest = tmp.path().join("dest");
    unpack(
        archive.clone(),
        &dest,
        &Selection::new(Some("src/nested/"), None).unwrap(),
    )
    .unwrap();
    assert_eq!(listing(&dest), listing(&src.join("src/nested")));

    // A file subpath is written at the mount path itself.
    let single = tmp.path().join("single");
    let selection = Selection::new(Some("src/main.py"), Some("conf/app.py")).unwrap();
    unpack(archive.clone(), &single, &selection).unwrap();
    assert_eq!(
        fs::read_to_string(single.join("conf/app.py")).unwrap(),
        "print(1)\n"
    );
    assert_eq!(listing(&single).len(), 2, "{:?}", listing(&single));

    let missing = unpack(
        archive,
        &tmp.path().join("x"),
        &Selection::new(Some("nope/"), None).unwrap(),
    );
    assert!(
        matches!(&missing, Err(ArchiveError::SubpathNotFound { subpath, .. }) if subpath == "nope"),
        "{missing:?}"
    );
}

#[test]
fn selection_paths_must_be_relative_without_dotdot() {
    for (subpath, dest) in [
        (Some("/abs"), None),
        (Some("a/../b"), None),
        (None, Some("../up")),
    ] {
        let err = Selection::new(subpath, dest).unwrap_err();
        assert!(matches!(err, ArchiveError::InvalidPath { .. }), "{err}");
    }
}

/// One raw tar entry, written without any of the tar crate's path checks.
struct Raw<'a> {
    path: &'a [u8],
    kind: EntryType,
    link: &'a [u8],
    data: &'a [u8],
}

fn raw_archive(entries: &[Raw<'_>]) -> Vec<u8> {
    let mut tar = Vec::new();
    for entry in entries {
        let mut header = Header::new_gnu();
        let old = header.as_old_mut();
        old.name[..entry.path.len()].copy_from_slice(entry.path);
        old.linkname[..entry.link.len()].copy_from_slice(entry.link);
        header.set_mode(0o644);
        header.set_size(entry.data.len() as u64);
        header.set_entry_type(entry.kind);
        header.set_cksum();
        tar.extend_from_slice(header.as_bytes());
        tar.extend_from_slice(entry.data);
        tar.resize(tar.len().next_multiple_of(512), 0);
    }
    tar.extend_from_slice(&[0; 1024]);
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&tar).unwrap();
    gz.finish().unwrap()
}

fn file<'a>(path: &'a [u8], data: &'a [u8]) -> Raw<'a> {
    Raw {
        path,
        kind: EntryType::Regular,
        link: b"",
        data,
    }
}

fn link<'a>(path: &'a [u8], kind: EntryType, target: &'a [u8]) -> Raw<'a> {
    Raw {
        path,
        kind,
        link: target,
        data: b"",
    }
}

/// A root to extract into, and beside it a directory that must stay untouched.
struct Sandbox {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("secret"), "original").unwrap();
        Sandbox {
            _tmp: tmp,
            root,
            outside,
        }
    }

    fn assert_outside_untouched(&self) {
        let names: Vec<_> = fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["secret"]);
        assert_eq!(
            fs::read_to_string(self.outside.join("secret")).unwrap(),
            "original"
        );
        let parent_names: Vec<_> = fs::read_dir(self.root.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(parent_names.len(), 2, "{parent_names:?}");
    }

    /// Extracts and expects a refusal naming `entry`.
    fn refuses(&self, archive: Vec<u8>, entry: &str, reason: &str) {
        let err = unpack(archive, &self.root, &Selection::default()).unwrap_err();
        match &err {
            ArchiveError::UnsafeEntry {
                entry: e,
                reason: r,
                ..
            } => {
                assert_eq!(e, entry, "{err}");
                assert!(r.contains(reason), "{err}");
                assert!(err.to_string().contains(entry));
            }
            other => panic!("expected a refusal of {entry}, got {other}"),
        }
        self.assert_outside_untouched();
    }
}

#[test]
fn absolute_paths_are_refused() {
    let sandbox = Sandbox::new();
    let target = sandbox.outside.join("abs.txt");
    let path = target.to_str().unwrap().as_bytes();
    sandbox.refuses(
        raw_archive(&[file(path, b"pwned")]),
        target.to_str().unwrap(),
        "absolute",
    );
    assert!(!target.exists());
}

#[test]
fn dotdot_paths_are_refused() {
    let sandbox = Sandbox::new();
    sandbox.refuses(
        raw_archive(&[
            file(b"ok.txt", b"fine"),
            file(b"sub/../../outside/dotdot.txt", b"pwned"),
        ]),
        "sub/../../outside/dotdot.txt",
        "'..'",
    );
}

#[test]
fn symlinks_leading_out_are_refused() {
    let sandbox = Sandbox::new();
    sandbox.refuses(
        raw_archive(&[link(b"esc", EntryType::Symlink, b"../outside")]),
        "esc",
        "outside the extraction root",
    );
    assert!(fs::symlink_metadata(sandbox.root.join("esc")).is_err());
    sandbox.refuses(
        raw_archive(&[link(b"abs", EntryType::Symlink, b"/etc")]),
        "abs",
        "absolute",
    );
}

#[test]
fn chains_of_harmless_looking_links_are_refused() {
    // Each link stays inside lexically, but a/l2 -> l/.. with a/l -> .. resolves to the
    // parent of the root.
    let sandbox = Sandbox::new();
    sandbox.refuses(
        raw_archive(&[
            Raw {
                path: b"a/",
                kind: EntryType::Directory,
                link: b"",
                data: b"",
            },
            link(b"a/l2", EntryType::Symlink, b"l/.."),
            link(b"a/l", EntryType::Symlink, b".."),
        ]),
        "a/l2",
        "resolves outside",
    );
}

#[test]
fn hard_links_leading_out_are_refused() {
    let sandbox = Sandbox::new();
    sandbox.refuses(
        raw_archive(&[link(b"hl", EntryType::Link, b"../outside/secret")]),
        "hl",
        "'..'",
    );
    sandbox.refuses(
        raw_archive(&[link(b"hl", EntryType::Link, b"/etc/passwd")]),
        "hl",
        "absolute",
    );
    // A hard link to a symlink would otherwise carry the link out of the checks.
    sandbox.refuses(
        raw_archive(&[
            link(b"s", EntryType::Symlink, b"x"),
            link(b"hl", EntryType::Link, b"s"),
        ]),
        "hl",
        "not a regular file",
    );
}

#[test]
fn nothing_is_written_through_links() {
    let sandbox = Sandbox::new();
    // Inside the archive: d/up points at the root (fine), then d/up/x would go through it.
    sandbox.refuses(
        raw_archive(&[
            Raw {
                path: b"d/",
                kind: EntryType::Directory,
                link: b"",
                data: b"",
            },
            link(b"d/up", EntryType::Symlink, b".."),
            file(b"d/up/x", b"through"),
        ]),
        "d/up/x",
        "symbolic link",
    );

    // A link already in the root that points outside is never followed.
    let sandbox = Sandbox::new();
    symlink(&sandbox.outside, sandbox.root.join("evil")).unwrap();
    sandbox.refuses(
        raw_archive(&[file(b"evil/pwned", b"x")]),
        "evil/pwned",
        "symbolic link",
    );

    // A file entry over an existing link replaces the link instead of writing to its target.
    let sandbox = Sandbox::new();
    symlink(
        sandbox.outside.join("secret"),
        sandbox.root.join("secret-link"),
    )
    .unwrap();
    unpack(
        raw_archive(&[file(b"secret-link", b"replaced")]),
        &sandbox.root,
        &Selection::default(),
    )
    .unwrap();
    assert_eq!(
        fs::read_to_string(sandbox.root.join("secret-link")).unwrap(),
        "replaced"
    );
    assert!(
        !fs::symlink_metadata(sandbox.root.join("secret-link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    sandbox.assert_outside_untouched();
}

#[test]
fn device_nodes_and_fifos_are_refused() {
    for (kind, reason) in [
        (EntryType::Char, "device"),
        (EntryType::Block, "device"),
        (EntryType::Fifo, "fifo"),
    ] {
        let sandbox = Sandbox::new();
        sandbox.refuses(raw_archive(&[link(b"node", kind, b"")]), "node", reason);
        assert!(fs::symlink_metadata(sandbox.root.join("node")).is_err());
    }
}

#[tokio::test]
async fn corrupt_archives_are_read_errors() {
    let tmp = tempfile::tempdir().unwrap();
    sample_tree(&tmp.path().join("src"));
    let mut archive = pack(&tmp.path().join("src")).await;
    let n = archive.len();
    archive[n - 6] ^= 0xff; // inside the last member's crc/size trailer
    let err = unpack(archive, &tmp.path().join("dest"), &Selection::default()).unwrap_err();
    assert!(matches!(err, ArchiveError::ReadArchive { .. }), "{err}");
}
