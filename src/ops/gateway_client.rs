//! The client of errand's gateway the commands use: where it is, the bearer token it is called with, and its errors as the commands report them.

use std::path::PathBuf;

use serde_json::Value;

use crate::ops::{Error, ErrorCode};

/// Where the gateway is and who calls it, as the `--gateway*` flags give it.
#[derive(Clone, Debug, Default)]
pub struct GatewayEndpoint {
    /// The gateway's base URL.
    pub url: Option<String>,
    /// The bearer token to call it with (else the kubeconfig user's token).
    pub token: Option<String>,
    /// A file holding the bearer token (surrounding whitespace ignored); it wins over `token`.
    pub token_file: Option<PathBuf>,
    /// A PEM file with the CA that signed the gateway's serving certificate.
    pub ca: Option<PathBuf>,
}

/// The token in `path`, trimmed; an error naming the flag when it cannot be read or is empty.
fn read_token(path: &std::path::Path) -> Result<String, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::argument(format!("--gateway-token-file {}: {e}", path.display())))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(Error::argument(format!(
            "--gateway-token-file {}: the file is empty",
            path.display()
        )));
    }
    Ok(token.to_owned())
}

/// A bearer token goes over plain `http://` only to this machine (a port-forward): anywhere
/// else anyone on the path reads it.
fn plain_http_only_to_loopback(url: &reqwest::Url) -> Result<(), Error> {
    if url.scheme() != "http" {
        return Ok(());
    }
    let loopback = match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    if loopback {
        return Ok(());
    }
    Err(Error::argument(format!(
        "--gateway {url}: a bearer token is not sent over plain http:// to another machine; \
         use the gateway's https:// URL (with --gateway-ca for its CA), or a port-forward to \
         http://localhost"
    )))
}

/// Requests to the gateway with one caller's token.
pub struct GatewayClient {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl GatewayClient {
    /// A client as `args` say, with `token` (the kubeconfig user's) when `args` name none.
    pub fn new(args: &GatewayEndpoint, token: Option<String>) -> Result<Self, Error> {
        let base = args.url.clone().ok_or_else(|| {
            Error::argument(
                "--gateway: the gateway's URL is required (or ERRAND_GATEWAY), e.g. after \
                 `kubectl port-forward -n errand-system svc/errand 9443:gateway`",
            )
        })?;
        let url = reqwest::Url::parse(&base)
            .map_err(|e| Error::argument(format!("--gateway {base:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::argument(format!(
                "--gateway {base:?}: the scheme must be http or https"
            )));
        }
        let from_file = match &args.token_file {
            Some(path) => Some(read_token(path)?),
            None => None,
        };
        let token = from_file.or(args.token.clone()).or(token).ok_or_else(|| {
            Error::argument(
                "--gateway-token: the gateway needs a bearer token and the kubeconfig's \
                     user has none (or ERRAND_GATEWAY_TOKEN)",
            )
        })?;
        plain_http_only_to_loopback(&url)?;
        let mut builder = reqwest::Client::builder();
        if let Some(path) = &args.ca {
            let pem = std::fs::read(path)
                .map_err(|e| Error::argument(format!("--gateway-ca {}: {e}", path.display())))?;
            let ca = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| Error::argument(format!("--gateway-ca {}: {e}", path.display())))?;
            builder = builder.add_root_certificate(ca);
        }
        let http = builder
            .build()
            .map_err(|e| Error::new(ErrorCode::Internal, format!("the HTTP client: {e}")))?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token: Some(token),
        })
    }

    /// A client of a gateway on this machine that asks for no token (the local backend's).
    pub fn local(base: String) -> Self {
        Self {
            http: reqwest::Client::new(),
            base,
            token: None,
        }
    }

    /// `POST path` with a JSON body; the JSON answer.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, Error> {
        let request = self
            .http
            .post(format!("{}{path}", self.base))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        self.send(request).await
    }

    /// `GET path`; the JSON answer.
    pub async fn get(&self, path: &str) -> Result<Value, Error> {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, Error> {
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let response = request.send().await.map_err(|e| {
            Error::new(
                ErrorCode::GatewayUnreachable,
                format!("the gateway at {}: {e}", self.base),
            )
        })?;
        let status = response.status();
        let text = response.text().await.map_err(|e| {
            Error::new(
                ErrorCode::GatewayError,
                format!("the gateway's answer: {e}"),
            )
        })?;
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            return Ok(body);
        }
        let message = body["error"]["message"]
            .as_str()
            .map_or_else(|| body.to_string(), str::to_owned);
        Err(Error::new(gateway_code(status.as_u16()), message))
    }
}

/// The command line's error code of a gateway refusal.
fn gateway_code(status: u16) -> ErrorCode {
    match status {
        400 | 413 => ErrorCode::InvalidArgument,
        401 => ErrorCode::Unauthorized,
        403 => ErrorCode::Forbidden,
        404 => ErrorCode::NotFound,
        503 => ErrorCode::NotReady,
        _ => ErrorCode::GatewayError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(url: &str) -> Result<(), Error> {
        plain_http_only_to_loopback(&reqwest::Url::parse(url).unwrap())
    }

    #[test]
    fn a_token_goes_over_plain_http_only_to_this_machine() {
        for url in [
            "http://localhost:9443",
            "http://127.0.0.1:1",
            "http://[::1]:8/",
            "https://gateway.example.com",
        ] {
            assert!(check(url).is_ok(), "{url}");
        }
        for url in ["http://gateway.example.com", "http://10.0.0.1:11443"] {
            let error = check(url).unwrap_err().to_string();
            assert!(error.contains("--gateway"), "{error}");
            assert!(error.contains("https://"), "{error}");
        }
    }

    #[test]
    fn a_token_file_is_read_trimmed_and_must_hold_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "  abc.def\n").unwrap();
        assert_eq!(read_token(&path).unwrap(), "abc.def");
        std::fs::write(&path, "\n").unwrap();
        assert!(
            read_token(&path)
                .unwrap_err()
                .to_string()
                .contains("--gateway-token-file")
        );
        assert!(read_token(&dir.path().join("none")).is_err());
    }
}
