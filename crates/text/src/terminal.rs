//! Names from files on a terminal: printed, never obeyed.

use std::borrow::Cow;

/// Whether `c` is written as an escape: a control character (C0, DEL, C1: an ESC starts a
/// terminal command, BEL ends one, CR returns the cursor, NUL hides what follows) or a
/// bidirectional-formatting character (which reorders what the terminal shows).
pub(crate) fn hidden(c: char) -> bool {
    c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` to print on a terminal: every control character (C0 including LF and tab, DEL, C1)
/// and bidirectional-formatting character written as Rust's `\u{…}` escape (ESC as `\u{1b}`,
/// BEL as `\u{7}`, NUL as `\u{0}`). For one name: a dataset's, an attribute's, a label.
/// A backslash is left as it is.
pub fn terminal(text: &str) -> Cow<'_, str> {
    escaped(text, false)
}

/// [`terminal`] for text of several lines (a table, an error with its causes): the same
/// escapes, except that LF still ends a line.
pub fn terminal_lines(text: &str) -> Cow<'_, str> {
    escaped(text, true)
}

fn escaped(text: &str, keep_lf: bool) -> Cow<'_, str> {
    let shown = |c: char| !hidden(c) || (keep_lf && c == '\n');
    if text.chars().all(shown) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match shown(c) {
            true => out.push(c),
            false => out.extend(c.escape_unicode()),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped() {
        assert_eq!(terminal("w\x1b]0;pwned\x07"), "w\\u{1b}]0;pwned\\u{7}");
        assert_eq!(terminal("\x1b[2J"), "\\u{1b}[2J");
        assert_eq!(terminal("a\rb\0c\x7f\u{9b}\n\t"), "a\\u{d}b\\u{0}c\\u{7f}\\u{9b}\\u{a}\\u{9}");
        assert_eq!(terminal("abc\u{202e}"), "abc\\u{202e}");
        assert_eq!(terminal_lines("a\x1b\nb\r\n"), "a\\u{1b}\nb\\u{d}\n");
        assert!(matches!(terminal("conv1.weight é"), Cow::Borrowed(_)));
    }

    proptest::proptest! {
        #[test]
        fn no_control_character_survives(text in "\\PC*|[\\x00-\\x1f\\x7f-\\u{9f}a]*") {
            proptest::prop_assert!(!terminal(&text).chars().any(char::is_control));
            proptest::prop_assert!(!terminal_lines(&text).chars().any(|c| c.is_control() && c != '\n'));
        }
    }
}
