//! The Python task kit's own tests (`python/tests`, standard library `unittest`), run here so
//! that the one test command runs them: a failure there fails this test with Python's report.
//! Needs Python 3 (CI installs it); without it the test fails and says so.
#![allow(clippy::unwrap_used)]

use std::path::Path;

#[test]
fn the_python_kit_s_unit_tests_pass() {
    let python = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("python");
    let out = std::process::Command::new("python3")
        .args(["-B", "-m", "unittest", "discover", "-s", "tests", "-v"])
        .current_dir(&python)
        .output()
        .expect("this test needs python3 (CI installs it)");
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    // Every test ran: unittest's summary counts them.
    assert!(report.contains("Ran ") && report.contains("OK"), "{report}");
}

/// Every task spec under `examples/` reads as a spec, and names a script that exists.
#[test]
fn the_examples_specs_read_and_name_their_scripts() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let dir = repo.join("examples/python");
    let mut n = 0;
    for f in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = f.path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let spec = tapfinger::spec::TaskSpec::from_toml(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let script = spec.command.iter().find(|a| a.ends_with(".py")).unwrap();
        assert!(repo.join(script).is_file(), "{}: {script}", path.display());
        n += 1;
    }
    assert_eq!(n, 2, "the two example specs");
}
