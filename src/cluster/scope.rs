//! Which namespaces the cluster components serve: all of them (a ClusterRole), or only those an operator opted in (`--watch-namespace a,b`, the chart's `controller.watchNamespaces`, a Role in each).

use std::fmt;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};

/// The namespaces served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Namespaces {
    /// Every namespace.
    All,
    /// Only these, sorted and without repeats (never empty).
    Only(Vec<String>),
}

/// One watch of a cache: where it lists and what it selects.
pub type Watch<K> = (Api<K>, watcher::Config);

impl Namespaces {
    /// Only `names`, or every namespace when there are none.
    pub fn only(names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let mut names: Vec<String> = names.into_iter().map(Into::into).collect();
        names.sort();
        names.dedup();
        if names.is_empty() {
            Self::All
        } else {
            Self::Only(names)
        }
    }

    /// The names served, or `None` for every namespace.
    pub fn names(&self) -> Option<&[String]> {
        match self {
            Self::All => None,
            Self::Only(names) => Some(names),
        }
    }

    /// Whether `namespace` is served.
    pub fn serves(&self, namespace: &str) -> bool {
        match self {
            Self::All => true,
            Self::Only(names) => names.iter().any(|n| n == namespace),
        }
    }

    /// An `Api` of `K` per served namespace (one over all of them for [`Namespaces::All`]).
    pub fn apis<K>(&self, client: &Client) -> Vec<Api<K>>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        match self {
            Self::All => vec![Api::all(client.clone())],
            Self::Only(names) => names
                .iter()
                .map(|n| Api::namespaced(client.clone(), n))
                .collect(),
        }
    }

    /// The watches of `K` a cache of the served namespaces needs, each selecting by `config`.
    pub fn watches<K>(&self, client: &Client, config: &watcher::Config) -> Vec<Watch<K>>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        self.apis(client)
            .into_iter()
            .map(|api| (api, config.clone()))
            .collect()
    }

    /// The watches of the served Namespace objects themselves: one by name each, which a
    /// ClusterRole limited to those `resourceNames` permits.
    pub fn namespace_watches(&self, client: &Client) -> Vec<Watch<PartialObjectMeta<Namespace>>> {
        let api = || Api::all(client.clone());
        match self {
            Self::All => vec![(api(), watcher::Config::default())],
            Self::Only(names) => names
                .iter()
                .map(|n| {
                    let config = watcher::Config::default().fields(&format!("metadata.name={n}"));
                    (api(), config)
                })
                .collect(),
        }
    }
}

impl fmt::Display for Namespaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("*"),
            Self::Only(names) => f.write_str(&names.join(",")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_names_is_every_namespace_and_names_are_sorted_once() {
        assert_eq!(Namespaces::only(Vec::<String>::new()), Namespaces::All);
        let only = Namespaces::only(["team-b", "team-a", "team-b"]);
        assert_eq!(only.to_string(), "team-a,team-b");
        assert!(only.serves("team-a") && only.serves("team-b"));
        assert!(!only.serves("team-c") && !only.serves("kube-system"));
        assert!(Namespaces::All.serves("kube-system"));
    }
}
