//! Whether a download is answered with a redirect to the store's presigned URL of the object instead of its bytes: the `redirect` query parameter, the store, the method, and how long the URL lasts. Pure.
//!
//! A client that asks with `redirect=true` gets `307 Temporary Redirect` to a short-lived
//! presigned GET URL of exactly the object it was authorized to read, so the bytes come
//! straight from the object store instead of through the API server and errand. Only stores
//! whose own signer makes URLs meant for clients (S3, GCS, Azure) redirect: the `file://`
//! store's HMAC-signed URLs point at errand's blob endpoint inside the cluster, which a
//! client outside cannot reach, so those downloads stream as without the parameter.

use super::status::Refusal;

/// The query parameter a client asks for a redirect with.
pub const PARAMETER: &str = "redirect";

/// How long a redirect's presigned URL lasts, in seconds, unless the signer allows less: long
/// enough to follow it, short enough that a leaked URL is soon worthless.
pub const LIFETIME_SECONDS: i64 = 300;

/// How a download is delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// The bytes, streamed from the store through errand.
    Stream,
    /// A redirect to a presigned URL of the object.
    Redirect,
}

/// Whether the query asks for a redirect: `redirect=true` does, `redirect=false` or no such
/// parameter does not; any other value is a 400 that names the parameter.
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

/// How to deliver a download that was `asked` to redirect, as a HEAD (`head`) or not, when
/// the store can presign URLs for clients (`presigns`) and the operator allows redirects.
pub fn delivery(asked: bool, head: bool, presigns: bool) -> Delivery {
    // A HEAD has no body to move elsewhere: its headers are the answer.
    if asked && !head && presigns {
        Delivery::Redirect
    } else {
        Delivery::Stream
    }
}

/// How long a redirect's URL lasts with a signer whose URLs may last at most `max` seconds.
pub fn lifetime_seconds(max: Option<i64>) -> i64 {
    max.map_or(LIFETIME_SECONDS, |max| LIFETIME_SECONDS.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_redirect_true_asks_and_a_bad_value_names_the_parameter() {
        assert_eq!(asked(None), Ok(false));
        assert_eq!(asked(Some("")), Ok(false));
        assert_eq!(asked(Some("redirect=true")), Ok(true));
        assert_eq!(asked(Some("timeout=30s&redirect=true")), Ok(true));
        assert_eq!(asked(Some("redirect=false")), Ok(false));
        assert_eq!(asked(Some("redirects=true")), Ok(false));
        for bad in ["redirect", "redirect=", "redirect=1", "redirect=TRUE"] {
            let refusal = asked(Some(bad)).unwrap_err();
            assert_eq!(refusal.code, 400, "{bad}");
            let message = refusal.status.message.unwrap();
            assert!(
                message.starts_with("query parameter \"redirect\" must be true or false"),
                "{message}"
            );
        }
    }

    #[test]
    fn only_a_get_that_asks_on_a_presigning_store_is_redirected() {
        assert_eq!(delivery(true, false, true), Delivery::Redirect);
        for (asked, head, presigns) in [
            (false, false, true),
            (true, true, true),
            (true, false, false),
            (false, false, false),
        ] {
            assert_eq!(
                delivery(asked, head, presigns),
                Delivery::Stream,
                "asked {asked}, head {head}, presigns {presigns}"
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
