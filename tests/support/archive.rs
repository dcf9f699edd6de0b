//! Archives and digests for tests: `tar.gz` bodies built entry by entry, hostile paths kept as they are.

use sha2::{Digest, Sha256};

/// Lowercase hex sha256 of `bytes`, as the store and the statuses record it.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A `tar.gz` of `(path, content)` regular files. Paths are written raw into the header, so
/// `../x` or `/etc/x` reach the archive as they are (the `tar` crate's setters refuse them).
pub fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for (path, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(content.len() as u64);
        header.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
        header.set_cksum();
        builder.append(&header, *content).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}
