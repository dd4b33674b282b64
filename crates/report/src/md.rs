//! `report.md`'s tables: each column a heading and what it shows of one CSV row.

use std::fmt::Write as _;

/// A column of a `report.md` table: its heading and what it shows of one CSV row (empty when
/// the row has nothing to show).
pub(crate) type MdColumn<T> = (&'static str, fn(&T) -> String);

/// Appends a markdown table to `md`: the headings `lead` and then `cols`'; per row, its `lead`
/// values and then what each column shows of it. `lead` (axis keys) and its values (grid
/// labels) come from a config and are escaped ([`resilab_text::markdown`]); a column that shows
/// such text escapes it itself.
pub(crate) fn md_table<'a, T: 'a>(
    md: &mut String,
    lead: &[String],
    cols: &[&MdColumn<T>],
    rows: impl IntoIterator<Item = (Vec<String>, &'a T)>,
) {
    let mut header: Vec<String> = lead.iter().map(|l| resilab_text::markdown(l)).collect();
    header.extend(cols.iter().map(|(h, _)| h.to_string()));
    let _ = writeln!(md, "| {} |", header.join(" | "));
    let _ = writeln!(md, "|{}|", vec!["---"; header.len()].join("|"));
    for (line, row) in rows {
        let mut line: Vec<String> = line.iter().map(|v| resilab_text::markdown(v)).collect();
        line.extend(cols.iter().map(|(_, show)| show(row)));
        let _ = writeln!(md, "| {} |", line.join(" | "));
    }
}
