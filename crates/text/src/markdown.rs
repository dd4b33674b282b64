//! Text from a config or a file inside Markdown: shown as written, never as markup.

use crate::terminal::hidden;

/// `text` escaped for Markdown (CommonMark and GitHub's tables), to sit inside a line: a table
/// cell, a heading, a sentence.
///
/// - `|` (a table's delimiter) and the characters of links, images, code, emphasis,
///   strike-through and headings (`\`, `[`, `]`, `!`, `(`, `)`, `` ` ``, `*`, `_`, `~`, `#`)
///   gain a backslash (but for `_` between two letters or digits, which is no emphasis:
///   `injection_tries` stays as it is);
/// - HTML's `<`, `>` and `&` become `&lt;`, `&gt;` and `&amp;` (so no tag or entity reaches a
///   renderer);
/// - a line break (CR, LF, or CR LF) becomes one space, so the text stays on its line;
/// - any other control character is written as a `\u{1b}` escape, as [`crate::terminal`] does.
pub fn markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut chars = text.chars().peekable();
    let mut before = None;
    while let Some(c) = chars.next() {
        let after = chars.peek().copied();
        let word = |x: Option<char>| x.is_some_and(char::is_alphanumeric);
        match c {
            '\r' if after == Some('\n') => {}
            // Between two letters or digits `_` neither opens nor closes emphasis.
            '_' if word(before) && word(after) => out.push('_'),
            '\r' | '\n' => out.push(' '),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\\' | '|' | '[' | ']' | '!' | '(' | ')' | '`' | '*' | '_' | '~' | '#' => {
                out.push('\\');
                out.push(c);
            }
            c if hidden(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
        before = Some(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_shows_as_text() {
        for (text, shown) in [
            ("<script>alert(1)</script>", "&lt;script&gt;alert\\(1\\)&lt;/script&gt;"),
            ("a\n# heading", "a \\# heading"),
            ("a\r\nb\rc", "a b c"),
            ("![x](http://example.invalid/x.png)", "\\!\\[x\\]\\(http://example.invalid/x.png\\)"),
            ("a|b", "a\\|b"),
            ("&amp;", "&amp;amp;"),
            ("`code` *em* _em_ ~~s~~ \\", "\\`code\\` \\*em\\* \\_em\\_ \\~\\~s\\~\\~ \\\\"),
            ("\x1b]0;t\x07\0", "\\u{1b}\\]0;t\\u{7}\\u{0}"),
            ("resnet-8 1e-3", "resnet-8 1e-3"),
            ("injection_tries _x_ a_ _b", "injection_tries \\_x\\_ a\\_ \\_b"),
        ] {
            assert_eq!(markdown(text), shown, "{text:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn no_markup_or_line_break_survives(text in ".*") {
            let md = markdown(&text);
            proptest::prop_assert!(!md.contains(['<', '>', '\n', '\r']));
            // Every `|`, `[`, `!` or backtick is escaped: an odd run of backslashes before it.
            let b = md.as_bytes();
            for (i, c) in b.iter().enumerate() {
                if b"|[]!()`*~#".contains(c) {
                    let run = b[..i].iter().rev().take_while(|&&x| x == b'\\').count();
                    proptest::prop_assert!(run % 2 == 1, "{md:?} at {i}");
                }
            }
        }
    }
}
