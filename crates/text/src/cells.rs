//! CSV cells a spreadsheet shows as text, and the readers that give them back as written.

use std::borrow::Cow;
use std::io::Write;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The first characters that make a spreadsheet read a cell as a formula (OWASP's list).
const FORMULA_STARTS: &[u8] = b"=+-@\t\r";

/// The cell `text` as resilab writes it: with a leading `'` when it begins with one of
/// `=`, `+`, `-`, `@`, a tab or a CR and does not read as a number, or when it begins with `'`
/// (so that [`csv_uncell`] can tell the quote it added from one of the text's own).
pub fn csv_cell(text: &str) -> Cow<'_, str> {
    match needs_quote(text.as_bytes()) {
        true => Cow::Owned(format!("'{text}")),
        false => Cow::Borrowed(text),
    }
}

/// A cell as [`csv_cell`] wrote it, back as the text it was given: without one leading `'`.
pub fn csv_uncell(cell: &str) -> &str {
    cell.strip_prefix('\'').unwrap_or(cell)
}

/// Whether a cell needs a leading `'`.
fn needs_quote(cell: &[u8]) -> bool {
    match cell.first() {
        Some(b'\'') => true,
        Some(c) if FORMULA_STARTS.contains(c) => !std::str::from_utf8(cell).is_ok_and(|s| s.parse::<f64>().is_ok()),
        _ => false,
    }
}

/// The bytes of one cell as [`csv_cell`] writes it.
fn cell_bytes(cell: &[u8]) -> Cow<'_, [u8]> {
    match needs_quote(cell) {
        true => Cow::Owned([b"'".as_slice(), cell].concat()),
        false => Cow::Borrowed(cell),
    }
}

/// A record read from a file resilab wrote, each cell as [`csv_uncell`] gives it back.
pub fn unescaped(record: &csv::StringRecord) -> csv::StringRecord {
    let mut r: csv::StringRecord = record.iter().map(csv_uncell).collect();
    r.set_position(record.position().cloned());
    r
}

/// Every row of `reader` (which reads its header) as a `T`, each cell unescaped first.
pub fn csv_rows<T: DeserializeOwned, R: std::io::Read>(reader: &mut csv::Reader<R>) -> csv::Result<Vec<T>> {
    let headers = reader.headers()?.clone();
    reader.records().map(|r| unescaped(&r?).deserialize(Some(&headers))).collect()
}

/// A CSV writer whose every cell goes through [`csv_cell`]: `csv::Writer`'s calls, with the
/// same header rule (a header row from the first struct serialized, unless built
/// [`without_headers`](Self::without_headers) or a record was written first).
pub struct CsvWriter<W: Write> {
    inner: csv::Writer<W>,
    /// Whether the next struct serialized writes its header row first.
    header: bool,
}

impl<W: Write> CsvWriter<W> {
    /// A writer that writes the header row of the first struct serialized when `headers`.
    pub fn new(w: W, headers: bool) -> Self {
        Self { inner: csv::WriterBuilder::new().has_headers(headers).from_writer(w), header: headers }
    }

    /// A writer that writes the header row of the first struct serialized.
    pub fn from_writer(w: W) -> Self {
        Self::new(w, true)
    }

    /// A writer that writes no header row of its own.
    pub fn without_headers(w: W) -> Self {
        Self::new(w, false)
    }

    /// Writes one record, each cell through [`csv_cell`].
    pub fn write_record<I, T>(&mut self, record: I) -> csv::Result<()>
    where
        I: IntoIterator<Item = T>,
        T: AsRef<[u8]>,
    {
        self.header = false;
        for field in record {
            self.inner.write_field(cell_bytes(field.as_ref()))?;
        }
        self.inner.write_record(None::<&[u8]>)
    }

    /// Serializes one record as `csv::Writer::serialize` does (its header row first, for the
    /// first struct), each cell through [`csv_cell`].
    pub fn serialize<S: Serialize>(&mut self, record: S) -> csv::Result<()> {
        let mut scratch = csv::WriterBuilder::new().has_headers(self.header).buffer_capacity(1024).from_writer(Vec::new());
        scratch.serialize(record)?;
        let bytes = scratch.into_inner().map_err(|e| csv::Error::from(e.into_error()))?;
        let mut lines = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(bytes.as_slice());
        let mut line = csv::ByteRecord::new();
        while lines.read_byte_record(&mut line)? {
            self.write_record(&line)?;
        }
        Ok(())
    }

    /// Flushes what is buffered to the underlying writer.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }

    /// The underlying writer, flushed (the error is the flush's).
    pub fn into_inner(self) -> std::io::Result<W> {
        self.inner.into_inner().map_err(|e| e.into_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_starts_gain_a_quote_and_numbers_stay() {
        for (cell, written) in [
            ("=cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0"),
            ("+1+cmd", "'+1+cmd"),
            ("-2+3", "'-2+3"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("\t=1", "'\t=1"),
            ("\r=1", "'\r=1"),
            ("'quoted", "''quoted"),
            ("-0.5", "-0.5"),
            ("-1e-3", "-1e-3"),
            ("+3", "+3"),
            ("-inf", "-inf"),
            ("plain", "plain"),
            ("a=b", "a=b"),
            ("", ""),
        ] {
            assert_eq!(csv_cell(cell), written, "{cell:?}");
            assert_eq!(csv_uncell(&csv_cell(cell)), cell, "{cell:?}");
        }
    }

    #[derive(Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Row {
        label: String,
        value: f64,
    }

    #[test]
    fn serialized_rows_read_back_as_written() {
        let rows = vec![
            Row { label: "=cmd|' /C calc'!A0".into(), value: -0.5 },
            Row { label: "'=x".into(), value: 1e-3 },
            Row { label: "line\nbreak, \"quoted\"".into(), value: -1.0 },
        ];
        let mut w = CsvWriter::from_writer(Vec::new());
        for r in &rows {
            w.serialize(r).unwrap();
        }
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        assert!(text.starts_with("label,value\n'=cmd|' /C calc'!A0,-0.5\n''=x,0.001\n"), "{text}");
        let mut raw = csv::Reader::from_reader(text.as_bytes());
        let back: Vec<Row> = csv_rows(&mut raw).unwrap();
        assert_eq!(back, rows);
    }

    #[test]
    fn header_rule_follows_csv_writer() {
        let mut w = CsvWriter::from_writer(Vec::new());
        w.write_record(["a", "=b"]).unwrap();
        w.serialize(("x", 1)).unwrap();
        w.serialize(Row { label: "@x".into(), value: 2.0 }).unwrap();
        assert_eq!(String::from_utf8(w.into_inner().unwrap()).unwrap(), "a,'=b\nx,1\n'@x,2.0\n");
        let mut w = CsvWriter::without_headers(Vec::new());
        w.serialize(Row { label: "l".into(), value: 2.0 }).unwrap();
        assert_eq!(String::from_utf8(w.into_inner().unwrap()).unwrap(), "l,2.0\n");
    }

    proptest::proptest! {
        #[test]
        fn every_cell_round_trips_and_none_starts_a_formula(cell in ".*") {
            let written = csv_cell(&cell);
            proptest::prop_assert_eq!(csv_uncell(&written), cell.as_str());
            let first = written.as_bytes().first().copied();
            let number = written.parse::<f64>().is_ok();
            proptest::prop_assert!(number || !first.is_some_and(|c| FORMULA_STARTS.contains(&c)));
        }
    }
}
