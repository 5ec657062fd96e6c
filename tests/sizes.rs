//! Function size, checked on the source: no function in the workspace (code, tests, benches)
//! is longer than [`MAX_LINES`] lines from its `fn` line to its closing brace. A longer one
//! does several things; split it along its steps, each a function with a name that says what
//! it does.
//!
//! The check is textual and relies on rustfmt's layout (which CI enforces): a function starts
//! at a line whose first word after its visibility and qualifiers is `fn`, and ends at the
//! first later line that is its indentation followed by `}`.

// A test: an unreadable source tree is a broken checkout, said at once.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use tapfinger_tests::rust_files;

/// The longest a function may be, in lines.
const MAX_LINES: usize = 150;

/// Folders of the workspace holding Rust sources.
const FOLDERS: &[&str] = &[
    "shared",
    "sim",
    "agent",
    "coordinator",
    "net",
    "harness",
    "tests",
];

/// Whether `line` (indentation removed) opens a function with a body.
fn opens_fn(line: &str) -> bool {
    let mut rest = line;
    for q in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(q).unwrap_or(rest);
    }
    for q in ["async ", "unsafe "] {
        rest = rest.strip_prefix(q).unwrap_or(rest);
    }
    rest.starts_with("fn ") && !line.trim_end().ends_with(';')
}

/// The functions of `text` longer than `max` lines: (first line, name, length).
fn long_functions(text: &str, max: usize) -> Vec<(usize, String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let body = l.trim_start();
        if !opens_fn(body) {
            continue;
        }
        let indent = &l[..l.len() - body.len()];
        let close = format!("{indent}}}");
        let Some(end) = lines[i + 1..].iter().position(|x| *x == close) else {
            continue;
        };
        let len = end + 2;
        if len > max {
            let name: String = body[body.find("fn ").unwrap() + 3..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push((i + 1, name, len));
        }
    }
    out
}

#[test]
fn no_function_is_longer_than_the_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for f in FOLDERS {
        rust_files(&root.join(f), &mut files);
    }
    assert!(files.len() > 100, "only {} Rust files found", files.len());
    let mut long = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (line, name, len) in long_functions(&text, MAX_LINES) {
            long.push(format!("{}:{line} {name} ({len} lines)", f.display()));
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_check_sees_a_long_function_and_its_name() {
    let body = "    let x = 1;\n".repeat(5);
    let text = format!("pub(crate) async fn big() {{\n{body}}}\nfn small() {{}}\n");
    assert_eq!(long_functions(&text, 6), vec![(1, "big".to_string(), 7)]);
    assert!(long_functions(&text, 7).is_empty());
    let nested = format!("impl A {{\n    fn inner() {{\n{body}    }}\n}}\n");
    assert_eq!(
        long_functions(&nested, 3),
        vec![(2, "inner".to_string(), 7)]
    );
    assert!(long_functions("fn declared();\n", 0).is_empty());
}
