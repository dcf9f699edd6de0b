//! The outbound address policy: which IP addresses the controller may connect to on a tenant's behalf, and which an execution's egress ranges may hold, decided from CIDR lists alone (no I/O).
//!
//! The default denies every range that leads into the node, the cluster or the cloud's
//! control plane (loopback, link-local with the metadata endpoint, private, CGNAT, ULA,
//! unspecified, multicast and reserved); the operator adds the cluster's Service and pod
//! CIDRs and the API server's address, and may allow ranges back (an in-cluster webhook
//! receiver): an allow entry wins over every deny entry.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An address range: an address and how many of its leading bits are fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The range of `addr`'s first `prefix` bits; `None` when `prefix` is longer than the
    /// address. An IPv4-mapped IPv6 range (`::ffff:a.b.c.d/96+`) is kept as its IPv4 range.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Self> {
        let (addr, prefix) = match addr {
            IpAddr::V6(v6) if prefix >= 96 => match v6.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), prefix - 96),
                None => (addr, prefix),
            },
            _ => (addr, prefix),
        };
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        (prefix <= bits).then_some(Self { addr, prefix })
    }

    /// Whether every address of `other` is in this range.
    pub fn covers(&self, other: &Cidr) -> bool {
        self.addr.is_ipv4() == other.addr.is_ipv4()
            && self.prefix <= other.prefix
            && self.contains(other.addr)
    }

    /// The range with its host bits cleared (`10.1.2.3/8` is `10.0.0.0/8`), as a
    /// NetworkPolicy's `ipBlock` writes it.
    pub fn network(&self) -> Cidr {
        let addr = match self.addr {
            IpAddr::V4(v4) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4((u32::from(v4) & mask).into())
            }
            IpAddr::V6(v6) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(v6) & mask).into())
            }
        };
        Cidr {
            addr,
            prefix: self.prefix,
        }
    }

    /// Whether `ip` (IPv4-mapped IPv6 addresses read as IPv4) is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Why a text is not an address range; each quotes the text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCidr {
    /// What comes before the `/` is not an address.
    #[error("{0:?} is not an address range: write it as 10.0.0.0/8, fd00::/8 or one address")]
    Address(String),
    /// What comes after the `/` is not a number.
    #[error("{0:?}: the prefix length after '/' must be a number of bits")]
    Prefix(String),
    /// A prefix longer than the address has bits.
    #[error("{0:?}: the prefix length is longer than the address")]
    PrefixTooLong(String),
}

impl FromStr for Cidr {
    type Err = InvalidCidr;

    /// `10.0.0.0/8`, `fd00::/8`, or one address (`10.96.0.1`: a /32 or /128).
    fn from_str(text: &str) -> Result<Self, InvalidCidr> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| InvalidCidr::Address(text.to_owned()))?;
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .map_err(|_| InvalidCidr::Prefix(text.to_owned()))?,
            None if addr.is_ipv4() => 32,
            None => 128,
        };
        Self::new(addr, prefix).ok_or_else(|| InvalidCidr::PrefixTooLong(text.to_owned()))
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:127.0.0.1`) as the IPv4 address it reaches; any
/// other address as it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// The ranges denied unless the operator allows them, each with what it is.
pub const DEFAULT_DENY: [(&str, &str); 19] = [
    ("0.0.0.0/8", "this network (unspecified)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (cloud metadata)"),
    ("10.0.0.0/8", "private"),
    ("172.16.0.0/12", "private"),
    ("192.168.0.0/16", "private"),
    ("100.64.0.0/10", "carrier-grade NAT"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("198.18.0.0/15", "benchmarking"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved and broadcast"),
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::/96", "IPv4-compatible"),
    ("64:ff9b::/96", "NAT64 (reaches IPv4 addresses)"),
    ("2002::/16", "6to4 (reaches IPv4 addresses)"),
    ("fe80::/10", "link-local"),
    ("fc00::/7", "unique local"),
    ("ff00::/8", "multicast"),
];

/// What the policy makes of one address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The controller may connect.
    Allowed,
    /// It may not: the address is in this denied range (for the controller's log, never for
    /// the tenant).
    Denied(DeniedRange),
}

/// The denied range an address fell in, and what the range is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeniedRange {
    /// The range.
    pub range: Cidr,
    /// What it is (`loopback`, `the cluster's Service CIDR`, an operator's entry).
    pub what: String,
}

impl Verdict {
    /// Whether the address may be connected to.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Verdict::Allowed)
    }
}

/// Which addresses outbound requests made on a tenant's behalf may reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboundPolicy {
    deny: Vec<(Cidr, String)>,
    allow: Vec<Cidr>,
}

impl Default for OutboundPolicy {
    /// [`DEFAULT_DENY`], nothing allowed back.
    fn default() -> Self {
        let deny = DEFAULT_DENY
            .iter()
            .map(|(range, what)| {
                let range = range.parse().expect("the default ranges parse");
                (range, (*what).to_owned())
            })
            .collect();
        Self {
            deny,
            allow: Vec::new(),
        }
    }
}

impl OutboundPolicy {
    /// A policy that denies nothing: for tests and tools whose targets are not a tenant's.
    pub fn allow_all() -> Self {
        Self {
            deny: Vec::new(),
            allow: Vec::new(),
        }
    }

    /// This policy that also denies `range`, described as `what` in the controller's log.
    pub fn deny(mut self, range: Cidr, what: impl Into<String>) -> Self {
        self.deny.push((range, what.into()));
        self
    }

    /// This policy that allows `range` back, whatever denies it.
    pub fn allow(mut self, range: Cidr) -> Self {
        self.allow.push(range);
        self
    }

    /// The ranges allowed back.
    pub fn allowed(&self) -> &[Cidr] {
        &self.allow
    }

    /// The denied ranges and what each is.
    pub fn denied(&self) -> impl Iterator<Item = (&Cidr, &str)> {
        self.deny.iter().map(|(range, what)| (range, what.as_str()))
    }

    /// What of `range` an execution's pod may be let reach: the denied ranges inside it to cut
    /// out (those no allow entry covers), or the denied range that covers all of it.
    pub fn carve(&self, range: &Cidr) -> Result<Vec<Cidr>, DeniedRange> {
        let allowed_back = |r: &Cidr| self.allow.iter().any(|a| a.covers(r));
        if allowed_back(range) {
            return Ok(Vec::new());
        }
        if let Some((covering, what)) = self.deny.iter().find(|(d, _)| d.covers(range)) {
            return Err(DeniedRange {
                range: *covering,
                what: what.clone(),
            });
        }
        let mut cut: Vec<Cidr> = self
            .deny
            .iter()
            .map(|(d, _)| d.network())
            .filter(|d| range.covers(d) && !allowed_back(d))
            .collect();
        cut.sort_by_key(ToString::to_string);
        cut.dedup();
        Ok(cut)
    }

    /// Whether the controller may connect to `ip`: an allow entry that holds it wins; else
    /// the first deny entry that holds it refuses it; else it is allowed.
    pub fn decide(&self, ip: IpAddr) -> Verdict {
        if self.allow.iter().any(|range| range.contains(ip)) {
            return Verdict::Allowed;
        }
        match self.deny.iter().find(|(range, _)| range.contains(ip)) {
            Some((range, what)) => Verdict::Denied(DeniedRange {
                range: *range,
                what: what.clone(),
            }),
            None => Verdict::Allowed,
        }
    }
}

/// What an operator sets (flags, chart values) and the controller learns of its cluster: the
/// policy is the default with these added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutboundSettings {
    /// The cluster's Service CIDRs (denied).
    pub service_cidrs: Vec<Cidr>,
    /// The cluster's pod CIDRs (denied).
    pub pod_cidrs: Vec<Cidr>,
    /// The API server's addresses (denied).
    pub api_servers: Vec<IpAddr>,
    /// More ranges to deny.
    pub deny: Vec<Cidr>,
    /// Ranges allowed back, whatever denies them.
    pub allow: Vec<Cidr>,
}

impl OutboundSettings {
    /// The policy: [`DEFAULT_DENY`] and these.
    pub fn policy(&self) -> OutboundPolicy {
        let mut policy = OutboundPolicy::default();
        for range in &self.service_cidrs {
            policy = policy.deny(*range, "the cluster's Service CIDR");
        }
        for range in &self.pod_cidrs {
            policy = policy.deny(*range, "the cluster's pod CIDR");
        }
        for ip in &self.api_servers {
            let host = if ip.is_ipv4() { 32 } else { 128 };
            let range = Cidr::new(*ip, host).expect("a host prefix fits");
            policy = policy.deny(range, "the API server");
        }
        for range in &self.deny {
            policy = policy.deny(*range, "the operator's outbound deny list");
        }
        for range in &self.allow {
            policy = policy.allow(*range);
        }
        policy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(ip: &str) -> Verdict {
        OutboundPolicy::default().decide(ip.parse().unwrap())
    }

    fn denied_as(ip: &str) -> String {
        match decide(ip) {
            Verdict::Denied(range) => range.what,
            Verdict::Allowed => panic!("{ip} was allowed"),
        }
    }

    #[test]
    fn the_default_denies_what_leads_into_the_node_the_cluster_and_the_cloud() {
        for (ip, what) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("0.0.0.0", "this network (unspecified)"),
            ("169.254.169.254", "link-local (cloud metadata)"),
            ("10.96.0.1", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "reserved and broadcast"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fe80::1", "link-local"),
            ("fd00:ec2::254", "unique local"),
            ("fc00::1", "unique local"),
            ("ff02::1", "multicast"),
            ("64:ff9b::a9fe:a9fe", "NAT64 (reaches IPv4 addresses)"),
        ] {
            assert_eq!(denied_as(ip), what, "{ip}");
        }
    }

    #[test]
    fn ipv4_mapped_ipv6_addresses_are_judged_as_the_ipv4_address_they_reach() {
        assert_eq!(denied_as("::ffff:127.0.0.1"), "loopback");
        assert_eq!(
            denied_as("::ffff:169.254.169.254"),
            "link-local (cloud metadata)"
        );
        assert_eq!(denied_as("::ffff:a9fe:a9fe"), "link-local (cloud metadata)");
        assert_eq!(denied_as("::ffff:10.0.0.1"), "private");
        assert_eq!(decide("::ffff:93.184.216.34"), Verdict::Allowed);
        // An operator's range written either way holds both spellings.
        let mapped: Cidr = "::ffff:10.1.0.0/112".parse().unwrap();
        assert_eq!(mapped, "10.1.0.0/16".parse().unwrap());
        let policy = OutboundPolicy::default().allow(mapped);
        assert!(policy.decide("10.1.2.3".parse().unwrap()).is_allowed());
        assert!(
            policy
                .decide("::ffff:10.1.2.3".parse().unwrap())
                .is_allowed()
        );
    }

    #[test]
    fn public_addresses_are_allowed() {
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
        ] {
            assert_eq!(decide(ip), Verdict::Allowed, "{ip}");
        }
    }

    #[test]
    fn operator_entries_deny_more_and_allow_back() {
        let policy = OutboundPolicy::default()
            .deny("203.0.113.0/24".parse().unwrap(), "the API server")
            .allow("10.96.5.7".parse().unwrap());
        assert!(policy.decide("10.96.5.7".parse().unwrap()).is_allowed());
        assert!(!policy.decide("10.96.5.8".parse().unwrap()).is_allowed());
        assert_eq!(
            policy.decide("203.0.113.9".parse().unwrap()),
            Verdict::Denied(DeniedRange {
                range: "203.0.113.0/24".parse().unwrap(),
                what: "the API server".into(),
            })
        );
        assert!(
            OutboundPolicy::allow_all()
                .decide("127.0.0.1".parse().unwrap())
                .is_allowed()
        );
    }

    #[test]
    fn cluster_ranges_and_the_api_server_are_denied_and_allow_entries_win() {
        let settings = OutboundSettings {
            service_cidrs: vec!["198.51.100.0/24".parse().unwrap()],
            pod_cidrs: vec!["2001:db8:1::/64".parse().unwrap()],
            api_servers: vec!["203.0.113.7".parse().unwrap()],
            deny: vec!["192.0.2.0/24".parse().unwrap()],
            allow: vec!["10.0.9.0/24".parse().unwrap()],
        };
        let policy = settings.policy();
        let what = |ip: &str| match policy.decide(ip.parse().unwrap()) {
            Verdict::Denied(range) => range.what,
            Verdict::Allowed => "allowed".into(),
        };
        assert_eq!(what("198.51.100.20"), "the cluster's Service CIDR");
        assert_eq!(what("2001:db8:1::5"), "the cluster's pod CIDR");
        assert_eq!(what("203.0.113.7"), "the API server");
        assert_eq!(what("::ffff:203.0.113.7"), "the API server");
        assert_eq!(what("203.0.113.8"), "allowed");
        assert_eq!(what("192.0.2.1"), "the operator's outbound deny list");
        assert_eq!(what("10.0.9.4"), "allowed");
        assert_eq!(what("10.0.10.4"), "private");
    }

    #[test]
    fn ranges_parse_or_say_how_to_write_them() {
        assert_eq!(
            "10.0.0.0/8".parse::<Cidr>().unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert_eq!(
            "10.96.0.1".parse::<Cidr>().unwrap().to_string(),
            "10.96.0.1/32"
        );
        assert_eq!("fd00::/8".parse::<Cidr>().unwrap().to_string(), "fd00::/8");
        assert_eq!("::/0".parse::<Cidr>().unwrap().to_string(), "::/0");
        assert!(
            "0.0.0.0/0"
                .parse::<Cidr>()
                .unwrap()
                .contains("1.2.3.4".parse().unwrap())
        );
        for (text, says) in [
            ("10.0.0.0/33", "longer than the address"),
            ("10.0.0/8", "write it as"),
            ("10.0.0.0/x", "number of bits"),
            ("example.com", "write it as"),
        ] {
            let error = text.parse::<Cidr>().unwrap_err().to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn an_egress_range_has_the_denied_ranges_inside_it_cut_out_and_one_inside_a_denied_range_is_refused()
     {
        let cidr = |t: &str| t.parse::<Cidr>().unwrap();
        let policy = OutboundPolicy::default().allow(cidr("10.88.0.1/32"));
        // A public range: nothing to cut.
        assert_eq!(policy.carve(&cidr("203.0.113.0/24")), Ok(vec![]));
        // Everything: every denied range is cut out (and 10/8 though 10.88.0.1 is allowed
        // back, since the allow covers only part of it).
        let everything = policy.carve(&cidr("0.0.0.0/0")).unwrap();
        for denied in [
            "10.0.0.0/8",
            "127.0.0.0/8",
            "169.254.0.0/16",
            "192.168.0.0/16",
        ] {
            assert!(
                everything.contains(&cidr(denied)),
                "{denied}: {everything:?}"
            );
        }
        // Inside a denied range: refused, naming what it is.
        let refused = policy.carve(&cidr("169.254.169.254")).unwrap_err();
        assert_eq!(refused.what, "link-local (cloud metadata)");
        assert!(policy.carve(&cidr("10.1.2.0/24")).is_err());
        // Allowed back by the operator: reachable whole.
        assert_eq!(policy.carve(&cidr("10.88.0.1/32")), Ok(vec![]));
        // Host bits are cleared for the ipBlock.
        assert_eq!(cidr("10.1.2.3/8").network().to_string(), "10.0.0.0/8");
        assert_eq!(cidr("fd00::1/8").network().to_string(), "fd00::/8");
    }
}
