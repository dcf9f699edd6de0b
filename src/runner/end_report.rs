//! The run-ended report (issue 36, part 1): what the runner tells the controller once the results and the manifest are saved, and the pure checks the controller makes before it believes it.
//!
//! The report repeats the termination message ([`TerminationSummary`]) a few seconds before
//! the kubelet gets to publish it, with the time the agent ended. It carries the outcome only:
//! the state, the exit codes, the saved results' names, sizes and digests, and the same
//! bounded stderr tail the status shows on failure; never a URL, a token or an environment
//! value. Its body is untrusted ([`RunEndReport::parse`] bounds and checks it), and it is
//! believed only when the manifest saved in the store exists and says the same
//! ([`RunEndReport::check_manifest`]). The pod's own end is still observed afterwards and wins
//! where it disagrees (see `controller::execution::status`).
//!
//! The runner sends it to [`RUN_ENDED_ENDPOINT`] with the run's own bearer token from its
//! grants; the replica that checks it records it on the execution, sealed under the signing
//! key ([`RunEndReport::seal`]), and the reconciling replica believes only a seal it can verify
//! for that execution ([`RunEndReport::unseal`]): an annotation is something a tenant may edit.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::termination::{TERMINATION_MESSAGE_LIMIT, TerminationSummary};
use crate::api::ResultEntry;
use crate::resolve::run_tokens::RunTokens;
use crate::store::keys::{ExecutionId, ResultName};

/// The largest report body: a termination message plus the envelope.
pub const REPORT_BODY_LIMIT: usize = TERMINATION_MESSAGE_LIMIT + 1024;

/// Path of the controller's run-ended endpoint (the server side is `crate::serve::run_ended`).
pub const RUN_ENDED_ENDPOINT: &str = "/run-ended";

/// The largest manifest the check reads: a manifest lists a few results and the entries the
/// archives left out, well under this.
pub const MANIFEST_READ_LIMIT: usize = 1 << 20;

/// The run's end as the runner reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunEndReport {
    /// The execution the pod runs (the controller checks it against the pod's token).
    pub execution: ExecutionId,
    /// When the agent ended.
    pub finished_at: Timestamp,
    /// The exit code `run-agent` exits with once the report is answered: what the agent's
    /// container must end with for the pod to agree with the report.
    pub runner_exit_code: i32,
    /// How the run ended and what it saved, the manifest last, as the termination message says.
    pub summary: TerminationSummary,
}

/// Why a report is not believed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportRefusal {
    /// The body is not a report, or is larger than [`REPORT_BODY_LIMIT`].
    #[error("the report is not a run-ended report of at most {REPORT_BODY_LIMIT} bytes: {0}")]
    Malformed(String),
    /// The report lists no manifest: only a run whose runner saved the manifest itself (no
    /// extension follows) finishes early.
    #[error("the report lists no {}: the pod's end decides", ResultName::Manifest)]
    NoManifest,
    /// The manifest in the store does not say what the report says.
    #[error("the saved manifest does not match the report: {0}")]
    Mismatch(String),
}

/// A report as recorded on its execution, with its seal.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SealedReport {
    report: RunEndReport,
    seal: String,
}

/// The part of `manifest.json` the check reads.
#[derive(Deserialize)]
struct SavedManifest {
    execution: ExecutionId,
    results: Vec<ResultEntry>,
}

impl RunEndReport {
    /// The report in `body`, checked for size and shape: at most as many results as there are
    /// result names, each named by one, and a stderr tail no longer than a termination
    /// message.
    pub fn parse(body: &[u8]) -> Result<Self, ReportRefusal> {
        if body.len() > REPORT_BODY_LIMIT {
            return Err(ReportRefusal::Malformed(format!("{} bytes", body.len())));
        }
        let report: Self =
            serde_json::from_slice(body).map_err(|e| ReportRefusal::Malformed(e.to_string()))?;
        let results = &report.summary.results;
        if results.len() > ResultName::ALL.len() {
            return Err(ReportRefusal::Malformed(format!(
                "{} results, more than a run saves",
                results.len()
            )));
        }
        if let Some(unknown) = results
            .iter()
            .find(|r| !ResultName::ALL.iter().any(|n| n.as_str() == r.name))
        {
            return Err(ReportRefusal::Malformed(format!(
                "{:?} is not a result name",
                unknown.name
            )));
        }
        Ok(report)
    }

    /// The report as recorded on its execution: the report and its seal under `tokens`.
    pub fn seal(&self, tokens: &RunTokens) -> String {
        let report = serde_json::to_vec(self).expect("a report always serializes");
        let seal = tokens.seal(&report);
        let sealed = SealedReport {
            report: self.clone(),
            seal,
        };
        serde_json::to_string(&sealed).expect("a sealed report always serializes")
    }

    /// The report recorded as `recorded` on the execution with `execution_uid`, if its seal
    /// under `tokens` holds and it is that execution's; `None` for anything else (a tenant's
    /// edit, another execution's report copied over).
    pub fn unseal(recorded: &str, tokens: &RunTokens, execution_uid: &str) -> Option<Self> {
        let sealed: SealedReport = serde_json::from_str(recorded).ok()?;
        let report = serde_json::to_vec(&sealed.report).ok()?;
        (tokens.verify_seal(&report, &sealed.seal) && sealed.report.execution.uid == execution_uid)
            .then_some(sealed.report)
    }

    /// The report's entry of the manifest, if it lists one.
    pub fn manifest_entry(&self) -> Result<&ResultEntry, ReportRefusal> {
        self.summary
            .results
            .iter()
            .find(|r| r.name == ResultName::Manifest.as_str())
            .ok_or(ReportRefusal::NoManifest)
    }

    /// Checks the report against `manifest`, the bytes of the execution's saved
    /// `manifest.json`: their size and sha256 must be the report's entry of it, the manifest
    /// must belong to the report's execution, and it must list exactly the report's other
    /// results.
    pub fn check_manifest(&self, manifest: &[u8]) -> Result<(), ReportRefusal> {
        let entry = self.manifest_entry()?;
        let mismatch = |what: String| Err(ReportRefusal::Mismatch(what));
        let digest = hex::encode(Sha256::digest(manifest));
        if entry.size != manifest.len() as u64 || entry.sha256 != digest {
            return mismatch(format!(
                "the report says {} bytes with sha256 {}, the store holds {} bytes with sha256 \
                 {digest}",
                entry.size,
                entry.sha256,
                manifest.len()
            ));
        }
        let saved: SavedManifest = match serde_json::from_slice(manifest) {
            Ok(saved) => saved,
            Err(e) => return mismatch(format!("it is not a manifest: {e}")),
        };
        if saved.execution != self.execution {
            return mismatch("it belongs to another execution".into());
        }
        let reported: Vec<&ResultEntry> = self
            .summary
            .results
            .iter()
            .filter(|r| r.name != ResultName::Manifest.as_str())
            .collect();
        if reported != saved.results.iter().collect::<Vec<_>>() {
            return mismatch("it lists other results than the report".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::RunState;

    fn entry(name: &str, bytes: &[u8]) -> ResultEntry {
        ResultEntry {
            name: name.into(),
            size: bytes.len() as u64,
            sha256: hex::encode(Sha256::digest(bytes)),
        }
    }

    /// A saved manifest listing `output_workdir` and `run_result`, and a report that matches it.
    fn saved() -> (Vec<u8>, RunEndReport) {
        let listed = vec![entry("output_workdir", b"tar"), entry("run_result", b"{}")];
        let manifest = serde_json::to_vec(&serde_json::json!({
            "execution": ExecutionId::test(),
            "results": listed,
        }))
        .unwrap();
        let mut results = listed;
        results.push(entry(ResultName::Manifest.as_str(), &manifest));
        let report = RunEndReport {
            execution: ExecutionId::test(),
            finished_at: Timestamp::from_second(1_800_000_090).unwrap(),
            runner_exit_code: 0,
            summary: TerminationSummary {
                state: RunState::Succeeded,
                exit_code: Some(0),
                timed_out: false,
                stderr_tail: String::new(),
                results,
                results_error: None,
                gpu_devices: Vec::new(),
            },
        };
        (manifest, report)
    }

    #[test]
    fn a_report_round_trips_and_matches_the_manifest_it_lists() {
        let (manifest, report) = saved();
        let body = serde_json::to_vec(&report).unwrap();
        assert!(body.len() <= REPORT_BODY_LIMIT);
        let parsed = RunEndReport::parse(&body).unwrap();
        assert_eq!(parsed, report);
        assert_eq!(parsed.check_manifest(&manifest), Ok(()));
    }

    #[test]
    fn a_hostile_body_is_refused_saying_why() {
        let (_, report) = saved();
        let too_big = vec![b' '; REPORT_BODY_LIMIT + 1];
        assert!(matches!(
            RunEndReport::parse(&too_big),
            Err(ReportRefusal::Malformed(why)) if why.contains("bytes")
        ));
        assert!(matches!(
            RunEndReport::parse(b"{\"execution\":"),
            Err(ReportRefusal::Malformed(_))
        ));
        let mut extra = serde_json::to_value(&report).unwrap();
        extra["grants"] = serde_json::json!({"url": "http://x"});
        assert!(matches!(
            RunEndReport::parse(&serde_json::to_vec(&extra).unwrap()),
            Err(ReportRefusal::Malformed(why)) if why.contains("grants")
        ));
        let mut odd = report.clone();
        odd.summary.results[0].name = "../../etc/passwd".into();
        assert!(matches!(
            RunEndReport::parse(&serde_json::to_vec(&odd).unwrap()),
            Err(ReportRefusal::Malformed(why)) if why.contains("not a result name")
        ));
        let mut many = report;
        many.summary.results = vec![entry("run_result", b"{}"); ResultName::ALL.len() + 1];
        assert!(matches!(
            RunEndReport::parse(&serde_json::to_vec(&many).unwrap()),
            Err(ReportRefusal::Malformed(why)) if why.contains("more than a run saves")
        ));
    }

    #[test]
    fn only_a_sealed_report_of_the_same_execution_is_believed() {
        let (_, report) = saved();
        let tokens = RunTokens::run_ended(b"0123456789abcdef0123456789abcdef");
        let uid = report.execution.uid.clone();
        let recorded = report.seal(&tokens);
        assert_eq!(
            RunEndReport::unseal(&recorded, &tokens, &uid),
            Some(report.clone())
        );
        assert_eq!(
            RunEndReport::unseal(&recorded, &tokens, "another-uid"),
            None
        );
        let other_key = RunTokens::run_ended(b"another key, as long as the first one");
        assert_eq!(RunEndReport::unseal(&recorded, &other_key, &uid), None);
        let mut edited: serde_json::Value = serde_json::from_str(&recorded).unwrap();
        edited["report"]["runnerExitCode"] = 1.into();
        assert_eq!(
            RunEndReport::unseal(&edited.to_string(), &tokens, &uid),
            None
        );
        let unsealed = serde_json::json!({"report": report, "seal": ""});
        assert_eq!(
            RunEndReport::unseal(&unsealed.to_string(), &tokens, &uid),
            None
        );
        assert_eq!(RunEndReport::unseal("not json", &tokens, &uid), None);
    }

    #[test]
    fn a_report_the_manifest_does_not_back_is_not_believed() {
        let (manifest, report) = saved();
        let mut unlisted = report.clone();
        unlisted
            .summary
            .results
            .retain(|r| r.name != ResultName::Manifest.as_str());
        assert_eq!(
            unlisted.check_manifest(&manifest),
            Err(ReportRefusal::NoManifest)
        );
        let mut other_digest = manifest.clone();
        other_digest.push(b' ');
        assert!(matches!(
            report.check_manifest(&other_digest),
            Err(ReportRefusal::Mismatch(why)) if why.contains("the store holds")
        ));
        let mut claims_more = report.clone();
        claims_more
            .summary
            .results
            .insert(0, entry("output_artifacts", b"logs"));
        assert!(matches!(
            claims_more.check_manifest(&manifest),
            Err(ReportRefusal::Mismatch(why)) if why.contains("other results")
        ));
        let mut elsewhere = report;
        elsewhere.execution.uid = "another-uid".into();
        assert!(matches!(
            elsewhere.check_manifest(&manifest),
            Err(ReportRefusal::Mismatch(why)) if why.contains("another execution")
        ));
    }
}
