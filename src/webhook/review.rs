//! The admission decision for AgentExecutions, AgentDeployments, AgentSchedules and AgentExtensions as pure functions of the AdmissionReview: what to check, and the response that reports it.
//!
//! A create is resolved against the live objects it names (the caller does the lookups and
//! hands the outcome to [`verdict`]); an update of an execution only needs the old and new
//! objects, because the only change allowed after creation is `cancel` going from false to
//! true. Cancelling is never re-resolved: an execution must stay cancellable after its Agent
//! is gone. A deployment resolves as an execution with nothing to run once
//! ([`crate::resolve::as_execution_spec`]); an update is resolved again only when it changes
//! the agent or environment (a redeploy), so a refused redeploy leaves the running one as it was.
//! A schedule's create and every change of its spec check its timing
//! ([`crate::resolve::schedule::check`]) and resolve its template as an execution's create.

use kube::core::DynamicObject;
use kube::core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, ConvertAdmissionReviewError, Operation,
};
use kube::core::response::{Status, StatusCause, StatusDetails};

use crate::api::{
    AgentDeployment, AgentExecution, AgentExecutionSpec, AgentExtension, AgentSchedule,
};
use crate::resolve::{InvalidSpec, Problem, RunLimits, Snapshot};

/// Why a request body could not be read as an AdmissionReview.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The body is not an `admission.k8s.io/v1` AdmissionReview.
    #[error("the body is not an AdmissionReview: {0}")]
    Malformed(#[source] serde_json::Error),
    /// The review carries no request.
    #[error("the AdmissionReview carries no request")]
    NoRequest(#[source] ConvertAdmissionReviewError),
}

/// Reads the body the API server posts.
pub fn parse(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, ReviewError> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(ReviewError::Malformed)?;
    review.try_into().map_err(ReviewError::NoRequest)
}

/// The kind of object a review is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reviewed {
    /// An AgentExecution.
    Execution,
    /// An AgentDeployment.
    Deployment,
    /// An AgentSchedule (its execution template is what is resolved).
    Schedule,
}

impl Reviewed {
    /// The kind a request is about, from its `kind`.
    fn of(request: &AdmissionRequest<DynamicObject>) -> Self {
        match request.kind.kind.as_str() {
            "AgentDeployment" => Reviewed::Deployment,
            "AgentSchedule" => Reviewed::Schedule,
            _ => Reviewed::Execution,
        }
    }

    /// What the object is called in a message.
    const fn noun(self) -> &'static str {
        match self {
            Reviewed::Execution => "execution",
            Reviewed::Deployment => "deployment",
            Reviewed::Schedule => "schedule",
        }
    }
}

/// What to do with a request.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Resolve this spec in this namespace against the live objects, then call [`verdict`].
    Resolve {
        /// What is reviewed.
        kind: Reviewed,
        /// The namespace the object is created in.
        namespace: String,
        /// The submitted spec (a deployment's as [`crate::resolve::as_execution_spec`]).
        spec: Box<AgentExecutionSpec>,
    },
    /// Decided without any lookup.
    Decided(Verdict),
}

/// The outcome of a review.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Admit the request.
    Allow,
    /// Refuse it: the spec has these problems.
    Invalid(InvalidSpec),
    /// Refuse it: the object could not be read.
    Malformed(String),
    /// Refuse it: the objects it names could not be checked (the API server failed us).
    Unavailable(String),
}

/// Decides what a request needs.
pub fn step(request: &AdmissionRequest<DynamicObject>) -> Step {
    if request.sub_resource.is_some() {
        // Only the main resource is registered; status writes are the controller's own.
        return Step::Decided(Verdict::Allow);
    }
    match Reviewed::of(request) {
        Reviewed::Deployment => return deployment_step(request),
        Reviewed::Schedule => return schedule_step(request),
        Reviewed::Execution => {}
    }
    if request.kind.kind == "AgentExtension" {
        return Step::Decided(match request.operation {
            Operation::Create | Operation::Update => check_extension(request.object.as_ref()),
            Operation::Delete | Operation::Connect => Verdict::Allow,
        });
    }
    match request.operation {
        Operation::Create => match execution(request.object.as_ref(), "object") {
            Ok(execution) => Step::Resolve {
                kind: Reviewed::Execution,
                namespace: request
                    .namespace
                    .clone()
                    .or(execution.metadata.namespace)
                    .unwrap_or_default(),
                spec: Box::new(execution.spec),
            },
            Err(message) => Step::Decided(Verdict::Malformed(message.to_string())),
        },
        Operation::Update => {
            let old = execution(request.old_object.as_ref(), "oldObject");
            let new = execution(request.object.as_ref(), "object");
            match (old, new) {
                (Ok(old), Ok(new)) => Step::Decided(check_update(&old.spec, &new.spec)),
                (Err(message), _) | (_, Err(message)) => {
                    Step::Decided(Verdict::Malformed(message.to_string()))
                }
            }
        }
        Operation::Delete | Operation::Connect => Step::Decided(Verdict::Allow),
    }
}

/// A deployment's create, and an update that changes its agent or environment, are resolved.
fn deployment_step(request: &AdmissionRequest<DynamicObject>) -> Step {
    let new = decoded::<AgentDeployment>(request.object.as_ref(), "object", "AgentDeployment");
    let resolve = |deployment: AgentDeployment| Step::Resolve {
        kind: Reviewed::Deployment,
        namespace: request
            .namespace
            .clone()
            .or(deployment.metadata.namespace)
            .unwrap_or_default(),
        spec: Box::new(crate::resolve::as_execution_spec(&deployment.spec)),
    };
    match request.operation {
        Operation::Create => match new {
            Ok(deployment) => resolve(deployment),
            Err(message) => Step::Decided(Verdict::Malformed(message.to_string())),
        },
        Operation::Update => {
            let old = decoded::<AgentDeployment>(
                request.old_object.as_ref(),
                "oldObject",
                "AgentDeployment",
            );
            match (old, new) {
                (Ok(old), Ok(new))
                    if crate::resolve::source_digest(&old.spec)
                        == crate::resolve::source_digest(&new.spec) =>
                {
                    Step::Decided(Verdict::Allow)
                }
                (Ok(_), Ok(new)) => resolve(new),
                (Err(message), _) | (_, Err(message)) => {
                    Step::Decided(Verdict::Malformed(message.to_string()))
                }
            }
        }
        Operation::Delete | Operation::Connect => Step::Decided(Verdict::Allow),
    }
}

/// A schedule's create or update: its timing is checked here, then its template is resolved
/// as an execution's create would be.
fn schedule_step(request: &AdmissionRequest<DynamicObject>) -> Step {
    match request.operation {
        Operation::Create | Operation::Update => {
            match decoded::<AgentSchedule>(request.object.as_ref(), "object", "AgentSchedule") {
                Ok(schedule) => {
                    match crate::resolve::schedule::check(&schedule.spec, jiff::Timestamp::now()) {
                        Ok(_) => Step::Resolve {
                            kind: Reviewed::Schedule,
                            namespace: request
                                .namespace
                                .clone()
                                .or(schedule.metadata.namespace)
                                .unwrap_or_default(),
                            spec: Box::new(schedule.spec.execution_template.spec),
                        },
                        Err(invalid) => Step::Decided(Verdict::Invalid(invalid)),
                    }
                }
                Err(message) => Step::Decided(Verdict::Malformed(message.to_string())),
            }
        }
        Operation::Delete | Operation::Connect => Step::Decided(Verdict::Allow),
    }
}

/// An AgentExtension (created or changed) must declare valid result names, none of errand's
/// own, and a config schema of the subset errand checks; running executions keep the
/// definition they were admitted with.
fn check_extension(object: Option<&DynamicObject>) -> Verdict {
    match decoded::<AgentExtension>(object, "object", "AgentExtension") {
        Ok(extension) => {
            let problems = crate::resolve::check_extension(&extension.spec);
            if problems.is_empty() {
                Verdict::Allow
            } else {
                Verdict::Invalid(InvalidSpec { problems })
            }
        }
        Err(message) => Verdict::Malformed(message.to_string()),
    }
}

fn execution(
    object: Option<&DynamicObject>,
    field: &str,
) -> Result<AgentExecution, MalformedObject> {
    decoded(object, field, "AgentExecution")
}

fn decoded<K: serde::de::DeserializeOwned>(
    object: Option<&DynamicObject>,
    field: &str,
    kind: &str,
) -> Result<K, MalformedObject> {
    let object = object.ok_or_else(|| MalformedObject::Missing {
        field: field.to_owned(),
    })?;
    let value = serde_json::to_value(object).map_err(|source| MalformedObject::Encode {
        field: field.to_owned(),
        source,
    })?;
    crate::resolve::decode(value).map_err(|problem| MalformedObject::NotKind {
        field: field.to_owned(),
        kind: kind.to_owned(),
        problem,
    })
}

/// Why an object of a review (its `object` or `oldObject`) cannot be read as its kind.
#[derive(Debug, thiserror::Error)]
enum MalformedObject {
    /// The request carries no such object.
    #[error("the request has no {field}")]
    Missing { field: String },
    /// The object does not encode as JSON.
    #[error("{field}: {source}")]
    Encode {
        field: String,
        source: serde_json::Error,
    },
    /// The object is not a valid object of its kind.
    #[error("{field} is not a valid {kind}: {problem}")]
    NotKind {
        field: String,
        kind: String,
        problem: Problem,
    },
}

/// An update may only set `cancel` and `kill` (from false to true), clear `held`, and change
/// `deadline` until a cancel; the CRD's CEL rules say the same, and this holds even where they
/// were relaxed.
pub fn check_update(old: &AgentExecutionSpec, new: &AgentExecutionSpec) -> Verdict {
    let mut problems = Vec::new();
    let fixed = |spec: &AgentExecutionSpec| AgentExecutionSpec {
        cancel: false,
        kill: false,
        held: false,
        deadline: None,
        ..spec.clone()
    };
    if fixed(old) != fixed(new) {
        problems.push(Problem::new(
            "spec",
            "is immutable except cancel; delete and re-create the execution to change it",
        ));
    }
    if old.cancel && !new.cancel {
        problems.push(Problem::new(
            "spec.cancel",
            "true cannot change back to false",
        ));
    }
    if old.kill && !new.kill {
        problems.push(Problem::new(
            "spec.kill",
            "true cannot change back to false",
        ));
    }
    if new.kill && !new.cancel {
        problems.push(Problem::new(
            "spec.kill",
            "needs cancel: a kill is a cancel without the grace period",
        ));
    }
    if new.held && !old.held {
        problems.push(Problem::new(
            "spec.held",
            "can only be set when the execution is created",
        ));
    }
    if old.cancel && old.deadline != new.deadline {
        problems.push(Problem::new(
            "spec.deadline",
            "cannot change after a cancel: termination began",
        ));
    }
    if problems.is_empty() {
        Verdict::Allow
    } else {
        Verdict::Invalid(InvalidSpec { problems })
    }
}

/// The verdict on a create of `spec` from its resolution and the cluster's `limits` (the same
/// check the controller makes before it creates anything), with the rules that hold only at
/// creation. A deployment runs nothing once, so only its resolution and its egress ranges
/// count.
pub fn verdict(
    kind: Reviewed,
    spec: &AgentExecutionSpec,
    resolution: Result<Snapshot, InvalidSpec>,
    limits: &RunLimits,
) -> Verdict {
    if kind == Reviewed::Deployment {
        return match resolution.and_then(|snapshot| limits.check_egress(&snapshot)) {
            Ok(()) => Verdict::Allow,
            Err(invalid) => Verdict::Invalid(invalid),
        };
    }
    let checked = resolution.and_then(|snapshot| limits.check(&snapshot).map(|()| snapshot));
    match crate::resolve::admit_creation(spec, checked) {
        Ok(_) => Verdict::Allow,
        Err(invalid) if kind == Reviewed::Schedule => {
            Verdict::Invalid(crate::resolve::schedule::in_template(invalid))
        }
        Err(invalid) => Verdict::Invalid(invalid),
    }
}

/// The AdmissionReview that answers `request` with `verdict`. A refusal carries one cause per
/// problem (field path and message), the way the API server reports its own validation.
pub fn respond(
    request: &AdmissionRequest<DynamicObject>,
    verdict: Verdict,
) -> AdmissionReview<DynamicObject> {
    let response = AdmissionResponse::from(request);
    let (status, causes) = match verdict {
        Verdict::Allow => return response.into_review(),
        Verdict::Invalid(invalid) => {
            let causes = invalid
                .problems
                .iter()
                .map(|p| StatusCause {
                    reason: "FieldValueInvalid".to_owned(),
                    message: p.message.clone(),
                    field: p.field.clone(),
                })
                .collect();
            (
                Status::failure(&invalid.describe(&request.kind.kind), "Invalid").with_code(422),
                causes,
            )
        }
        Verdict::Malformed(message) => (
            Status::failure(&message, "BadRequest").with_code(400),
            vec![],
        ),
        Verdict::Unavailable(message) => (
            Status::failure(
                &format!(
                    "could not check the objects the {} names: {message}",
                    Reviewed::of(request).noun()
                ),
                "ServiceUnavailable",
            )
            .with_code(503),
            vec![],
        ),
    };
    let mut response = response.deny(&status.message);
    response.result = status.with_details(StatusDetails {
        name: request.name.clone(),
        group: crate::api::GROUP.to_owned(),
        kind: request.kind.kind.clone(),
        uid: String::new(),
        causes,
        retry_after_seconds: 0,
    });
    response.into_review()
}

/// The answer to a body that is not an AdmissionReview at all.
pub fn unreadable(error: &ReviewError) -> AdmissionReview<DynamicObject> {
    AdmissionResponse::invalid(error).into_review()
}

#[cfg(test)]
mod tests;
