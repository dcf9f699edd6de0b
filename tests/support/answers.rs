//! The JSON Schema of errand's answers as `errand schema` prints it, compiled once, and the check that an answer conforms to it.

use std::sync::OnceLock;

/// The schema `errand schema` prints, compiled.
fn validator() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_errand"))
            .arg("schema")
            .output()
            .unwrap();
        assert!(output.status.success(), "errand schema failed: {output:?}");
        let schema: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        jsonschema::draft202012::new(&schema)
            .unwrap_or_else(|e| panic!("errand schema is not a valid JSON Schema: {e}"))
    })
}

/// Panics, naming every violation, unless `answer` conforms to `errand schema`.
pub fn assert_conforms(answer: &serde_json::Value) {
    let errors: Vec<String> = validator()
        .iter_errors(answer)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "the answer does not conform to `errand schema`: {errors:?}\n{answer}"
    );
}

/// Whether `answer` conforms to `errand schema`.
pub fn conforms(answer: &serde_json::Value) -> bool {
    validator().is_valid(answer)
}
