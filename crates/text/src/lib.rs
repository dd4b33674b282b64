//! Text that came from a config or a file, as resilab writes it out: it stays text.
//!
//! Grid labels, campaign names, messages and the names of datasets and attributes in an HDF5
//! file are chosen by whoever wrote the config or the file. Each output kind has one function
//! here that every place writing such text goes through:
//!
//! - **CSV** ([`CsvWriter`], [`csv_cell`]): a text cell that begins with `=`, `+`, `-`, `@`, a
//!   tab or a CR is written with a leading `'` (the OWASP rule against CSV injection), so a
//!   spreadsheet shows it as text instead of running it as a formula; a cell that reads as a
//!   number (`-0.5`, `-1e-3`, `+3`) stays as it is. A cell that begins with `'` gains one too, so
//!   that [`csv_uncell`] (and [`csv_rows`], [`unescaped`]) gives back exactly what was written.
//! - **Markdown** ([`markdown`]): table delimiters, HTML, line breaks and link, image, emphasis
//!   and heading syntax are escaped, so the text shows as written and adds no markup.
//! - **Terminal** ([`terminal`], [`terminal_lines`]): every control character (C0, DEL, C1) and
//!   every bidirectional-formatting character is written as a Rust-style `\u{1b}` escape, so a
//!   name cannot retitle, clear or recolour the terminal.
//!
//! ```
//! assert_eq!(resilab_text::csv_cell("=1+2"), "'=1+2");
//! assert_eq!(resilab_text::csv_cell("-0.5"), "-0.5");
//! assert_eq!(resilab_text::markdown("a|b <i>"), "a\\|b &lt;i&gt;");
//! assert_eq!(resilab_text::terminal("\x1b[2J"), "\\u{1b}[2J");
//! ```

mod cells;
mod markdown;
mod terminal;

pub use cells::{CsvWriter, csv_cell, csv_rows, csv_uncell, unescaped};
pub use markdown::markdown;
pub use terminal::{terminal, terminal_lines};
