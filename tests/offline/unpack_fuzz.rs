//! Property tests of extraction over arbitrary bytes and arbitrary tar headers: no panic, nothing outside the root, bounded time. `fuzz/` runs the same check under libFuzzer for longer.

use errand::archive::Selection;
use proptest::prelude::*;

use crate::support::archives::gzip;
use crate::support::hostile::extract_and_check;

/// Raw bytes gzipped and not: mostly refused at once, never a panic.
const BYTE_CASES: u32 = 1000;
/// Tar streams of arbitrary headers.
const HEADER_CASES: u32 = 2000;

/// Path components a hostile archive likes.
fn component() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"a".to_vec()),
        Just(b"b".to_vec()),
        Just(b"..".to_vec()),
        Just(b".".to_vec()),
        Just(b"".to_vec()),
        Just(b"etc".to_vec()),
        Just(vec![b'x'; 300]),
        proptest::collection::vec(any::<u8>(), 1..8),
    ]
}

fn path() -> impl Strategy<Value = Vec<u8>> {
    (any::<bool>(), proptest::collection::vec(component(), 1..5)).prop_map(|(absolute, parts)| {
        let mut path = if absolute { b"/".to_vec() } else { Vec::new() };
        path.extend(parts.join(&b'/'));
        path
    })
}

/// One entry's header fields, written raw: any type byte, any mode, and mtimes and sizes up to
/// the largest the fields hold.
#[derive(Debug, Clone)]
struct RawEntry {
    path: Vec<u8>,
    link: Vec<u8>,
    kind: u8,
    mode: u32,
    mtime: u64,
    size: u64,
    data: Vec<u8>,
    long_name: bool,
    good_checksum: bool,
}

fn entry() -> impl Strategy<Value = RawEntry> {
    let kind = prop_oneof![
        Just(b'0'),
        Just(b'1'),
        Just(b'2'),
        Just(b'3'),
        Just(b'5'),
        Just(b'6'),
        Just(b'7'),
        Just(b'S'),
        Just(b'V'),
        Just(b'g'),
        Just(b'x'),
        Just(b'L'),
        Just(b'K'),
        any::<u8>(),
    ];
    (
        path(),
        path(),
        kind,
        any::<u32>(),
        prop_oneof![Just(0u64), Just(1 << 63), Just(u64::MAX), any::<u64>()],
        prop_oneof![0u64..2048, Just(1 << 40), any::<u64>()],
        proptest::collection::vec(any::<u8>(), 0..1024),
        any::<bool>(),
        prop::bool::weighted(0.95),
    )
        .prop_map(
            |(path, link, kind, mode, mtime, size, data, long_name, good_checksum)| RawEntry {
                path,
                link,
                kind,
                mode,
                mtime,
                size,
                data,
                long_name,
                good_checksum,
            },
        )
}

fn tar_stream(entries: &[RawEntry]) -> Vec<u8> {
    let mut tar = Vec::new();
    for entry in entries {
        if entry.long_name {
            push_header(
                &mut tar,
                b"././@LongLink",
                b"",
                b'L',
                0o644,
                0,
                entry.path.len() as u64 + 1,
                true,
            );
            tar.extend_from_slice(&entry.path);
            tar.push(0);
            tar.resize(tar.len().next_multiple_of(512), 0);
        }
        let name: &[u8] = if entry.long_name {
            b"short"
        } else {
            &entry.path
        };
        push_header(
            &mut tar,
            name,
            &entry.link,
            entry.kind,
            entry.mode,
            entry.mtime,
            entry.size,
            entry.good_checksum,
        );
        // The data need not match the size: short data is a truncated archive.
        tar.extend_from_slice(&entry.data);
        tar.resize(tar.len().next_multiple_of(512), 0);
    }
    tar.extend_from_slice(&[0; 1024]);
    tar
}

#[allow(clippy::too_many_arguments)]
fn push_header(
    tar: &mut Vec<u8>,
    name: &[u8],
    link: &[u8],
    kind: u8,
    mode: u32,
    mtime: u64,
    size: u64,
    good_checksum: bool,
) {
    let mut header = tar::Header::new_gnu();
    {
        let old = header.as_old_mut();
        let n = name.len().min(old.name.len());
        old.name[..n].copy_from_slice(&name[..n]);
        let n = link.len().min(old.linkname.len());
        old.linkname[..n].copy_from_slice(&link[..n]);
    }
    header.set_mode(mode);
    header.set_mtime(mtime);
    header.set_size(size);
    header.set_entry_type(tar::EntryType::new(kind));
    header.set_cksum();
    if !good_checksum {
        header.as_old_mut().cksum[0] ^= 1;
    }
    tar.extend_from_slice(header.as_bytes());
}

fn selection() -> impl Strategy<Value = Selection> {
    prop_oneof![
        3 => Just(Selection::default()),
        1 => Just(Selection::new(Some("a"), Some("mnt")).unwrap()),
        1 => Just(Selection::new(None, Some("a/b")).unwrap()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(BYTE_CASES))]

    #[test]
    fn arbitrary_bytes_never_panic_or_escape(bytes in proptest::collection::vec(any::<u8>(), 0..4096), gzipped in any::<bool>()) {
        let archive = if gzipped { gzip(&bytes) } else { bytes };
        extract_and_check(&archive, &Selection::default());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(HEADER_CASES))]

    #[test]
    fn arbitrary_tar_headers_never_panic_or_escape(
        entries in proptest::collection::vec(entry(), 1..8),
        selection in selection(),
    ) {
        extract_and_check(&gzip(&tar_stream(&entries)), &selection);
    }
}
