//! Where outbound connections find a host name's addresses: the system's resolver, or one nameserver (the cluster's DNS Service, for a controller off-cluster). The policy is applied to what they find, not here.

use std::net::SocketAddr;

use futures::future::BoxFuture;

/// Finds the addresses of a host name.
pub trait Resolver: Send + Sync {
    /// The addresses of `host`, each with `port`.
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>>;
}

/// The system's resolver (the cluster's DNS in a pod).
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
        let host = host.to_owned();
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

/// A nameserver's resolver (the cluster's DNS Service, for a controller that runs
/// off-cluster, whose own resolver does not know the cluster's names).
pub struct NameserverResolver(hickory_resolver::TokioResolver);

impl NameserverResolver {
    /// Resolves at `nameserver` (UDP, then TCP for a truncated answer), nothing else.
    pub fn new(nameserver: SocketAddr) -> Self {
        use hickory_resolver::config::{NameServerConfigGroup, ResolverConfig};
        let servers =
            NameServerConfigGroup::from_ips_clear(&[nameserver.ip()], nameserver.port(), true);
        let config = ResolverConfig::from_parts(None, vec![], servers);
        let provider = hickory_resolver::name_server::TokioConnectionProvider::default();
        Self(hickory_resolver::TokioResolver::builder_with_config(config, provider).build())
    }
}

impl Resolver for NameserverResolver {
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
        // Fully qualified: no search domain is tried.
        let resolver = self.0.clone();
        let name = format!("{}.", host.trim_end_matches('.'));
        Box::pin(async move {
            let found = resolver
                .lookup_ip(name)
                .await
                .map_err(std::io::Error::other)?;
            Ok(found.iter().map(|ip| SocketAddr::new(ip, port)).collect())
        })
    }
}
