//! What the input flags become on a cluster: standard input as the execution's input, tags as labels (and tag patterns as label selectors), the shown variables and stdin size as annotations.

use std::collections::BTreeMap;

use kube::api::ObjectMeta;
use serde_json::{Value, json};

use crate::api::MAX_INPUT_BYTES;
use crate::api::contract::{SHOWN_ENV_ANNOTATION, STDIN_BYTES_ANNOTATION};
use crate::api::tags::{TagPattern, is_tag_label, tag_labels};
use crate::ops::execute::RunInputs;
use crate::ops::{Error, ErrorCode};

/// Standard input as the execution's input (`ERRAND_INPUT_FILE` in the pod): UTF-8, at most
/// the input's bound, and not besides `--input`.
pub fn stdin_as_input(stdin: &[u8], input: &str) -> Result<String, Error> {
    if !input.is_empty() {
        return Err(Error::argument(
            "standard input and --input both give the input; on a cluster standard input becomes the execution's input, so give one of them",
        ));
    }
    if stdin.len() > MAX_INPUT_BYTES {
        return Err(Error::new(
            ErrorCode::StdinTooLarge,
            format!(
                "standard input has {} bytes; on a cluster it becomes spec.input, which holds at most {MAX_INPUT_BYTES} bytes (put larger input in the working directory)",
                stdin.len()
            ),
        ));
    }
    String::from_utf8(stdin.to_vec()).map_err(|_| {
        Error::argument(
            "standard input is not UTF-8; on a cluster it becomes spec.input, which is text (put binary input in the working directory)",
        )
    })
}

/// Puts the tags (labels), the shown variables and the stdin size (annotations) on a new
/// execution.
pub fn label_inputs(metadata: &mut ObjectMeta, inputs: &RunInputs) {
    if !inputs.tags.is_empty() {
        metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .extend(tag_labels(&inputs.tags));
    }
    let mut annotations = BTreeMap::new();
    if !inputs.env.is_empty() {
        annotations.insert(
            SHOWN_ENV_ANNOTATION.to_owned(),
            serde_json::to_string(&inputs.shown_env()).expect("a map of strings serializes"),
        );
    }
    if let Some(stdin) = &inputs.stdin {
        annotations.insert(STDIN_BYTES_ANNOTATION.to_owned(), stdin.len().to_string());
    }
    if !annotations.is_empty() {
        metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .extend(annotations);
    }
}

/// The merge patch that replaces the tag labels of an object now labelled `current` with the
/// labels of `tags`.
pub fn retag_patch(current: &BTreeMap<String, String>, tags: &[String]) -> Value {
    let wanted = tag_labels(tags);
    let mut labels = serde_json::Map::new();
    for key in current
        .keys()
        .filter(|k| is_tag_label(k) && !wanted.contains_key(*k))
    {
        labels.insert(key.clone(), Value::Null);
    }
    for (key, value) in wanted {
        labels.insert(key, Value::String(value));
    }
    json!({"metadata": {"labels": labels}})
}

/// The label selector of tag patterns (AND-combined); `None` without patterns.
pub fn tag_selector(patterns: &[TagPattern]) -> Option<String> {
    (!patterns.is_empty()).then(|| {
        patterns
            .iter()
            .map(TagPattern::selector)
            .collect::<Vec<_>>()
            .join(",")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_become_labels_annotations_and_the_input() {
        let inputs = RunInputs {
            stdin: Some(b"data".to_vec()),
            env: BTreeMap::from([("K".into(), "secret".into())]),
            masked: ["K".to_owned()].into(),
            tags: vec!["a.b".into()],
        };
        let mut metadata = ObjectMeta::default();
        label_inputs(&mut metadata, &inputs);
        let labels = metadata.labels.unwrap();
        assert!(labels.contains_key("tag.errand.dev/a.b"));
        assert!(labels.contains_key("tag-prefix.errand.dev/a"));
        let annotations = metadata.annotations.unwrap();
        assert_eq!(annotations[SHOWN_ENV_ANNOTATION], r#"{"K":"***"}"#);
        assert_eq!(annotations[STDIN_BYTES_ANNOTATION], "4");
        assert_eq!(stdin_as_input(b"data", "").unwrap(), "data");
        assert_eq!(
            stdin_as_input(b"x", "y").unwrap_err().code,
            "invalid_argument"
        );
        assert_eq!(
            stdin_as_input(&vec![b'x'; MAX_INPUT_BYTES + 1], "")
                .unwrap_err()
                .code,
            "stdin_too_large"
        );
        let patch = retag_patch(&labels, &["a.c".to_owned()]);
        assert_eq!(
            patch,
            json!({"metadata": {"labels": {
                "tag.errand.dev/a.b": null,
                "tag.errand.dev/a.c": "",
                "tag-prefix.errand.dev/a": "",
            }}})
        );
        let patterns = [
            TagPattern::parse("a.*").unwrap(),
            TagPattern::parse("x").unwrap(),
        ];
        assert_eq!(
            tag_selector(&patterns).unwrap(),
            "tag-prefix.errand.dev/a,tag.errand.dev/x"
        );
    }
}
