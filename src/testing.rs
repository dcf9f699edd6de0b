//! Fixtures for the unit tests, built in one place: the calculator Agent, the `prod`
//! environment that binds its model key, the namespace's catalog, an execution of the
//! calculator, its resolved snapshot, the reference to its snapshot ConfigMap and where its
//! results go. Each starts from a `test()` constructor and is varied with `with_*` methods
//! (controller-rs's builder style), so a test states only what it changes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;
use serde_json::{Value, json};

use crate::api::{
    AgentConfig, AgentDeployment, AgentDeploymentSpec, AgentEnvironmentSpec, AgentExecution,
    AgentExecutionSpec, AgentExecutionStatus, AgentExtensionSpec, AgentSpec, ArtifactMount,
    Compute, FilesetStatus, Reference, RuntimeContainer, RuntimeSecurity, SnapshotRef, Workdir,
};
use crate::resolve::{InMemoryCatalog, Problem, Snapshot, resolve_execution};
use crate::store::keys::ExecutionId;

/// The namespace every fixture lives in.
pub const NS: &str = "team-a";
/// The uid of [`AgentExecution::test`].
pub const UID: &str = "0d9f6a52-1111-2222-3333-444455556666";
/// The value of the `model-keys` Secret's `openai` key, which must never leave the Secret.
pub const SECRET_VALUE: &str = "sk-very-secret-value";

/// The digest of a pushed Fileset whose 64 hex digits are all `digit`.
pub fn fileset_digest(digit: char) -> String {
    format!("sha256:{}", digit.to_string().repeat(64))
}

/// The status of a Fileset pushed with [`fileset_digest`]`(digit)`.
pub fn pushed(digit: char) -> FilesetStatus {
    FilesetStatus {
        digest: Some(fileset_digest(digit)),
        ..FilesetStatus::default()
    }
}

/// A working directory: Fileset reference `base` with `(ref, mountPath)` mounts.
pub fn workdir(base: &str, mounts: &[(&str, &str)]) -> Workdir {
    Workdir {
        base: Some(base.into()),
        artifact_mounts: mounts
            .iter()
            .map(|(fileset_ref, mount_path)| ArtifactMount {
                fileset_ref: (*fileset_ref).into(),
                mount_path: (*mount_path).into(),
            })
            .collect(),
    }
}

impl AgentSpec {
    /// The calculator: `python3 /agent/calculator.py` on `errand.local/calculator:dev`, an
    /// `agents-spec-v1` config with provider `openai`, a default model whose key is
    /// `OPENAI_API_KEY`, and `PRECISION=2`.
    pub fn test() -> Self {
        let config = json!({
            "config_format": "agents-spec-v1", "name": "calculator", "provider": "openai",
            "models": {"default": {"provider": "openai", "model": "gpt-4o", "api_key_env": "OPENAI_API_KEY"}},
            "env": {"PRECISION": "2"},
        });
        Self {
            runtime: Some(RuntimeContainer {
                image: "errand.local/calculator:dev".into(),
                command: vec!["python3".into(), "/agent/calculator.py".into()],
                ..RuntimeContainer::default()
            }),
            config: AgentConfig(config.as_object().expect("an object").clone()),
        }
    }

    /// With arguments after the command.
    pub fn with_args(mut self, args: &[&str]) -> Self {
        self.runtime.get_or_insert_default().args = args.iter().map(|a| (*a).to_owned()).collect();
        self
    }

    /// With the agent's own choice of user.
    pub fn with_security(mut self, security: Option<RuntimeSecurity>) -> Self {
        self.runtime.get_or_insert_default().security_context = security;
        self
    }

    /// With the config's `field` set to `value`.
    pub fn with_config(mut self, field: &str, value: Value) -> Self {
        self.config.0.insert(field.into(), value);
        self
    }

    /// Without the config's `field`.
    pub fn without_config(mut self, field: &str) -> Self {
        self.config.0.remove(field);
        self
    }
}

impl AgentEnvironmentSpec {
    /// `prod`: binds `OPENAI_API_KEY` to Secret `model-keys`, key `openai`.
    pub fn test() -> Self {
        Self::default().with_secrets(&[("OPENAI_API_KEY", "model-keys#openai")])
    }

    /// With exactly these `(variable, secret[#key])` bindings.
    pub fn with_secrets(mut self, bindings: &[(&str, &str)]) -> Self {
        self.overlay.secrets = bindings
            .iter()
            .map(|(env, target)| ((*env).to_owned(), (*target).to_owned()))
            .collect();
        self
    }

    /// With a plain environment variable.
    pub fn with_env(mut self, name: &str, value: &str) -> Self {
        self.overlay.env.insert(name.into(), value.into());
        self
    }

    /// With this compute.
    pub fn with_compute(mut self, compute: Compute) -> Self {
        self.compute = compute;
        self
    }

    /// With the overlay's `provider`.
    pub fn with_provider(mut self, provider: &str) -> Self {
        self.overlay.provider = Some(provider.into());
        self
    }
}

impl InMemoryCatalog {
    /// Namespace [`NS`] holding Agent `calculator` ([`AgentSpec::test`]), AgentEnvironment
    /// `prod` ([`AgentEnvironmentSpec::test`]), Secret `model-keys` with key `openai`
    /// ([`SECRET_VALUE`]), and Filesets `repo` (pushed, digest `a…`), `data` (pushed, `b…`)
    /// and `empty` (never pushed).
    pub fn test() -> Self {
        Self::default()
            .with_agent(NS, "calculator", AgentSpec::test())
            .with_environment(NS, "prod", AgentEnvironmentSpec::test())
            .with_secret(NS, "model-keys", &[("openai", SECRET_VALUE)])
            .with_fileset(NS, "repo", pushed('a'))
            .with_fileset(NS, "data", pushed('b'))
            .with_fileset(NS, "empty", FilesetStatus::default())
            .with_extension("analysis", AgentExtensionSpec::test())
    }
}

impl AgentExtensionSpec {
    /// Kind `analysis`: the test extension image, saving `analysis-report`, with a config
    /// schema of one optional integer `depth` and nothing else.
    pub fn test() -> Self {
        serde_json::from_value(json!({
            "extensionKind": "analysis",
            "image": "errand.local/test-extension:test",
            "command": ["/bin/sh", "-c", "analyse"],
            "results": ["analysis-report"],
            "configSchema": {
                "type": "object",
                "properties": {"depth": {"type": "integer", "minimum": 1}},
                "additionalProperties": false,
            },
        }))
        .expect("the test extension is valid")
    }
}

impl AgentExecutionSpec {
    /// The calculator asked "What is 12 multiplied by 8?" in environment `prod`, with the
    /// default timeouts.
    pub fn test() -> Self {
        Self {
            agent_ref: Some(Reference::named("calculator")),
            input: "What is 12 multiplied by 8?".into(),
            environment_ref: Some(Reference::named("prod")),
            ..Self::default()
        }
    }

    /// With a working directory (see [`workdir`]).
    pub fn with_workdir(mut self, base: &str, mounts: &[(&str, &str)]) -> Self {
        self.workdir = Some(workdir(base, mounts));
        self
    }

    /// With these run and start timeouts.
    pub fn with_timeouts(mut self, timeout_seconds: i64, start_timeout_seconds: i64) -> Self {
        self.timeout_seconds = timeout_seconds;
        self.start_timeout_seconds = Some(start_timeout_seconds);
        self
    }

    /// Submitted to a Kueue queue, or not.
    pub fn with_queue(mut self, queue: Option<&str>) -> Self {
        self.queue_name = queue.map(str::to_owned);
        self
    }
}

impl AgentExecution {
    /// Execution `calc` of [`AgentExecutionSpec::test`] in [`NS`], uid [`UID`], generation 1,
    /// no status yet.
    pub fn test() -> Self {
        Self {
            metadata: ObjectMeta {
                name: Some("calc".into()),
                namespace: Some(NS.into()),
                uid: Some(UID.into()),
                generation: Some(1),
                ..ObjectMeta::default()
            },
            spec: AgentExecutionSpec::test(),
            status: None,
        }
    }

    /// With this spec.
    pub fn with_spec(mut self, spec: AgentExecutionSpec) -> Self {
        self.spec = spec;
        self
    }

    /// Created at `time`.
    pub fn with_creation_timestamp(mut self, time: Time) -> Self {
        self.metadata.creation_timestamp = Some(time);
        self
    }

    /// With this status.
    pub fn with_status(mut self, status: Option<AgentExecutionStatus>) -> Self {
        self.status = status;
        self
    }
}

impl AgentDeploymentSpec {
    /// The calculator served in environment `prod`, one replica, the default port and probe.
    pub fn test() -> Self {
        Self {
            agent_ref: Some(Reference::named("calculator")),
            environment_ref: Some(Reference::named("prod")),
            ..Self::default()
        }
    }
}

impl AgentDeployment {
    /// Deployment `calc` of [`AgentDeploymentSpec::test`] in [`NS`], uid [`UID`], generation 1,
    /// no status yet.
    pub fn test() -> Self {
        let mut deployment = AgentDeployment::new("calc", AgentDeploymentSpec::test());
        deployment.metadata.namespace = Some(NS.into());
        deployment.metadata.uid = Some(UID.into());
        deployment.metadata.generation = Some(1);
        deployment
    }
}

impl ExecutionId {
    /// Where the results of [`AgentExecution::test`] go.
    pub fn test() -> Self {
        Self {
            namespace: NS.into(),
            name: "calc".into(),
            uid: UID.into(),
        }
    }
}

/// The fields `problems` name, in order: what a validation test compares first.
pub fn fields(problems: &[Problem]) -> Vec<&str> {
    problems.iter().map(|p| p.field.as_str()).collect()
}

/// Asserts that `problem`'s message says `text`, showing the whole message when it does not.
#[track_caller]
pub fn assert_says(problem: &Problem, text: &str) {
    assert!(
        problem.message.contains(text),
        "{}: {:?} does not say {text:?}",
        problem.field,
        problem.message
    );
}

impl crate::api::Egress {
    /// Rules of `(cidr, ports)`.
    pub fn of(rules: &[(&str, &[u16])]) -> Self {
        Self {
            allow: rules
                .iter()
                .map(|(cidr, ports)| crate::api::EgressRule {
                    cidr: (*cidr).to_owned(),
                    ports: ports.to_vec(),
                })
                .collect(),
            hosts: Vec::new(),
        }
    }

    /// These rules and host rules of `(host, ports)`.
    pub fn with_hosts(mut self, hosts: &[(&str, &[u16])]) -> Self {
        self.hosts = hosts
            .iter()
            .map(|(host, ports)| crate::api::EgressHost {
                host: (*host).to_owned(),
                ports: ports.to_vec(),
            })
            .collect();
        self
    }
}

impl Snapshot {
    /// [`AgentExecutionSpec::test`] with workdir `repo` and `data#tables/` mounted at `data`,
    /// resolved against [`InMemoryCatalog::test`].
    pub fn test() -> Self {
        let spec = AgentExecutionSpec::test().with_workdir("repo", &[("data#tables/", "data")]);
        resolve_execution(NS, &spec, &InMemoryCatalog::test()).expect("the fixture resolves")
    }
}

impl SnapshotRef {
    /// The snapshot ConfigMap of [`AgentExecution::test`] (`errand-calc-snapshot`), with a
    /// placeholder digest.
    pub fn test() -> Self {
        Self {
            config_map: "errand-calc-snapshot".into(),
            digest: "sha256:00".into(),
        }
    }
}
