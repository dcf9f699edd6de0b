//! The store against a real `file://` directory: write-once puts, streamed multipart uploads
//! with size and sha256, listing and deleting under a prefix, and content-addressed filesets.

use std::fs;

use crate::support::store::{execution, read_all};
use bytes::Bytes;
use errand::archive::ByteStream;
use errand::store::keys::{self, ResultName};
use errand::store::{BlobBody, PushedFileset, Store, StoreError};
use futures::StreamExt;
use sha2::{Digest, Sha256};

fn open(dir: &std::path::Path) -> Store {
    Store::open(&format!("file://{}", dir.display())).unwrap()
}

fn body(parts: Vec<Vec<u8>>) -> ByteStream {
    futures::stream::iter(parts.into_iter().map(|p| Ok(Bytes::from(p)))).boxed()
}

#[tokio::test]
async fn a_second_write_to_a_result_key_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let key = keys::result(&execution(), ResultName::RunResult).unwrap();
    store
        .put_new(&key, body(vec![b"first".to_vec()]))
        .await
        .unwrap();

    let err = store
        .put_new(&key, body(vec![b"second".to_vec()]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::AlreadyExists { key: k } if *k == key),
        "{err}"
    );
    assert!(err.to_string().contains(&key));
    assert_eq!(read_all(&store, &key).await, b"first");

    // Large bodies take the multipart path; they are refused the same way.
    let big = vec![vec![1u8; 4 * 1024 * 1024]; 3];
    let err = store.put_new(&key, body(big)).await.unwrap_err();
    assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err}");
    assert_eq!(read_all(&store, &key).await, b"first");
}

#[tokio::test]
async fn large_streamed_uploads_report_size_and_sha256() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    // 13 MiB + a bit in uneven pieces: three parts of 5 MiB, the last one short.
    let parts: Vec<Vec<u8>> = (0..14u8)
        .map(|i| vec![i; 1024 * 1024 - usize::from(i)])
        .collect();
    let all = parts.concat();
    let key = keys::result(&execution(), ResultName::OutputWorkdir).unwrap();
    let info = store.put_new(&key, body(parts)).await.unwrap();
    assert_eq!(info.size, all.len() as u64);
    assert_eq!(info.sha256, hex::encode(Sha256::digest(&all)));
    assert_eq!(info.key, key);
    assert_eq!(read_all(&store, &key).await, all);
    // Local objects come back as the file itself.
    assert!(matches!(store.get(&key).await.unwrap(), BlobBody::File(_)));
}

#[tokio::test]
async fn a_failing_body_leaves_no_object() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let key = keys::result(&execution(), ResultName::OutputArtifacts).unwrap();
    let failing: ByteStream = futures::stream::iter(vec![
        Ok(Bytes::from(vec![0u8; 6 * 1024 * 1024])),
        Err(std::io::Error::other("packer broke")),
    ])
    .boxed();
    let err = store.put_new(&key, failing).await.unwrap_err();
    assert!(err.to_string().contains("packer broke"), "{err}");
    assert!(!store.exists(&key).await.unwrap());
}

#[tokio::test]
async fn list_and_delete_under_a_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let mine = execution();
    let mut other = execution();
    other.name = "calc-2".into();
    for name in [ResultName::RunResult, ResultName::Manifest] {
        store
            .put_new(
                &keys::result(&mine, name).unwrap(),
                body(vec![b"x".to_vec()]),
            )
            .await
            .unwrap();
    }
    let other_key = keys::result(&other, ResultName::RunResult).unwrap();
    store
        .put_new(&other_key, body(vec![b"y".to_vec()]))
        .await
        .unwrap();

    let prefix = keys::results_prefix(&mine).unwrap();
    let listed: Vec<String> = store
        .list(&prefix)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.key)
        .collect();
    assert_eq!(
        listed,
        [
            keys::result(&mine, ResultName::Manifest).unwrap(),
            keys::result(&mine, ResultName::RunResult).unwrap()
        ]
    );
    assert_eq!(store.delete_prefix(&prefix).await.unwrap(), 2);
    assert!(store.list(&prefix).await.unwrap().is_empty());
    assert!(store.exists(&other_key).await.unwrap());
    let missing = store
        .get(&keys::result(&mine, ResultName::RunResult).unwrap())
        .await;
    assert!(matches!(missing, Err(StoreError::NotFound { .. })));
}

#[tokio::test]
async fn filesets_are_content_addressed() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(&tmp.path().join("store"));
    let dir = tmp.path().join("tree");
    fs::create_dir_all(dir.join("sub")).unwrap();
    fs::write(dir.join("a.txt"), "a").unwrap();
    fs::write(dir.join("sub/b.txt"), "b").unwrap();

    let first = store.push_fileset("team-a", &dir).await.unwrap();
    assert_eq!(first.file_count, 2);
    assert_eq!(first.key, keys::fileset("team-a", &first.digest).unwrap());
    let blob = read_all(&store, &first.key).await;
    assert_eq!(blob.len() as u64, first.size);
    assert_eq!(hex::encode(Sha256::digest(&blob)), first.digest);

    // Pushing the same tree again changes nothing; a changed tree gets a new address.
    assert!(first.created);
    let again = store.push_fileset("team-a", &dir).await.unwrap();
    assert_eq!(
        again,
        PushedFileset {
            created: false,
            ..first.clone()
        },
        "the second push stored nothing"
    );
    fs::write(dir.join("a.txt"), "changed").unwrap();
    let changed = store.push_fileset("team-a", &dir).await.unwrap();
    assert_ne!(changed.digest, first.digest);
    let listed = store
        .list(&keys::filesets_prefix("team-a").unwrap())
        .await
        .unwrap();
    // Each blob has its path index beside it, and no temporary upload is left behind.
    let keys: Vec<&str> = listed.iter().map(|l| l.key.as_str()).collect();
    let expected: Vec<String> = [&first.digest, &changed.digest]
        .into_iter()
        .flat_map(|d| {
            [
                keys::fileset("team-a", d).unwrap(),
                keys::fileset_paths("team-a", d).unwrap(),
            ]
        })
        .collect();
    let mut expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    expected.sort();
    assert_eq!(keys, expected);
    let index = store
        .fileset_paths("team-a", &first.digest)
        .await
        .unwrap()
        .unwrap();
    assert!(index.contains("sub/b.txt") && index.contains("sub/") && !index.contains("c.txt"));
    assert!(store.list("uploads/team-a/").await.unwrap().is_empty());

    let err = store
        .push_fileset("team-a", &dir.join("a.txt"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is not a directory"), "{err}");
}

#[test]
fn default_url_is_a_local_store() {
    let url = Store::default_url().unwrap();
    assert!(url.starts_with("file:///"), "{url}");
    assert!(url.ends_with("/errand/store"), "{url}");
}

#[tokio::test]
async fn bare_absolute_paths_open_a_local_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nested/store");
    let store = Store::open(dir.to_str().unwrap()).unwrap();
    store
        .put_new("results/x/y/z/run_result", body(vec![b"{}".to_vec()]))
        .await
        .unwrap();
    assert!(dir.join("results/x/y/z/run_result").is_file());
}
