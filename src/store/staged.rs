//! Write-once objects in a `file://` store: each is written where no reader sees it and linked to its key only once complete and synced.
//!
//! A body that fits in [`SMALL_BODY`] is gathered in memory and written in one blocking call
//! to an unnamed file in its key's directory (`O_TMPFILE`), which a crash at any point
//! leaves nowhere. A larger body, or one on a filesystem without unnamed files, is streamed
//! to a partial file under `partial/`, which deleting a prefix also deletes whatever a killed
//! process left of ([`keys::partials_prefix`]). Either way no reader ever sees a partial
//! object, a write cut off at any byte (its client gone, the controller killed) leaves
//! nothing under its key and a retry is accepted. The link is a hard link, which fails when
//! the key exists, so of two complete writes of one key exactly one wins.

use std::io::{self, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::StreamExt;
use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, AtFlags};
use object_store::local::LocalFileSystem;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::{StoreError, StoredObject, Written, body_error, keys, object_path, upload_token};
use crate::archive::ByteStream;

/// Bytes gathered before each write to the partial file.
const WRITE_BUFFER: usize = 1024 * 1024;
/// Bodies up to this size are written in one blocking call, without a partial file: most
/// results (run records, manifests, small archives) are a few hundred bytes, and each step of
/// a streamed write is a hand-off to a blocking thread.
const SMALL_BODY: usize = WRITE_BUFFER;

/// Writes `body` to `key` where no reader sees it and links it to `key` once complete.
pub(super) async fn put(
    fs: &LocalFileSystem,
    key: &str,
    mut body: ByteStream,
) -> Result<Written, StoreError> {
    let target = filesystem_path(fs, key)?;
    let mut head = Vec::new();
    let mut head_len = 0;
    while head_len <= SMALL_BODY {
        match body.next().await {
            Some(Ok(bytes)) => {
                head_len += bytes.len();
                head.push(bytes);
            }
            Some(Err(source)) => return Err(body_error(key, source)),
            None => return put_small(fs, key, target, head).await,
        }
    }
    let body = futures::stream::iter(head.into_iter().map(Ok))
        .chain(body)
        .boxed();
    put_streamed(fs, key, &target, body).await
}

/// Writes the whole body `parts` to an unnamed file linked to `target`, or streams it through
/// a partial file where unnamed files are not available.
async fn put_small(
    fs: &LocalFileSystem,
    key: &str,
    target: PathBuf,
    parts: Vec<Bytes>,
) -> Result<Written, StoreError> {
    let mut hasher = Sha256::new();
    for part in &parts {
        hasher.update(part);
    }
    let written = StoredObject {
        key: key.to_owned(),
        size: parts.iter().map(|p| p.len() as u64).sum(),
        sha256: hex::encode(hasher.finalize()),
    };
    let owned_key = key.to_owned();
    let (linked, parts, target) = tokio::task::spawn_blocking(move || {
        let linked = write_unnamed(&owned_key, &target, &parts);
        (linked, parts, target)
    })
    .await
    .map_err(|e| write_error(key, io::Error::other(e)))?;
    match linked? {
        Linked::Created => Ok(Written::Created(written)),
        Linked::Existed => Ok(Written::Existed(written)),
        Linked::Unsupported => {
            let body = futures::stream::iter(parts.into_iter().map(Ok)).boxed();
            put_streamed(fs, key, &target, body).await
        }
    }
}

/// How writing an unnamed file ended.
enum Linked {
    /// The file is `target` now.
    Created,
    /// `target` already existed; the file was dropped.
    Existed,
    /// The filesystem has no unnamed files, or there is no `/proc` to link one by.
    Unsupported,
}

/// Writes `parts` to an unnamed file in `target`'s directory, syncs it and links it to
/// `target`. Until the link the file has no name, so a crash leaves nothing behind.
fn write_unnamed(key: &str, target: &Path, parts: &[Bytes]) -> Result<Linked, StoreError> {
    let io_error = |source| write_error(key, source);
    let dir = target.parent().unwrap_or(target);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).custom_flags(nix::libc::O_TMPFILE);
    let mut opened = options.open(dir);
    if matches!(&opened, Err(e) if e.kind() == io::ErrorKind::NotFound) {
        std::fs::create_dir_all(dir).map_err(create_dir_error(dir))?;
        opened = options.open(dir);
    }
    let mut file = match opened {
        Ok(file) => file,
        // Kernels and filesystems without O_TMPFILE refuse it with one of these.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(nix::libc::EOPNOTSUPP | nix::libc::EISDIR | nix::libc::EINVAL)
            ) =>
        {
            return Ok(Linked::Unsupported);
        }
        Err(e) => return Err(io_error(e)),
    };
    for part in parts {
        file.write_all(part).map_err(io_error)?;
    }
    file.sync_all().map_err(io_error)?;
    let by_descriptor = format!("/proc/self/fd/{}", file.as_raw_fd());
    match nix::unistd::linkat(
        AT_FDCWD,
        by_descriptor.as_str(),
        AT_FDCWD,
        target,
        AtFlags::AT_SYMLINK_FOLLOW,
    ) {
        Ok(()) => Ok(Linked::Created),
        Err(Errno::EEXIST) => Ok(Linked::Existed),
        Err(Errno::ENOENT) if !Path::new(&by_descriptor).exists() => Ok(Linked::Unsupported),
        Err(errno) => Err(io_error(errno.into())),
    }
}

/// Streams `body` to a partial file of `key` and links it to `target` once complete.
async fn put_streamed(
    fs: &LocalFileSystem,
    key: &str,
    target: &Path,
    mut body: ByteStream,
) -> Result<Written, StoreError> {
    let (file, partial) = create_partial(fs, key).await?;
    let io_error = |source| write_error(key, source);
    let mut out = tokio::io::BufWriter::with_capacity(WRITE_BUFFER, file);
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    while let Some(bytes) = body.next().await {
        let bytes = bytes.map_err(|source| body_error(key, source))?;
        hasher.update(&bytes);
        size += bytes.len() as u64;
        out.write_all(&bytes).await.map_err(io_error)?;
    }
    out.flush().await.map_err(io_error)?;
    out.into_inner().sync_all().await.map_err(io_error)?;
    let written = StoredObject {
        key: key.to_owned(),
        size,
        sha256: hex::encode(hasher.finalize()),
    };
    let linked = link(&partial.path, target).await;
    partial.remove().await;
    match linked {
        Ok(()) => Ok(Written::Created(written)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(Written::Existed(written)),
        Err(e) => Err(io_error(e)),
    }
}

/// Where `key` lives on disk.
fn filesystem_path(fs: &LocalFileSystem, key: &str) -> Result<PathBuf, StoreError> {
    fs.path_to_filesystem(&object_path(key)?)
        .map_err(|source| StoreError::Backend {
            operation: "put",
            key: key.to_owned(),
            source,
        })
}

/// A new partial file of `key` under a name no other write shares.
async fn create_partial(
    fs: &LocalFileSystem,
    key: &str,
) -> Result<(tokio::fs::File, PartialFile), StoreError> {
    loop {
        let path = filesystem_path(fs, &keys::partial(key, &upload_token())?)?;
        let mut options = tokio::fs::OpenOptions::new();
        options.write(true).create_new(true);
        let mut opened = options.open(&path).await;
        // Another write may remove a directory it emptied just after this one made it.
        for _ in 0..3 {
            match &opened {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    create_parent(&path).await?;
                    opened = options.open(&path).await;
                }
                _ => break,
            }
        }
        match opened {
            Ok(file) => return Ok((file, PartialFile::new(path, key))),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(write_error(key, source)),
        }
    }
}

fn write_error(key: &str, source: io::Error) -> StoreError {
    StoreError::Backend {
        operation: "put",
        key: key.to_owned(),
        source: object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(source),
        },
    }
}

/// Hard-links `partial` to `target`, creating `target`'s directory if needed; fails with
/// `AlreadyExists` when `target` exists.
async fn link(partial: &Path, target: &Path) -> io::Result<()> {
    match tokio::fs::hard_link(partial, target).await {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            create_parent(target).await.map_err(io::Error::other)?;
            tokio::fs::hard_link(partial, target).await
        }
        other => other,
    }
}

async fn create_parent(path: &Path) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(path);
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(create_dir_error(dir))
}

fn create_dir_error(dir: &Path) -> impl FnOnce(io::Error) -> StoreError {
    let path = dir.to_owned();
    move |source| StoreError::CreateDir { path, source }
}

/// A partial file, removed with the directories that held only it when the write ends,
/// however it ends (an error, or its task dropped because its client went away).
struct PartialFile {
    path: PathBuf,
    /// `partial/` and one directory per segment of the key before its name.
    levels: usize,
    removed: bool,
}

impl PartialFile {
    fn new(path: PathBuf, key: &str) -> PartialFile {
        PartialFile {
            path,
            levels: key.matches('/').count() + 1,
            removed: false,
        }
    }

    async fn remove(mut self) {
        self.removed = true;
        let (path, levels) = (std::mem::take(&mut self.path), self.levels);
        tokio::task::spawn_blocking(move || remove_partial(&path, levels))
            .await
            .unwrap_or_default();
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if !self.removed {
            remove_partial(&self.path, self.levels);
        }
    }
}

fn remove_partial(path: &Path, levels: usize) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "removing a partial write");
    }
    // A directory another write still uses is not empty, and stays.
    for dir in path.ancestors().skip(1).take(levels) {
        if std::fs::remove_dir(dir).is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use bytes::Bytes;
    use futures::StreamExt;

    use crate::archive::ByteStream;
    use crate::store::{Store, StoreError, keys};

    const KEY: &str = "results/team-a/calc/uid-1/output_workdir";

    fn store(dir: &Path) -> Store {
        Store::open(&format!("file://{}", dir.display())).unwrap()
    }

    fn body(parts: &[&'static [u8]]) -> ByteStream {
        let parts: Vec<_> = parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        futures::stream::iter(parts).boxed()
    }

    /// A body that sends `part` and then breaks, as a connection cut mid-upload does.
    fn cut_off(part: &'static [u8]) -> ByteStream {
        futures::stream::iter([
            Ok(Bytes::from_static(part)),
            Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        ])
        .boxed()
    }

    /// Every file under `dir`, relative to it.
    fn files(dir: &Path) -> Vec<String> {
        let mut found = Vec::new();
        let mut stack = vec![dir.to_owned()];
        while let Some(at) = stack.pop() {
            for entry in std::fs::read_dir(&at).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    found.push(path.strip_prefix(dir).unwrap().display().to_string());
                }
            }
        }
        found.sort();
        found
    }

    #[tokio::test]
    async fn a_write_cut_off_at_any_byte_leaves_nothing_and_its_retry_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let failed = store.put_new(KEY, cut_off(b"half of it")).await;
        assert!(matches!(failed, Err(StoreError::Body { .. })), "{failed:?}");
        assert!(!store.exists(KEY).await.unwrap());
        assert_eq!(
            files(dir.path()),
            Vec::<String>::new(),
            "no partial file is left"
        );

        let stored = store
            .put_new(KEY, body(&[b"all ", b"of it"]))
            .await
            .unwrap();
        assert_eq!(stored.size, 9);
        assert_eq!(files(dir.path()), vec![KEY.to_owned()]);
        assert!(
            !dir.path().join("partial").exists(),
            "no empty directory of partial files is left"
        );
    }

    #[tokio::test]
    async fn a_body_larger_than_a_small_one_is_streamed_whole_and_leaves_no_partial_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let part: &'static [u8] =
            Box::leak(vec![7u8; super::SMALL_BODY / 2 + 1].into_boxed_slice());
        let stored = store
            .put_new(KEY, body(&[part, part, b"tail"]))
            .await
            .unwrap();
        assert_eq!(stored.size, 2 * part.len() as u64 + 4);
        let on_disk = std::fs::read(dir.path().join(KEY)).unwrap();
        assert_eq!(on_disk.len() as u64, stored.size);
        assert!(on_disk.ends_with(b"tail"));
        assert_eq!(files(dir.path()), vec![KEY.to_owned()]);
        assert!(!dir.path().join("partial").exists());
        let again = store.put_new(KEY, body(&[part, part, b"tail"])).await;
        assert_eq!(
            again.unwrap(),
            stored,
            "the same large bytes again are accepted"
        );
    }

    #[tokio::test]
    async fn a_write_whose_task_is_dropped_leaves_no_partial_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let never_ends = futures::stream::iter([Ok(Bytes::from_static(b"some"))])
            .chain(futures::stream::pending())
            .boxed();
        let write = store.put_new(KEY, never_ends);
        let stopped = tokio::time::timeout(std::time::Duration::from_millis(200), write).await;
        assert!(stopped.is_err(), "the body never ends");
        assert_eq!(files(dir.path()), Vec::<String>::new());
        assert!(!dir.path().join("partial").exists());
    }

    #[tokio::test]
    async fn complete_objects_are_write_once_but_the_same_bytes_again_are_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let first = store.put_new(KEY, body(&[b"the result"])).await.unwrap();
        let again = store
            .put_new(KEY, body(&[b"the ", b"result"]))
            .await
            .unwrap();
        assert_eq!(again, first, "a retry whose answer was lost succeeds");
        let other = store.put_new(KEY, body(&[b"another result"])).await;
        assert!(
            matches!(other, Err(StoreError::AlreadyExists { .. })),
            "{other:?}"
        );
        assert_eq!(files(dir.path()), vec![KEY.to_owned()]);
    }

    #[tokio::test]
    async fn of_two_concurrent_writes_of_a_key_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let (a, b) = futures::join!(
            store.put_new(KEY, body(&[b"from a"])),
            store.put_new(KEY, body(&[b"from b"]))
        );
        assert_eq!(
            [a.is_ok(), b.is_ok()].iter().filter(|ok| **ok).count(),
            1,
            "{a:?} {b:?}"
        );
        assert_eq!(files(dir.path()), vec![KEY.to_owned()]);
    }

    #[tokio::test]
    async fn partial_writes_a_killed_process_left_are_never_listed_and_go_with_their_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        store.put_new(KEY, body(&[b"complete"])).await.unwrap();
        let left = dir
            .path()
            .join(keys::partial(&format!("{KEY}x"), "1-2-3").unwrap());
        std::fs::create_dir_all(left.parent().unwrap()).unwrap();
        std::fs::write(&left, b"cut off").unwrap();

        let prefix = "results/team-a/calc/uid-1/";
        let listed: Vec<_> = store
            .list(prefix)
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.key)
            .collect();
        assert_eq!(listed, vec![KEY.to_owned()]);
        assert_eq!(store.delete_prefix(prefix).await.unwrap(), 1);
        assert_eq!(files(dir.path()), Vec::<String>::new());
    }
}
