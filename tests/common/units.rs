//! The unit rule of docs/metrics.md ("Units: one per column name"): every accuracy or overhead
//! column (a name with the word `acc` or `overhead`) is in that table with one unit; a name
//! ending `_frac`, `_pct` or `_pts` has that unit; fractions of accuracy lie in [-1, 1] and
//! percentages of accuracy in [0, 100].

use std::collections::BTreeMap;
use std::path::Path;

/// The text of docs/metrics.md's section `heading` (its `## heading` line), up to the next
/// section.
pub fn metrics_section(heading: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/metrics.md")).unwrap();
    let section = doc.split(&format!("## {heading}")).nth(1).unwrap_or_else(|| panic!("docs/metrics.md has no section {heading:?}"));
    section.split("\n## ").next().unwrap().to_string()
}

/// The unit a docs table's unit cell names: `frac`, `pct`, `pts` or `s` (simulated seconds).
pub fn unit_word(cell: &str) -> Option<&'static str> {
    [("fraction", "frac"), ("percent", "pct"), ("points", "pts"), ("simulated seconds", "s")]
        .into_iter()
        .find(|(word, _)| cell.starts_with(word))
        .map(|(_, unit)| unit)
}

/// The documented unit of each accuracy and overhead column: `frac`, `pct`, `pts` or another
/// word (`s`).
pub fn table() -> BTreeMap<String, String> {
    let section = metrics_section("Units: one per column name");
    let mut t = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let unit = unit_word(cells[1]).unwrap_or_else(|| panic!("docs/metrics.md: unknown unit {:?}", cells[1]));
        for name in cells[0].trim_start_matches("| ").split(", ") {
            let name = name.trim_matches('`').to_string();
            assert!(t.insert(name.clone(), unit.to_string()).is_none(), "docs/metrics.md lists {name} twice");
        }
    }
    assert!(t.len() > 20, "{t:?}");
    t
}

/// A name the rule covers: one of its words is `acc` or `overhead`.
pub fn covered(name: &str) -> bool {
    name.split('_').any(|w| w == "acc" || w == "overhead")
}

/// Checks one column name (of `file`) against the table.
pub fn check_name(file: &str, name: &str, table: &BTreeMap<String, String>) {
    if !covered(name) {
        return;
    }
    let unit = table.get(name).unwrap_or_else(|| panic!("{file}: column {name} is not in docs/metrics.md's unit table"));
    let suffix = name.rsplit('_').next().unwrap();
    if ["frac", "pct", "pts"].contains(&suffix) {
        assert_eq!(suffix, unit, "{file}: {name} is documented in another unit");
    }
}

/// Checks a CSV file's header, its accuracy values and, in a `comparisons.csv`, the names in
/// its `metric` column (which carry the unit of the row's values).
pub fn check_csv(path: &Path, table: &BTreeMap<String, String>) {
    let file = path.display().to_string();
    let mut rd = csv::ReaderBuilder::new().flexible(true).from_path(path).unwrap();
    let header = rd.headers().unwrap().clone();
    for name in &header {
        check_name(&file, name, table);
    }
    let metric = header.iter().position(|h| h == "metric");
    for rec in rd.records() {
        let rec = rec.unwrap();
        for (name, v) in header.iter().zip(rec.iter()) {
            let (Some(unit), Ok(x)) = (table.get(name), v.parse::<f64>()) else { continue };
            // An accuracy itself: not a loss, a time to reach one, or seconds.
            let accuracy =
                name.split('_').any(|w| w == "acc") && !["loss", "time"].iter().any(|w| name.contains(w)) && !name.ends_with("_s");
            if accuracy && unit == "frac" && x.is_finite() {
                assert!((0.0..=1.0).contains(&x), "{file}: {name} = {v} is not a fraction");
            }
            if accuracy && unit == "pct" && x.is_finite() {
                assert!((0.0..=100.0).contains(&x), "{file}: {name} = {v} is not a percentage");
            }
        }
        if let Some(m) = metric.and_then(|i| rec.get(i)) {
            assert!(m.ends_with("_pct") || m.ends_with("_pts"), "{file}: metric {m} does not name its unit");
            check_name(&file, m, table);
        }
    }
}

/// Checks every CSV file and `summary.json` under `dir`; returns how many files were read.
pub fn check_dir(dir: &Path, table: &BTreeMap<String, String>) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            n += check_dir(&p, table);
        } else if p.extension().is_some_and(|e| e == "csv") {
            check_csv(&p, table);
            n += 1;
        } else if p.file_name().is_some_and(|f| f == "summary.json") {
            let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            for key in v.as_object().unwrap().keys() {
                check_name(&p.display().to_string(), key, table);
            }
            n += 1;
        }
    }
    n
}
