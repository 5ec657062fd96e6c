//! The house's layering, checked on the source: within each crate, no two sibling modules
//! depend on each other, directly or round a circle (`a` uses `crate::b`, `b` uses `crate::a`).
//! A circle means neither module can be read, tested or moved without the other; the fix is to
//! move what both need below both.
//!
//! At every level: the crate's top-level modules, and the submodules of each module
//! (`protocol::gang` and `protocol::resolve` must not use each other either).
//!
//! What counts as a use: a `crate::`, `super::` or `self::` path in code of the module's files,
//! resolved to the module it names (comment lines, the `mod tests` item and `tests.rs` files are
//! left out: tests sit above the code they test; other test-only items are code and count). The
//! check is textual, so it also sees a use written as a full path; an item re-exported by a
//! parent counts as the parent's.

// A test: an unreadable source tree is a broken checkout, said at once.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use tapfinger_tests::rust_files;

const CRATES: &[&str] = &[
    "shared",
    "shared/core",
    "shared/jobs",
    "shared/policies",
    "shared/forecast",
    "shared/model",
    "sim",
    "agent",
    "coordinator",
    "net",
    "harness",
];

/// A module's path in its crate (`protocol/gang.rs` → `["protocol", "gang"]`; a `mod.rs`
/// is its folder's module).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs").to_string();
        if stem != "mod" {
            parts.push(stem);
        }
    }
    parts
}

/// The code of a file without its unit tests: everything before the `mod tests` item (and the
/// `#[cfg(test)]` line above it). Other test-only items stay: they are code of the module.
fn code_of(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let cut = lines.iter().position(|l| {
        let t = l.trim_start();
        t.starts_with("mod tests") || t.starts_with("pub(crate) mod tests")
    });
    let mut keep = cut.map_or(&lines[..], |i| &lines[..i]);
    if let Some((last, rest)) = keep.split_last()
        && last.trim() == "#[cfg(test)]"
    {
        keep = rest;
    }
    keep.join("\n")
}

/// The paths a line of code names from `crate::`, `super::` and `self::`, resolved against the
/// module `at` (a file `a/b.rs` and a folder's `a/b/mod.rs` are both module `a::b`), as lists
/// of names. A `{a, b::c}` group
/// yields one path per item.
fn paths_in(line: &str, at: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for root in ["crate::", "super::", "self::"] {
        for (i, _) in line.match_indices(root) {
            // Preceded by an identifier character or `::`: part of another path.
            let before = line[..i].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut base: Vec<String> = match root {
                "crate::" => Vec::new(),
                // `super` of `a/b.rs` is `a`; of `a/b/mod.rs` (module `a::b`) it is `a` too.
                "super::" => at[..at.len().saturating_sub(1)].to_vec(),
                _ => at.to_vec(),
            };
            let mut rest = &line[i + root.len()..];
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            expand(rest, base, &mut out);
        }
    }
    out
}

/// The paths of `text` (what follows a `prefix::`), appended to `out`.
fn expand(text: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    let mut rest = text;
    loop {
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            if let Some(group) = rest.strip_prefix('{') {
                // Split the group's items at top-level commas.
                let (mut depth, mut start) = (0usize, 0usize);
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            expand(group[start..i].trim(), path.clone(), out);
                            return;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            expand(group[start..i].trim(), path.clone(), out);
                            start = i + 1;
                        }
                        _ => {}
                    }
                }
                expand(group[start..].trim(), path.clone(), out);
                return;
            }
            break;
        }
        path.push(name.clone());
        rest = &rest[name.len()..];
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    if !path.is_empty() {
        out.push(path);
    }
}

/// For every module with submodules (the crate root included, as `[]`), its children and the
/// children each one uses: an edge `a -> b` when code in `a` (or below it) names something in
/// `b` (or below it), `a` and `b` sharing that parent.
fn uses(src: &Path) -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .map(|f| module_path(f.strip_prefix(src).unwrap()))
        .collect();
    let mut levels: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for m in &modules {
        if let Some((last, parent)) = m.split_last() {
            levels
                .entry(parent.to_vec())
                .or_default()
                .entry(last.clone())
                .or_default();
        }
    }
    for f in &files {
        let rel = f.strip_prefix(src).unwrap();
        if rel.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let at = module_path(rel);
        let top = at.first().map(String::as_str);
        if at.is_empty() || top == Some("lib") || top == Some("main") {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(f).unwrap());
        for line in code.lines() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for target in paths_in(line, &at) {
                // The longest prefix of the path that is a module.
                let Some(to) = (1..=target.len())
                    .rev()
                    .map(|n| target[..n].to_vec())
                    .find(|p| modules.contains(p))
                else {
                    continue;
                };
                let common = at.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common < at.len() && common < to.len() {
                    levels
                        .entry(at[..common].to_vec())
                        .or_default()
                        .entry(at[common].clone())
                        .or_default()
                        .insert(to[common].clone());
                }
            }
        }
    }
    levels
}

/// A circle among the modules, if there is one: the modules round it, in order.
fn circle(deps: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search with the path on a stack: an edge back into the path is a circle.
    fn visit(
        m: &str,
        deps: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            return Some(path[i..].to_vec());
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in deps.get(m).into_iter().flatten() {
            if deps.contains_key(d)
                && let Some(c) = visit(d, deps, path, done)
            {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for m in deps.keys() {
        if let Some(c) = visit(m, deps, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_crate_has_a_circle_between_its_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut seen = 0;
    let mut circles = Vec::new();
    for krate in CRATES {
        for (parent, deps) in uses(&root.join(krate).join("src")) {
            seen += deps.len();
            if let Some(c) = circle(&deps) {
                let at = parent.iter().map(|p| format!("{p}::")).collect::<String>();
                circles.push(format!(
                    "{krate}: {}",
                    c.iter()
                        .map(|m| format!("{at}{m}"))
                        .collect::<Vec<_>>()
                        .join(" -> ")
                ));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "modules that use each other round a circle:\n{}",
        circles.join("\n")
    );
    assert!(
        seen > 100,
        "only {seen} modules found: the check read the wrong folders"
    );
}

#[test]
fn paths_are_read_as_the_compiler_resolves_them() {
    let at = |s: &str| s.split('/').map(String::from).collect::<Vec<_>>();
    let p = |line: &str, m: &str| {
        paths_in(line, &at(m))
            .into_iter()
            .map(|p| p.join("::"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        p("use super::resolve::x;", "protocol/gang"),
        ["protocol::resolve::x"]
    );
    assert_eq!(
        p("use super::{bayes::f, Claim};", "protocol/gang"),
        ["protocol::bayes::f", "protocol::Claim"]
    );
    assert_eq!(p("use self::gang::G;", "protocol"), ["protocol::gang::G"]);
    assert_eq!(p("let x = crate::a::b(1);", "c"), ["a::b"]);
    assert_eq!(p("use super::super::a;", "x/y/z"), ["x::a"]);
    assert!(p("tapfinger::crate::a", "c").is_empty());
    let code = code_of(
        "use crate::a;\n#[cfg(test)]\nuse crate::b as c;\n#[cfg(test)]\nmod tests {\nuse crate::d;\n}",
    );
    assert_eq!(code, "use crate::a;\n#[cfg(test)]\nuse crate::b as c;");
}

#[test]
fn the_check_finds_a_circle_where_there_is_one() {
    let deps: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a", "d"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(m, ds)| (m.to_string(), ds.into_iter().map(String::from).collect()))
    .collect();
    let c = circle(&deps).expect("a -> b -> c -> a");
    assert_eq!(c.len(), 3);
    let mut without = deps.clone();
    without.get_mut("c").unwrap().remove("a");
    assert_eq!(circle(&without), None);
}
