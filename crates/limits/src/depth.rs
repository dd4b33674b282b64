//! How deep a TOML or YAML text nests, counted in one linear pass before a parser sees it.
//!
//! resilab's configurations nest a handful of levels. A hostile one that nests a hundred
//! thousand (`a: [[[[…]]]]`, 200 KB) keeps the YAML parser busy for over a minute (its work
//! grows with the square of the depth) before its own recursion limit refuses it, and the TOML
//! parser refuses such a file with its whole first line in the message. [`check_toml_depth`] and
//! [`check_yaml_depth`] refuse any text deeper than [`MAX_DEPTH`] at once, naming the line and
//! column where the limit is passed.
//!
//! The TOML count is exact for arrays and inline tables (strings and comments are skipped as
//! the grammar defines them; dotted keys are left to the parser's own limit, which is fast).
//! The YAML count may only err high: it adds the block levels (one per deeper indentation, and
//! one per `- ` or `? ` that opens a line) to every `[` or `{` not yet closed, wherever it
//! stands outside a whole-line comment, quoted text included, since telling a quote from an
//! apostrophe takes a parser. Text with more than [`MAX_DEPTH`] unclosed brackets in its strings
//! is refused, a price no real configuration pays.
//!
//! ```
//! use resilab_limits::{MAX_DEPTH, check_yaml_depth};
//!
//! assert!(check_yaml_depth("a:\n  b: [1, {c: 2}]\n", MAX_DEPTH).is_ok());
//! let deep = format!("a: {}1{}\n", "[".repeat(100_000), "]".repeat(100_000));
//! let e = check_yaml_depth(&deep, MAX_DEPTH).unwrap_err();
//! assert_eq!(e.to_string(), "nests deeper than 64 levels at line 1, column 67 (resilab's configurations nest a handful)");
//! ```

/// The deepest nesting a configuration may have.
pub const MAX_DEPTH: usize = 64;

/// A text nests deeper than the limit; where it first does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("nests deeper than {max} levels at line {line}, column {column} (resilab's configurations nest a handful)")]
pub struct DepthError {
    /// The limit.
    pub max: usize,
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1, in characters.
    pub column: usize,
}

fn too_deep(max: usize, line: usize, text_line: &str, byte: usize) -> DepthError {
    let column = text_line.get(..byte).map_or(byte, |s| s.chars().count()) + 1;
    DepthError { max, line, column }
}

/// Checks that the arrays and inline tables of a TOML text nest at most `max` deep (a table
/// header's brackets count while they are open).
pub fn check_toml_depth(text: &str, max: usize) -> Result<(), DepthError> {
    let b = text.as_bytes();
    let (mut i, mut depth, mut line, mut line_start) = (0, 0usize, 1, 0);
    while i < b.len() {
        match b[i] {
            b'\n' => {
                line += 1;
                line_start = i + 1;
            }
            b'#' => {
                while i + 1 < b.len() && b[i + 1] != b'\n' {
                    i += 1;
                }
            }
            q @ (b'"' | b'\'') => {
                let multi = b[i..].starts_with(if q == b'"' { b"\"\"\"" } else { b"'''" });
                let (end, lines, last_start) = toml_string_end(b, i, q, multi);
                if lines > 0 {
                    line += lines;
                    line_start = last_start;
                }
                i = end;
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Err(too_deep(max, line, &text[line_start..], i - line_start));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// The byte after the TOML string that opens at `start` with quote `q` (three of them when
/// `multi`), the newlines inside it and where the last of them ends. A one-line string also
/// ends at its line's end (TOML allows no newline in it; the parser will say so).
fn toml_string_end(b: &[u8], start: usize, q: u8, multi: bool) -> (usize, usize, usize) {
    let (mut i, mut lines, mut last_start) = (start + if multi { 3 } else { 1 }, 0, 0);
    while i < b.len() {
        match b[i] {
            b'\\' if q == b'"' && b.get(i + 1).is_some_and(|&c| c != b'\n') => i += 1,
            b'\n' if !multi => return (i, lines, last_start),
            b'\n' => {
                lines += 1;
                last_start = i + 1;
            }
            c if c == q && (!multi || b[i..].starts_with(&[q, q, q])) => {
                // A closing run may hold up to two more quotes that belong to the text.
                let mut end = i + if multi { 3 } else { 1 };
                while multi && end < b.len() && b[end] == q && end < i + 5 {
                    end += 1;
                }
                return (end, lines, last_start);
            }
            _ => {}
        }
        i += 1;
    }
    (b.len(), lines, last_start)
}

/// Checks that a YAML text nests at most `max` deep, counting high where unsure (see the
/// module's documentation).
pub fn check_yaml_depth(text: &str, max: usize) -> Result<(), DepthError> {
    // Indentations of the open block levels, innermost last; brackets open across lines.
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    for (n, text_line) in text.split('\n').enumerate() {
        let b = text_line.as_bytes();
        let indent = b.iter().take_while(|&&c| c == b' ').count();
        let rest = &b[indent..];
        if rest.iter().all(|c| c.is_ascii_whitespace()) || rest.first() == Some(&b'#') {
            continue;
        }
        if flow == 0 {
            while indents.last().is_some_and(|&top| top >= indent) {
                indents.pop();
            }
            indents.push(indent);
        }
        // `- - - x` and `? ? x` open one level per indicator on a single line.
        let mut i = indent;
        let mut compact = 0;
        while i < b.len() && matches!(b[i], b'-' | b'?') && b.get(i + 1).is_none_or(|c| c.is_ascii_whitespace()) {
            compact += 1;
            i += 1;
            while i < b.len() && b[i] == b' ' {
                i += 1;
            }
        }
        let block = indents.len() + compact;
        if block > max {
            return Err(too_deep(max, n + 1, text_line, i.min(b.len())));
        }
        for (j, &c) in b.iter().enumerate().skip(i) {
            match c {
                b'[' | b'{' => {
                    flow += 1;
                    if block + flow > max {
                        return Err(too_deep(max, n + 1, text_line, j));
                    }
                }
                b']' | b'}' => flow = flow.saturating_sub(1),
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn nested(open: &str, close: &str, n: usize) -> (String, String) {
        (open.repeat(n), close.repeat(n))
    }

    #[test]
    fn a_hundred_thousand_levels_are_refused_at_once() {
        let n = 100_000;
        let (o, c) = nested("[", "]", n);
        let (mo, mc) = nested("{a: ", "}", n);
        let (to, tc) = nested("{a = ", "}", n);
        let t = Instant::now();
        for yaml in [format!("a: {o}1{c}\n"), format!("a: {mo}1{mc}\n"), format!("a:\n{}1\n", "- ".repeat(n))] {
            let e = check_yaml_depth(&yaml, MAX_DEPTH).unwrap_err();
            assert_eq!((e.max, e.line), (64, if yaml.starts_with("a:\n") { 2 } else { 1 }), "{e}");
        }
        for toml in [format!("a = {o}1{c}\n"), format!("a = {to}1{tc}\n"), format!("x = 1\n[t]\nb = {o}{c}\n")] {
            let e = check_toml_depth(&toml, MAX_DEPTH).unwrap_err();
            assert_eq!(e.max, 64, "{e}");
        }
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        let e = check_toml_depth(&format!("x = 1\n[t]\nb = {o}{c}\n"), MAX_DEPTH).unwrap_err();
        assert_eq!((e.line, e.column), (3, 5 + 64));
    }

    #[test]
    fn the_limit_is_exact_for_brackets_and_block_levels() {
        let at = |n: usize| format!("a = {}{}\n", "[".repeat(n), "]".repeat(n));
        assert!(check_toml_depth(&at(64), 64).is_ok());
        assert!(check_toml_depth(&at(65), 64).is_err());
        // YAML: the top mapping is a level of its own.
        let at = |n: usize| format!("a: {}{}\n", "[".repeat(n), "]".repeat(n));
        assert!(check_yaml_depth(&at(63), 64).is_ok());
        assert!(check_yaml_depth(&at(64), 64).is_err());
        let block: String = (0..70).map(|i| format!("{}k{i}:\n", " ".repeat(i))).collect();
        assert_eq!(check_yaml_depth(&block, 64).unwrap_err().line, 65);
        let shallow: String = (0..200).map(|i| format!("k{i}:\n  a: 1\n  b: [1, 2]\n")).collect();
        assert!(check_yaml_depth(&shallow, 64).is_ok());
    }

    #[test]
    fn toml_strings_and_comments_are_not_counted() {
        let deep = "[".repeat(100);
        for text in [
            format!("a = \"{deep}\"\n"),
            format!("a = '{deep}'\n"),
            format!("a = \"\"\"\n{deep}\n\\\"\"\" \"\"\"\n"),
            format!("a = '''{deep}''''\n"),
            format!("# {deep}\na = 1\n"),
            format!("\"{deep}\" = 1\n"),
        ] {
            assert_eq!(check_toml_depth(&text, 64), Ok(()), "{text}");
        }
        // After a multi-line string, counting goes on with the right line numbers.
        let e = check_toml_depth(&format!("a = \"\"\"\n\n\"\"\"\nb = {deep}\n"), 64).unwrap_err();
        assert_eq!((e.line, e.column), (4, 5 + 64));
    }

    #[test]
    fn yaml_comments_and_document_shapes_pass() {
        let text = format!(
            "# {}\nseed: 3\nlist:\n  - a\n  - - b\n    - c\n? complex\n: value\nflow: {{a: [1, 2], b: {{c: d}}}}\nmulti: [\n  1,\n  2\n]\nafter: 1\n",
            "[".repeat(100)
        );
        assert_eq!(check_yaml_depth(&text, 64), Ok(()));
        // `  - - b` is the deepest: the top mapping, the list, two compact sequences.
        assert_eq!(check_yaml_depth(&text, 4), Ok(()));
        assert_eq!(check_yaml_depth(&text, 3).unwrap_err().line, 5);
    }
}
