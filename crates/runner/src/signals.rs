//! `signals.csv`: every number the run's detectors thresholded, one row per evaluation in the
//! order the guard made them (`[detect] record_signals`; see `resilab_recovery::signals`).

use std::path::Path;

use resilab_recovery::signals::SignalRow;

use crate::{Error, Result};

/// The file's name in a run's directory.
pub const SIGNALS_CSV: &str = "signals.csv";

/// `rows` as CSV (floats in their shortest form that reads back to the same bits).
pub fn to_csv(rows: &[SignalRow]) -> Result<Vec<u8>> {
    let path = Path::new(SIGNALS_CSV);
    let mut w = csv::Writer::from_writer(Vec::new());
    if rows.is_empty() {
        // The header alone: a run that recorded nothing still says what it would have held.
        w.write_record(["step", "attempt", "rank", "micro", "signal", "value", "max_abs", "scale", "ranks"])
            .map_err(crate::csv_err(path))?;
    }
    for r in rows {
        w.serialize(r).map_err(crate::csv_err(path))?;
    }
    w.into_inner().map_err(|e| Error::Io { path: path.to_path_buf(), source: e.into_error() })
}

/// Reads a run's `signals.csv` at `path`.
pub fn read(path: &Path) -> Result<Vec<SignalRow>> {
    let mut reader = csv::Reader::from_path(path).map_err(crate::csv_err(path))?;
    reader.deserialize().map(|r| r.map_err(crate::csv_err(path))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use resilab_recovery::signals::SignalKind;

    #[test]
    fn rows_read_back_bit_for_bit() {
        let row = |signal, value: f64, max_abs: Option<f64>| SignalRow {
            step: 3,
            attempt: 1,
            rank: 2,
            micro: None,
            signal,
            value,
            max_abs,
            scale: None,
            ranks: None,
        };
        let rows = vec![
            row(SignalKind::Loss, 1.234_567_890_123, None),
            row(SignalKind::Loss, f64::NAN, None),
            SignalRow { scale: Some(65536.0), ..row(SignalKind::Gradients, f64::from(0.1f32), Some(f64::INFINITY)) },
            SignalRow { micro: Some(1), ..row(SignalKind::Loss, -0.0, None) },
            SignalRow { ranks: Some("1;3".into()), ..row(SignalKind::Digests, 2.0, None) },
        ];
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(SIGNALS_CSV);
        std::fs::write(&p, to_csv(&rows).unwrap()).unwrap();
        let back = read(&p).unwrap();
        assert_eq!(back.len(), rows.len());
        for (a, b) in rows.iter().zip(&back) {
            assert_eq!((a.value.to_bits(), a.max_abs.map(f64::to_bits)), (b.value.to_bits(), b.max_abs.map(f64::to_bits)));
            assert_eq!(
                (a.step, a.attempt, a.rank, a.micro, a.signal, a.scale, &a.ranks),
                (b.step, b.attempt, b.rank, b.micro, b.signal, b.scale, &b.ranks)
            );
        }
        std::fs::write(&p, to_csv(&[]).unwrap()).unwrap();
        assert!(read(&p).unwrap().is_empty());
    }
}
