//! Merging an environment's overlay into an agent config: the environment wins, maps merge deeply, lists replace.

use serde_json::{Map, Value};

use crate::api::EnvironmentOverlay;

/// Deep-merges `overlay` into `base`. Objects merge key by key; any other overlay value
/// (scalar or list) replaces the base value; an overlay `null` removes the key.
pub fn merge_values(base: &mut Value, overlay: &Value) {
    match (base, overlay) {
        (Value::Object(base), Value::Object(overlay)) => merge_maps(base, overlay),
        (base, overlay) => *base = overlay.clone(),
    }
}

/// Deep-merges the object `overlay` into the object `base` (see [`merge_values`]).
pub fn merge_maps(base: &mut Map<String, Value>, overlay: &Map<String, Value>) {
    for (key, value) in overlay {
        if value.is_null() {
            base.remove(key);
        } else if let Some(existing) = base.get_mut(key) {
            merge_values(existing, value);
        } else {
            base.insert(key.clone(), value.clone());
        }
    }
}

/// The agent config with the environment's overlay merged in. `overlay.config` goes first,
/// so the dedicated fields (`env`, `mcp`, `provider`, `models`) win over it.
pub fn merge_environment(
    config: &Map<String, Value>,
    overlay: &EnvironmentOverlay,
) -> Map<String, Value> {
    let mut merged = config.clone();
    if let Some(extra) = &overlay.config {
        merge_maps(&mut merged, extra);
    }
    let mut dedicated = Map::new();
    if !overlay.env.is_empty() {
        let env = overlay
            .env
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())));
        dedicated.insert("env".into(), Value::Object(env.collect()));
    }
    if let Some(mcp) = &overlay.mcp {
        dedicated.insert("mcp".into(), Value::Object(mcp.clone()));
    }
    if let Some(provider) = &overlay.provider {
        dedicated.insert("provider".into(), Value::String(provider.clone()));
    }
    if let Some(models) = &overlay.models {
        dedicated.insert("models".into(), models.clone());
    }
    merge_maps(&mut merged, &dedicated);
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn maps_merge_deeply_and_lists_replace() {
        let mut base =
            json!({"mcp": {"servers": {"a": {"url": "x", "timeout": 5}}}, "tools": ["t1", "t2"]});
        merge_values(
            &mut base,
            &json!({"mcp": {"servers": {"a": {"url": "y"}, "b": {}}}, "tools": ["t3"]}),
        );
        assert_eq!(
            base,
            json!({"mcp": {"servers": {"a": {"url": "y", "timeout": 5}, "b": {}}}, "tools": ["t3"]})
        );
    }

    #[test]
    fn null_in_overlay_removes_the_key() {
        let mut base = json!({"telemetry": {"on": true}, "name": "a"});
        merge_values(&mut base, &json!({"telemetry": null}));
        assert_eq!(base, json!({"name": "a"}));
    }

    #[test]
    fn dedicated_overlay_fields_win_over_overlay_config() {
        let config = json!({"provider": "openai", "env": {"A": "1", "B": "2"}});
        let overlay = EnvironmentOverlay {
            env: [("B".to_string(), "3".to_string())].into(),
            provider: Some("anthropic".into()),
            config: Some(
                json!({"provider": "ollama", "instructions": "be brief"})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
            ..Default::default()
        };
        let merged = merge_environment(config.as_object().unwrap(), &overlay);
        assert_eq!(
            Value::Object(merged),
            json!({"provider": "anthropic", "env": {"A": "1", "B": "3"}, "instructions": "be brief"})
        );
    }
}
