//! Free ports for servers a test starts later: taken below the kernel's ephemeral range, so
//! neither an outgoing connection nor another test's `bind(…:0)` can take one between the
//! check and the server's own bind.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// The ports handed out: below Linux's default ephemeral range (32768–60999) and above the
/// registered services a test machine runs.
const FIRST: u32 = 20_000;
const COUNT: u32 = 12_000;

/// Where the next search starts; seeded from the process id so test binaries that run at once
/// start apart.
static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);

/// A port on `host` nobody listens on now and that no other caller in this process gets.
///
/// # Panics
/// When no port of the range can be bound on `host` (the host is not this machine's).
pub fn free_address(host: IpAddr) -> SocketAddr {
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % COUNT,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..COUNT {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % COUNT;
        let port = u16::try_from(FIRST + offset).expect("the range fits in u16");
        let address = SocketAddr::new(host, port);
        if TcpListener::bind(address).is_ok() {
            return address;
        }
    }
    panic!("no free port in {FIRST}..{} on {host}", FIRST + COUNT)
}

/// [`free_address`] on 127.0.0.1.
pub fn free_local_address() -> SocketAddr {
    free_address(IpAddr::from([127, 0, 0, 1]))
}
