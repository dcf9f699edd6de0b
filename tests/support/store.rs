//! What the tests read back from a store: whole objects, results as JSON or as the files of
//! a tarball, and the one execution most tests save results for.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::TryStreamExt;

use errand::archive::ByteStream;
use errand::store::Store;
use errand::store::keys::ExecutionId;

/// The names a `manifest.json` lists, in order.
pub fn manifest_names(manifest: &serde_json::Value) -> Vec<&str> {
    manifest["results"]
        .as_array()
        .expect("a manifest lists its results")
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect()
}

/// The namespace of [`execution`].
pub const NAMESPACE: &str = "team-a";

/// The execution the store, pod and runner tests save results for: `calc` in [`NAMESPACE`].
pub fn execution() -> ExecutionId {
    ExecutionId {
        namespace: NAMESPACE.into(),
        name: "calc".into(),
        uid: "0d9f6a52-1111-2222-3333-444455556666".into(),
    }
}

/// The whole object at `key`.
///
/// # Panics
/// When the object cannot be read, naming the key.
pub async fn read_all(store: &Store, key: &str) -> Vec<u8> {
    let body = store
        .get(key)
        .await
        .unwrap_or_else(|e| panic!("reading {key}: {e}"));
    collect(body.into_stream()).await
}

/// Every byte of a stream, in order.
pub async fn collect(stream: ByteStream) -> Vec<u8> {
    let chunks: Vec<Bytes> = stream.try_collect().await.expect("the stream reads");
    chunks.concat()
}

/// The regular files of a tar.gz, by path; the gzip may have several members, as errand's
/// parallel packing writes them.
pub fn tar_files(bytes: &[u8]) -> BTreeMap<String, String> {
    let mut archive = tar::Archive::new(flate2::read::MultiGzDecoder::new(bytes));
    let mut files = BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path().unwrap().display().to_string();
        let mut content = String::new();
        std::io::Read::read_to_string(&mut entry, &mut content).unwrap();
        files.insert(path, content);
    }
    files
}
