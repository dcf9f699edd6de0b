//! One hostile extraction, checked: whatever the bytes, extraction returns (no panic), writes nothing outside its root, and ends in bounded time. Shared by the property test (`tests/offline/unpack_fuzz.rs`) and the `cargo fuzz` target (`fuzz/`).

use std::fs;
use std::io::Cursor;
use std::path::Path;
use std::time::{Duration, Instant};

use errand::archive::{ExtractLimits, Selection, Unpacker};

/// How long one small hostile archive may take to extract: far beyond a slow machine (an
/// unoptimized build beside the rest of the suite on 2 cores), well short of a runaway walk.
pub const BOUND: Duration = Duration::from_secs(30);

/// Extracts `archive` (a `tar.gz`, or anything) into a fresh root beside an untouched
/// directory, with `selection` as a mount would, and panics if anything leaves the root or
/// the extraction takes longer than [`BOUND`].
pub fn extract_and_check(archive: &[u8], selection: &Selection) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let outside = tmp.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("secret"), "original").unwrap();
    let limits = ExtractLimits {
        max_bytes: 64 << 20,
        max_entries: 10_000,
    };
    let started = Instant::now();
    let unpacked = Unpacker::new(&root).and_then(|unpacker| {
        let mut unpacker = unpacker.with_limits(limits);
        unpacker.unpack_tar_gz(Cursor::new(archive.to_vec()), selection, "Fileset \"fuzz\"")?;
        unpacker.finish()
    });
    let took = started.elapsed();
    assert!(took < BOUND, "took {took:?}");
    // Refusals are fine; what must hold is that nothing outside the root changed.
    drop(unpacked);
    let mut beside: Vec<_> = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    beside.sort();
    assert_eq!(beside, ["outside", "root"]);
    let names: Vec<_> = fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["secret"]);
    assert_eq!(
        fs::read_to_string(outside.join("secret")).unwrap(),
        "original"
    );
    assert_links_stay_inside(&root, &root);
    make_writable(&root);
}

/// Every symbolic link under `dir` resolves (as far as it exists) inside `root`.
fn assert_links_stay_inside(root: &Path, dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            if let Ok(resolved) = fs::canonicalize(&path) {
                let root = fs::canonicalize(root).unwrap();
                assert!(
                    resolved.starts_with(&root),
                    "{} -> {}",
                    path.display(),
                    resolved.display()
                );
            }
        } else if meta.is_dir() {
            assert_links_stay_inside(root, &path);
        }
    }
}

/// Read-only directories from the archive would keep the temporary directory from going.
fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        make_writable(&entry.path());
    }
}
