//! `errand schema`: the JSON Schema of every answer the command line prints with `-o json`, generated from the Rust types the commands serialize.
//!
//! Each answer is `{schema_version, ok, type, <type>: payload}` ([`crate::cli::output::print_ok`]) or
//! the error answer ([`crate::cli::output::print_error`]). The schema is one choice over them, the
//! payload schemas generated with `schemars` and shared through `$defs`. A test checks every
//! answer the CLI prints in the test suites against it, so a new answer type that is missing
//! here fails.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Value, json};

use super::deploy::{DeploymentView, Redeployed, Undeployed};
use super::schedule::ScheduleView;
use crate::api::{Fileset, ResultEntry};
use crate::cli::answers::{
    AutomaticGcOff, Deleted, DeletedAll, DeletedObject, Downloaded, ExecutionView, Killed, Logs,
    PushedFilesetAnswer,
};
use crate::cli::output::SCHEMA_VERSION;
use crate::local::ObjectKind;
use crate::local::gc::GcReport;
use crate::ops::ErrorCode;
use crate::ops::Execution;
use crate::ops::backend::{Applied, DeadlineChanged};
use crate::resolve::Problem;
use crate::retention::sweep_store::SweepReport;

/// The body of an error answer, as [`super::output::print_error`] writes it: a stable `code`,
/// a message naming what is wrong, and at most one kind of detail.
#[derive(JsonSchema)]
#[allow(dead_code)] // Only its schema is used; print_error writes the same fields.
struct ErrorBody {
    /// Stable machine-readable code (`invalid_spec`, `not_found`, `invalid_state`, ...): one of
    /// [`ErrorCode`]'s values, each with a fixed exit code.
    code: Code,
    /// What is wrong, naming the field.
    message: String,
    /// Each problem of an invalid spec, with its field path.
    problems: Option<Vec<Problem>>,
    /// The record of a run that did not succeed (`execution_failed`).
    execution: Option<ExecutionView>,
    /// The API server's causes of a refusal.
    causes: Option<Vec<Value>>,
    /// Each document `apply` refused.
    refused: Option<Vec<Value>>,
    /// The deployment that failed (`deployment_failed`).
    deployment: Option<super::deploy::DeploymentView>,
}

/// An error answer's code: one of the codes errand gives today, listed with what each means;
/// a reader still accepts a code it does not know, which a newer errand may give.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)] // Only its schema is used.
enum Code {
    Known(ErrorCode),
    Other(String),
}

/// One successful answer type: its `type` and its payload's schema.
fn answer<T: JsonSchema>(generator: &mut SchemaGenerator, kind: &str) -> Value {
    let payload = generator.subschema_for::<T>();
    envelope(kind, true, payload.to_value())
}

fn envelope(kind: &str, ok: bool, payload: Value) -> Value {
    json!({
        "type": "object",
        "required": ["schema_version", "ok", "type", kind],
        "properties": {
            "schema_version": {"const": SCHEMA_VERSION},
            "ok": {"const": ok},
            "type": {"const": kind},
            kind: payload,
        },
    })
}

/// The JSON Schema (draft 2020-12) of every answer.
pub fn answers_schema() -> Value {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    let g = &mut generator;
    let mut answers = vec![
        answer::<ExecutionView>(g, "execution"),
        answer::<Vec<Execution>>(g, "executions"),
        answer::<Logs>(g, "logs"),
        answer::<Vec<ResultEntry>>(g, "results"),
        answer::<Downloaded>(g, "download"),
        answer::<Deleted>(g, "deleted"),
        answer::<DeletedObject>(g, "deleted"),
        answer::<DeletedAll>(g, "deleted_all"),
        answer::<Killed>(g, "killed"),
        answer::<DeadlineChanged>(g, "deadline"),
        answer::<Vec<Applied>>(g, "applied"),
        answer::<Option<Applied>>(g, "created"),
        answer::<PushedFilesetAnswer>(g, "fileset"),
        answer::<Vec<Fileset>>(g, "filesets"),
        answer::<GcReport>(g, "gc"),
        answer::<AutomaticGcOff>(g, "gc"),
        answer::<SweepReport>(g, "sweep"),
        answer::<DeploymentView>(g, "deployment"),
        answer::<Vec<DeploymentView>>(g, "deployments"),
        answer::<Undeployed>(g, "undeployed"),
        answer::<Redeployed>(g, "redeployed"),
        answer::<ScheduleView>(g, "schedule"),
        answer::<Vec<ScheduleView>>(g, "schedules"),
    ];
    // The gateway's answers, as the agent server and the gateway give them.
    for kind in ["invoke", "chat", "sessions"] {
        answers.push(envelope(kind, true, json!({"type": "object"})));
    }
    // The catalog lists are the objects as stored (an Agent's config keeps unknown fields).
    let catalog = [
        ObjectKind::Agent,
        ObjectKind::Environment,
        ObjectKind::Runtime,
        ObjectKind::Extension,
    ];
    for kind in catalog {
        answers.push(envelope(
            kind.plural(),
            true,
            json!({"type": "array", "items": {"type": "object"}}),
        ));
    }
    let error = generator.subschema_for::<ErrorBody>().to_value();
    answers.push(envelope("error", false, error));
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "errand answers",
        "description": "Every answer of `errand ... -o json`: exactly one of these objects.",
        "anyOf": answers,
        "$defs": generator.take_definitions(true),
    })
}
