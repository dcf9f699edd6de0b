//! Refusals as Kubernetes `Status` objects, the way the API server and every aggregated server answer: the HTTP code, a machine-readable reason, a message that names what was wrong, and the object it was about.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};

use crate::api::data::DATA_GROUP;

/// A refusal, rendered as a `Status` body with its HTTP code.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The HTTP status code.
    pub code: u16,
    /// The `Status` object (boxed: a refusal travels in every `Err`).
    pub status: Box<Status>,
}

/// What a refusal is about: a resource of the data API and an object name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject<'a> {
    /// The resource (`agentexecutions`, `filesets`, `agentexecutions/results`, ...).
    pub resource: &'a str,
    /// The object's name.
    pub name: &'a str,
}

impl Refusal {
    /// A refusal with `code`, `reason` and `message`, about `subject` when given.
    pub fn new(
        code: u16,
        reason: &str,
        message: impl Into<String>,
        subject: Option<Subject<'_>>,
    ) -> Self {
        let details = subject.map(|s| StatusDetails {
            group: Some(DATA_GROUP.to_owned()),
            kind: Some(s.resource.to_owned()),
            name: Some(s.name.to_owned()),
            ..StatusDetails::default()
        });
        Refusal {
            code,
            status: Box::new(Status {
                code: Some(i32::from(code)),
                details,
                message: Some(message.into()),
                reason: Some(reason.to_owned()),
                status: Some("Failure".to_owned()),
                ..Status::default()
            }),
        }
    }

    /// 400: the request itself is unusable.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Refusal::new(400, "BadRequest", message, None)
    }

    /// 401: the request did not come from the aggregation layer with a user.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Refusal::new(401, "Unauthorized", message, None)
    }

    /// 404 for a path this API does not serve.
    pub fn no_such_path(path: &str) -> Self {
        Refusal::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
            None,
        )
    }

    /// 404 about an object or a result.
    pub fn not_found(subject: Subject<'_>, message: impl Into<String>) -> Self {
        Refusal::new(404, "NotFound", message, Some(subject))
    }

    /// 405: the path is served, the method is not.
    pub fn method_not_allowed(method: &str, allowed: &str) -> Self {
        Refusal::new(
            405,
            "MethodNotAllowed",
            format!("{method} is not supported here; use {allowed}"),
            None,
        )
    }

    /// 413: an upload larger than the server accepts.
    pub fn too_large(subject: Subject<'_>, message: impl Into<String>) -> Self {
        Refusal::new(413, "RequestEntityTooLarge", message, Some(subject))
    }

    /// 416: a byte range outside the object.
    pub fn range_not_satisfiable(size: u64) -> Self {
        Refusal::new(
            416,
            "RequestedRangeNotSatisfiable",
            format!("the requested range is outside the object's {size} bytes"),
            None,
        )
    }

    /// 422: content the server refuses, with the offending part (an archive entry) as a cause.
    pub fn invalid(
        subject: Subject<'_>,
        message: impl Into<String>,
        field: Option<String>,
    ) -> Self {
        let mut refusal = Refusal::new(422, "Invalid", message, Some(subject));
        if let (Some(field), Some(details)) = (field, refusal.status.details.as_mut()) {
            details.causes = Some(vec![StatusCause {
                field: Some(field),
                message: refusal.status.message.clone(),
                reason: Some("FieldValueForbidden".to_owned()),
            }]);
        }
        refusal
    }

    /// 500: something on errand's side failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Refusal::new(500, "InternalError", message, None)
    }

    /// 503: errand cannot serve yet (the front proxy's CA is not loaded).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Refusal::new(503, "ServiceUnavailable", message, None)
    }

    /// The JSON body.
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&self.status).expect("a Status serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_a_status_object_naming_what_it_is_about() {
        let refusal = Refusal::not_found(
            Subject {
                resource: "agentexecutions/results",
                name: "calc",
            },
            "no such result",
        );
        let json: serde_json::Value = serde_json::from_slice(&refusal.body()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "apiVersion": "v1", "kind": "Status", "metadata": {},
                "status": "Failure", "code": 404, "reason": "NotFound",
                "message": "no such result",
                "details": {"group": "data.errand.dev", "kind": "agentexecutions/results", "name": "calc"},
            })
        );
        assert_eq!(refusal.code, 404);
    }

    #[test]
    fn an_invalid_upload_names_the_entry_as_its_cause() {
        let subject = Subject {
            resource: "filesets",
            name: "src",
        };
        let refusal = Refusal::invalid(
            subject.clone(),
            "entry \"../x\" is refused",
            Some("../x".into()),
        );
        let causes = refusal.status.details.unwrap().causes.unwrap();
        assert_eq!(causes[0].field.as_deref(), Some("../x"));
        assert_eq!(refusal.code, 422);
        assert_eq!(Refusal::too_large(subject, "too large").code, 413);
    }
}
