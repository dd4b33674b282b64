//! A campaign's record read from `runs.csv` where `runs.jsonl` is absent: the committed form
//! of a study (`results/paper/<preset>/` keeps `campaign.toml`, `campaign.json` and `runs.csv`,
//! not the JSON record), which `report`, `report --power` and `campaign --status` read as they
//! read a campaign's directory.
//!
//! `runs.csv` holds the columns a campaign of its kind fills ([`crate::metric_columns`]), each
//! value as the JSON record has it (numbers in their shortest round-trip form, `true`/`false`,
//! `NaN`/`inf` for non-finite losses, empty for none), so a row read back is the row recorded,
//! but for the fields its kind never fills (absent from both).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::value::{Error as DeError, MapDeserializer};
use serde::de::{IntoDeserializer, Visitor};

use crate::store::{checked_once, read_rows};
use crate::{Campaign, Error, Metrics, RUNS_CSV, RUNS_JSONL, Result, Row, Status};

/// The file a campaign directory's runs are read from: `runs.jsonl`, the record, when it
/// exists; else `runs.csv` when that exists (the committed form); else `runs.jsonl` (no runs
/// recorded yet).
pub fn record_path(dir: &Path) -> PathBuf {
    let (jsonl, csv) = (dir.join(RUNS_JSONL), dir.join(RUNS_CSV));
    if !jsonl.exists() && csv.exists() { csv } else { jsonl }
}

/// The runs recorded in `dir` ([`record_path`]), each checked against `campaign`'s grid and
/// kept once, as [`read_rows`] keeps them; none when neither file exists.
pub fn read_record(dir: &Path, campaign: &Campaign) -> Result<Vec<Row>> {
    let path = record_path(dir);
    if path.ends_with(RUNS_CSV) { read_csv_rows(&path, campaign) } else { read_rows(&path, campaign, false) }
}

/// The rows of `out`'s record for a campaign that continues there (`--resume`): `runs.jsonl`,
/// repaired as [`read_rows`] repairs it; where only `runs.csv` exists (the committed form), its
/// rows, written to a new `runs.jsonl` first, so that the campaign keeps them and runs only what
/// is missing, never starting again over an emptied `runs.csv`.
pub(crate) fn resume_record(out: &Path, campaign: &Campaign) -> Result<Vec<Row>> {
    let (jsonl, csv) = (out.join(RUNS_JSONL), out.join(RUNS_CSV));
    if jsonl.exists() || !csv.exists() {
        return read_rows(&jsonl, campaign, true);
    }
    let rows = read_csv_rows(&csv, campaign)?;
    resilab_runner::write_atomic(&jsonl, &crate::store::jsonl_bytes(&rows)?)?;
    Ok(rows)
}

/// The rows of the `runs.csv` at `path`, written for `campaign` ([`Row::header`]): each
/// checked against the grid and kept once, as [`read_rows`] keeps the JSON record's. A missing
/// column of the run's own (`id`, `index`, `seed`, `rep`, `status`), or a value that is not of
/// its column's type, is an error naming the file, the line and the column.
pub fn read_csv_rows(path: &Path, campaign: &Campaign) -> Result<Vec<Row>> {
    let csv_err = |source| Error::Csv { path: path.to_path_buf(), source };
    let mut reader = csv::Reader::from_path(path).map_err(csv_err)?;
    let header = reader.headers().map_err(csv_err)?.clone();
    let axes = campaign.axis_keys();
    let mut lines = Vec::new();
    for record in reader.records() {
        let record = resilab_text::unescaped(&record.map_err(csv_err)?);
        let line = record.position().map_or(0, |p| p.line() as usize);
        let cells: BTreeMap<&str, &str> = header.iter().zip(record.iter()).collect();
        let row = row_of(&cells, &axes).map_err(|why| Error::Row { path: path.to_path_buf(), line, why })?;
        lines.push((line, row));
    }
    checked_once(path, campaign, lines)
}

/// The columns of a row that are no metric: the run's own fields (the grid's axes aside).
const RUN_COLUMNS: &[&str] = &["id", "index", "seed", "rep", "status", "message"];

/// One row from its cells by column name.
fn row_of(cells: &BTreeMap<&str, &str>, axes: &[String]) -> std::result::Result<Row, String> {
    let get = |c: &str| cells.get(c).copied().ok_or_else(|| format!("no {c} column"));
    let number = |c: &str| get(c)?.parse::<u64>().map_err(|e| format!("{c}: {:?} is not a count ({e})", get(c).unwrap_or_default()));
    let status = get("status")?;
    let status = Status::deserialize(status.into_deserializer()).map_err(|e: DeError| format!("status: {e}"))?;
    let coords = axes.iter().map(|a| Ok((a.clone(), get(a)?.to_string()))).collect::<std::result::Result<_, String>>()?;
    let metrics = cells
        .iter()
        .filter(|(c, v)| !v.is_empty() && !RUN_COLUMNS.contains(c) && !axes.iter().any(|a| a == *c))
        .map(|(c, v)| (*c, Cell(v)));
    let metrics = Metrics::deserialize(MapDeserializer::new(metrics)).map_err(|e: DeError| format!("not a run record: {e}"))?;
    Ok(Row {
        id: get("id")?.to_string(),
        index: number("index")?,
        coords,
        seed: number("seed")?,
        rep: number("rep")?,
        status,
        message: cells.get("message").filter(|m| !m.is_empty()).map(|m| (*m).to_string()),
        metrics,
    })
}

/// One non-empty cell of `runs.csv`, read as the type its field asks for: a count, a number
/// (`NaN`, `inf` and `-inf` too), `true`/`false`, or text; a field that takes any type (the
/// non-finite floats' reader) gets a flag, a count, a number or else the text.
struct Cell<'a>(&'a str);

impl Cell<'_> {
    fn parse<T: std::str::FromStr>(&self, what: &str) -> std::result::Result<T, DeError> {
        self.0.parse().map_err(|_| serde::de::Error::custom(format!("{:?} is not {what}", self.0)))
    }
}

impl<'de> IntoDeserializer<'de, DeError> for Cell<'_> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> serde::Deserializer<'de> for Cell<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> std::result::Result<V::Value, DeError> {
        if let Ok(b) = self.0.parse::<bool>() {
            v.visit_bool(b)
        } else if let Ok(n) = self.0.parse::<u64>() {
            v.visit_u64(n)
        } else if let Ok(n) = self.0.parse::<i64>() {
            v.visit_i64(n)
        } else if let Ok(x) = self.0.parse::<f64>() {
            v.visit_f64(x)
        } else {
            v.visit_str(self.0)
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> std::result::Result<V::Value, DeError> {
        if self.0.is_empty() { v.visit_none() } else { v.visit_some(self) }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> std::result::Result<V::Value, DeError> {
        v.visit_bool(self.parse("true or false")?)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, v: V) -> std::result::Result<V::Value, DeError> {
        v.visit_u64(self.parse("a count")?)
    }

    fn deserialize_i64<V: Visitor<'de>>(self, v: V) -> std::result::Result<V::Value, DeError> {
        v.visit_i64(self.parse("an integer")?)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, v: V) -> std::result::Result<V::Value, DeError> {
        v.visit_f64(self.parse("a number")?)
    }

    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> std::result::Result<V::Value, DeError> {
        v.visit_str(self.0)
    }

    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> std::result::Result<V::Value, DeError> {
        v.visit_str(self.0)
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i128 u8 u16 u32 u128 f32 char bytes byte_buf unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kind;
    use crate::store::write_csv;

    fn small() -> Campaign {
        Campaign::parse(crate::spec::tests::SMALL, &[], "t").unwrap()
    }

    /// Grid run `i` of `c` with a value in every kind of field: counts, fractions, flags,
    /// text that reads as a number, non-finite losses and a message.
    fn full_row(c: &Campaign, i: u64) -> Row {
        let g = c.run_at(i).unwrap();
        Row {
            id: g.id,
            index: i,
            coords: g.coords.into_iter().collect(),
            seed: g.seed,
            rep: g.rep,
            status: if i.is_multiple_of(2) { Status::Ok } else { Status::Error },
            message: (i % 2 == 1).then(|| "-failed, with \"quotes\"".to_string()),
            metrics: Metrics {
                strategy: Some("rollback".into()),
                failed: Some(i.is_multiple_of(3)),
                steps: Some(4000 + i),
                final_acc: Some(0.1 + 1.0 / 3.0),
                final_loss: Some(if i == 1 { f64::NAN } else { 2.0 / 7.0 }),
                final_train_loss: Some(f64::NEG_INFINITY),
                acc_loss: Some(-1e-17),
                peak_abs: Some(f64::INFINITY),
                nev: Some(true),
                layers: Some("12345".into()),
                digest: Some("0042".into()),
                first_crash_phase: Some("=forward".into()),
                detection_latency: Some(3.0),
                values_corrupted: Some(u64::MAX),
                ..Metrics::default()
            },
        }
    }

    #[test]
    fn runs_csv_gives_back_the_rows_of_runs_jsonl() {
        let c = small();
        for kind in [Kind::Train, Kind::Restart, Kind::Eval] {
            let dir = tempfile::tempdir().unwrap();
            let rows: Vec<Row> = (0..4).map(|i| full_row(&c, i)).collect();
            write_csv(&dir.path().join(RUNS_CSV), &c.axis_keys(), kind, &rows).unwrap();
            assert_eq!(record_path(dir.path()), dir.path().join(RUNS_CSV));
            let back = read_record(dir.path(), &c).unwrap();
            // The fields a kind's runs.csv leaves out come back empty, as its runs leave them.
            let (cols, fields) = (crate::metric_columns(kind).unwrap(), serde_json::to_value(Metrics::default()).unwrap());
            let kept = |r: &Row| {
                let mut v = serde_json::to_value(r).unwrap();
                for k in fields.as_object().unwrap().keys().filter(|k| !cols.contains(k)) {
                    v[k] = serde_json::Value::Null;
                }
                v
            };
            assert_eq!(back.len(), rows.len(), "{kind:?}");
            for (a, b) in rows.iter().zip(&back) {
                assert_eq!(kept(a), serde_json::to_value(b).unwrap(), "{kind:?}");
            }
        }
        // With both files, runs.jsonl is the record.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(RUNS_CSV), "id,index\n").unwrap();
        std::fs::write(dir.path().join(RUNS_JSONL), "").unwrap();
        assert_eq!(record_path(dir.path()), dir.path().join(RUNS_JSONL));
        assert!(read_record(dir.path(), &c).unwrap().is_empty());
        assert!(read_record(tempfile::tempdir().unwrap().path(), &c).unwrap().is_empty(), "no record: no rows");
    }

    #[test]
    fn a_bad_csv_row_is_refused_naming_file_line_and_column() {
        let (dir, c) = (tempfile::tempdir().unwrap(), small());
        let p = dir.path().join(RUNS_CSV);
        write_csv(&p, &c.axis_keys(), Kind::Restart, &[full_row(&c, 0), full_row(&c, 2)]).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, text.replace(",4000,", ",forty,").replace(",4002,", ",x42,")).unwrap();
        let e = read_csv_rows(&p, &c).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{} line 2: not a run record", p.display())), "{e}");
        assert!(e.contains("\"forty\" is not a count"), "{e}");
        // A row of another grid index, as in runs.jsonl.
        let mut moved = full_row(&c, 1);
        moved.index = 3;
        write_csv(&p, &c.axis_keys(), Kind::Train, &[full_row(&c, 0), moved]).unwrap();
        let e = read_csv_rows(&p, &c).unwrap_err().to_string();
        assert!(e.contains("line 3: run ") && e.contains("is not grid index 3's run"), "{e}");
        std::fs::write(&p, "id,seed\nx,1\n").unwrap();
        let e = read_csv_rows(&p, &c).unwrap_err().to_string();
        assert!(e.ends_with("line 2: no status column"), "{e}");
    }
}
