//! The house's layering, checked on the source: within each crate, no two top-level modules
//! depend on each other, directly or round a circle (`a` uses `crate::b`, `b` uses `crate::a`).
//! A circle means neither module can be read, tested or moved without the other; the fix is to
//! move what both need below both.
//!
//! What counts as a use: a `crate::name` path in code of the module's files (comment lines,
//! unit tests after `#[cfg(test)]` and `tests.rs` files are left out: tests sit above the code
//! they test). The check is textual, so it also sees a use written as a full path.

// A test: an unreadable source tree is a broken checkout, said at once.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CRATES: &[&str] = &["shared", "sim", "agent", "coordinator", "net", "harness"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Each top-level module of the crate in `src` and the top-level modules its code names.
fn uses(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" || top == "main" || rel.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let entry = deps.entry(top.clone()).or_default();
        for line in code.lines() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (i, _) in line.match_indices("crate::") {
                // `crate::` preceded by an identifier character is another crate's path
                // (`tapfinger_sim::crate_x` never occurs; `some_crate::` would).
                let before = line[..i].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let name: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != top {
                    entry.insert(name);
                }
            }
        }
    }
    deps
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
    for krate in CRATES {
        let deps = uses(&root.join(krate).join("src"));
        seen += deps.len();
        if let Some(c) = circle(&deps) {
            panic!(
                "{krate}: the modules {} use each other round a circle",
                c.join(" -> ")
            );
        }
    }
    assert!(
        seen > 50,
        "only {seen} modules found: the check read the wrong folders"
    );
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
