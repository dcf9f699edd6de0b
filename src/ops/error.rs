//! The error of an operation: a stable [`ErrorCode`], a message naming what is wrong, and optional structured detail.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::local::files::ObjectFilesError;
use crate::local::{ManifestError, ReadManifestError, RecordError};
use crate::resolve::InvalidSpec;
use crate::store::StoreError;

/// The stable machine-readable code of a failed operation, as `-o json` answers name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// An execution ran and did not succeed.
    ExecutionFailed,
    /// A deployment failed to become ready.
    DeploymentFailed,
    /// The spec breaks a rule; the problems name the fields.
    InvalidSpec,
    /// Bad command-line input.
    InvalidArgument,
    /// A manifest that is too large, not text, or not valid YAML.
    InvalidManifest,
    /// More input on stdin than an input may hold.
    StdinTooLarge,
    /// No object by that name; the message names the ones there are (or says there are none
    /// yet and how to make one).
    NotFound,
    /// A name prefix that matches more than one object.
    AmbiguousName,
    /// An object by that name is there already.
    AlreadyExists,
    /// The execution has finished already.
    AlreadyFinished,
    /// The object is not in a state that allows the change.
    InvalidState,
    /// The object is not ready yet.
    NotReady,
    /// The backend does not offer the operation.
    NotSupported,
    /// The operation exists only with the local backend.
    LocalOnly,
    /// No answer in the time allowed.
    Timeout,
    /// Reading or writing a local file failed.
    IoError,
    /// The local store failed.
    StoreError,
    /// The cluster's result store cannot be reached.
    StoreUnreachable,
    /// A download whose content does not match its digest.
    CorruptDownload,
    /// The cluster refused or failed a request.
    ClusterError,
    /// The cluster cannot be reached.
    ClusterUnreachable,
    /// The request was not authenticated.
    Unauthorized,
    /// The request is not allowed.
    Forbidden,
    /// The request is larger than allowed.
    TooLarge,
    /// The configuration (kubeconfig, settings) is not usable.
    InvalidConfig,
    /// The gateway refused or failed a request.
    GatewayError,
    /// The gateway cannot be reached.
    GatewayUnreachable,
    /// The controller stopped.
    ControllerStopped,
    /// The MCP server failed.
    McpError,
    /// A failure of errand itself.
    Internal,
}

impl ErrorCode {
    /// The code as answers spell it (`not_found`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ExecutionFailed => "execution_failed",
            Self::DeploymentFailed => "deployment_failed",
            Self::InvalidSpec => "invalid_spec",
            Self::InvalidArgument => "invalid_argument",
            Self::InvalidManifest => "invalid_manifest",
            Self::StdinTooLarge => "stdin_too_large",
            Self::NotFound => "not_found",
            Self::AmbiguousName => "ambiguous_name",
            Self::AlreadyExists => "already_exists",
            Self::AlreadyFinished => "already_finished",
            Self::InvalidState => "invalid_state",
            Self::NotReady => "not_ready",
            Self::NotSupported => "not_supported",
            Self::LocalOnly => "local_only",
            Self::Timeout => "timeout",
            Self::IoError => "io_error",
            Self::StoreError => "store_error",
            Self::StoreUnreachable => "store_unreachable",
            Self::CorruptDownload => "corrupt_download",
            Self::ClusterError => "cluster_error",
            Self::ClusterUnreachable => "cluster_unreachable",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::TooLarge => "too_large",
            Self::InvalidConfig => "invalid_config",
            Self::GatewayError => "gateway_error",
            Self::GatewayUnreachable => "gateway_unreachable",
            Self::ControllerStopped => "controller_stopped",
            Self::McpError => "mcp_error",
            Self::Internal => "internal",
        }
    }

    /// The process exit code of a failure with this code: 1 a run that failed, 2 bad input,
    /// 3 nothing (or more than one thing) by that name, 4 anything else.
    pub fn exit_code(self) -> i32 {
        match self {
            Self::ExecutionFailed | Self::DeploymentFailed => 1,
            Self::InvalidSpec
            | Self::InvalidArgument
            | Self::InvalidManifest
            | Self::StdinTooLarge => 2,
            Self::NotFound | Self::AmbiguousName => 3,
            Self::AlreadyExists
            | Self::AlreadyFinished
            | Self::InvalidState
            | Self::NotReady
            | Self::NotSupported
            | Self::LocalOnly
            | Self::Timeout
            | Self::IoError
            | Self::StoreError
            | Self::StoreUnreachable
            | Self::CorruptDownload
            | Self::ClusterError
            | Self::ClusterUnreachable
            | Self::Unauthorized
            | Self::Forbidden
            | Self::TooLarge
            | Self::InvalidConfig
            | Self::GatewayError
            | Self::GatewayUnreachable
            | Self::ControllerStopped
            | Self::McpError
            | Self::Internal => 4,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A failed operation: a stable code, a message that names what is wrong, and an exit code.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    /// Stable machine-readable code, for example `invalid_spec` or `not_found`.
    pub code: ErrorCode,
    /// What is wrong.
    pub message: String,
    /// Extra structured detail (problems of an invalid spec, the record of a failed run).
    pub details: Option<(&'static str, Value)>,
}

impl Error {
    /// A failure with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: None,
        }
    }

    /// Bad command-line input.
    pub fn argument(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    /// A manifest file given with `flag` that could not be read: a path that cannot be opened
    /// is a bad argument; a file too large or not text is a bad manifest.
    pub fn manifest_file(flag: &str, error: ReadManifestError) -> Self {
        match error {
            ReadManifestError::Unreadable { .. } => Self::argument(format!("{flag} {error}")),
            _ => Self::new(ErrorCode::InvalidManifest, format!("{flag} {error}")),
        }
    }

    /// Packing the directory `dir` for a push failed: a tree errand cannot take whole is a bad
    /// argument, naming the directory and the entry.
    pub fn packing(dir: &std::path::Path, error: crate::archive::ArchiveError) -> Self {
        let code = if error.refuses_input() {
            ErrorCode::InvalidArgument
        } else {
            ErrorCode::StoreError
        };
        Self::new(code, format!("{}: {error}", dir.display()))
    }

    /// Pushing the directory `dir` to a store failed: a packing refusal as [`Error::packing`],
    /// anything else as the store's failure.
    pub fn pushing(dir: &std::path::Path, error: StoreError) -> Self {
        match error {
            StoreError::Archive(error) => Self::packing(dir, error),
            error => Self::from(error),
        }
    }

    /// The process exit code of this failure.
    pub fn exit_code(&self) -> i32 {
        self.code.exit_code()
    }
}

impl From<InvalidSpec> for Error {
    fn from(error: InvalidSpec) -> Self {
        let problems = serde_json::to_value(&error.problems).expect("problems always serialize");
        Self {
            code: ErrorCode::InvalidSpec,
            message: error.to_string(),
            details: Some(("problems", problems)),
        }
    }
}

impl From<StoreError> for Error {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Archive(error) if error.refuses_input() => {
                Self::new(ErrorCode::InvalidArgument, error.to_string())
            }
            error => Self::new(ErrorCode::StoreError, error.to_string()),
        }
    }
}

impl From<RecordError> for Error {
    fn from(error: RecordError) -> Self {
        let code = match error {
            RecordError::NotFound(..) => ErrorCode::NotFound,
            RecordError::AlreadyExists(..) => ErrorCode::AlreadyExists,
            RecordError::Io { .. } => ErrorCode::IoError,
        };
        Self::new(code, error.to_string())
    }
}

impl From<ObjectFilesError> for Error {
    fn from(error: ObjectFilesError) -> Self {
        let code = match error {
            ObjectFilesError::NotFound { .. } => ErrorCode::NotFound,
            ObjectFilesError::AlreadyExists { .. } => ErrorCode::AlreadyExists,
            ObjectFilesError::Io { .. } => ErrorCode::IoError,
        };
        Self::new(code, error.to_string())
    }
}

impl From<ManifestError> for Error {
    fn from(error: ManifestError) -> Self {
        Self::new(ErrorCode::InvalidManifest, error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_serializes_as_it_is_spelled() {
        let json = serde_json::to_value(ErrorCode::StdinTooLarge).unwrap();
        assert_eq!(json, "stdin_too_large");
        assert_eq!(ErrorCode::NotFound.to_string(), "not_found");
    }

    #[test]
    fn as_str_spells_each_code_as_serde_does() {
        let schema = schemars::schema_for!(ErrorCode).to_value();
        // Each code with its doc comment: `oneOf` of `{const, description}`.
        let names: Vec<&Value> = schema["oneOf"]
            .as_array()
            .expect("one choice per code")
            .iter()
            .map(|choice| &choice["const"])
            .collect();
        assert_eq!(names.len(), 30);
        for name in names {
            let code: ErrorCode = serde_json::from_value(name.clone()).unwrap();
            assert_eq!(code.as_str(), name.as_str().unwrap());
        }
    }

    #[test]
    fn exit_codes_group_the_codes() {
        assert_eq!(ErrorCode::ExecutionFailed.exit_code(), 1);
        assert_eq!(ErrorCode::StdinTooLarge.exit_code(), 2);
        assert_eq!(ErrorCode::AmbiguousName.exit_code(), 3);
        assert_eq!(ErrorCode::Timeout.exit_code(), 4);
    }
}
