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
