//! Several watches (one per opted-in namespace) feeding one cache: their events merged into the event sequence a single watch would give, each watch's re-list turned into the changes it makes.
//!
//! Pure. A cache's writer treats `Init … InitDone` as "replace everything", so the watches'
//! own re-lists cannot reach it as they are: one namespace's re-list would empty the others.
//! [`Merge`] therefore:
//! - holds the first lists back until every watch has listed, then gives them as one
//!   `Init`, `InitApply`…, `InitDone` (the cache reports ready only with all namespaces);
//! - afterwards gives a watch's re-list as `Apply` of what it listed and `Delete` of what it
//!   knew before and no longer lists (an object deleted while that watch was down).

use std::collections::{HashMap, HashSet};

use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;

/// The merge of `n` watches' events (see the module docs).
pub struct Merge<K: Resource<DynamicType = ()>> {
    watches: Vec<Watch<K>>,
    /// Whether every watch has listed once and the merged first list was given.
    listed: bool,
}

/// What the merge knows of one watch.
struct Watch<K: Resource<DynamicType = ()>> {
    /// Before the merged first list: this watch's objects so far.
    first: HashMap<ObjectRef<K>, K>,
    /// Whether this watch finished its first list.
    listed_once: bool,
    /// The objects this watch last said exist.
    known: HashSet<ObjectRef<K>>,
    /// During a later re-list: what it has listed so far.
    relisting: Option<HashSet<ObjectRef<K>>>,
}

impl<K: Resource<DynamicType = ()> + Clone> Merge<K> {
    /// The merge of `watches` watches, numbered from 0.
    pub fn new(watches: usize) -> Self {
        Self {
            watches: (0..watches)
                .map(|_| Watch {
                    first: HashMap::new(),
                    listed_once: false,
                    known: HashSet::new(),
                    relisting: None,
                })
                .collect(),
            listed: false,
        }
    }

    /// The events for the one cache that `event` of watch `watch` makes. `cached` gives the
    /// cache's copy of an object, for the deletions a re-list reveals.
    pub fn events(
        &mut self,
        watch: usize,
        event: Event<K>,
        cached: impl Fn(&ObjectRef<K>) -> Option<K>,
    ) -> Vec<Event<K>> {
        if self.listed {
            return self.after_first_list(watch, event, cached);
        }
        let source = &mut self.watches[watch];
        match event {
            Event::Init => source.first.clear(),
            Event::InitApply(object) | Event::Apply(object) => {
                source.first.insert(ObjectRef::from_obj(&object), object);
            }
            Event::Delete(object) => {
                source.first.remove(&ObjectRef::from_obj(&object));
            }
            Event::InitDone => source.listed_once = true,
        }
        if !self.watches.iter().all(|w| w.listed_once) {
            return Vec::new();
        }
        self.listed = true;
        let mut events = vec![Event::Init];
        for source in &mut self.watches {
            source.known = source.first.keys().cloned().collect();
            events.extend(
                source
                    .first
                    .drain()
                    .map(|(_, object)| Event::InitApply(object)),
            );
        }
        events.push(Event::InitDone);
        events
    }

    fn after_first_list(
        &mut self,
        watch: usize,
        event: Event<K>,
        cached: impl Fn(&ObjectRef<K>) -> Option<K>,
    ) -> Vec<Event<K>> {
        let source = &mut self.watches[watch];
        match event {
            Event::Init => {
                source.relisting = Some(HashSet::new());
                Vec::new()
            }
            Event::InitApply(object) | Event::Apply(object) => {
                let key = ObjectRef::from_obj(&object);
                if let Some(relisting) = source.relisting.as_mut() {
                    relisting.insert(key.clone());
                }
                source.known.insert(key);
                vec![Event::Apply(object)]
            }
            Event::Delete(object) => {
                source.known.remove(&ObjectRef::from_obj(&object));
                vec![Event::Delete(object)]
            }
            Event::InitDone => {
                let listed = source.relisting.take().unwrap_or_default();
                let gone = std::mem::replace(&mut source.known, listed);
                gone.iter()
                    .filter(|key| !source.known.contains(key))
                    .filter_map(cached)
                    .map(Event::Delete)
                    .collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector::{self, store::Writer};

    use super::*;

    fn object(namespace: &str, name: &str, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(namespace.to_owned()),
                name: Some(name.to_owned()),
                resource_version: Some(version.to_owned()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    /// A merge of two watches feeding a real reflector store, as the cache runs it.
    struct Fed {
        merge: Merge<ConfigMap>,
        writer: Writer<ConfigMap>,
        store: reflector::Store<ConfigMap>,
    }

    impl Fed {
        fn new() -> Self {
            let (store, writer) = reflector::store();
            Self {
                merge: Merge::new(2),
                writer,
                store,
            }
        }

        fn feed(&mut self, watch: usize, event: Event<ConfigMap>) -> Vec<Event<ConfigMap>> {
            let store = self.store.clone();
            let events = self
                .merge
                .events(watch, event, |key| store.get(key).map(|o| (*o).clone()));
            for event in &events {
                self.writer.apply_watcher_event(event);
            }
            events
        }

        /// `namespace/name@version` of everything the store holds, sorted.
        fn held(&self) -> Vec<String> {
            let mut held: Vec<String> = self
                .store
                .state()
                .iter()
                .map(|o| {
                    format!(
                        "{}/{}@{}",
                        o.metadata.namespace.as_deref().unwrap_or_default(),
                        o.metadata.name.as_deref().unwrap_or_default(),
                        o.metadata.resource_version.as_deref().unwrap_or_default()
                    )
                })
                .collect();
            held.sort();
            held
        }
    }

    #[tokio::test]
    async fn the_cache_is_ready_only_when_every_namespace_has_listed_and_then_holds_them_all() {
        let mut fed = Fed::new();
        assert!(fed.feed(0, Event::Init).is_empty());
        fed.feed(0, Event::InitApply(object("a", "one", "1")));
        fed.feed(0, Event::InitDone);
        // a's watch goes on while b still lists: held back, not lost.
        fed.feed(0, Event::Apply(object("a", "one", "2")));
        fed.feed(0, Event::Apply(object("a", "two", "3")));
        fed.feed(0, Event::Delete(object("a", "two", "3")));
        fed.feed(1, Event::Init);
        fed.feed(1, Event::InitApply(object("b", "one", "4")));
        assert!(fed.held().is_empty());
        let ready = tokio::time::timeout(
            std::time::Duration::from_millis(10),
            fed.store.wait_until_ready(),
        );
        assert!(ready.await.is_err(), "ready before b listed");
        let events = fed.feed(1, Event::InitDone);
        assert!(matches!(events.first(), Some(Event::Init)));
        assert!(matches!(events.last(), Some(Event::InitDone)));
        assert_eq!(fed.held(), ["a/one@2", "b/one@4"]);
        fed.store.wait_until_ready().await.unwrap();
    }

    #[test]
    fn a_relist_of_one_namespace_keeps_the_others_and_deletes_what_it_no_longer_lists() {
        let mut fed = Fed::new();
        for (watch, namespace) in [(0, "a"), (1, "b")] {
            fed.feed(watch, Event::Init);
            fed.feed(watch, Event::InitApply(object(namespace, "one", "1")));
            fed.feed(watch, Event::InitApply(object(namespace, "two", "1")));
            fed.feed(watch, Event::InitDone);
        }
        assert_eq!(fed.held(), ["a/one@1", "a/two@1", "b/one@1", "b/two@1"]);
        // a's watch restarts: "two" was deleted while it was down, "one" changed, "three" is new.
        assert!(fed.feed(0, Event::Init).is_empty());
        fed.feed(0, Event::InitApply(object("a", "one", "5")));
        fed.feed(0, Event::InitApply(object("a", "three", "5")));
        assert_eq!(
            fed.held(),
            ["a/one@5", "a/three@5", "a/two@1", "b/one@1", "b/two@1"]
        );
        let events = fed.feed(0, Event::InitDone);
        assert!(
            matches!(&events[..], [Event::Delete(gone)] if gone.metadata.name.as_deref() == Some("two")),
            "{events:?}"
        );
        assert_eq!(fed.held(), ["a/one@5", "a/three@5", "b/one@1", "b/two@1"]);
        // Later changes pass through as they are.
        fed.feed(1, Event::Delete(object("b", "one", "1")));
        fed.feed(1, Event::Apply(object("b", "four", "6")));
        assert_eq!(fed.held(), ["a/one@5", "a/three@5", "b/four@6", "b/two@1"]);
        // A second re-list of a deletes what the first listed and this one does not.
        fed.feed(0, Event::Init);
        fed.feed(0, Event::InitApply(object("a", "one", "7")));
        fed.feed(0, Event::InitDone);
        assert_eq!(fed.held(), ["a/one@7", "b/four@6", "b/two@1"]);
    }

    #[test]
    fn a_watch_that_restarts_during_the_first_list_starts_its_list_again() {
        let mut fed = Fed::new();
        fed.feed(0, Event::Init);
        fed.feed(0, Event::InitApply(object("a", "stale", "1")));
        fed.feed(0, Event::Init);
        fed.feed(0, Event::InitApply(object("a", "fresh", "2")));
        fed.feed(0, Event::InitDone);
        fed.feed(1, Event::Init);
        fed.feed(1, Event::InitDone);
        assert_eq!(fed.held(), ["a/fresh@2"]);
    }
}
