//! Packing and extraction: round trips, compatibility with GNU tar, and hostile archives that
//! must be refused without writing anything outside the extraction root.

use std::fs;
use std::io::{Cursor, Write};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use std::time::{Duration, Instant};

use errand::archive::{
    ArchiveError, ExtractLimits, Limit, PackOptions, Selection, Unpacker, pack_dir,
};
use flate2::Compression;
use flate2::write::GzEncoder;
use futures::TryStreamExt;
use tar::{EntryType, Header};
use tokio_util::sync::CancellationToken;

use crate::support::archives::{adversarial_symlink_archive, gzip, zeros_archive};

/// Packs `dir` into memory.
async fn pack(dir: &Path) -> Vec<u8> {
    let packing = pack_dir(dir, PackOptions::default()).unwrap();
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

fn unpack_with(
    archive: Vec<u8>,
    root: &Path,
    limits: ExtractLimits,
    label: &str,
) -> Result<(), ArchiveError> {
    let mut unpacker = Unpacker::new(root)?.with_limits(limits);
    unpacker.unpack_tar_gz(Cursor::new(archive), &Selection::default(), label)?;
    unpacker.finish().map(drop)
}

#[test]
fn an_adversarial_symlink_chain_stages_in_linear_time() {
    let archive = adversarial_symlink_archive();
    assert!(archive.len() < 64 * 1024, "{} bytes", archive.len());
    let sandbox = Sandbox::new();
    let started = Instant::now();
    unpack(archive, &sandbox.root, &Selection::default()).unwrap();
    let took = started.elapsed();
    // 71 s with a walk per link, well under a second with the memoized check. The bound
    // catches the quadratic walk, not a slow machine: an unoptimized build beside the rest of
    // the suite on 2 cores once took 5.8 s.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert_eq!(fs::read_dir(&sandbox.root).unwrap().count(), 1041);
    sandbox.assert_outside_untouched();
}

#[test]
fn a_gzip_bomb_stops_at_the_byte_limit_naming_the_archive_limit_and_progress() {
    // 1 GiB of zeros in about 1 MiB, after a small file.
    let mut head = tar::Builder::new(Vec::new());
    let mut header = Header::new_gnu();
    header.set_mode(0o644);
    header.set_size(4);
    head.append_data(&mut header, "small.txt", &b"tiny"[..])
        .unwrap();
    let mut before = head.into_inner().unwrap();
    before.truncate(before.len() - 1024);
    let archive = zeros_archive(&before, "bomb.bin", 1 << 30);
    assert!(archive.len() < 2 * 1024 * 1024, "{} bytes", archive.len());

    let sandbox = Sandbox::new();
    let limits = ExtractLimits {
        max_bytes: 64 * 1024 * 1024,
        max_entries: 100,
    };
    let err = unpack_with(archive, &sandbox.root, limits, "Fileset \"bomb\"").unwrap_err();
    match &err {
        ArchiveError::LimitExceeded {
            archive,
            entry,
            limit,
            entries,
            bytes,
        } => {
            assert_eq!(archive, "Fileset \"bomb\"");
            assert_eq!(entry, "bomb.bin");
            assert_eq!(*limit, Limit::Bytes(64 * 1024 * 1024));
            assert_eq!((*entries, *bytes), (1, 4));
        }
        other => panic!("expected the byte limit, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("Fileset \"bomb\"") && text.contains("67108864 bytes"),
        "{text}"
    );
    assert!(
        !sandbox.root.join("bomb.bin").exists(),
        "nothing of the bomb is written"
    );
}

use std::io::Read as _;

/// A `tar.gz` of one 8 GiB file, compressed lazily as it is read.
fn endless_gzip_file(name: &str) -> impl std::io::Read + Send + 'static {
    let mut header = Header::new_gnu();
    header.set_path(name).unwrap();
    header.set_mode(0o644);
    header.set_size(8 << 30);
    header.set_cksum();
    let tar = Cursor::new(header.as_bytes().to_vec()).chain(std::io::repeat(1).take(8 << 30));
    flate2::read::GzEncoder::new(tar, Compression::fast())
}

#[test]
fn a_sparse_entry_counts_at_its_logical_size() {
    // A GNU sparse entry with no data and a 2 GiB hole: about a hundred bytes gzipped.
    let mut header = Header::new_gnu();
    header.set_entry_type(EntryType::GNUSparse);
    header.set_mode(0o644);
    header.set_size(0);
    {
        let gnu = header.as_gnu_mut().unwrap();
        gnu.sparse[0].set_offset(2 << 30);
        gnu.sparse[0].set_length(0);
        gnu.set_real_size(2 << 30);
    }
    let mut tar = tar::Builder::new(Vec::new());
    tar.append_data(&mut header, "sparse.bin", &[][..]).unwrap();
    let archive = gzip(&tar.into_inner().unwrap());
    assert!(archive.len() < 200, "{} bytes", archive.len());

    let sandbox = Sandbox::new();
    let limits = ExtractLimits {
        max_bytes: 1 << 30,
        max_entries: 100,
    };
    let err = unpack_with(archive, &sandbox.root, limits, "Fileset \"sparse\"").unwrap_err();
    assert!(
        matches!(
            err,
            ArchiveError::LimitExceeded {
                limit: Limit::Bytes(_),
                bytes: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(!sandbox.root.join("sparse.bin").exists());
}

#[test]
fn the_entry_limit_counts_files_directories_and_links() {
    let entries: Vec<(String, Vec<u8>)> = (0..10)
        .map(|i| (format!("dir/f{i}"), b"x".to_vec()))
        .collect();
    let raw: Vec<Raw<'_>> = entries.iter().map(|(p, d)| file(p.as_bytes(), d)).collect();
    let sandbox = Sandbox::new();
    let limits = ExtractLimits {
        max_bytes: 1 << 20,
        max_entries: 5,
    };
    let err =
        unpack_with(raw_archive(&raw), &sandbox.root, limits, "Fileset \"many\"").unwrap_err();
    match err {
        ArchiveError::LimitExceeded {
            entry,
            limit,
            entries,
            ..
        } => {
            assert_eq!(limit, Limit::Entries(5));
            // dir/ and four files fit; the fifth file would be the sixth entry.
            assert_eq!((entry.as_str(), entries), ("dir/f4", 5));
        }
        other => panic!("expected the entry limit, got {other}"),
    }
}

#[test]
fn odd_headers_are_refused_or_clamped_in_words() {
    // An mtime at or past 2^63 seconds is clamped instead of panicking.
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = Header::new_gnu();
    header.set_mode(0o644);
    header.set_size(3);
    header.set_mtime(1 << 63);
    tar.append_data(&mut header, "future.txt", &b"hey"[..])
        .unwrap();
    let sandbox = Sandbox::new();
    unpack(
        gzip(&tar.into_inner().unwrap()),
        &sandbox.root,
        &Selection::default(),
    )
    .unwrap();
    let modified = fs::metadata(sandbox.root.join("future.txt"))
        .unwrap()
        .modified()
        .unwrap();
    assert!(modified > std::time::SystemTime::now());

    // A GNU volume label is named in words.
    let sandbox = Sandbox::new();
    sandbox.refuses(
        raw_archive(&[link(b"label", EntryType::new(b'V'), b"")]),
        "label",
        "unsupported entry type: GNU volume label ('V')",
    );

    // A 5,000-character path is refused naming the entry, not with a raw OS error.
    let long = "d/".repeat(2499) + "f";
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = Header::new_gnu();
    header.set_mode(0o644);
    header.set_size(1);
    tar.append_data(&mut header, &long, &b"x"[..]).unwrap();
    let sandbox = Sandbox::new();
    sandbox.refuses(
        gzip(&tar.into_inner().unwrap()),
        &long,
        "the path is 4999 bytes long; the longest path allowed is 4095 bytes",
    );
}

#[test]
fn a_mount_replaces_a_base_symlink_with_its_file() {
    // The base: settings.json -> defaults/settings.json and defaults/settings.json.
    let base = raw_archive(&[
        Raw {
            path: b"defaults/",
            kind: EntryType::Directory,
            link: b"",
            data: b"",
        },
        file(b"defaults/settings.json", b"{\"default\": true}"),
        link(
            b"settings.json",
            EntryType::Symlink,
            b"defaults/settings.json",
        ),
        link(b"conf", EntryType::Symlink, b"defaults"),
        file(b"plain", b"a file where the mount puts a directory"),
    ]);
    // The Fileset `cfg`: a file settings.json, and a directory `d` with one file.
    let cfg = raw_archive(&[
        file(b"settings.json", b"{\"mine\": true}"),
        Raw {
            path: b"d/",
            kind: EntryType::Directory,
            link: b"",
            data: b"",
        },
        file(b"d/x", b"x"),
    ]);
    let sandbox = Sandbox::new();
    let mut unpacker = Unpacker::new(&sandbox.root).unwrap();
    unpacker
        .unpack_tar_gz(Cursor::new(base), &Selection::default(), "base")
        .unwrap();
    for (subpath, mount) in [
        ("settings.json", "settings.json"),
        ("d/", "conf"),
        ("d/", "plain"),
    ] {
        unpacker
            .unpack_tar_gz(
                Cursor::new(cfg.clone()),
                &Selection::new(Some(subpath), Some(mount)).unwrap(),
                "cfg",
            )
            .unwrap();
    }
    unpacker.finish().unwrap();
    assert_eq!(
        fs::read_to_string(sandbox.root.join("settings.json")).unwrap(),
        "{\"mine\": true}"
    );
    assert_eq!(
        fs::read_to_string(sandbox.root.join("defaults/settings.json")).unwrap(),
        "{\"default\": true}",
        "the link's old target is untouched"
    );
    for mount in ["conf", "plain"] {
        let meta = fs::symlink_metadata(sandbox.root.join(mount)).unwrap();
        assert!(meta.is_dir(), "{mount} is now the mounted directory");
        assert_eq!(
            fs::read_to_string(sandbox.root.join(mount).join("x")).unwrap(),
            "x"
        );
    }
    assert!(
        !sandbox.root.join("defaults/x").exists(),
        "nothing went through the link"
    );
}

#[test]
fn cancelling_stops_extraction_within_a_chunk() {
    let cancel = CancellationToken::new();
    let sandbox = Sandbox::new();
    let mut unpacker = Unpacker::new(&sandbox.root)
        .unwrap()
        .with_cancel(cancel.clone());
    let growing = sandbox.root.join("huge.bin");
    let stopper = std::thread::spawn(move || {
        // Cancel once the file is being written.
        let waited = Instant::now();
        while fs::metadata(&growing).map_or(true, |m| m.len() < 1 << 20) {
            assert!(
                waited.elapsed() < Duration::from_secs(60),
                "extraction never started"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        cancel.cancel();
        Instant::now()
    });
    let err = unpacker
        .unpack_tar_gz(
            endless_gzip_file("huge.bin"),
            &Selection::default(),
            "Fileset \"huge\"",
        )
        .unwrap_err();
    let stopped = Instant::now();
    let cancelled_at = stopper.join().unwrap();
    assert!(matches!(err, ArchiveError::Cancelled { .. }), "{err}");
    assert!(err.to_string().contains("Fileset \"huge\""), "{err}");
    assert!(
        stopped - cancelled_at < Duration::from_secs(2),
        "{:?}",
        stopped - cancelled_at
    );
    let size = fs::metadata(sandbox.root.join("huge.bin")).unwrap().len();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        fs::metadata(sandbox.root.join("huge.bin")).unwrap().len(),
        size,
        "nothing grows after the stop"
    );
}
