//! The Helm chart without a cluster: `helm lint` is clean and `helm template` renders what an operator of a production cluster expects (least-privilege RBAC, restricted pods, a fail-closed webhook kept off errand's own namespace).
//!
//! Needs `helm` on PATH (`hack/test.sh` puts the one it builds there). Without it the tests
//! skip loudly, unless `ERRAND_CLUSTER_TESTS=1`, which makes a missing helm a failure.

use std::path::PathBuf;
use std::process::Command;

use crate::support::cluster;
use serde_json::Value;

fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("charts/errand")
}

/// Runs helm with `args`; `None` (after a loud message) when helm is not installed.
fn helm(args: &[&str]) -> Option<std::process::Output> {
    match Command::new("helm").args(args).output() {
        Ok(output) => Some(output),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            assert!(
                !cluster::cluster_required(),
                "{}=1 but helm is not on PATH (hack/test.sh puts it there)",
                cluster::REQUIRED_ENV
            );
            eprintln!("!!!!!!!! SKIPPING CHART TEST: helm is not on PATH !!!!!!!!");
            None
        }
        Err(e) => panic!("running helm: {e}"),
    }
}

/// The objects `helm template` renders with these `--set` values.
fn render(sets: &[&str]) -> Option<Vec<Value>> {
    let chart = chart();
    let mut args = vec![
        "template",
        "errand",
        chart.to_str().unwrap(),
        "--namespace",
        "errand-system",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let output = helm(&args)?;
    assert!(
        output.status.success(),
        "helm template {sets:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    Some(documents.into_iter().filter(|d| !d.is_null()).collect())
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Every rule of every Role and ClusterRole that covers `resource`.
fn rules_for<'a>(objects: &'a [Value], resource: &str) -> Vec<(&'a str, &'a Value)> {
    objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        .flat_map(|role| {
            let kind = role["kind"].as_str().unwrap();
            role["rules"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |rule| (kind, rule))
        })
        .filter(|(_, rule)| strings(&rule["resources"]).contains(&resource))
        .collect()
}

#[test]
fn helm_lint_is_clean() {
    let chart = chart();
    for sets in [
        vec![],
        vec![
            "webhook.certManager.enabled=true",
            "controller.watchNamespaces={team-a,team-b}",
        ],
        vec![
            "store.url=s3://results/errand",
            "store.credentialsSecret=store-credentials",
        ],
    ] {
        let mut args = vec!["lint", "--strict", chart.to_str().unwrap()];
        for set in &sets {
            args.extend(["--set", set]);
        }
        let Some(output) = helm(&args) else { return };
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "helm lint {sets:?}:\n{text}");
        assert!(
            !text.contains("[WARNING]") && !text.contains("[ERROR]"),
            "{text}"
        );
    }
}

#[test]
fn the_values_schema_refuses_bad_values() {
    let chart = chart();
    for bad in [
        "store.url=ftp://results",
        "webhook.timeoutSeconds=60",
        "image.pullPolicy=Sometimes",
        "controller.unknownSetting=1",
        "controller.ttlSecondsAfterFinished=-1",
        "controller.ttlSecondsAfterFinished=31622401",
        "agentPods.workspaceSizeLimit=20GB",
        "controller.storeSweep.interval=6y",
        "agentPods.serviceAccountName=Agents",
        "agentPods.imagePullSecrets[0].name=bad/name",
        "controller.extraction.maxBytes=0",
        "controller.extraction.maxEntries=lots",
        "controller.maxGrantLifetimeSeconds=-1",
        "controller.serverLimits.headerReadTimeoutSeconds=0",
        "controller.serverLimits.maxConnections=0",
        "controller.serverLimits.maxResultBytes=lots",
        "runtimes.deepagents.image=runner:1",
        "monitoring.serviceMonitor.interval=soon",
        "monitoring.prometheusRule.severity=page",
        "monitoring.prometheusRule.stuckStartingSeconds=5",
        "telemetry.otlpEndpoint=otel-collector:4318",
        "telemetry.unknown=1",
    ] {
        let Some(output) = helm(&["template", "errand", chart.to_str().unwrap(), "--set", bad])
        else {
            return;
        };
        assert!(!output.status.success(), "{bad} was accepted");
        assert!(
            String::from_utf8_lossy(&output.stderr)
                .contains("values don't meet the specifications of the schema"),
            "{bad}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn rbac_has_no_wildcards_and_secrets_are_only_read_by_get() {
    let Some(objects) = render(&[]) else { return };
    for role in of_kind(&objects, "ClusterRole")
        .into_iter()
        .chain(of_kind(&objects, "Role"))
    {
        for rule in role["rules"].as_array().unwrap() {
            for field in ["apiGroups", "resources", "verbs", "resourceNames"] {
                assert!(
                    !strings(&rule[field]).contains(&"*"),
                    "{} has a wildcard in {field}: {rule}",
                    role["metadata"]["name"]
                );
            }
        }
    }
    for (kind, rule) in rules_for(&objects, "secrets") {
        let verbs = strings(&rule["verbs"]);
        assert!(
            !verbs.contains(&"list") && !verbs.contains(&"watch"),
            "Secrets must never be listed or watched: {rule}"
        );
        if kind == "ClusterRole" {
            assert_eq!(verbs, ["get"], "the controller writes no Secret: {rule}");
        } else if verbs.contains(&"update") {
            assert_eq!(
                strings(&rule["resourceNames"]),
                ["errand-serving-tls"],
                "renewals are limited to the serving certificate's own Secret: {rule}"
            );
        }
    }
    let (kind, review_rule) = rules_for(&objects, "tokenreviews").pop().unwrap();
    assert_eq!(
        (kind, strings(&review_rule["verbs"])),
        ("ClusterRole", vec!["create"]),
        "the grant endpoint reviews pod tokens"
    );
    let (_, lease_rule) = rules_for(&objects, "leases").pop().unwrap();
    assert_eq!(strings(&lease_rule["verbs"]), ["get", "update"]);
    assert_eq!(strings(&lease_rule["resourceNames"]), ["errand-controller"]);
    let (_, webhook_rule) = rules_for(&objects, "validatingwebhookconfigurations")
        .pop()
        .expect("a rule to keep the CA bundle");
    assert_eq!(
        strings(&webhook_rule["resourceNames"]),
        ["errand-errand-system"]
    );
}

#[test]
fn opted_in_namespaces_get_a_role_each_instead_of_a_cluster_role() {
    let Some(objects) = render(&[
        "controller.watchNamespaces={team-b,team-a}",
        "controller.watchNamespaces={team-a,team-b}",
    ]) else {
        return;
    };
    let controller_roles = |kind: &str| -> Vec<&Value> {
        of_kind(&objects, kind)
            .into_iter()
            .filter(|r| {
                r["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .ends_with("-controller")
            })
            .collect()
    };
    assert!(
        controller_roles("ClusterRole").is_empty(),
        "opted-in namespaces need no ClusterRole of the controller's namespaced rights"
    );
    let namespace_of =
        |object: &&Value| object["metadata"]["namespace"].as_str().map(str::to_owned);
    let roles = controller_roles("Role");
    let mut role_namespaces: Vec<_> = roles.iter().filter_map(namespace_of).collect();
    role_namespaces.sort();
    assert_eq!(role_namespaces, ["team-a", "team-b"]);
    for role in &roles {
        let binding = of_kind(&objects, "RoleBinding")
            .into_iter()
            .find(|b| {
                namespace_of(b) == namespace_of(role)
                    && b["roleRef"]["name"] == role["metadata"]["name"]
            })
            .unwrap_or_else(|| panic!("no RoleBinding of {role}"));
        assert_eq!(binding["roleRef"]["kind"], "Role");
        assert_eq!(binding["subjects"][0]["kind"], "ServiceAccount");
    }
    let (kind, rule) = rules_for(&objects, "priorityclasses").pop().unwrap();
    assert_eq!(
        (kind, strings(&rule["verbs"])),
        ("ClusterRole", vec!["get"]),
        "PriorityClasses are cluster-scoped: a Role cannot grant them"
    );
    let (kind, rule) = rules_for(&objects, "agentruntimes").pop().unwrap();
    assert_eq!(
        (kind, strings(&rule["verbs"])),
        ("ClusterRole", vec!["get", "list", "watch"]),
        "AgentRuntimes are cluster-scoped: a Role cannot grant them"
    );
    let (_, namespaces) = rules_for(&objects, "namespaces").pop().unwrap();
    assert_eq!(
        strings(&namespaces["resourceNames"]),
        ["team-a", "team-b"],
        "the controller reads only the namespaces it serves"
    );
    let configuration = of_kind(&objects, "ValidatingWebhookConfiguration")[0];
    let webhooks = configuration["webhooks"].as_array().unwrap();
    assert!(!webhooks.is_empty());
    // Every webhook of namespaced kinds (a cluster-scoped kind has no namespace to select).
    for webhook in webhooks
        .iter()
        .filter(|w| w["rules"][0]["scope"] != "Cluster")
    {
        let selector = &webhook["namespaceSelector"]["matchExpressions"];
        assert_eq!(selector[1]["operator"], "In", "{webhook}");
        assert_eq!(
            strings(&selector[1]["values"]),
            ["team-a", "team-b"],
            "{webhook}"
        );
    }
    let deployment = of_kind(&objects, "Deployment")[0];
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    let watched = env
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "WATCH_NAMESPACE")
        .expect("WATCH_NAMESPACE");
    assert_eq!(watched["value"], "team-a,team-b");
}

#[test]
fn the_controller_runs_restricted_with_probes_and_resources() {
    let Some(objects) = render(&[]) else { return };
    let deployment = of_kind(&objects, "Deployment")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(strings(&security["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert!(container["resources"]["requests"]["memory"].is_string());
    assert!(container["resources"]["limits"]["memory"].is_string());
    let args = strings(&container["args"]);
    assert!(args.contains(&"--webhook-listen=0.0.0.0:9443"), "{args:?}");
    assert!(
        args.contains(&"--webhook-configuration=errand-errand-system"),
        "{args:?}"
    );
    assert!(
        args.contains(&"--store=file:///var/lib/errand/store"),
        "{args:?}"
    );
    assert!(
        args.contains(&"--create-lease=false"),
        "the chart owns the Lease"
    );
    // Large integers render whole, not as floats.
    for arg in [
        "--staging-budget-seconds=900",
        "--max-extract-bytes=17179869184",
        "--max-extract-entries=1000000",
    ] {
        assert!(args.contains(&arg), "{arg} not in {args:?}");
    }
    // The chart's server limits are the binary's defaults, whole.
    let limits = errand::cluster::listener::ServerLimits::DEFAULT;
    for arg in [
        format!(
            "--header-read-timeout-seconds={}",
            limits.header_read_timeout.as_secs()
        ),
        format!(
            "--tls-handshake-timeout-seconds={}",
            limits.handshake_timeout.as_secs()
        ),
        format!(
            "--body-idle-timeout-seconds={}",
            limits.body_idle_timeout.as_secs()
        ),
        format!("--max-connections={}", limits.max_connections),
        format!(
            "--max-result-bytes={}",
            errand::serve::blobs::DEFAULT_MAX_PUT_BYTES
        ),
    ] {
        assert!(args.contains(&arg.as_str()), "{arg} not in {args:?}");
    }
    assert_eq!(
        of_kind(&objects, "Lease")[0]["metadata"]["name"],
        "errand-controller"
    );
    let claim = of_kind(&objects, "PersistentVolumeClaim")[0];
    assert_eq!(
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "store")
            .unwrap()["persistentVolumeClaim"]["claimName"],
        claim["metadata"]["name"]
    );
    let service = of_kind(&objects, "Service")[0];
    let ports: Vec<&str> = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        ports,
        ["webhook", "data-api", "gateway", "egress-proxy", "http"]
    );
}

#[test]
fn the_data_api_is_registered_delegates_its_auth_and_joins_the_built_in_roles() {
    let Some(objects) = render(&[]) else { return };
    let service = of_kind(&objects, "APIService")[0];
    assert_eq!(service["metadata"]["name"], "v1alpha1.data.errand.dev");
    let spec = &service["spec"];
    assert_eq!(spec["group"], "data.errand.dev");
    assert_eq!(spec["insecureSkipTLSVerify"], false);
    assert!(
        spec.get("caBundle").is_none(),
        "the controller owns the CA bundle"
    );
    assert!(
        spec["groupPriorityMinimum"].as_i64().unwrap() < 1000,
        "below the CRDs"
    );
    assert_eq!(spec["service"]["port"], 8443);
    let ports = &of_kind(&objects, "Service")[0]["spec"]["ports"];
    assert!(
        ports
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["port"] == 8443 && p["targetPort"] == "data-api")
    );
    let args = strings(
        &of_kind(&objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"],
    );
    assert!(
        args.contains(&"--data-api-listen=0.0.0.0:10443"),
        "{args:?}"
    );
    assert!(
        args.contains(&"--api-service=v1alpha1.data.errand.dev"),
        "{args:?}"
    );
    let (_, ca_rule) = rules_for(&objects, "apiservices").pop().unwrap();
    assert_eq!(
        strings(&ca_rule["resourceNames"]),
        ["v1alpha1.data.errand.dev"]
    );
    assert_eq!(strings(&ca_rule["verbs"]), ["get", "patch"]);
    let (_, status_rule) = rules_for(&objects, "filesets/status").pop().unwrap();
    assert_eq!(strings(&status_rule["verbs"]), ["patch"]);

    let delegator = of_kind(&objects, "ClusterRoleBinding")
        .into_iter()
        .find(|b| b["roleRef"]["name"] == "system:auth-delegator")
        .expect("the SubjectAccessReviews are delegated");
    assert_eq!(delegator["subjects"][0]["name"], "errand");
    let reader = of_kind(&objects, "RoleBinding")
        .into_iter()
        .find(|b| b["roleRef"]["name"] == "extension-apiserver-authentication-reader")
        .expect("the front proxy's CA is readable");
    assert_eq!(reader["metadata"]["namespace"], "kube-system");

    let role = |suffix: &str| {
        of_kind(&objects, "ClusterRole")
            .into_iter()
            .find(|r| r["metadata"]["name"].as_str().unwrap().ends_with(suffix))
            .unwrap_or_else(|| panic!("a ClusterRole *{suffix}"))
    };
    let view = role("-view");
    assert_eq!(
        view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    let data_read = view["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| strings(&r["apiGroups"]) == ["data.errand.dev"])
        .unwrap();
    assert_eq!(strings(&data_read["verbs"]), ["get"]);
    assert!(strings(&data_read["resources"]).contains(&"agentexecutions/results"));
    let edit = role("-edit");
    assert!(
        edit["metadata"]["labels"]
            .get("rbac.authorization.k8s.io/aggregate-to-view")
            .is_none(),
        "viewers cannot push"
    );
    let push = edit["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| strings(&r["apiGroups"]) == ["data.errand.dev"])
        .unwrap();
    assert_eq!(strings(&push["resources"]), ["filesets/content"]);
    assert_eq!(strings(&push["verbs"]), ["update"]);

    assert!(
        controller_args(&objects).contains(&"--data-api-links=true"),
        "downloads get links to an object store by default"
    );
    let Some(streaming) = render(&["dataApi.links=false"]) else {
        return;
    };
    assert!(controller_args(&streaming).contains(&"--data-api-links=false"));

    let Some(without) = render(&["dataApi.enabled=false"]) else {
        return;
    };
    assert!(of_kind(&without, "APIService").is_empty());
    assert!(
        !controller_args(&without)
            .iter()
            .any(|a| a.starts_with("--data-api-links")),
    );
    assert!(rules_for(&without, "apiservices").is_empty());
}

fn controller_args(objects: &[Value]) -> Vec<&str> {
    strings(&of_kind(objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"])
}

#[test]
fn finished_executions_live_as_long_as_the_chart_default_says() {
    let Some(kept) = render(&[]) else { return };
    assert!(
        !controller_args(&kept)
            .iter()
            .any(|a| a.starts_with("--default-ttl-seconds-after-finished")),
        "no default lifetime unless one is set"
    );
    let Some(objects) = render(&["controller.ttlSecondsAfterFinished=86400"]) else {
        return;
    };
    assert!(controller_args(&objects).contains(&"--default-ttl-seconds-after-finished=86400"));
    assert!(
        !controller_args(&objects)
            .iter()
            .any(|a| a.starts_with("--store-sweep")),
        "no periodic sweep unless an interval is set"
    );
    let Some(sweeping) = render(&["controller.storeSweep.interval=6h"]) else {
        return;
    };
    let args = controller_args(&sweeping);
    assert!(args.contains(&"--store-sweep-interval=6h"), "{args:?}");
    assert!(args.contains(&"--store-sweep-grace=24h"), "{args:?}");
    let (_, executions) = rules_for(&objects, "agentexecutions").pop().unwrap();
    assert!(
        strings(&executions["verbs"]).contains(&"delete"),
        "{executions}"
    );
    let (kind, namespaces) = rules_for(&objects, "namespaces").pop().unwrap();
    assert_eq!(kind, "ClusterRole");
    assert_eq!(strings(&namespaces["verbs"]), ["get", "list", "watch"]);
    assert!(namespaces.get("resourceNames").is_none(), "{namespaces}");
}

#[test]
fn monitoring_objects_are_off_by_default_and_scrape_and_alert_on_the_controllers_metrics() {
    let Some(plain) = render(&[]) else { return };
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert!(of_kind(&plain, kind).is_empty(), "{kind} without asking");
    }
    let Some(objects) = render(&[
        "monitoring.serviceMonitor.enabled=true",
        "monitoring.serviceMonitor.labels.release=kube-prometheus-stack",
        "monitoring.prometheusRule.enabled=true",
        "monitoring.prometheusRule.stuckStartingSeconds=900",
    ]) else {
        return;
    };

    // The ServiceMonitor selects the controller's Service and scrapes its http port.
    let monitor = of_kind(&objects, "ServiceMonitor")[0];
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    let service = of_kind(&objects, "Service")
        .into_iter()
        .find(|s| s["metadata"]["labels"]["app.kubernetes.io/component"] == "controller")
        .expect("the controller's Service");
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap();
    for (key, value) in selector {
        assert_eq!(&service["metadata"]["labels"][key], value, "{key}");
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(
        (&endpoint["port"], &endpoint["path"]),
        (&Value::from("http"), &Value::from("/metrics"))
    );
    assert!(
        service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "http"),
        "{service}"
    );
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"][0],
        "errand-system"
    );

    // The rules alert on metrics the controller exports, with the values' thresholds.
    let rule = of_kind(&objects, "PrometheusRule")[0];
    let alerts: Vec<(&str, &str)> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["alert"].as_str().unwrap(), r["expr"].as_str().unwrap()))
        .collect();
    let names: Vec<&str> = alerts.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        names,
        [
            "ErrandReconcileErrors",
            "ErrandExecutionStuckStarting",
            "ErrandStoreSweepFailing"
        ]
    );
    for ((_, expr), metric) in alerts.iter().zip([
        "errand_controller_reconcile_errors_total[10m])) > 0.05",
        "errand_controller_longest_starting_seconds) > 900",
        "errand_controller_store_sweeps_total{outcome=\"failed\"}[2h]) > 0",
    ]) {
        assert!(expr.contains(metric), "{expr}");
    }
    let annotations = &rule["spec"]["groups"][0]["rules"][0]["annotations"];
    assert!(
        annotations["summary"]
            .as_str()
            .unwrap()
            .contains("{{ $labels.reason }}"),
        "Prometheus's own templating reaches the rule: {annotations}"
    );
}

#[test]
fn agent_pods_get_the_charts_pull_secrets_service_account_and_volume_limits() {
    let Some(plain) = render(&[]) else { return };
    let flags = [
        "--agent-image-pull-secret",
        "--agent-service-account",
        "--workspace-size-limit",
        "--scratch-size-limit",
    ];
    assert!(
        !controller_args(&plain)
            .iter()
            .any(|a| flags.iter().any(|f| a.starts_with(f))),
        "nothing set, nothing passed"
    );
    let Some(objects) = render(&[
        "agentPods.imagePullSecrets[0].name=platform-registry",
        "agentPods.imagePullSecrets[1].name=team-registry",
        "agentPods.serviceAccountName=errand-agents",
        "agentPods.workspaceSizeLimit=20Gi",
        "agentPods.scratchSizeLimit=2Gi",
    ]) else {
        return;
    };
    let args = controller_args(&objects);
    for expected in [
        "--agent-image-pull-secret=platform-registry",
        "--agent-image-pull-secret=team-registry",
        "--agent-service-account=errand-agents",
        "--workspace-size-limit=20Gi",
        "--scratch-size-limit=2Gi",
    ] {
        assert!(args.contains(&expected), "{expected} not in {args:?}");
    }
}

#[test]
fn the_webhook_fails_closed_and_stays_off_errands_own_namespace() {
    let Some(objects) = render(&["webhook.excludeNamespaces={sandbox}"]) else {
        return;
    };
    let configuration = of_kind(&objects, "ValidatingWebhookConfiguration")[0];
    let webhook = &configuration["webhooks"][0];
    assert_eq!(webhook["failurePolicy"], "Fail");
    assert_eq!(webhook["sideEffects"], "None");
    assert!(webhook["timeoutSeconds"].as_i64().unwrap() <= 10);
    assert_eq!(
        strings(&webhook["rules"][0]["operations"]),
        ["CREATE", "UPDATE"]
    );
    assert_eq!(
        strings(&webhook["rules"][0]["resources"]),
        ["agentexecutions"]
    );
    let excluded = &webhook["namespaceSelector"]["matchExpressions"][0];
    assert_eq!(excluded["operator"], "NotIn");
    assert_eq!(
        strings(&excluded["values"]),
        ["errand-system", "kube-system", "sandbox"]
    );
    assert_eq!(
        webhook["clientConfig"]["service"]["path"],
        "/validate-agentexecution"
    );
    assert!(
        webhook["clientConfig"].get("caBundle").is_none(),
        "the controller owns the CA bundle"
    );
}

#[test]
fn cert_manager_mode_issues_the_certificate_and_injects_the_ca() {
    let Some(objects) = render(&["webhook.certManager.enabled=true"]) else {
        return;
    };
    let certificate = of_kind(&objects, "Certificate")[0];
    assert_eq!(
        strings(&certificate["spec"]["dnsNames"]),
        [
            "errand.errand-system.svc",
            "errand.errand-system.svc.cluster.local",
            "localhost"
        ]
    );
    assert_eq!(
        strings(&certificate["spec"]["ipAddresses"]),
        ["127.0.0.1", "::1"],
        "a port-forward to the gateway verifies it too"
    );
    // One certificate for both endpoints, named for what it serves, mounted from its Secret.
    assert_eq!(certificate["metadata"]["name"], "errand-serving");
    assert_eq!(certificate["spec"]["secretName"], "errand-serving-cert");
    let volumes = &of_kind(&objects, "Deployment")[0]["spec"]["template"]["spec"]["volumes"];
    assert!(
        volumes
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["secret"]["secretName"] == "errand-serving-cert"),
        "{volumes}"
    );
    assert_eq!(of_kind(&objects, "Issuer").len(), 1);
    let configuration = of_kind(&objects, "ValidatingWebhookConfiguration")[0];
    assert_eq!(
        configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "errand-system/errand-serving"
    );
    let args = strings(
        &of_kind(&objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"],
    );
    assert!(
        args.contains(&"--serving-cert-dir=/etc/errand/serving-tls"),
        "{args:?}"
    );
    assert!(rules_for(&objects, "validatingwebhookconfigurations").is_empty());
    assert!(rules_for(&objects, "apiservices").is_empty());
    assert_eq!(
        of_kind(&objects, "APIService")[0]["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "errand-system/errand-serving"
    );
}

#[test]
fn an_object_store_needs_no_volume_and_gets_its_credentials() {
    let Some(objects) = render(&[
        "store.url=s3://results/errand",
        "store.credentialsSecret=store-credentials",
        "kueue.defaultQueueName=team-queue",
    ]) else {
        return;
    };
    assert!(of_kind(&objects, "PersistentVolumeClaim").is_empty());
    let container =
        &of_kind(&objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["envFrom"][0]["secretRef"]["name"],
        "store-credentials"
    );
    let args = strings(&container["args"]);
    assert!(args.contains(&"--store=s3://results/errand"));
    assert!(args.contains(&"--default-queue-name=team-queue"));
}

#[test]
fn the_controller_gets_the_otlp_endpoint_only_when_one_is_set() {
    let Some(objects) = render(&[]) else { return };
    assert!(
        !controller_args(&objects)
            .iter()
            .any(|a| a.starts_with("--otlp-endpoint")),
        "{:?}",
        controller_args(&objects)
    );
    let Some(objects) =
        render(&["telemetry.otlpEndpoint=http://otel-collector.observability.svc:4318"])
    else {
        return;
    };
    assert!(
        controller_args(&objects)
            .contains(&"--otlp-endpoint=http://otel-collector.observability.svc:4318")
    );
}

#[test]
fn the_test_hook_runs_the_calculator_and_checks_the_answer() {
    let Some(objects) = render(&[]) else { return };
    let pod = of_kind(&objects, "Pod")[0];
    assert_eq!(pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    let run = &pod["spec"]["initContainers"][0];
    assert!(strings(&run["args"]).contains(&"--input=What is 12 multiplied by 8?"));
    let config_map = of_kind(&objects, "ConfigMap")[0];
    let agent = config_map["data"]["agent.yaml"].as_str().unwrap();
    assert!(agent.contains(r#"[ "$answer" = 96 ]"#), "{agent}");
    assert_eq!(pod["spec"]["containers"][0]["args"][0], "delete");
}

#[test]
fn the_chart_installs_agent_runtimes_from_values() {
    let Some(objects) = render(&[
        "runtimes.deepagents.harnessKind=deepagents",
        "runtimes.deepagents.image=registry.example.com/deepagents-runner:1.0",
        "runtimes.deepagents.command[0]=deepagents-runner",
        "runtimes.deepagents.configFormats[0]=nemo-agents-spec-v1",
    ]) else {
        return;
    };
    let runtimes = of_kind(&objects, "AgentRuntime");
    assert_eq!(runtimes.len(), 1);
    let runtime = runtimes[0];
    assert_eq!(runtime["metadata"]["name"], "deepagents");
    assert!(runtime["metadata"].get("namespace").is_none(), "{runtime}");
    assert_eq!(
        runtime["spec"],
        serde_json::json!({
            "harnessKind": "deepagents",
            "image": "registry.example.com/deepagents-runner:1.0",
            "command": ["deepagents-runner"],
            "configFormats": ["nemo-agents-spec-v1"],
        })
    );
    let Some(defaults) = render(&[]) else { return };
    assert!(of_kind(&defaults, "AgentRuntime").is_empty());
}

#[test]
fn agent_deployments_are_admitted_by_the_webhook_and_served_with_deployments_and_services() {
    let Some(objects) = render(&[]) else { return };
    let configuration = of_kind(&objects, "ValidatingWebhookConfiguration")[0];
    let webhook = configuration["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "agentdeployments.errand.dev")
        .expect("a webhook for AgentDeployments");
    assert_eq!(webhook["failurePolicy"], "Fail");
    assert_eq!(
        strings(&webhook["rules"][0]["resources"]),
        ["agentdeployments"]
    );
    assert_eq!(
        webhook["clientConfig"]["service"]["path"],
        "/validate-agentdeployment"
    );
    for (resource, verbs) in [
        (
            "deployments",
            vec!["get", "list", "watch", "create", "patch"],
        ),
        ("services", vec!["get", "create", "patch"]),
        ("endpointslices", vec!["get", "list", "watch"]),
        ("agentdeployments/status", vec!["patch"]),
    ] {
        let (kind, rule) = rules_for(&objects, resource)
            .pop()
            .unwrap_or_else(|| panic!("no rule for {resource}"));
        assert_eq!(kind, "ClusterRole");
        assert_eq!(strings(&rule["verbs"]), verbs, "{resource}");
    }
    assert!(
        controller_args(&objects).contains(&"--gateway-listen=0.0.0.0:11443"),
        "the gateway is served"
    );
    let (_, invoke) = rules_for(&objects, "agentdeployments/invoke")
        .pop()
        .expect("the edit role may invoke");
    assert_eq!(strings(&invoke["verbs"]), ["create"]);
    let (_, reviews) = rules_for(&objects, "subjectaccessreviews")
        .pop()
        .expect("the gateway reviews access");
    assert_eq!(strings(&reviews["verbs"]), ["create"]);
    let view = rules_for(&objects, "agentdeployments");
    assert!(
        view.iter()
            .any(|(_, rule)| strings(&rule["verbs"]).contains(&"create")),
        "the edit role creates AgentDeployments: {view:?}"
    );
}

/// The ingress rules of the chart's NetworkPolicy, each as (ports, `from` or null).
fn policy_rules(objects: &[Value]) -> Vec<(Vec<i64>, Value)> {
    let policies = of_kind(objects, "NetworkPolicy");
    assert_eq!(policies.len(), 1, "one NetworkPolicy for the controller");
    let spec = &policies[0]["spec"];
    assert_eq!(
        spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "controller"
    );
    assert_eq!(strings(&spec["policyTypes"]), ["Ingress"]);
    spec["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rule| {
            let ports = rule["ports"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["port"].as_i64().unwrap())
                .collect();
            (ports, rule["from"].clone())
        })
        .collect()
}

#[test]
fn network_policies_admit_each_listeners_callers_only() {
    let Some(objects) = render(&[]) else { return };
    let rules = policy_rules(&objects);
    // By default no rule names the webhook or data API ports: only the node reaches them.
    assert!(
        rules
            .iter()
            .all(|(ports, _)| !ports.contains(&9443) && !ports.contains(&10443)),
        "{rules:?}"
    );
    let (_, http) = rules.iter().find(|(ports, _)| ports == &[8080]).unwrap();
    let peers = http.as_array().unwrap();
    assert_eq!(
        peers[0]["podSelector"]["matchExpressions"][0]["key"], "errand.dev/execution",
        "execution pods reach their grants"
    );
    assert_eq!(peers[0]["namespaceSelector"], serde_json::json!({}));
    assert_eq!(
        peers[1]["podSelector"]["matchLabels"]["app.kubernetes.io/name"], "prometheus",
        "the scrapers"
    );
    let (_, gateway) = rules.iter().find(|(ports, _)| ports == &[11443]).unwrap();
    assert!(gateway.is_null(), "the gateway takes callers from anywhere");
    let (_, proxy) = rules.iter().find(|(ports, _)| ports == &[3128]).unwrap();
    let keys: Vec<&serde_json::Value> = proxy
        .as_array()
        .unwrap()
        .iter()
        .map(|peer| &peer["podSelector"]["matchExpressions"][0]["key"])
        .collect();
    assert_eq!(
        keys,
        ["errand.dev/execution", "errand.dev/deployment"],
        "only agent pods reach the egress proxy"
    );
    let args = controller_args(&objects);
    assert!(
        args.contains(&"--egress-proxy-listen=0.0.0.0:3128"),
        "{args:?}"
    );
    assert!(
        args.contains(&"--egress-proxy-url=http://errand.errand-system.svc:3128"),
        "{args:?}"
    );
    assert!(
        args.contains(&"--model-credentials=proxied"),
        "model keys are proxied by default: {args:?}"
    );
    let to_controller = args
        .iter()
        .find(|a| a.starts_with("--execution-egress-allow="))
        .unwrap();
    assert!(to_controller.contains(r#""port":3128"#), "{to_controller}");
    assert!(
        args.contains(&"--deployment-network-policies=true"),
        "{args:?}"
    );
    assert!(args.contains(
        &"--gateway-pod-labels=app.kubernetes.io/name=errand,app.kubernetes.io/instance=errand,app.kubernetes.io/component=controller"
    ));

    let Some(objects) = render(&[
        "networkPolicy.apiServer[0].ipBlock.cidr=10.0.0.10/32",
        "networkPolicy.gatewayFrom[0].namespaceSelector.matchLabels.tenant=yes",
        "networkPolicy.metricsFrom=null",
        "networkPolicy.agentDeployments=false",
        "networkPolicy.agentIngressCIDRs={192.168.0.0/24}",
    ]) else {
        return;
    };
    let rules = policy_rules(&objects);
    let (_, api_server) = rules
        .iter()
        .find(|(ports, _)| ports == &[9443, 10443])
        .unwrap();
    assert_eq!(api_server[0]["ipBlock"]["cidr"], "10.0.0.10/32");
    let (_, http) = rules.iter().find(|(ports, _)| ports == &[8080]).unwrap();
    assert_eq!(http.as_array().unwrap().len(), 1, "execution pods only");
    let (_, gateway) = rules.iter().find(|(ports, _)| ports == &[11443]).unwrap();
    assert_eq!(
        gateway[0]["namespaceSelector"]["matchLabels"]["tenant"],
        "yes"
    );
    let args = controller_args(&objects);
    assert!(args.contains(&"--deployment-network-policies=false"));
    assert!(args.contains(&"--agent-ingress-cidr=192.168.0.0/24"));

    let Some(objects) = render(&["networkPolicy.enabled=false"]) else {
        return;
    };
    assert!(of_kind(&objects, "NetworkPolicy").is_empty());
}

#[test]
fn the_controller_may_apply_network_policies_and_denies_execution_egress_by_default() {
    let Some(objects) = render(&[]) else { return };
    let rules = rules_for(&objects, "networkpolicies");
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(
        strings(&rules[0].1["verbs"]),
        ["get", "create", "patch", "delete"]
    );
    let args = controller_args(&objects);
    assert!(args.contains(&"--execution-egress=deny"), "{args:?}");
    let to_controller: Value = args
        .iter()
        .find_map(|a| a.strip_prefix("--execution-egress-allow="))
        .map(|rule| serde_json::from_str(rule).unwrap())
        .expect("a rule to the controller's pods");
    let peer = &to_controller["to"][0];
    assert_eq!(
        peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "errand-system"
    );
    assert_eq!(
        peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "controller"
    );
    assert_eq!(to_controller["ports"][0]["port"], 8080);

    let Some(open) = render(&["networkPolicy.executionEgress=open"]) else {
        return;
    };
    let args = controller_args(&open);
    assert!(args.contains(&"--execution-egress=open"), "{args:?}");
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--execution-egress-allow")),
        "{args:?}"
    );
}

#[test]
fn gateway_sessions_are_bounded_by_the_charts_values() {
    let Some(objects) = render(&[]) else { return };
    let args = controller_args(&objects);
    assert!(
        args.contains(&"--gateway-session-max-turns=200"),
        "{args:?}"
    );
    assert!(
        args.contains(&"--gateway-session-retention=30d"),
        "{args:?}"
    );
    let Some(objects) = render(&[
        "gateway.sessions.maxTurns=10",
        "gateway.sessions.retention=12h",
    ]) else {
        return;
    };
    let args = controller_args(&objects);
    assert!(args.contains(&"--gateway-session-max-turns=10"), "{args:?}");
    assert!(
        args.contains(&"--gateway-session-retention=12h"),
        "{args:?}"
    );
}

#[test]
fn an_admission_policy_limits_the_controller_to_objects_errand_manages() {
    let Some(objects) = render(&[]) else { return };
    let policy = of_kind(&objects, "ValidatingAdmissionPolicy");
    assert_eq!(policy.len(), 1);
    let spec = &policy[0]["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    let resources: Vec<&str> = spec["matchConstraints"]["resourceRules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rule| strings(&rule["resources"]))
        .collect();
    assert_eq!(
        resources,
        [
            "pods",
            "services",
            "configmaps",
            "deployments",
            "jobs",
            "networkpolicies"
        ]
    );
    assert!(
        spec["matchConditions"][0]["expression"]
            .as_str()
            .unwrap()
            .contains("system:serviceaccount:errand-system:errand'"),
        "only the controller's ServiceAccount is limited"
    );
    let label = errand::api::contract::MANAGED_BY_LABEL;
    for validation in spec["validations"].as_array().unwrap() {
        let expression = validation["expression"].as_str().unwrap();
        assert!(
            expression.contains(&format!(
                "['{label}'] == '{}'",
                errand::api::contract::MANAGED_BY
            )),
            "{expression}"
        );
    }
    let binding = of_kind(&objects, "ValidatingAdmissionPolicyBinding");
    assert_eq!(
        binding[0]["spec"]["policyName"],
        policy[0]["metadata"]["name"]
    );
    assert_eq!(strings(&binding[0]["spec"]["validationActions"]), ["Deny"]);

    let Some(objects) = render(&["admissionPolicy.enabled=false"]) else {
        return;
    };
    assert!(of_kind(&objects, "ValidatingAdmissionPolicy").is_empty());
}
