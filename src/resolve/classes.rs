//! The classes a run's pod names: the RuntimeClass the installation or the AgentRuntime requires, conflicts with it and classes the cluster lacks refused naming the field that set them.

use super::catalog::{Catalog, ClassKind};
use super::problems::Problems;
use super::rules::object_name;
use super::runtime::with_runtime_defaults;
use crate::api::Compute;

/// Where a class of a run comes from, for the field a problem about it names.
#[derive(Clone, Copy)]
enum Origin<'a> {
    /// The environment's compute, at this prefix (`spec.environment`, `AgentEnvironment "x" spec`).
    Environment(&'a str),
    /// The compute defaults of the AgentRuntime with this name.
    Runtime(&'a str),
    /// The installation's required RuntimeClass.
    Installation,
}

impl Origin<'_> {
    fn field(self, kind: ClassKind) -> String {
        match self {
            Origin::Environment(prefix) => format!("{prefix}.compute.{}", kind.field()),
            Origin::Runtime(name) => format!("AgentRuntime {name:?} spec.compute.{}", kind.field()),
            Origin::Installation => "the installation's agentPods.runtimeClassName".to_owned(),
        }
    }
}

/// The compute a run's pod uses: `environment`'s (its fields at `prefix.compute`) over the
/// defaults of the picked `runtime` (name and compute), with the RuntimeClass required by the
/// installation ([`Catalog::required_runtime_class`]), else by the runtime, else the
/// environment's. A RuntimeClass named below the one required that differs from it, and a class
/// the cluster lacks, are problems at the field that named it.
pub(super) fn placed_compute(
    environment: Compute,
    prefix: &str,
    runtime: Option<(&str, &Compute)>,
    catalog: &dyn Catalog,
    problems: &mut Problems,
) -> Compute {
    let runtime_origin = runtime.map_or(Origin::Installation, |(name, _)| Origin::Runtime(name));
    let required = catalog
        .required_runtime_class()
        .map(|class| (Origin::Installation, class));
    // Who names each class, strongest first.
    let claims = |kind: ClassKind| -> Vec<(Origin<'_>, String)> {
        let by_environment = kind
            .named_in(&environment)
            .map(|class| (Origin::Environment(prefix), class.to_owned()));
        let by_runtime = runtime
            .and_then(|(_, compute)| kind.named_in(compute))
            .map(|class| (runtime_origin, class.to_owned()));
        match kind {
            ClassKind::Runtime => vec![required.clone(), by_runtime, by_environment],
            ClassKind::Priority => vec![by_environment, by_runtime],
        }
        .into_iter()
        .flatten()
        .collect()
    };
    let claims = ClassKind::ALL.map(|kind| (kind, claims(kind)));
    let mut compute = with_runtime_defaults(environment, runtime.map(|(_, compute)| compute));
    for (kind, claims) in claims {
        let Some(((origin, class), weaker)) = claims.split_first() else {
            continue;
        };
        if kind == ClassKind::Runtime {
            for (other, named) in weaker.iter().filter(|(_, named)| named != class) {
                problems.push(
                    other.field(kind),
                    format!(
                        "RuntimeClass {named:?} is not allowed: {} runs its agents under \
                         RuntimeClass {class:?}; remove the field or set it to {class:?}",
                        requirer_name(*origin)
                    ),
                );
            }
            compute.runtime_class_name = Some(class.clone());
        }
        if object_name(class).is_ok() && catalog.class_exists(kind, class) == Some(false) {
            let kind_name = kind.kind();
            problems.push(
                origin.field(kind),
                format!(
                    "{kind_name} {class:?} not found ({kind_name}es are cluster-wide; `kubectl \
                     get {}` lists them)",
                    kind.resource()
                ),
            );
        }
    }
    compute
}

/// Who requires a RuntimeClass, in a sentence.
fn requirer_name(origin: Origin<'_>) -> String {
    match origin {
        Origin::Runtime(name) => format!("AgentRuntime {name:?}"),
        _ => "this installation (the chart's agentPods.runtimeClassName)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::InMemoryCatalog;

    fn compute(runtime_class: Option<&str>, priority_class: Option<&str>) -> Compute {
        Compute {
            runtime_class_name: runtime_class.map(str::to_owned),
            priority_class_name: priority_class.map(str::to_owned),
            ..Compute::default()
        }
    }

    /// The compute placed and each problem as `field: message`.
    fn placed(
        environment: Compute,
        runtime: Option<Compute>,
        catalog: &InMemoryCatalog,
    ) -> (Compute, Vec<String>) {
        let mut problems = Problems::default();
        let runtime = runtime.as_ref().map(|compute| ("deep", compute));
        let compute = placed_compute(
            environment,
            "spec.environment",
            runtime,
            catalog,
            &mut problems,
        );
        let found = problems
            .into_error()
            .problems
            .into_iter()
            .map(|p| format!("{}: {}", p.field, p.message))
            .collect();
        (compute, found)
    }

    #[test]
    fn an_installation_requirement_applies_to_runs_that_name_no_class_and_refuses_another() {
        let catalog = InMemoryCatalog::default().with_required_runtime_class("gvisor");
        let (compute, problems) = placed(Compute::default(), None, &catalog);
        assert_eq!(compute.runtime_class_name.as_deref(), Some("gvisor"));
        assert!(problems.is_empty(), "{problems:?}");

        let (_, same) = placed(compute.clone(), None, &catalog);
        assert!(same.is_empty(), "{same:?}");

        let (_, problems) = placed(compute_with("runc"), Some(compute_with("kata")), &catalog);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with(
                "AgentRuntime \"deep\" spec.compute.runtimeClassName: RuntimeClass \"kata\""
            ),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with(
                "spec.environment.compute.runtimeClassName: RuntimeClass \"runc\" is not allowed: \
                 this installation (the chart's agentPods.runtimeClassName) runs its agents under \
                 RuntimeClass \"gvisor\"; remove the field or set it to \"gvisor\""
            ),
            "{problems:?}"
        );
    }

    fn compute_with(runtime_class: &str) -> Compute {
        compute(Some(runtime_class), None)
    }

    #[test]
    fn a_runtime_requires_its_class_of_its_agents_environments() {
        let catalog = InMemoryCatalog::default();
        let (compute, problems) =
            placed(Compute::default(), Some(compute_with("gvisor")), &catalog);
        assert_eq!(compute.runtime_class_name.as_deref(), Some("gvisor"));
        assert!(problems.is_empty(), "{problems:?}");

        let (_, problems) = placed(compute_with("runc"), Some(compute_with("gvisor")), &catalog);
        assert_eq!(
            problems,
            [
                "spec.environment.compute.runtimeClassName: RuntimeClass \"runc\" is not allowed: \
              AgentRuntime \"deep\" runs its agents under RuntimeClass \"gvisor\"; remove the \
              field or set it to \"gvisor\""
            ]
        );
    }

    #[test]
    fn a_class_the_cluster_lacks_is_refused_at_the_field_that_named_it() {
        let catalog = InMemoryCatalog::default()
            .with_class(ClassKind::Runtime, "gvisor")
            .without_classes(ClassKind::Priority);
        let (_, problems) = placed(compute(Some("kata"), Some("batch")), None, &catalog);
        assert_eq!(
            problems,
            [
                "spec.environment.compute.priorityClassName: PriorityClass \"batch\" not found \
                 (PriorityClasses are cluster-wide; `kubectl get priorityclasses` lists them)",
                "spec.environment.compute.runtimeClassName: RuntimeClass \"kata\" not found \
                 (RuntimeClasses are cluster-wide; `kubectl get runtimeclasses` lists them)",
            ]
        );

        let (_, problems) = placed(Compute::default(), Some(compute_with("kata")), &catalog);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("AgentRuntime \"deep\" spec.compute.runtimeClassName: RuntimeClass \"kata\" not found"),
            "{problems:?}"
        );

        let required = catalog.with_required_runtime_class("kata");
        let (_, problems) = placed(Compute::default(), None, &required);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with(
                "the installation's agentPods.runtimeClassName: RuntimeClass \"kata\" not found"
            ),
            "{problems:?}"
        );
    }

    #[test]
    fn a_cluster_whose_classes_are_unknown_refuses_none_for_missing() {
        let (compute, problems) = placed(
            compute(Some("kata"), Some("batch")),
            None,
            &InMemoryCatalog::default(),
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(compute.runtime_class_name.as_deref(), Some("kata"));
    }
}
