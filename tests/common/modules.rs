//! The module graph of a crate, read from its sources: which module uses which, and the circles.
//!
//! A module is a source file (`lib.rs` and `main.rs` are the crate root, `a.rs` and `a/mod.rs`
//! are `a`, `a/b.rs` is `a::b`); a module written inline in a file belongs to that file. Module
//! `m` uses module `n` when `m`'s code names an item of `n`: a `use` of it, or a path to it
//! (`crate::n::f`, `super::f`, `self::child::T`, `child::f`). A name re-exported by `pub use` is
//! followed to the module that defines it, and the re-export itself is not a use: a facade adds
//! no edge. Declaring a submodule (`mod child;`) is not a use either. Code under `#[cfg(test)]`
//! is left out: a test may read any module it likes.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// One use of a module by another, with where it was seen.
#[derive(Debug, Clone)]
pub struct Edge {
    /// The using module, `crate::...`.
    pub from: String,
    /// The used module.
    pub to: String,
    /// `file:line` of the reference.
    pub at: String,
}

/// A crate's modules, their re-exports and their uses.
#[derive(Debug, Default)]
pub struct Graph {
    files: BTreeMap<String, PathBuf>,
    children: BTreeMap<String, BTreeSet<String>>,
    aliases: BTreeMap<(String, String), Vec<String>>,
    /// Every use found.
    pub edges: Vec<Edge>,
}

/// What a `*` in a `use` tree is read as by [`Graph::unreadable`].
const GLOB: &str = "__glob__";

/// A module's path as segments below the crate root.
fn segments(module: &str) -> Vec<String> {
    module.split("::").filter(|s| !s.is_empty()).map(str::to_string).collect()
}

fn join(segs: &[String]) -> String {
    segs.join("::")
}

impl Graph {
    /// How many modules (source files) the crate has.
    pub fn modules(&self) -> usize {
        self.files.len()
    }

    /// Reads the crate whose root source file is `root` (`src/lib.rs` or `src/main.rs`).
    pub fn of_crate(root: &Path) -> Graph {
        let mut g = Graph::default();
        g.add_file("", root, root.parent().unwrap_or(Path::new(".")).to_path_buf());
        let sources: Vec<(String, String, PathBuf)> =
            g.files.iter().map(|(m, p)| (m.clone(), clean(&fs::read_to_string(p).unwrap_or_default()), p.clone())).collect();
        for (module, text, _) in &sources {
            g.collect_aliases(module, text);
        }
        for (module, text, path) in &sources {
            g.collect_uses(module, text, path);
        }
        g
    }

    /// Records `file` as `module`, and the non-test submodules it declares (looked up in `dir`).
    fn add_file(&mut self, module: &str, file: &Path, dir: PathBuf) {
        self.files.insert(module.to_string(), file.to_path_buf());
        let text = clean(&fs::read_to_string(file).unwrap_or_default());
        for child in declared_modules(&text) {
            let name = if module.is_empty() { child.clone() } else { format!("{module}::{child}") };
            let flat = dir.join(format!("{child}.rs"));
            let nested = dir.join(&child).join("mod.rs");
            let (path, sub) = if flat.exists() { (flat, dir.join(&child)) } else { (nested, dir.join(&child)) };
            if path.exists() {
                self.children.entry(module.to_string()).or_default().insert(child);
                self.add_file(&name, &path, sub);
            }
        }
    }

    fn collect_aliases(&mut self, module: &str, text: &str) {
        for (public, tree, _) in use_statements(text) {
            if !public {
                continue;
            }
            for (path, rename) in expand(&tree) {
                let Some(abs) = self.absolute(module, &path) else { continue };
                let name = match (rename, path.last().map(String::as_str)) {
                    (Some(r), _) => r,
                    (None, Some("self")) => abs.last().cloned().unwrap_or_default(),
                    (None, Some(n)) => n.to_string(),
                    (None, None) => continue,
                };
                self.aliases.insert((module.to_string(), name), abs);
            }
        }
    }

    fn collect_uses(&mut self, module: &str, text: &str, file: &Path) {
        let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
        let mut found: Vec<(Vec<String>, usize)> = Vec::new();
        for (public, tree, offset) in use_statements(text) {
            if !public {
                found.extend(expand(&tree).into_iter().map(|(p, _)| (p, offset)));
            }
        }
        let code = strip_uses(text);
        found.extend(code_paths(&code));
        // A name this module re-exports, used here by itself: a use of where it comes from.
        let own: Vec<String> = self.aliases.keys().filter(|(m, _)| m == module).map(|(_, n)| n.clone()).collect();
        for (name, offset) in words(&code).into_iter().filter(|(w, _)| own.contains(w)) {
            found.push((vec!["self".to_string(), name], offset));
        }
        for (path, offset) in found {
            let Some(abs) = self.absolute(module, &path) else { continue };
            let to = self.defining_module(&abs, 0);
            if to != module {
                let at = format!("{}:{}", file.display(), line_of(offset.min(text.len())));
                self.edges.push(Edge { from: module.to_string(), to, at });
            }
        }
    }

    /// `path` as segments from the crate root, or `None` for a path into another crate.
    fn absolute(&self, module: &str, path: &[String]) -> Option<Vec<String>> {
        let mut base = segments(module);
        let mut rest = path;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            Some(first) if self.children.get(module).is_some_and(|c| c.contains(first)) => {}
            _ => return None,
        }
        base.extend(rest.iter().filter(|s| s.as_str() != "self").cloned());
        Some(base)
    }

    /// The module that defines what `abs` names: its longest module prefix, following
    /// re-exports of the name after it.
    fn defining_module(&self, abs: &[String], depth: usize) -> String {
        let mut k = 0;
        while k < abs.len() && self.files.contains_key(&join(&abs[..=k])) {
            k += 1;
        }
        let module = join(&abs[..k]);
        if depth < 8
            && let Some(target) = abs.get(k).and_then(|name| self.aliases.get(&(module.clone(), name.clone())))
        {
            let mut next = target.clone();
            next.extend(abs[k + 1..].iter().cloned());
            return self.defining_module(&next, depth + 1);
        }
        module
    }

    /// What the reader cannot follow, each as `file:line: what`: a glob import of one of the
    /// crate's own modules (`use super::*`, `pub use a::*`: which names it brings in depends on
    /// the other module's contents, so its uses are invisible here) and a macro shared beyond its
    /// file (`#[macro_export]`, `#[macro_use]`: the paths in its body are used where it expands,
    /// not where it is written). A macro kept in its file expands where its body is read.
    /// Globs of other crates (`burn::prelude::*`) and of a module's own enum are fine.
    pub fn unreadable(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (module, path) in &self.files {
            let text = clean(&fs::read_to_string(path).unwrap_or_default());
            let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
            for (_, tree, offset) in use_statements(&text) {
                for (glob, _) in expand(&tree.replace('*', GLOB)).into_iter().filter(|(p, _)| p.last().map(String::as_str) == Some(GLOB)) {
                    if self.absolute(module, &glob[..glob.len() - 1]).is_some() {
                        out.push(format!("{}:{}: glob import `use {}`", path.display(), line_of(offset), tree.trim()));
                    }
                }
            }
            for attribute in ["#[macro_export]", "#[macro_use]"] {
                for (offset, _) in text.match_indices(attribute) {
                    out.push(format!("{}:{}: {attribute}", path.display(), line_of(offset)));
                }
            }
        }
        out
    }

    /// The circles: each set of two or more modules that reach one another through uses, with
    /// the edges inside it.
    pub fn circles(&self) -> Vec<(Vec<String>, Vec<Edge>)> {
        let nodes: Vec<String> = self.files.keys().cloned().collect();
        let reach = |from: &str| -> BTreeSet<String> {
            let mut seen = BTreeSet::new();
            let mut todo = vec![from.to_string()];
            while let Some(m) = todo.pop() {
                for e in self.edges.iter().filter(|e| e.from == m) {
                    if seen.insert(e.to.clone()) {
                        todo.push(e.to.clone());
                    }
                }
            }
            seen
        };
        let reaches: BTreeMap<String, BTreeSet<String>> = nodes.iter().map(|n| (n.clone(), reach(n))).collect();
        let mut done = BTreeSet::new();
        let mut out = Vec::new();
        for n in &nodes {
            if done.contains(n) || !reaches[n].contains(n) {
                continue;
            }
            let members: Vec<String> = nodes.iter().filter(|m| reaches[n].contains(*m) && reaches[*m].contains(n)).cloned().collect();
            done.extend(members.iter().cloned());
            let inside = self.edges.iter().filter(|e| members.contains(&e.from) && members.contains(&e.to)).cloned().collect();
            out.push((members, inside));
        }
        out
    }
}

/// The text with comments, string and character literals blanked (offsets kept), and every item
/// under `#[cfg(test)]` removed.
pub fn clean(text: &str) -> String {
    strip_test_items(&strip_comments_and_strings(text))
}

fn strip_comments_and_strings(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in out.iter_mut().take(to).skip(from) {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            i + block_comment_len(rest)
        } else if let Some(len) = string_len(b, i) {
            i + len
        } else if rest[0] == b'\'' {
            i + char_len(&text[i..])
        } else {
            i += 1;
            continue;
        };
        blank(&mut out, i, end);
        i = end.max(i + 1);
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn block_comment_len(s: &[u8]) -> usize {
    let (mut depth, mut i) = (0usize, 0);
    while i + 1 < s.len() {
        if s[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if s[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    s.len()
}

/// The length of the string literal that starts at `i`, if one does: `"…"`, or with a `b` or
/// `c` and/or `r` prefix and `#`s (`br"…"`, `r#"…"#`). Not inside an identifier.
fn string_len(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && is_ident(b[i - 1]) {
        return None;
    }
    let s = &b[i..];
    let kind = usize::from(matches!(s.first(), Some(b'b' | b'c')));
    let raw = s.get(kind) == Some(&b'r');
    let hashes = if raw { s[kind + 1..].iter().take_while(|&&c| c == b'#').count() } else { 0 };
    let open = kind + usize::from(raw) + hashes;
    if s.get(open) != Some(&b'"') {
        return None;
    }
    if raw {
        let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
        let body = &s[open + 1..];
        return Some(body.windows(close.len()).position(|w| w == close.as_slice()).map_or(s.len(), |p| open + 1 + p + close.len()));
    }
    let mut j = open + 1;
    while j < s.len() {
        match s[j] {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    Some(s.len())
}

/// The length in bytes of the character literal `s` starts with (`'x'`, `'\n'`, `'\''`,
/// `'\u{..}'`), or 1 for a lifetime's quote.
fn char_len(s: &str) -> usize {
    let rest = &s[1..];
    if rest.starts_with('\\') {
        // The escaped character, then the closing quote.
        return rest.get(2..).and_then(|t| t.find('\'')).map_or(1, |p| p + 4);
    }
    match rest.chars().next() {
        Some(c) if rest[c.len_utf8()..].starts_with('\'') => 2 + c.len_utf8(),
        _ => 1,
    }
}

/// Removes each item that follows `#[cfg(test)]`: up to its `;`, or its `{ ... }` block.
fn strip_test_items(text: &str) -> String {
    let mut out = text.as_bytes().to_vec();
    let mut from = 0;
    while let Some(p) = text[from..].find("#[cfg(test)]") {
        let start = from + p;
        let b = text.as_bytes();
        let mut i = start + "#[cfg(test)]".len();
        let mut depth = 0usize;
        while i < b.len() {
            match b[i] {
                b';' if depth == 0 => break,
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        let end = (i + 1).min(b.len());
        for c in out.iter_mut().take(end).skip(start) {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The names of the modules declared as files (`mod x;`, `pub mod x;`, `pub(crate) mod x;`).
fn declared_modules(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for stmt in text.split(';') {
        let words: Vec<&str> = stmt.split_whitespace().collect();
        if let [.., kw, name] = words.as_slice()
            && *kw == "mod"
            && name.bytes().all(is_ident)
        {
            out.push(name.to_string());
        }
    }
    out
}

/// Each `use` statement: whether it re-exports (`pub` or `pub(...)`), its tree, its offset.
fn use_statements(text: &str) -> Vec<(bool, String, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = text[from..].find("use ") {
        let at = from + p;
        from = at + 4;
        if at > 0 && is_ident(b[at - 1]) {
            continue;
        }
        let before = text[..at].trim_end();
        let head = before.rsplit([';', '{', '}', ']']).next().unwrap_or("").trim();
        if !(head.is_empty() || head.starts_with("pub")) {
            continue;
        }
        let Some(len) = text[at..].find(';') else { break };
        out.push((head.starts_with("pub"), text[at + 4..at + len].trim().to_string(), at));
        from = at + len;
    }
    out
}

/// The text with its `use` statements blanked.
fn strip_uses(text: &str) -> String {
    let mut out = text.as_bytes().to_vec();
    for (_, _, at) in use_statements(text) {
        let end = text[at..].find(';').map_or(text.len(), |l| at + l);
        for c in out.iter_mut().take(end).skip(at) {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `use` tree's paths, braces expanded (`a::{b, c::{d, self}}` gives `a::b`, `a::c::d`,
/// `a::c::self`), each with the name it is renamed to (`as`), if any.
fn expand(tree: &str) -> Vec<(Vec<String>, Option<String>)> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace() || *c == ' ').collect();
    let mut out = Vec::new();
    expand_into(&[], tree.trim(), &mut out);
    out
}

fn expand_into(prefix: &[String], tree: &str, out: &mut Vec<(Vec<String>, Option<String>)>) {
    let tree = tree.trim().trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let mut base = prefix.to_vec();
        base.extend(tree[..open].split("::").map(str::trim).filter(|s| !s.is_empty()).map(str::to_string));
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_into(&base, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand_into(&base, &inner[start..], out);
    } else if !tree.is_empty() {
        let mut parts = tree.split(" as ");
        let path = parts.next().unwrap_or(tree);
        let rename = parts.next().map(|r| r.trim().to_string()).filter(|r| r != "_");
        let mut p = prefix.to_vec();
        p.extend(path.split("::").map(str::trim).filter(|s| !s.is_empty() && *s != "*").map(str::to_string));
        out.push((p, rename));
    }
}

/// Every identifier that stands alone (not part of a path), with its offset.
fn words(text: &str) -> Vec<(String, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !is_ident(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && is_ident(b[i]) {
            i += 1;
        }
        let joined = (start >= 2 && &text[start - 2..start] == "::") || text[i..].starts_with("::");
        let after = text[i..].trim_start();
        let declared = text[..start].trim_end().ends_with("mod") && after.starts_with(';');
        // A field (`name: T`, `name: value`) or an enum variant (`Name(..)`, `Name { .. }`,
        // `Name,` opening its line) that happens to share a re-exported name.
        let field = after.starts_with(':') && !after.starts_with("::");
        let line_start = text[..start].rsplit('\n').next().unwrap_or("").trim().trim_start_matches("pub").is_empty();
        let variant = line_start && (after.starts_with('(') || after.starts_with('{') || after.starts_with(','));
        if !joined && !declared && !field && !variant {
            out.push((text[start..i].to_string(), start));
        }
    }
    out
}

/// Every path of two or more segments in code (`a::b::c`), with its offset.
fn code_paths(text: &str) -> Vec<(Vec<String>, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !is_ident(b[i]) || (i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let start = i;
        let mut segs = Vec::new();
        loop {
            let s = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            segs.push(text[s..i].to_string());
            if text[i..].starts_with("::") && b.get(i + 2).is_some_and(|&c| is_ident(c)) {
                i += 2;
            } else {
                break;
            }
        }
        if segs.len() >= 2 {
            out.push((segs, start));
        }
    }
    out
}
