//! The watches behind the cluster components' caches, each trimmed to what its readers need so memory stays small per execution.

use std::fmt::Debug;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, PodSpec};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::api::AgentExecution;
use crate::api::contract;
use crate::cluster::index::{self, Index, KeyOf};
use crate::cluster::merged_watch::Merge;
use crate::cluster::scope::Watch;

/// The label selector of everything the controller creates.
pub fn managed_selector() -> String {
    format!("{}={}", contract::MANAGED_BY_LABEL, contract::MANAGED_BY)
}

/// A reflector of `K` (trimmed by `trim`) filled by `watches` (one per served namespace, see
/// [`crate::cluster::scope::Namespaces::watches`]), and the stream that feeds it with every change.
pub fn cache<K>(
    watches: Vec<Watch<K>>,
    trim: impl FnMut(&mut K) + Send + 'static,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let stream = trimmed_events(watches, trim, store.clone())
        .reflect(writer)
        .touched_objects();
    (store, stream)
}

/// [`cache`], with the store indexed by `key_of` (see [`index`]).
pub fn indexed_cache<K>(
    watches: Vec<Watch<K>>,
    trim: impl FnMut(&mut K) + Send + 'static,
    key_of: KeyOf<K>,
) -> (
    Index<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (index, mut writer) = index::indexed_store(key_of);
    let stream = trimmed_events(watches, trim, index.store().clone())
        .inspect_ok(move |event| writer.apply_watcher_event(event))
        .touched_objects();
    (index, stream)
}

/// The watch events of `K` from every watch, trimmed by `trim`, each watch retried with
/// backoff. Several watches are merged into the events one would give ([`Merge`]); `cached`
/// is the store they fill, which names what a re-list deleted.
fn trimmed_events<K>(
    watches: Vec<Watch<K>>,
    mut trim: impl FnMut(&mut K) + Send + 'static,
    cached: Store<K>,
) -> BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let mut trimmed = move |event: watcher::Event<K>| {
        event.modify(|object| {
            object.meta_mut().managed_fields = None;
            trim(object);
        })
    };
    if let [_] = &watches[..] {
        let (api, config) = watches.into_iter().next().expect("one watch");
        return watcher(api, config)
            .default_backoff()
            .map_ok(trimmed)
            .boxed();
    }
    let mut merge = Merge::new(watches.len());
    let each = watches.into_iter().enumerate().map(|(n, (api, config))| {
        watcher(api, config)
            .default_backoff()
            .map_ok(move |event| (n, event))
            .boxed()
    });
    futures::stream::select_all(each)
        .map_ok(move |(n, event)| {
            let events = merge.events(n, trimmed(event), |key| {
                cached.get(key).map(|object| (*object).clone())
            });
            futures::stream::iter(events.into_iter().map(Ok))
        })
        .try_flatten()
        .boxed()
}

/// Keeps only what the status needs of a Job: its identity, owner, suspension and status.
pub fn trim_job(job: &mut Job) {
    let suspend = job.spec.as_ref().and_then(|s| s.suspend);
    job.spec = Some(JobSpec {
        suspend,
        ..JobSpec::default()
    });
    job.metadata.annotations = None;
}

/// Keeps only what the results cleanup needs of a snapshot ConfigMap's metadata: identity,
/// labels, the execution's name, finalizers and deletion.
pub fn trim_config_map(config_map: &mut PartialObjectMeta<ConfigMap>) {
    let meta = &mut config_map.metadata;
    meta.owner_references = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|key, _| key == contract::EXECUTION_NAME_ANNOTATION);
    }
}

/// Keeps only what triggering an owner's reconcile needs of a child's metadata: its identity
/// and owner references.
pub fn trim_to_owners<K>(child: &mut PartialObjectMeta<K>) {
    let meta = &mut child.metadata;
    meta.labels = None;
    meta.annotations = None;
    meta.finalizers = None;
}

/// Keeps only what the controller needs of a namespace: its name, annotations (the lifetime
/// of finished executions) and deletion (results cleanup).
pub fn trim_namespace(namespace: &mut PartialObjectMeta<Namespace>) {
    let meta = &mut namespace.metadata;
    meta.labels = None;
    meta.owner_references = None;
    meta.finalizers = None;
}

/// Maps a namespace to every cached execution in it (a change to the namespace can change
/// their lifetime).
pub fn executions_in_namespace(
    executions: Store<AgentExecution>,
) -> impl Fn(PartialObjectMeta<Namespace>) -> Vec<ObjectRef<AgentExecution>> + Send + Sync + 'static
{
    move |namespace| {
        let name = namespace.name_any();
        executions
            .state()
            .iter()
            .filter(|e| e.metadata.namespace.as_deref() == Some(name.as_str()))
            .map(|e| ObjectRef::from_obj(e.as_ref()))
            .collect()
    }
}

/// Keeps only what the status needs of a pod: its identity, labels, annotations, node and status
/// (with the agent's image digest).
pub fn trim_pod(pod: &mut Pod) {
    // Only the node is kept of the spec: a lost node is named in the status.
    let node_name = pod.spec.take().and_then(|spec| spec.node_name);
    pod.spec = node_name.map(|node_name| PodSpec {
        node_name: Some(node_name),
        ..PodSpec::default()
    });
    if let Some(status) = pod.status.as_mut() {
        status.pod_ip = None;
        status.pod_ips = None;
        status.host_ip = None;
        status.host_ips = None;
        for container in status
            .container_statuses
            .iter_mut()
            .chain(status.init_container_statuses.iter_mut())
            .flatten()
        {
            // The agent's image digest is provenance (status.imageID); errand's own is not.
            if container.name != contract::AGENT_CONTAINER {
                container.image_id = String::new();
            }
            container.container_id = None;
            container.volume_mounts = None;
            container.resources = None;
            container.allocated_resources = None;
        }
    }
}

/// The uid of the execution a pod of errand belongs to, which the pod cache is indexed by.
pub fn pod_execution_uid(pod: &Pod) -> Option<&str> {
    pod.labels()
        .get(contract::EXECUTION_UID_LABEL)
        .map(String::as_str)
}

/// The execution a pod of errand belongs to.
pub fn pod_execution(pod: Pod) -> Option<ObjectRef<AgentExecution>> {
    let name = pod.annotations().get(contract::EXECUTION_NAME_ANNOTATION)?;
    Some(ObjectRef::new(name).within(&pod.namespace()?))
}

/// The execution that owns `job`, as `Controller::owns` would map it.
pub fn job_execution(job: &Job) -> Option<ObjectRef<AgentExecution>> {
    let owner = job
        .owner_references()
        .iter()
        .find(|o| o.kind == "AgentExecution")?;
    Some(ObjectRef::new(&owner.name).within(&job.namespace()?))
}

/// Drives a stream to its end, for caches nobody else polls.
pub async fn drive<S: Stream>(stream: S) {
    stream.for_each(|_| std::future::ready(())).await;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::PodSpec;
    use kube::api::ObjectMeta;

    use super::*;

    #[test]
    fn the_pod_cache_keeps_the_agents_image_digest_only() {
        use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
        let status = |name: &str| ContainerStatus {
            name: name.to_owned(),
            image_id: format!("{name}@sha256:1234"),
            container_id: Some("containerd://abc".to_owned()),
            ..Default::default()
        };
        let mut pod = Pod {
            status: Some(PodStatus {
                init_container_statuses: Some(vec![status(contract::STAGE_CONTAINER)]),
                container_statuses: Some(vec![status(contract::AGENT_CONTAINER)]),
                ..Default::default()
            }),
            ..Default::default()
        };
        trim_pod(&mut pod);
        let status = pod.status.unwrap();
        let agent = &status.container_statuses.unwrap()[0];
        assert_eq!(
            agent.image_id,
            format!("{}@sha256:1234", contract::AGENT_CONTAINER)
        );
        assert_eq!(agent.container_id, None);
        assert_eq!(status.init_container_statuses.unwrap()[0].image_id, "");
    }

    #[test]
    fn a_pod_maps_to_its_execution_by_annotation() {
        let pod = Pod {
            metadata: ObjectMeta {
                namespace: Some("team-a".into()),
                annotations: Some(BTreeMap::from([(
                    contract::EXECUTION_NAME_ANNOTATION.to_owned(),
                    "a-very-long-execution-name".to_owned(),
                )])),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            status: None,
        };
        let mut trimmed = pod.clone();
        trim_pod(&mut trimmed);
        assert!(trimmed.spec.is_none());
        assert_eq!(
            pod_execution(trimmed),
            Some(ObjectRef::new("a-very-long-execution-name").within("team-a"))
        );
    }
}
