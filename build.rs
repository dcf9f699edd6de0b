//! Turns each committed CRD in `crds/` into its bare `openAPIV3Schema` as JSON in `OUT_DIR`, so
//! the local backend's schema checks read JSON at run time instead of parsing YAML on every run.

use std::path::Path;

/// The CRDs whose schemas the local backend checks manifests against.
const CRDS: [&str; 6] = [
    "agents.errand.dev",
    "agentenvironments.errand.dev",
    "agentexecutions.errand.dev",
    "agentextensions.errand.dev",
    "agentruntimes.errand.dev",
    "filesets.errand.dev",
];

fn main() {
    let out_dir = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    for name in CRDS {
        let source = format!("crds/{name}.yaml");
        println!("cargo:rerun-if-changed={source}");
        let yaml = std::fs::read_to_string(&source).unwrap_or_else(|e| panic!("{source}: {e}"));
        let mut crd: serde_json::Value =
            serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("{source}: {e}"));
        let schema = crd
            .pointer_mut("/spec/versions/0/schema/openAPIV3Schema")
            .map(serde_json::Value::take)
            .unwrap_or_else(|| panic!("{source}: no spec.versions[0].schema.openAPIV3Schema"));
        let target = Path::new(&out_dir).join(format!("{name}.schema.json"));
        std::fs::write(&target, schema.to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", target.display()));
    }
}
