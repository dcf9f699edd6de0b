//! `tar.gz` archives built in memory for tests: files written entry by entry with hostile paths kept as they are, a file of zeros that expands a thousandfold, a symlink chain that is quadratic to resolve link by link; and the digests the store records.

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

/// Lowercase hex sha256 of `bytes`, as the store and the statuses record it.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A `tar.gz` of `(path, content)` regular files. Paths are written raw into the header, so
/// `../x` or `/etc/x` reach the archive as they are (the `tar` crate's setters refuse them).
pub fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    for (path, content) in files {
        let mut header = Header::new_gnu();
        header.set_entry_type(EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(content.len() as u64);
        header.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
        header.set_cksum();
        builder.append(&header, *content).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

/// `data` gzipped.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(data).unwrap();
    gz.finish().unwrap()
}

/// A `tar.gz` of one file `name` of `size` zero bytes (a multiple of 1 MiB), a thousandth of
/// that gzipped: the same gzip member of 1 MiB of zeros, repeated, after a member holding
/// `before` (whole tar entries) and the file's header.
pub fn zeros_archive(before: &[u8], name: &str, size: u64) -> Vec<u8> {
    let mut header = Header::new_gnu();
    header.set_path(name).unwrap();
    header.set_mode(0o644);
    header.set_size(size);
    header.set_cksum();
    let mut head = before.to_vec();
    head.extend_from_slice(header.as_bytes());
    let mut archive = gzip(&head);
    let mib = gzip(&vec![0; 1 << 20]);
    for _ in 0..size >> 20 {
        archive.extend_from_slice(&mib);
    }
    archive.extend_from_slice(&gzip(&[0; 1024]));
    archive
}

/// Forty chained links whose targets are ~3.9 KB of `d/../d/..` detours, then a thousand links
/// to the chain's head: each link on its own stays inside, and a walk per link costs the whole
/// chain (71 s before the linear check).
pub fn adversarial_symlink_archive() -> Vec<u8> {
    let detour = "d/../".repeat(780);
    let mut builder = tar::Builder::new(Vec::new());
    let plain = |builder: &mut tar::Builder<Vec<u8>>, path: &str, kind: EntryType| {
        let mut header = Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(0o755);
        header.set_size(0);
        builder.append_data(&mut header, path, &[][..]).unwrap();
    };
    plain(&mut builder, "d/", EntryType::Directory);
    plain(&mut builder, "c0", EntryType::Regular);
    let links = (1..=39)
        .map(|i| (format!("c{i}"), format!("{detour}c{}", i - 1)))
        .chain((0..1000).map(|i| (format!("h{i}"), format!("{detour}c39"))));
    for (path, target) in links {
        let mut header = Header::new_gnu();
        header.set_entry_type(EntryType::Symlink);
        header.set_mode(0o777);
        header.set_size(0);
        builder.append_link(&mut header, path, target).unwrap();
    }
    gzip(&builder.into_inner().unwrap())
}
