//! Whether a download is answered with a link (a presigned URL of the object in the store) instead of its bytes: the `link` query parameter, the store, the method, and how long the URL lasts. Pure.
//!
//! A client that asks with `link=true` gets `200` with a [`DownloadLink`](crate::api::data::DownloadLink)
//! (content type [`LINK_CONTENT_TYPE`](crate::api::data::LINK_CONTENT_TYPE)): a short-lived
//! presigned GET URL of exactly the object it was authorized to read, so the bytes come straight
//! from the object store instead of through the API server and errand. It is a plain answer, not
//! a redirect, because kube-apiserver's aggregation layer refuses to forward redirects from an
//! aggregated server by default. Only stores whose own signer makes URLs meant for clients (S3,
//! GCS, Azure) give links: the `file://` store's HMAC-signed URLs point at errand's blob
//! endpoint inside the cluster, which a client outside cannot reach, so those downloads stream
//! the bytes as without the parameter, and the client tells the two apart by the content type.

use super::status::Refusal;

/// The query parameter a client asks for a link with.
pub const PARAMETER: &str = "link";

/// How long a link's presigned URL lasts, in seconds, unless the signer allows less: long
/// enough to use it, short enough that a leaked URL is soon worthless.
pub const LIFETIME_SECONDS: i64 = 300;

/// How a download is delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// The bytes, streamed from the store through errand.
    Stream,
    /// A link: a presigned URL of the object.
    Link,
}

/// Whether the query asks for a link: `link=true` does, `link=false` or no such parameter
/// does not; any other value is a 400 that names the parameter.
pub fn asked(query: Option<&str>) -> Result<bool, Refusal> {
    let mut asked = false;
    for pair in query.unwrap_or_default().split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name != PARAMETER {
            continue;
        }
        asked = match value {
            "true" => true,
            "false" => false,
            other => {
                return Err(Refusal::bad_request(format!(
                    "query parameter {PARAMETER:?} must be true or false, not {other:?}"
                )));
            }
        };
    }
    Ok(asked)
}

/// How to deliver a download that `asked` for a link, as a HEAD (`head`) or not, when the
/// store can presign URLs for clients and the operator allows links (`links`).
pub fn delivery(asked: bool, head: bool, links: bool) -> Delivery {
    // A link is the answer to a GET only: a HEAD describes the bytes a GET without it streams.
    if asked && !head && links {
        Delivery::Link
    } else {
        Delivery::Stream
    }
}

/// How long a link's URL lasts with a signer whose URLs may last at most `max` seconds.
pub fn lifetime_seconds(max: Option<i64>) -> i64 {
    max.map_or(LIFETIME_SECONDS, |max| LIFETIME_SECONDS.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_link_true_asks_and_a_bad_value_names_the_parameter() {
        assert_eq!(asked(None), Ok(false));
        assert_eq!(asked(Some("")), Ok(false));
        assert_eq!(asked(Some("link=true")), Ok(true));
        assert_eq!(asked(Some("timeout=30s&link=true")), Ok(true));
        assert_eq!(asked(Some("link=false")), Ok(false));
        assert_eq!(asked(Some("links=true")), Ok(false));
        for bad in ["link", "link=", "link=1", "link=TRUE"] {
            let refusal = asked(Some(bad)).unwrap_err();
            assert_eq!(refusal.code, 400, "{bad}");
            let message = refusal.status.message.unwrap();
            assert!(
                message.starts_with("query parameter \"link\" must be true or false"),
                "{message}"
            );
        }
    }

    #[test]
    fn only_a_get_that_asks_on_a_store_that_gives_links_gets_one() {
        assert_eq!(delivery(true, false, true), Delivery::Link);
        for (asked, head, links) in [
            (false, false, true),
            (true, true, true),
            (true, false, false),
            (false, false, false),
        ] {
            assert_eq!(
                delivery(asked, head, links),
                Delivery::Stream,
                "asked {asked}, head {head}, links {links}"
            );
        }
    }

    #[test]
    fn the_url_lasts_five_minutes_or_less_if_the_signer_says_so() {
        assert_eq!(lifetime_seconds(None), 300);
        assert_eq!(lifetime_seconds(Some(7 * 24 * 3600)), 300);
        assert_eq!(lifetime_seconds(Some(60)), 60);
    }
}
