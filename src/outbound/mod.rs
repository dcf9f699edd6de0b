//! Outbound requests the controller makes on a tenant's behalf (notify webhooks, the gateway's upstream): which addresses they may reach ([`policy`], pure, in [`crate::resolve`] since admission checks egress ranges against it) and the clients that hold to it ([`client`]).

pub mod client;
pub mod resolver;
pub use crate::resolve::outbound_policy as policy;

pub use client::{Failure, Refused, TenantClient, internal_client};
pub use policy::{
    Cidr, DEFAULT_DENY, DeniedRange, InvalidCidr, OutboundPolicy, OutboundSettings, Verdict,
};
