//! Typed rejections: every problem names the field path and the offending value, and all are reported at once.

use std::fmt;

/// One thing wrong with a submitted execution.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Problem {
    /// Path of the offending field, for example `spec.workdir.artifactMounts[0].mountPath`.
    pub field: String,
    /// What is wrong, quoting the offending value.
    pub message: String,
}

impl Problem {
    /// A problem at `field`: `message` is a refusal's text or a typed refusal (a rule's
    /// error), kept as its message.
    pub fn new(field: impl Into<String>, message: impl fmt::Display) -> Self {
        Self {
            field: field.into(),
            message: message.to_string(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// Every problem found in one execution; resolution never stops at the first.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct InvalidSpec {
    /// The problems, in the order the spec was walked.
    pub problems: Vec<Problem>,
}

impl InvalidSpec {
    /// The problems as one message about an object of `kind` (`AgentExecution`,
    /// `AgentExtension`).
    pub fn describe(&self, kind: &str) -> String {
        let n = self.problems.len();
        let problems: Vec<String> = self.problems.iter().map(Problem::to_string).collect();
        format!(
            "invalid {kind} ({n} problem{}): {}",
            if n == 1 { "" } else { "s" },
            problems.join("; ")
        )
    }
}

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe("AgentExecution"))
    }
}

/// Collects problems while a spec is walked.
#[derive(Debug, Default)]
pub(crate) struct Problems(Vec<Problem>);

impl Problems {
    pub(crate) fn push(&mut self, field: impl Into<String>, message: impl fmt::Display) {
        self.0.push(Problem::new(field, message));
    }

    pub(crate) fn extend(&mut self, more: impl IntoIterator<Item = Problem>) {
        self.0.extend(more);
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems found so far as an error.
    pub(crate) fn into_error(self) -> InvalidSpec {
        InvalidSpec { problems: self.0 }
    }

    /// `resolution` with the problems found so far added before its own.
    pub(crate) fn finish_with<T>(
        mut self,
        resolution: Result<T, InvalidSpec>,
    ) -> Result<T, InvalidSpec> {
        match resolution {
            Ok(value) => self.finish(value),
            Err(invalid) => {
                self.extend(invalid.problems);
                Err(self.into_error())
            }
        }
    }

    /// `Ok(value)` when nothing was found, else every problem.
    pub(crate) fn finish<T>(self, value: T) -> Result<T, InvalidSpec> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(InvalidSpec { problems: self.0 })
        }
    }
}
