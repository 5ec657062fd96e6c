//! Helpers of the command-line tests (`cli*.rs`): run the built `tapfinger-sim`, write inputs
//! into a temporary folder, expect a clear error.
// Each test file uses some of them.
#![allow(dead_code)]

use std::process::Command;

pub(crate) fn sim(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tapfinger-sim"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

pub(crate) fn write(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tapfinger-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

pub(crate) const BASE: &str = include_str!("../../presets/synthetic3.toml");

pub(crate) fn fails_with(args: &[&str], needle: &str) {
    let (ok, _, err) = sim(args);
    assert!(!ok, "{args:?} should fail");
    assert!(
        err.contains(needle),
        "{args:?}: expected {needle:?} in {err:?}"
    );
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
}
