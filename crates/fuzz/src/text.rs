//! Mutations of a TOML configuration's text: a flipped character, a deleted or duplicated line,
//! a number replaced with a huge, negative or zero value, an unknown key inserted.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Values a number is replaced with: zero, negative, huge, out of range for i64 and u32, and
/// the float specials.
pub const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "-7",
    "0.0",
    "-0.5",
    "1e308",
    "-1e308",
    "1e30",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551616",
    "4294967297",
    "1000000000",
    "nan",
    "inf",
    "-inf",
];

/// One mutation of a configuration's text. Line indices count `\n`-separated lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TextMutation {
    /// Replace the character at byte offset `at` with `to`.
    FlipChar {
        /// Byte offset of the character (a char boundary).
        at: usize,
        /// The new character.
        to: char,
    },
    /// Remove a line.
    DeleteLine(usize),
    /// Insert a copy of a line after it.
    DuplicateLine(usize),
    /// Replace the number at bytes `start..end` with `with`.
    ReplaceNumber {
        /// First byte of the number.
        start: usize,
        /// One past its last byte.
        end: usize,
        /// The replacement, one of [`NUMBERS`].
        with: String,
    },
    /// Insert the line `text` before line `line` (at the end when `line` is the line count).
    InsertLine {
        /// Where.
        line: usize,
        /// The new line: an unknown key.
        text: String,
    },
}

impl std::fmt::Display for TextMutation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::FlipChar { at, to } => write!(f, "character at byte {at} -> {to:?}"),
            Self::DeleteLine(i) => write!(f, "delete line {}", i + 1),
            Self::DuplicateLine(i) => write!(f, "duplicate line {}", i + 1),
            Self::ReplaceNumber { start, end, with } => write!(f, "number at bytes {start}..{end} -> {with}"),
            Self::InsertLine { line, text } => write!(f, "insert {text:?} before line {}", line + 1),
        }
    }
}

/// Byte ranges of the numbers in `text`: maximal runs of `0-9 . _ + - e E` that start with a
/// digit or a sign followed by a digit, are not preceded by a letter, digit or underscore (so
/// `beta1` holds none), and contain a digit.
pub fn numbers(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let in_num = |c: u8| c.is_ascii_digit() || b"._+-eE".contains(&c);
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts = b[i].is_ascii_digit() || (matches!(b[i], b'-' | b'+') && b.get(i + 1).is_some_and(u8::is_ascii_digit));
        let free = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b'.');
        if starts && free {
            let mut j = i + 1;
            while j < b.len() && in_num(b[j]) {
                j += 1;
            }
            out.push((i, j));
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

impl TextMutation {
    /// Draws a mutation of `text` (which must not be empty).
    pub fn draw(rng: &mut ChaCha8Rng, text: &str) -> Self {
        let lines = text.split('\n').count();
        let nums = numbers(text);
        match rng.random_range(0..100) {
            0..25 => Self::draw_flip(rng, text),
            25..40 => Self::DeleteLine(rng.random_range(0..lines)),
            40..50 => Self::DuplicateLine(rng.random_range(0..lines)),
            50..85 if !nums.is_empty() => {
                let (start, end) = nums[rng.random_range(0..nums.len())];
                Self::ReplaceNumber { start, end, with: NUMBERS[rng.random_range(0..NUMBERS.len())].to_string() }
            }
            _ => {
                let value = ["1", "\"x\"", "true", "[1, 2]", "{ a = 1 }"][rng.random_range(0..5)];
                Self::InsertLine { line: rng.random_range(0..=lines), text: format!("fuzz_{} = {value}", rng.random_range(0..1000u32)) }
            }
        }
    }

    /// One character changed: an ASCII character gets one of its 7 bits flipped, any other
    /// character becomes `x`.
    fn draw_flip(rng: &mut ChaCha8Rng, text: &str) -> Self {
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        let (at, c) = chars[rng.random_range(0..chars.len())];
        let to = if c.is_ascii() { char::from(c as u8 ^ (1 << rng.random_range(0..7u32))) } else { 'x' };
        Self::FlipChar { at, to }
    }

    /// The mutated text.
    pub fn apply(&self, text: &str) -> String {
        let mut lines: Vec<&str> = text.split('\n').collect();
        match self {
            Self::FlipChar { at, to } => {
                let Some(c) = text[*at..].chars().next() else { return text.to_string() };
                format!("{}{to}{}", &text[..*at], &text[at + c.len_utf8()..])
            }
            Self::DeleteLine(i) if *i < lines.len() => {
                lines.remove(*i);
                lines.join("\n")
            }
            Self::DuplicateLine(i) if *i < lines.len() => {
                lines.insert(*i, lines[*i]);
                lines.join("\n")
            }
            Self::ReplaceNumber { start, end, with } => format!("{}{with}{}", &text[..*start], &text[*end..]),
            Self::InsertLine { line, text: new } => {
                lines.insert((*line).min(lines.len()), new);
                lines.join("\n")
            }
            Self::DeleteLine(_) | Self::DuplicateLine(_) => text.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng as _;

    const CFG: &str =
        "seed = 7\n\n[model]\narch = \"resnet\"\ndepth = 8\nwidth = 0.25\n\n[optimizer]\nlr = 5e-2\nbeta1 = 0.9\nmomentum = -0.5\n";

    #[test]
    fn numbers_are_found_whole() {
        let found: Vec<&str> = numbers(CFG).iter().map(|&(s, e)| &CFG[s..e]).collect();
        assert_eq!(found, ["7", "8", "0.25", "5e-2", "0.9", "-0.5"]);
    }

    proptest! {
        #[test]
        fn every_mutation_changes_exactly_what_it_says(seed: u64) {
            let m = TextMutation::draw(&mut ChaCha8Rng::seed_from_u64(seed), CFG);
            let out = m.apply(CFG);
            let (before, after): (Vec<&str>, Vec<&str>) = (CFG.split('\n').collect(), out.split('\n').collect());
            match &m {
                TextMutation::FlipChar { at, to } => {
                    let c = CFG[*at..].chars().next().unwrap();
                    prop_assert_ne!(c, *to);
                    prop_assert_eq!(&out[..*at], &CFG[..*at]);
                    prop_assert_eq!(out[*at..].chars().next().unwrap(), *to);
                    prop_assert_eq!(&out[at + to.len_utf8()..], &CFG[at + c.len_utf8()..]);
                }
                TextMutation::DeleteLine(i) => {
                    let mut want = before.clone();
                    want.remove(*i);
                    prop_assert_eq!(after, want);
                }
                TextMutation::DuplicateLine(i) => {
                    prop_assert_eq!(after.len(), before.len() + 1);
                    prop_assert_eq!(after[*i], after[i + 1]);
                    prop_assert_eq!(&after[..=*i], &before[..=*i]);
                    prop_assert_eq!(&after[i + 2..], &before[i + 1..]);
                }
                TextMutation::ReplaceNumber { start, end, with } => {
                    prop_assert!(numbers(CFG).contains(&(*start, *end)));
                    prop_assert!(NUMBERS.contains(&with.as_str()));
                    prop_assert_eq!(out, format!("{}{with}{}", &CFG[..*start], &CFG[*end..]));
                }
                TextMutation::InsertLine { line, text } => {
                    prop_assert!(text.starts_with("fuzz_"));
                    let mut want = before.clone();
                    want.insert(*line, text.as_str());
                    prop_assert_eq!(after, want);
                }
            }
        }
    }
}
