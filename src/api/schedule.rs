//! The `AgentSchedule` resource: executions created from a template on a cron schedule, with CronJob's semantics.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::execution::AgentExecutionSpec;

/// The longest schedule name: `<name>-<minutes since the epoch>` stays a 63-character label.
pub const MAX_SCHEDULE_NAME: usize = 52;
/// The successful executions a schedule keeps when it sets no limit.
pub const DEFAULT_SUCCESSFUL_HISTORY: i32 = 3;
/// The failed (or cancelled) executions a schedule keeps when it sets no limit.
pub const DEFAULT_FAILED_HISTORY: i32 = 1;

/// Executions of one template, created on a cron schedule.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "errand.dev",
    version = "v1alpha1",
    kind = "AgentSchedule",
    doc = "Executions of one template, created on a cron schedule with the semantics of a Kubernetes CronJob.",
    namespaced,
    status = "AgentScheduleStatus",
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 52").message("metadata.name must be a DNS label (lowercase letters, digits and '-', starting with a letter) of at most 52 characters: it names the executions <name>-<minutes since the epoch>"),
    shortname = "asched",
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(name = "TimeZone", type_ = "string", json_path = ".spec.timeZone"),
    printcolumn(name = "Suspend", type_ = "boolean", json_path = ".spec.suspend"),
    printcolumn(name = "Active", type_ = "integer", json_path = ".status.activeCount"),
    printcolumn(name = "Last Schedule", type_ = "date", json_path = ".status.lastScheduleTime"),
    printcolumn(name = "Next", type_ = "date", json_path = ".status.nextScheduleTime"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.message",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AgentScheduleSpec {
    /// When to run, as a cron expression: five fields (minute hour day-of-month month
    /// day-of-week, with names, ranges, lists and steps) or `@hourly`, `@daily`, `@weekly`,
    /// `@monthly`, `@yearly`.
    #[schemars(length(min = 1, max = 256))]
    pub schedule: String,
    /// The IANA time zone the schedule's wall times are in (for example `Europe/Berlin`);
    /// UTC when not set. A wall time the zone skips fires as far past the jump; a repeated
    /// one fires once, at its first occurrence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub time_zone: Option<String>,
    /// What each run is: the AgentExecution it creates. Checked at create by the same rules
    /// as an execution, so a schedule that could never run is refused.
    pub execution_template: ExecutionTemplate,
    /// What to do when a run is due while an earlier one has not ended: `Allow` it, `Forbid`
    /// it (the due run waits, and is missed past `startingDeadlineSeconds`), or `Replace`
    /// (cancel the running one first).
    #[serde(default)]
    pub concurrency_policy: ConcurrencyPolicy,
    /// How late a run may start after its scheduled time (after a controller outage, or
    /// while `Forbid` holds it) before it counts as missed. Without it, a late run always
    /// starts; either way at most one catch-up run starts, for the latest missed time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub starting_deadline_seconds: Option<i64>,
    /// Stops creating runs; runs that started go on. Times missed while suspended count as
    /// missed (subject to `startingDeadlineSeconds`) when it is resumed.
    #[serde(default)]
    pub suspend: bool,
    /// Succeeded executions to keep (the oldest beyond are deleted with their results).
    #[serde(default = "default_successful_history")]
    #[schemars(range(min = 0, max = 1000))]
    pub successful_executions_history_limit: i32,
    /// Failed or cancelled executions to keep (the oldest beyond are deleted with their
    /// results).
    #[serde(default = "default_failed_history")]
    #[schemars(range(min = 0, max = 1000))]
    pub failed_executions_history_limit: i32,
}

fn default_successful_history() -> i32 {
    DEFAULT_SUCCESSFUL_HISTORY
}

fn default_failed_history() -> i32 {
    DEFAULT_FAILED_HISTORY
}

/// The execution each run creates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionTemplate {
    /// Labels and annotations the executions carry (besides errand's own).
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,
    /// The AgentExecution's spec. `rerunOf`, `cancel`, `kill`, `held` and `deadline` are not
    /// taken here: each run is a fresh execution of the template.
    #[schemars(schema_with = "template_spec_schema")]
    pub spec: AgentExecutionSpec,
}

/// Labels and annotations of the executions a schedule creates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TemplateMetadata {
    /// Labels every execution carries.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations every execution carries.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl TemplateMetadata {
    fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// The execution spec's schema without its transition rules (those that read `oldSelf` keep
/// an execution's spec immutable; a template may change).
fn template_spec_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<AgentExecutionSpec>();
    if let Some(reference) = schema.get("$ref").and_then(|r| r.as_str()) {
        let name = reference.rsplit('/').next().unwrap_or_default().to_owned();
        if let Some(definition) = generator.definitions().get(&name).cloned() {
            schema = schemars::Schema::try_from(definition).unwrap_or(schema);
        }
    }
    if let Some(rules) = schema
        .get_mut("x-kubernetes-validations")
        .and_then(|r| r.as_array_mut())
    {
        rules.retain(|rule| {
            !rule["rule"]
                .as_str()
                .is_some_and(|text| text.contains("oldSelf"))
        });
    }
    schema
}

/// What a schedule does with a due run while an earlier one has not ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConcurrencyPolicy {
    /// Runs overlap.
    #[default]
    Allow,
    /// The due run waits until none is active (missed past `startingDeadlineSeconds`).
    Forbid,
    /// The active runs are cancelled and the due one starts.
    Replace,
}

/// Observed state of a schedule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentScheduleStatus {
    /// The scheduled time of the latest run created (or, when the starting deadline passed,
    /// counted as missed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When the latest run that succeeded ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
    /// The next scheduled time; none while suspended or when the expression never fires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// The executions of this schedule that have not ended, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active: Vec<String>,
    /// How many executions have not ended (`active`'s length, for the printer column).
    #[serde(default)]
    pub active_count: i32,
    /// Standard conditions: `Ready` (False with reason `InvalidSchedule` or `Suspended`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// A short human message: why the schedule does not run, or what it last skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
