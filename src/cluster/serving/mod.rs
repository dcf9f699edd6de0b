//! The serving certificate of errand's HTTPS endpoints, shared by the admission webhook and the data API: one certificate for errand's Service, its CA in every object the API server calls errand through.
//!
//! [`caller`] is how the webhook knows the API server calls it (a secret path).
//! [`certs`] makes the certificate (pure), [`tls`] serves whichever one is current, and
//! [`provision`] keeps it in place: generated and shared through a Secret, or read from files
//! cert-manager keeps current. The process runs one [`provision::keep`] loop and hands the
//! same [`tls::ServingCertificate`] to each endpoint.

pub mod caller;
pub mod certs;
pub mod provision;
pub mod tls;

pub use provision::{CaBundleHolder, Certificates, SelfSigned};
