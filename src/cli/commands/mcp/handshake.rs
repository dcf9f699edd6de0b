//! The MCP session's order, kept in front of `rmcp`: a request the server does not serve, or one out of order, gets a JSON-RPC error and the server serves on.
//!
//! `rmcp` ends the session when the first request is not `initialize`, so a client that
//! negotiates first (the MCP Python SDK's `mcp.Client` probes `server/discover`, and falls back
//! to `initialize` on an error) would never connect. [`Handshake`] wraps the transport: before
//! `initialize` it answers every other request (`ping` aside, which the lifecycle allows) and
//! drops notifications and responses; after it, a second `initialize` is refused; an unknown
//! method is `-32601` at any time. `rmcp` negotiates the version itself: it echoes the
//! client's version when it knows it, and answers with its own latest otherwise.

use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestMethod, CancelTaskMethod, ClientJsonRpcMessage, ClientRequest,
    CompleteRequestMethod, ConstString, ErrorCode, ErrorData, GetPromptRequestMethod,
    GetTaskInfoMethod, GetTaskResultMethod, InitializeResultMethod, ListPromptsRequestMethod,
    ListResourceTemplatesRequestMethod, ListResourcesRequestMethod, ListTasksMethod,
    ListToolsRequestMethod, PingRequestMethod, ReadResourceRequestMethod, ServerJsonRpcMessage,
    SetLevelRequestMethod, SubscribeRequestMethod, UnsubscribeRequestMethod,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

/// The protocol's client requests. `rmcp` reads one whose params it cannot read as a custom
/// request: its method is known, its params are wrong.
const PROTOCOL_METHODS: [&str; 17] = [
    InitializeResultMethod::VALUE,
    PingRequestMethod::VALUE,
    CompleteRequestMethod::VALUE,
    SetLevelRequestMethod::VALUE,
    GetPromptRequestMethod::VALUE,
    ListPromptsRequestMethod::VALUE,
    ListResourcesRequestMethod::VALUE,
    ListResourceTemplatesRequestMethod::VALUE,
    ReadResourceRequestMethod::VALUE,
    SubscribeRequestMethod::VALUE,
    UnsubscribeRequestMethod::VALUE,
    CallToolRequestMethod::VALUE,
    ListToolsRequestMethod::VALUE,
    GetTaskInfoMethod::VALUE,
    ListTasksMethod::VALUE,
    GetTaskResultMethod::VALUE,
    CancelTaskMethod::VALUE,
];

/// What the session does with one message from the client.
#[derive(Debug, PartialEq)]
enum Admission {
    /// `rmcp` serves it.
    Serve,
    /// Answered here with this error; `rmcp` never sees it.
    Refuse(ErrorData),
    /// Dropped: a notification or response before the session exists.
    Drop,
}

/// The decision for `message`, in a session `initialized` or not.
fn admit(initialized: bool, message: &ClientJsonRpcMessage) -> Admission {
    let ClientJsonRpcMessage::Request(request) = message else {
        return if initialized {
            Admission::Serve
        } else {
            Admission::Drop
        };
    };
    let method = request.request.method();
    match (&request.request, initialized) {
        (ClientRequest::CustomRequest(_), _) if PROTOCOL_METHODS.contains(&method) => {
            Admission::Refuse(ErrorData::invalid_params(
                format!("{method}: its params are not the protocol's"),
                None,
            ))
        }
        (ClientRequest::CustomRequest(_), _) => Admission::Refuse(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("method not found: {method}"),
            None,
        )),
        (ClientRequest::InitializeRequest(_), true) => Admission::Refuse(
            ErrorData::invalid_request("initialize: the session is already initialized", None),
        ),
        (ClientRequest::InitializeRequest(_) | ClientRequest::PingRequest(_), false)
        | (_, true) => Admission::Serve,
        (_, false) => Admission::Refuse(ErrorData::invalid_request(
            format!("{method} before initialize: a session starts with initialize"),
            None,
        )),
    }
}

/// A server transport that keeps the session's order (see the module's doc).
pub struct Handshake<T> {
    inner: T,
    initialized: bool,
}

impl<T> Handshake<T> {
    /// `inner`, before `initialize`.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            initialized: false,
        }
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Handshake<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    /// The next message `rmcp` serves. The only await is the inner receive (`rmcp` drops this
    /// future when it has something to send), so a refusal is sent from a task of its own.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let message = self.inner.receive().await?;
            match admit(self.initialized, &message) {
                Admission::Serve => {
                    if let ClientJsonRpcMessage::Request(request) = &message {
                        self.initialized |=
                            matches!(request.request, ClientRequest::InitializeRequest(_));
                    }
                    return Some(message);
                }
                Admission::Refuse(error) => {
                    let id = match message {
                        ClientJsonRpcMessage::Request(request) => Some(request.id),
                        _ => None,
                    };
                    let refusal = self.inner.send(ServerJsonRpcMessage::error(error, id));
                    tokio::spawn(async move {
                        if let Err(error) = refusal.await {
                            tracing::warn!(%error, "answering a refused MCP request");
                        }
                    });
                }
                Admission::Drop => {}
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::{Admission, admit};
    use rmcp::model::{ClientJsonRpcMessage, ErrorCode};
    use serde_json::json;

    fn message(value: serde_json::Value) -> ClientJsonRpcMessage {
        serde_json::from_value(value).unwrap()
    }

    fn initialize() -> ClientJsonRpcMessage {
        message(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
        )
    }

    fn refusal(admission: Admission) -> (ErrorCode, String) {
        match admission {
            Admission::Refuse(error) => (error.code, error.message.into_owned()),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn before_initialize_only_initialize_and_ping_are_served() {
        let discover = message(json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover"}));
        assert_eq!(
            refusal(admit(false, &discover)),
            (
                ErrorCode::METHOD_NOT_FOUND,
                "method not found: server/discover".to_owned()
            )
        );
        let list = message(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        assert_eq!(
            refusal(admit(false, &list)),
            (
                ErrorCode::INVALID_REQUEST,
                "tools/list before initialize: a session starts with initialize".to_owned()
            )
        );
        let initialized = message(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(admit(false, &initialized), Admission::Drop);
        let ping = message(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}));
        assert_eq!(admit(false, &ping), Admission::Serve);
        assert_eq!(admit(false, &initialize()), Admission::Serve);
    }

    #[test]
    fn after_initialize_unknown_methods_and_a_second_initialize_are_refused() {
        let unknown = message(json!({"jsonrpc": "2.0", "id": 4, "method": "no/such"}));
        assert_eq!(
            refusal(admit(true, &unknown)).0,
            ErrorCode::METHOD_NOT_FOUND
        );
        assert_eq!(
            refusal(admit(true, &initialize())),
            (
                ErrorCode::INVALID_REQUEST,
                "initialize: the session is already initialized".to_owned()
            )
        );
        let list = message(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}));
        assert_eq!(admit(true, &list), Admission::Serve);
        let call =
            message(json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {}}));
        assert_eq!(
            refusal(admit(true, &call)),
            (
                ErrorCode::INVALID_PARAMS,
                "tools/call: its params are not the protocol's".to_owned()
            )
        );
        let note = message(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(admit(true, &note), Admission::Serve);
    }
}
