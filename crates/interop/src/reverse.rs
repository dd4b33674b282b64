//! `resilab export --renames-from CONFIG`: the configuration's `[[import.rename]]` rules turned
//! around, so that an exported file carries the names of the module it was imported from and
//! loads into it with `strict=True`.
//!
//! A rule can be turned around when its `from` is a text (letters, digits, `_` and escaped
//! punctuation such as `\.`), optionally anchored with `^` or `$`, and its `to` refers to no
//! group: then `to` is put back as that text. Each exported name is checked by renaming it
//! forward again: a name that would not come back is an error naming it.

use std::collections::BTreeMap;

use regex::Regex;
use resilab_runner::Rename;

use crate::fit::rename;
use crate::{Error, Result};

/// Where a reversed rule puts its text back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Anchor {
    Start,
    End,
    Anywhere,
}

/// One rule turned around: `to` becomes `text` again.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Reversed {
    to: String,
    text: String,
    anchor: Anchor,
}

/// The renames of a configuration, turned around.
pub struct Reverse {
    rules: Vec<Reversed>,
    forward: Vec<(Regex, String)>,
}

impl Reverse {
    /// Turns `rules` around, or says which rule cannot be and why.
    pub fn new(rules: &[Rename]) -> Result<Self> {
        let reversed = rules.iter().enumerate().map(|(i, r)| reverse(i, r)).collect::<Result<Vec<_>>>()?;
        Ok(Self { rules: reversed, forward: crate::fit::compile(rules)? })
    }

    /// `name` (resilab's) under the file's names: the rules undone, last first.
    fn undo(&self, name: &str) -> String {
        self.rules.iter().rev().fold(name.to_string(), |n, r| match r.anchor {
            Anchor::Start if r.to.is_empty() => format!("{}{n}", r.text),
            Anchor::Start => n.strip_prefix(&r.to).map_or(n.clone(), |rest| format!("{}{rest}", r.text)),
            Anchor::End if r.to.is_empty() => format!("{n}{}", r.text),
            Anchor::End => n.strip_suffix(&r.to).map_or(n.clone(), |rest| format!("{rest}{}", r.text)),
            Anchor::Anywhere => n.replace(&r.to, &r.text),
        })
    }

    /// The file's name of each of `names`, checked: renamed forward, each gives its own name
    /// back (so no two names become one file name).
    pub fn names<'a>(&self, names: impl Iterator<Item = &'a str>) -> Result<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        for name in names {
            let file = self.undo(name);
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

/// Rule `i` turned around.
fn reverse(i: usize, r: &Rename) -> Result<Reversed> {
    let key = format!("import.rename[{i}]");
    if r.to.contains('$') {
        return Err(Error::Config(format!(
            "{key}.to = {:?} refers to a group: what it replaced is not one text, so export cannot put it back (use a rule without groups)",
            r.to
        )));
    }
    let (anchor, body) = match (r.from.strip_prefix('^'), r.from.strip_suffix('$')) {
        (Some(b), _) => (Anchor::Start, b),
        (None, Some(b)) if !b.ends_with('\\') => (Anchor::End, b),
        _ => (Anchor::Anywhere, r.from.as_str()),
    };
    let text = literal(body).ok_or_else(|| {
        Error::Config(format!(
            "{key}.from = {:?} is a pattern, not a text: export can undo only renames of a fixed text (e.g. \"^module\\\\.\")",
            r.from
        ))
    })?;
    if r.to.is_empty() && anchor == Anchor::Anywhere {
        return Err(Error::Config(format!(
            "{key} removes {:?} wherever it is: export cannot tell where to put it back (anchor it with ^ or $)",
            r.from
        )));
    }
    Ok(Reversed { to: r.to.clone(), text, anchor })
}

/// The text a regular expression without metacharacters matches (escapes undone), if it is one.
fn literal(pattern: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                e if e.is_ascii_punctuation() => out.push(e),
                _ => return None,
            },
            '.' | '*' | '+' | '?' | '(' | ')' | '[' | ']' | '{' | '}' | '|' | '^' | '$' => return None,
            c => out.push(c),
        }
    }
    Some(out)
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
    fn what_cannot_be_undone_is_one_line_naming_the_rule_or_the_name() {
        let e = |rules: &[Rename]| Reverse::new(rules).err().unwrap().to_string();
        assert!(e(&[rule("^module\\.", ""), rule("^(\\w+)\\.", "$1_")]).starts_with("import.rename[1].to = \"$1_\" refers to a group"));
        assert!(e(&[rule("conv.", "c.")]).starts_with("import.rename[0].from = \"conv.\" is a pattern"));
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
