//! The HTTP clients of outbound requests: never a redirect, never a proxy, and for requests a tenant directs, every address checked against the [`OutboundPolicy`] where the connection is made (the resolver), so DNS rebinding cannot get round it.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::policy::{DeniedRange, OutboundPolicy, Verdict};
use super::resolver::{Resolver, SystemResolver};

/// A request refused by the outbound policy: every address of `host` is denied. For the
/// controller's log only: it names addresses a tenant must not learn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The host the request named.
    pub host: String,
    /// Each address it resolved to, and the denied range that holds it.
    pub denied: Vec<(IpAddr, DeniedRange)>,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is refused by the outbound policy:", self.host)?;
        for (ip, range) in &self.denied {
            write!(f, " {ip} is in {} ({})", range.range, range.what)?;
        }
        if self.denied.is_empty() {
            write!(f, " it has no address")?;
        }
        Ok(())
    }
}

impl std::error::Error for Refused {}

/// How an outbound request ended without an answer, in classes a tenant may see (the detail
/// goes to the controller's log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The outbound policy refused every address of the host.
    RefusedByPolicy,
    /// No answer in time.
    Timeout,
    /// The host did not resolve, or refused or dropped the connection, or TLS failed.
    Unreachable,
}

impl Failure {
    /// What went wrong, for an error a sender builds.
    pub fn of(error: &reqwest::Error) -> Self {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(cause) = source {
            if cause.downcast_ref::<Refused>().is_some() {
                return Failure::RefusedByPolicy;
            }
            source = cause.source();
        }
        if error.is_timeout() {
            Failure::Timeout
        } else {
            Failure::Unreachable
        }
    }
}

/// The resolver of tenant-directed clients: `lookup`'s addresses, keeping only those the
/// policy allows; none left is a [`Refused`].
struct PolicyResolver {
    policy: Arc<OutboundPolicy>,
    lookup: Arc<dyn Resolver>,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        let host = name.as_str().to_owned();
        let lookup = self.lookup.resolve(&host, 0);
        Box::pin(async move {
            let resolved = lookup.await?;
            let (allowed, denied) = judge(&policy, &resolved);
            if allowed.is_empty() {
                return Err(Box::new(Refused { host, denied }) as _);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// The addresses of `resolved` the policy allows, and those it denies with why.
pub fn judge(
    policy: &OutboundPolicy,
    resolved: &[SocketAddr],
) -> (Vec<SocketAddr>, Vec<(IpAddr, DeniedRange)>) {
    let mut allowed = Vec::new();
    let mut denied = Vec::new();
    for address in resolved {
        match policy.decide(address.ip()) {
            Verdict::Allowed => allowed.push(*address),
            Verdict::Denied(range) => denied.push((address.ip(), range)),
        }
    }
    (allowed, denied)
}

/// A client builder that follows no redirect and uses no proxy from the environment (a
/// proxy would make the connection, out of the policy's sight).
fn builder(timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(timeout)
        .user_agent(concat!("errand/", env!("CARGO_PKG_VERSION")))
}

/// A client for addresses the controller itself chose (the pods of an AgentDeployment, from
/// its Service's EndpointSlices): no redirects, no proxy, connecting within `connect_timeout`.
pub fn internal_client(connect_timeout: Duration) -> reqwest::Client {
    builder(connect_timeout)
        .tcp_nodelay(true)
        .build()
        .expect("a plain HTTP client builds")
}

/// A client builder for URLs a tenant wrote: every address `lookup` finds checked against
/// `policy`, no redirects, no proxy, connecting within `connect_timeout`. An address written in
/// the URL is not resolved: check it with [`check_literal`].
pub fn tenant_builder(
    policy: Arc<OutboundPolicy>,
    lookup: Arc<dyn Resolver>,
    connect_timeout: Duration,
) -> reqwest::ClientBuilder {
    builder(connect_timeout).dns_resolver(Arc::new(PolicyResolver { policy, lookup }))
}

/// A client for URLs a tenant wrote: every address checked against the policy, no redirects,
/// no proxy; each request bounded by `timeout`.
#[derive(Clone)]
pub struct TenantClient {
    http: reqwest::Client,
    policy: Arc<OutboundPolicy>,
}

impl TenantClient {
    /// A client under `policy` whose requests give up after `timeout`.
    pub fn new(policy: Arc<OutboundPolicy>, timeout: Duration) -> Self {
        let http = tenant_builder(Arc::clone(&policy), Arc::new(SystemResolver), timeout)
            .timeout(timeout)
            .build()
            .expect("a TLS client with the native roots builds");
        Self { http, policy }
    }

    /// A POST to `url`, refused at once when its host is an IP address the policy denies (an
    /// address in the URL is connected to without the resolver).
    pub fn post(&self, url: &url::Url) -> Result<reqwest::RequestBuilder, Refused> {
        check_literal(&self.policy, url)?;
        Ok(self.http.post(url.clone()))
    }
}

/// Refuses `url` when its host is an IP address `policy` denies (a client connects to an
/// address in the URL without its resolver).
pub fn check_literal(policy: &OutboundPolicy, url: &url::Url) -> Result<(), Refused> {
    let ip = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        Some(url::Host::Domain(_)) | None => return Ok(()),
    };
    match policy.decide(ip) {
        Verdict::Allowed => Ok(()),
        Verdict::Denied(range) => Err(Refused {
            host: ip.to_string(),
            denied: vec![(ip, range)],
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolved_addresses_are_kept_only_when_allowed() {
        let policy = OutboundPolicy::default();
        let resolved: Vec<SocketAddr> = [
            "93.184.216.34:0",
            "127.0.0.1:0",
            "[::ffff:169.254.169.254]:0",
        ]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
        let (allowed, denied) = judge(&policy, &resolved);
        assert_eq!(allowed, [resolved[0]]);
        let what: Vec<&str> = denied.iter().map(|(_, r)| r.what.as_str()).collect();
        assert_eq!(what, ["loopback", "link-local (cloud metadata)"]);
    }

    #[test]
    fn an_address_in_the_url_is_checked_without_the_resolver() {
        let client = TenantClient::new(Arc::new(OutboundPolicy::default()), Duration::from_secs(1));
        for url in [
            "http://127.0.0.1:8080/x",
            "http://[::1]/",
            "http://[::ffff:169.254.169.254]/latest",
            "http://169.254.169.254/latest/meta-data",
            "http://2130706433/",
            "http://0x7f.1/",
        ] {
            let parsed = url::Url::parse(url).unwrap();
            let refused = client
                .post(&parsed)
                .err()
                .unwrap_or_else(|| panic!("{url} allowed"));
            assert_eq!(refused.denied.len(), 1, "{url}");
        }
        assert!(
            client
                .post(&url::Url::parse("https://hooks.example.com/").unwrap())
                .is_ok()
        );
    }
}
