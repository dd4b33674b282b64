//! `resilab export --renames-from CONFIG`: the configuration's `[[import.rename]]` rules turned
//! around, so that an exported file carries the names of the module it was imported from and
//! loads into it with `strict=True`.
//!
//! A rule can be turned around when its `from` is text (letters, digits, `_` and escaped
//! punctuation such as `\.`) and capturing groups (`(\d+)`, `(?P<stage>\d)`), optionally
//! anchored with `^` and `$`, and its `to` refers to each group exactly once (`$1`, `${1}`,
//! `${stage}`): then the turned rule is itself a regular expression, `to` with each reference
//! replaced by its group, and it puts back `from` with each group's text. So
//! `from = "^stage(\d)\.block0\."`, `to = "layer${1}.0."` turns into
//! `^layer(\d)\.0\.` → `stage${1}.block0.`. Forward and back go through the same
//! [`rename`] (the import's), and each exported name is checked by renaming it forward again: a
//! name that would not come back is an error naming it.

use std::collections::BTreeMap;

use regex::Regex;
use resilab_runner::Rename;

use crate::fit::rename;
use crate::{Error, Result};

/// The renames of a configuration, turned around.
pub struct Reverse {
    /// The turned rules, last rule first: [`rename`] with them undoes the import's.
    undo: Vec<(Regex, String)>,
    forward: Vec<(Regex, String)>,
}

impl Reverse {
    /// Turns `rules` around, or says which rule cannot be and why.
    pub fn new(rules: &[Rename]) -> Result<Self> {
        let mut undo = rules.iter().enumerate().map(|(i, r)| reverse(i, r)).collect::<Result<Vec<_>>>()?;
        undo.reverse();
        Ok(Self { undo, forward: crate::fit::compile(rules)? })
    }

    /// The file's name of each of `names`, checked: renamed forward, each gives its own name
    /// back (so no two names become one file name).
    pub fn names<'a>(&self, names: impl Iterator<Item = &'a str>) -> Result<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        for name in names {
            let file = rename(name, &self.undo);
            let back = rename(&file, &self.forward);
            if back != name {
                return Err(Error::Config(format!(
                    "--renames-from: {name} would be exported as {file}, which the rules rename to {back}, not back to {name}: the rules cannot be undone for this name"
                )));
            }
            out.insert(name.to_string(), file);
        }
        Ok(out)
    }
}

/// A piece of a rule's `from`: text, or a capturing group (its number, name and pattern).
#[derive(Clone, Debug, PartialEq, Eq)]
enum From {
    Text(String),
    Group { index: usize, name: Option<String>, pattern: String },
}

/// A piece of a rule's `to`: text, or a reference to a group (by number or name).
#[derive(Clone, Debug, PartialEq, Eq)]
enum To {
    Text(String),
    Ref(String),
}

/// A rule's `from`, split: anchored at the start, at the end, and its pieces.
struct Pattern {
    start: bool,
    end: bool,
    pieces: Vec<From>,
}

/// Rule `i` turned around: the regular expression that finds what `to` wrote, and the
/// replacement that writes `from`'s text back.
fn reverse(i: usize, r: &Rename) -> Result<(Regex, String)> {
    let key = format!("import.rename[{i}]");
    let p = split_from(&r.from).ok_or_else(|| {
        Error::Config(format!(
            "{key}.from = {:?} is a pattern, not a text with groups: export can undo text, ^ and $, and capturing groups that to uses once each (e.g. from = \"^stage(\\\\d)\\\\.\", to = \"layer${{1}}.\")",
            r.from
        ))
    })?;
    let to = split_to(&r.to);
    let group_of = |reference: &str| {
        p.pieces.iter().find_map(|piece| match piece {
            From::Group { index, name, .. } if index.to_string() == reference || name.as_deref() == Some(reference) => Some(*index),
            _ => None,
        })
    };
    let mut pattern = String::from(if p.start { "^" } else { "" });
    let mut used = BTreeMap::new();
    for piece in &to {
        match piece {
            To::Text(t) => pattern += &regex::escape(t),
            To::Ref(reference) => {
                let index = group_of(reference).ok_or_else(|| {
                    Error::Config(format!(
                        "{key}.to = {:?} refers to group {reference}, which from does not have (a name runs on over letters, digits and _: write ${{1}}_ for group 1 then _)",
                        r.to
                    ))
                })?;
                *used.entry(index).or_insert(0) += 1;
                let inner = p.pieces.iter().find_map(|x| match x {
                    From::Group { index: j, pattern, .. } if *j == index => Some(pattern.as_str()),
                    _ => None,
                });
                pattern += &format!("(?P<g{index}>{})", inner.unwrap_or_default());
            }
        }
    }
    for piece in &p.pieces {
        if let From::Group { index, .. } = piece
            && used.get(index) != Some(&1)
        {
            let times = used.get(index).copied().unwrap_or(0);
            return Err(Error::Config(format!(
                "{key}: group {index} of from = {:?} is used {times} times in to = {:?}: export can put a group's text back only when to holds it exactly once",
                r.from, r.to
            )));
        }
    }
    if pattern.is_empty() && !p.end {
        return Err(Error::Config(format!(
            "{key} removes {:?} wherever it is: export cannot tell where to put it back (anchor it with ^ or $)",
            r.from
        )));
    }
    if p.end {
        pattern.push('$');
    }
    let replacement: String = p
        .pieces
        .iter()
        .map(|piece| match piece {
            From::Text(t) => t.replace('$', "$$"),
            From::Group { index, .. } => format!("${{g{index}}}"),
        })
        .collect();
    let re = Regex::new(&pattern)
        .map_err(|e| Error::Config(format!("{key} cannot be turned around: {}", e.to_string().lines().last().unwrap_or_default())))?;
    Ok((re, replacement))
}

/// `from` as anchors, text and capturing groups; `None` when it holds anything else (a `.`, a
/// class or a repetition outside a group, a nested or non-capturing group).
fn split_from(from: &str) -> Option<Pattern> {
    let (start, body) = match from.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, from),
    };
    let mut p = Pattern { start, end: false, pieces: Vec::new() };
    let mut text = String::new();
    let mut chars = body.chars().peekable();
    let mut groups = 0;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                e if e.is_ascii_punctuation() => text.push(e),
                _ => return None,
            },
            '(' => {
                groups += 1;
                let name = group_name(&mut chars)?;
                let pattern = group_body(&mut chars)?;
                p.pieces.push(From::Text(std::mem::take(&mut text)));
                p.pieces.push(From::Group { index: groups, name, pattern });
            }
            '$' if chars.peek().is_none() => p.end = true,
            '.' | '*' | '+' | '?' | '[' | ']' | '{' | '}' | '|' | '^' | '$' | ')' => return None,
            c => text.push(c),
        }
    }
    p.pieces.push(From::Text(text));
    p.pieces.retain(|x| x != &From::Text(String::new()));
    Some(p)
}

/// After a group's `(`: its name (`?P<name>` or `?<name>`), `None` inside for an unnamed one;
/// `None` outside for a non-capturing group or a flag.
fn group_name(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<Option<String>> {
    if chars.peek() != Some(&'?') {
        return Some(None);
    }
    chars.next();
    if chars.peek() == Some(&'P') {
        chars.next();
    }
    if chars.next()? != '<' {
        return None;
    }
    let name: String = chars.by_ref().take_while(|&c| c != '>').collect();
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then_some(Some(name))
}

/// A group's pattern up to its `)`, which has no group inside it.
fn group_body(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<String> {
    let mut body = String::new();
    let mut class = false;
    loop {
        let c = chars.next()?;
        match c {
            '\\' => {
                body.push(c);
                body.push(chars.next()?);
                continue;
            }
            '[' => class = true,
            ']' => class = false,
            '(' if !class => return None,
            ')' if !class => return (!body.is_empty()).then_some(body),
            _ => {}
        }
        body.push(c);
    }
}

/// `to` as text and group references, read as the regex crate reads a replacement: `$$` is a
/// `$`, `${name}` and `$name` (the longest run of letters, digits and `_`) refer to a group, and
/// any other `$` is text.
fn split_to(to: &str) -> Vec<To> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut rest = to;
    while let Some(at) = rest.find('$') {
        text += &rest[..at];
        let after = &rest[at + 1..];
        let (reference, used) = if let Some(tail) = after.strip_prefix('$') {
            text.push('$');
            rest = tail;
            continue;
        } else if let Some(braced) = after.strip_prefix('{').and_then(|b| b.find('}').map(|end| &b[..end])) {
            (braced.to_string(), braced.len() + 2)
        } else {
            let name: String = after.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            let n = name.len();
            (name, n)
        };
        if reference.is_empty() {
            text.push('$');
            rest = after;
            continue;
        }
        out.push(To::Text(std::mem::take(&mut text)));
        out.push(To::Ref(reference));
        rest = &after[used..];
    }
    text += rest;
    out.push(To::Text(text));
    out.retain(|x| x != &To::Text(String::new()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(from: &str, to: &str) -> Rename {
        Rename { from: from.into(), to: to.into() }
    }

    #[test]
    fn literal_renames_are_undone_and_checked_forward() {
        let r = Reverse::new(&[rule("^module\\.", ""), rule("downsample\\.0\\.", "downsample.conv.")]).unwrap();
        let names = r.names(["layer2.0.downsample.conv.weight", "stem.conv.weight"].into_iter()).unwrap();
        assert_eq!(names["layer2.0.downsample.conv.weight"], "module.layer2.0.downsample.0.weight");
        assert_eq!(names["stem.conv.weight"], "module.stem.conv.weight");
        let suffix = Reverse::new(&[rule("_orig$", "")]).unwrap();
        assert_eq!(suffix.names(["fc.weight"].into_iter()).unwrap()["fc.weight"], "fc.weight_orig");
    }

    #[test]
    fn groups_are_put_back_where_from_had_them() {
        // The rule: a user's `stage<N>.block0.` is resilab's `layer<N>.0.`.
        let r = Reverse::new(&[rule("^module\\.", ""), rule("^stage(\\d+)\\.block0\\.", "layer${1}.0.")]).unwrap();
        let names = r.names(["layer12.0.conv1.weight", "stem.conv.weight"].into_iter()).unwrap();
        assert_eq!(names["layer12.0.conv1.weight"], "module.stage12.block0.conv1.weight");
        assert_eq!(names["stem.conv.weight"], "module.stem.conv.weight");
        // Named groups, `$name` and `$1` without braces, two groups swapped, a `$` kept as text.
        let named = Reverse::new(&[rule("^(?P<kind>conv|bn)_(\\d)\\.", "block$2.${kind}.")]).unwrap();
        assert_eq!(named.names(["block3.conv.weight"].into_iter()).unwrap()["block3.conv.weight"], "conv_3.weight");
        let dollar = Reverse::new(&[rule("^a\\$", "b$$")]).unwrap();
        assert_eq!(dollar.names(["b$.w"].into_iter()).unwrap()["b$.w"], "a$.w");
    }

    #[test]
    fn to_is_read_as_the_regex_crate_reads_a_replacement() {
        let refs = |to: &str| split_to(to);
        assert_eq!(refs("layer${1}.0."), [To::Text("layer".into()), To::Ref("1".into()), To::Text(".0.".into())]);
        assert_eq!(refs("$1_x"), [To::Ref("1_x".into())]);
        assert_eq!(refs("a$$b$"), [To::Text("a$b$".into())]);
        assert_eq!(refs("${x"), [To::Text("${x".into())]);
        // The same reading as the regex crate's own expansion, on every case above.
        let re = Regex::new("(?P<x>q)").unwrap();
        for to in ["layer${1}.0.", "a$$b$", "${x"] {
            let expanded: String = refs(to)
                .iter()
                .map(|p| match p {
                    To::Text(t) => t.clone(),
                    To::Ref(_) => "q".into(),
                })
                .collect();
            assert_eq!(re.replace("q", to), expanded, "{to}");
        }
    }

    #[test]
    fn what_cannot_be_undone_is_one_line_naming_the_rule_or_the_name() {
        let e = |rules: &[Rename]| Reverse::new(rules).err().unwrap().to_string();
        // `$1_` is group "1_", as the regex crate reads it, and names no group of from.
        assert!(e(&[rule("^module\\.", ""), rule("^(\\w+)\\.", "$1_")]).starts_with("import.rename[1].to = \"$1_\" refers to group 1_"));
        assert!(e(&[rule("conv.", "c.")]).starts_with("import.rename[0].from = \"conv.\" is a pattern"));
        assert!(e(&[rule("^(?:a)b", "c")]).contains("is a pattern"), "a non-capturing group");
        assert!(e(&[rule("^(a(b))", "$1")]).contains("is a pattern"), "a nested group");
        // A group's text must come back from exactly one place in to.
        assert!(e(&[rule("^s(\\d)\\.(\\d)", "layer$1.")]).contains("group 2 of from"), "a group to drops");
        assert!(e(&[rule("^s(\\d)", "$1${1}")]).contains("is used 2 times"), "a group to doubles");
        assert!(e(&[rule("\\.bias", "")]).contains("wherever it is"));
        // A model name the rules would not give back: its file name renames to another.
        let bn = Reverse::new(&[rule("bn\\.", "norm.")]).unwrap();
        assert_eq!(bn.names(["a.norm.weight"].into_iter()).unwrap()["a.norm.weight"], "a.bn.weight");
        let err = bn.names(["a.bn.weight"].into_iter()).unwrap_err().to_string();
        assert_eq!(
            err,
            "--renames-from: a.bn.weight would be exported as a.bn.weight, which the rules rename to a.norm.weight, not back to a.bn.weight: the rules cannot be undone for this name"
        );
    }
}
