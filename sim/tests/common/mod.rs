//! Helpers of the command-line tests (`cli*.rs`): run the built `tapfinger-sim`, write inputs
//! into a test's own temporary folder, expect a clear error.
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

/// A folder of one test's own, removed when the test ends (passed or failed), so that test
/// runs leave nothing behind in the system's temporary folder.
pub(crate) struct Scratch(tempfile::TempDir);

impl Scratch {
    pub(crate) fn new() -> Self {
        Self(
            tempfile::Builder::new()
                .prefix("tapfinger-cli-")
                .tempdir()
                .unwrap(),
        )
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        self.0.path()
    }

    /// Writes `text` to the file `name` in the folder, and gives its path.
    pub(crate) fn write(&self, name: &str, text: &str) -> std::path::PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
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
