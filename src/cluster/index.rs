//! A reflector store with an index by one value of each object (an execution's pods by its uid, Kueue's Workloads by their Job's uid), so a reconcile finds its objects without scanning the whole cache.
//!
//! [`IndexWriter`] applies each watch event to the store and to the index together, under the
//! index's lock: a lookup sees both as they were before an event or both as they are after it.
//! The index is therefore exact, with nothing to prune later: an object that is deleted or
//! changes its value leaves its old entry at once, and a re-list replaces the whole index
//! when it replaces the store's content (an object deleted while the watch was down is never
//! reported as deleted, and no entry of it survives the re-list). The index holds names only;
//! a lookup reads the objects from the store.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::watcher;

/// The value an object is indexed by, if it has one (objects without one are not indexed).
pub type KeyOf<K> = fn(&K) -> Option<&str>;

/// Object names by namespace, then by the value they are indexed by.
type Names = HashMap<String, HashMap<String, Vec<String>>>;

/// The read side: the store, and the names of its objects by namespace and value.
pub struct Index<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    names: Arc<RwLock<Names>>,
}

impl<K: Resource<DynamicType = ()> + 'static> Clone for Index<K> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            names: Arc::clone(&self.names),
        }
    }
}

/// The write side: applies watch events to the store and the index (see the module docs).
pub struct IndexWriter<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Writer<K>,
    index: Index<K>,
    key_of: KeyOf<K>,
    /// The names of a re-list in progress, which replace the index when it is done.
    relisted: Names,
}

/// An empty store indexed by `key_of`, and the writer that fills both.
pub fn indexed_store<K>(key_of: KeyOf<K>) -> (Index<K>, IndexWriter<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, writer) = reflector::store();
    let index = Index {
        store,
        names: Arc::default(),
    };
    let writer = IndexWriter {
        store: writer,
        index: index.clone(),
        key_of,
        relisted: Names::default(),
    };
    (index, writer)
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Index<K> {
    /// The whole store.
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// The objects in `namespace` indexed by `key`, in no particular order.
    pub fn get(&self, namespace: &str, key: &str) -> Vec<Arc<K>> {
        let names = self.read();
        let Some(names) = names.get(namespace).and_then(|keys| keys.get(key)) else {
            return Vec::new();
        };
        names
            .iter()
            .filter_map(|name| self.store.get(&ObjectRef::new(name).within(namespace)))
            .collect()
    }

    /// How many values of `namespace` have objects indexed.
    #[cfg(test)]
    fn keys_in(&self, namespace: &str) -> usize {
        self.read().get(namespace).map_or(0, HashMap::len)
    }

    fn read(&self) -> RwLockReadGuard<'_, Names> {
        self.names.read().expect("no panics while holding the lock")
    }

    fn write(&self) -> RwLockWriteGuard<'_, Names> {
        self.names
            .write()
            .expect("no panics while holding the lock")
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> IndexWriter<K> {
    /// Applies one watch event to the index and the store, as one change for readers.
    ///
    /// The store is written last, still under the index's lock: its first filling wakes the
    /// reconciles waiting for the caches, and they must find the index filled too.
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<K>) {
        let mut names = self.index.write();
        match event {
            watcher::Event::Apply(object) | watcher::Event::Delete(object) => {
                // The store still holds the object as it was: where it was indexed until now.
                let cached = self.index.store.get(&ObjectRef::from_obj(object));
                let was = cached
                    .as_deref()
                    .and_then(|old| Entry::of(self.key_of, old));
                let is = match event {
                    watcher::Event::Apply(_) => Entry::of(self.key_of, object),
                    _ => None,
                };
                if was != is {
                    if let Some(was) = was {
                        was.remove_from(&mut names);
                    }
                    if let Some(is) = is {
                        is.insert_into(&mut names);
                    }
                }
            }
            watcher::Event::Init => self.relisted = Names::default(),
            watcher::Event::InitApply(object) => {
                if let Some(entry) = Entry::of(self.key_of, object) {
                    entry.insert_into(&mut self.relisted);
                }
            }
            watcher::Event::InitDone => *names = std::mem::take(&mut self.relisted),
        }
        self.store.apply_watcher_event(event);
    }
}

/// Where an object is indexed.
#[derive(PartialEq)]
struct Entry<'a> {
    namespace: &'a str,
    key: &'a str,
    name: &'a str,
}

impl<'a> Entry<'a> {
    /// Where `object` is indexed, if it is (it has a namespace, a name and a value).
    fn of<K: Resource>(key_of: KeyOf<K>, object: &'a K) -> Option<Self> {
        let meta = object.meta();
        Some(Entry {
            namespace: meta.namespace.as_deref()?,
            key: key_of(object)?,
            name: meta.name.as_deref()?,
        })
    }

    fn insert_into(&self, names: &mut Names) {
        let entry = names
            .entry(self.namespace.to_owned())
            .or_default()
            .entry(self.key.to_owned())
            .or_default();
        if !entry.iter().any(|n| n == self.name) {
            entry.push(self.name.to_owned());
        }
    }

    /// Removes this entry, and the value and namespace it leaves empty.
    fn remove_from(&self, names: &mut Names) {
        let Some(keys) = names.get_mut(self.namespace) else {
            return;
        };
        if let Some(entry) = keys.get_mut(self.key) {
            entry.retain(|n| n != self.name);
            if entry.is_empty() {
                keys.remove(self.key);
            }
        }
        if keys.is_empty() {
            names.remove(self.namespace);
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;
    use kube::api::ObjectMeta;

    use super::*;

    const LABEL: &str = "errand.dev/execution-uid";

    fn by_label(pod: &Pod) -> Option<&str> {
        pod.labels().get(LABEL).map(String::as_str)
    }

    fn pod(namespace: &str, name: &str, uid: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                labels: uid.map(|uid| [(LABEL.to_owned(), uid.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    /// The names of the pods `index` finds, sorted.
    fn found(index: &Index<Pod>, namespace: &str, uid: &str) -> Vec<String> {
        let mut names: Vec<String> = index
            .get(namespace, uid)
            .iter()
            .map(|p| p.name_any())
            .collect();
        names.sort();
        names
    }

    fn listed(writer: &mut IndexWriter<Pod>, pods: Vec<Pod>) {
        writer.apply_watcher_event(&watcher::Event::Init);
        for pod in pods {
            writer.apply_watcher_event(&watcher::Event::InitApply(pod));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
    }

    #[test]
    fn created_pods_are_found_by_namespace_and_uid() {
        let (index, mut writer) = indexed_store(by_label);
        listed(&mut writer, vec![pod("a", "p1", Some("u1"))]);
        writer.apply_watcher_event(&watcher::Event::Apply(pod("a", "p2", Some("u1"))));
        writer.apply_watcher_event(&watcher::Event::Apply(pod("a", "q", Some("u2"))));
        writer.apply_watcher_event(&watcher::Event::Apply(pod("b", "p1", Some("u1"))));
        writer.apply_watcher_event(&watcher::Event::Apply(pod("a", "bare", None)));
        assert_eq!(found(&index, "a", "u1"), ["p1", "p2"]);
        assert_eq!(found(&index, "a", "u2"), ["q"]);
        assert_eq!(found(&index, "b", "u1"), ["p1"]);
        assert!(found(&index, "a", "u3").is_empty());
        assert!(found(&index, "c", "u1").is_empty());
        assert_eq!(index.store().state().len(), 5, "unlabelled pods are cached");
    }

    #[test]
    fn an_updated_pod_is_found_once_with_its_latest_state() {
        let (index, mut writer) = indexed_store(by_label);
        listed(&mut writer, vec![pod("a", "p", Some("u"))]);
        let mut running = pod("a", "p", Some("u"));
        running.metadata.resource_version = Some("2".into());
        writer.apply_watcher_event(&watcher::Event::Apply(running));
        let pods = index.get("a", "u");
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].resource_version().as_deref(), Some("2"));
    }

    #[test]
    fn a_deleted_pod_is_gone_and_its_entry_too() {
        let (index, mut writer) = indexed_store(by_label);
        listed(
            &mut writer,
            vec![pod("a", "p1", Some("u")), pod("a", "p2", Some("u"))],
        );
        writer.apply_watcher_event(&watcher::Event::Delete(pod("a", "p1", Some("u"))));
        assert_eq!(found(&index, "a", "u"), ["p2"]);
        writer.apply_watcher_event(&watcher::Event::Delete(pod("a", "p2", Some("u"))));
        assert!(found(&index, "a", "u").is_empty());
        assert_eq!(index.keys_in("a"), 0, "no empty entry is kept");
    }

    #[test]
    fn a_relabelled_pod_moves_to_its_new_uid() {
        let (index, mut writer) = indexed_store(by_label);
        listed(&mut writer, vec![pod("a", "p", Some("old"))]);
        writer.apply_watcher_event(&watcher::Event::Apply(pod("a", "p", Some("new"))));
        assert!(found(&index, "a", "old").is_empty());
        assert_eq!(found(&index, "a", "new"), ["p"]);
        writer.apply_watcher_event(&watcher::Event::Apply(pod("a", "p", None)));
        assert!(found(&index, "a", "new").is_empty());
        assert_eq!(index.keys_in("a"), 0);
        // Deleted with a label it no longer had in the cache: nothing else moves.
        writer.apply_watcher_event(&watcher::Event::Delete(pod("a", "p", Some("new"))));
        assert_eq!(index.store().state().len(), 0);
    }

    #[test]
    fn a_relist_drops_the_pods_deleted_while_the_watch_was_down() {
        let (index, mut writer) = indexed_store(by_label);
        listed(
            &mut writer,
            vec![pod("a", "gone", Some("u1")), pod("a", "kept", Some("u2"))],
        );
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(pod("a", "kept", Some("u2"))));
        assert_eq!(
            found(&index, "a", "u1"),
            ["gone"],
            "until the re-list is done, the cache is as it was"
        );
        writer.apply_watcher_event(&watcher::Event::InitApply(pod("a", "new", Some("u3"))));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        assert!(found(&index, "a", "u1").is_empty());
        assert_eq!(found(&index, "a", "u2"), ["kept"]);
        assert_eq!(found(&index, "a", "u3"), ["new"]);
        assert_eq!(index.keys_in("a"), 2, "the gone pod's entry is dropped");
    }
}
