//! docs/config.md documents every configuration key: the keys the serde structs accept (read
//! from their JSON schema) and the documented keys are the same sets, section by section.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

/// Every key path the schema accepts: `a`, `a.b`, and `a[].b` inside arrays of tables.
fn schema_keys<T: schemars::JsonSchema>() -> BTreeSet<String> {
    let root = serde_json::to_value(schemars::schema_for!(T)).unwrap();
    let mut out = BTreeSet::new();
    walk(&root, &root, "", &mut out);
    out
}

fn walk(root: &Value, node: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let Some(r) = node.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap();
        walk(root, &root["$defs"][name], prefix, out);
    }
    for combinator in ["anyOf", "oneOf", "allOf"] {
        for member in node.get(combinator).and_then(Value::as_array).into_iter().flatten() {
            walk(root, member, prefix, out);
        }
    }
    if let Some(items) = node.get("items") {
        walk(root, items, &format!("{prefix}[]"), out);
    }
    for (key, value) in node.get("properties").and_then(Value::as_object).into_iter().flatten() {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        out.insert(path.clone());
        walk(root, value, &path, out);
    }
}

/// The keys in the first column of the tables under `## {section}` in docs/config.md.
fn documented(section: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/config.md")).unwrap();
    let body = text.split(&format!("\n## {section}\n")).nth(1).unwrap_or_else(|| panic!("docs/config.md has no section {section}"));
    let body = body.split("\n## ").next().unwrap();
    body.lines().filter_map(|l| l.strip_prefix("| `")).map(|l| l.split('`').next().unwrap().to_string()).collect()
}

fn assert_same(section: &str, code: &BTreeSet<String>, docs: &BTreeSet<String>) {
    let undocumented: Vec<&String> = code.difference(docs).collect();
    let stale: Vec<&String> = docs.difference(code).collect();
    assert!(
        undocumented.is_empty() && stale.is_empty(),
        "docs/config.md, {section}: keys the code accepts but the file does not document: {undocumented:?}; documented keys the code does not accept: {stale:?}"
    );
}

#[test]
fn every_run_configuration_key_is_documented() {
    // `fault` entries are tables parsed by hand: their keys are checked in their own section.
    let code: BTreeSet<String> =
        schema_keys::<resilab_runner::RunConfig>().into_iter().filter(|k| !k.starts_with("fault[]") && !k.starts_with("fault.")).collect();
    assert!(code.contains("parallel.network.latency_us") && code.contains("detect.loss_spike.window"), "{code:?}");
    assert_same("Run configuration", &code, &documented("Run configuration"));
}

#[test]
fn every_fault_key_is_documented() {
    let code: BTreeSet<String> = resilab_faults::OWN_KEYS.iter().map(|k| format!("fault[].{k}")).collect();
    assert_same("Faults", &code, &documented("Faults"));
}

#[test]
fn every_campaign_setting_is_documented() {
    let mut code: BTreeSet<String> = schema_keys::<resilab_campaign::Settings>().into_iter().map(|k| format!("campaign.{k}")).collect();
    code.insert("campaign".into());
    let docs: BTreeSet<String> = documented("Campaign configuration").into_iter().filter(|k| k.starts_with("campaign")).collect();
    assert!(code.contains("campaign.hypothesis[].metric"), "{code:?}");
    assert_same("Campaign configuration", &code, &docs);
    let rest = documented("Campaign configuration");
    for key in ["base", "inject", "grid", "grid.workers_hit", "grid.self_test"] {
        assert!(rest.contains(key), "docs/config.md, Campaign configuration: {key} is not documented");
    }
}

#[test]
fn every_injector_key_is_documented() {
    let code = schema_keys::<resilab_inject::RawConfig>();
    assert!(code.contains("allow_NaN_values") && code.contains("locations_to_corrupt"), "{code:?}");
    assert_same("Injector configuration", &code, &documented("Injector configuration"));
}
