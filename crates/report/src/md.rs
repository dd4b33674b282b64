//! `report.md`'s tables: each column a heading and what it shows of one CSV row.

use std::fmt::Write as _;

/// A column of a `report.md` table: its heading and what it shows of one CSV row (empty when
/// the row has nothing to show).
pub(crate) type MdColumn<T> = (&'static str, fn(&T) -> String);

/// Appends a markdown table to `md`: the headings `lead` and then `cols`'; per row, its `lead`
/// values and then what each column shows of it.
pub(crate) fn md_table<'a, T: 'a>(
    md: &mut String,
    lead: &[String],
    cols: &[&MdColumn<T>],
    rows: impl IntoIterator<Item = (Vec<String>, &'a T)>,
) {
    let mut header: Vec<&str> = lead.iter().map(String::as_str).collect();
    header.extend(cols.iter().map(|(h, _)| *h));
    let _ = writeln!(md, "| {} |", header.join(" | "));
    let _ = writeln!(md, "|{}|", vec!["---"; header.len()].join("|"));
    for (mut line, row) in rows {
        line.extend(cols.iter().map(|(_, show)| show(row)));
        let _ = writeln!(md, "| {} |", line.join(" | "));
    }
}
