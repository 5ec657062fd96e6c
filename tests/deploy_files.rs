//! The service files in deploy/systemd are valid for systemd: `systemd-analyze verify` on the
//! agent's and the coordinator's units, with no message at all (verify exits 0 on unknown keys
//! and bad values: its messages are the verdict, and a unit with a bad key is shown to draw
//! one). Verify also insists that ExecStart's program exists: the installed path
//! (/usr/local/bin/...) is replaced by `/bin/true` for the check, since the test cannot install
//! the binaries there (the workspace's own binaries are not all built by the test run). And
//! `systemd-sysusers --root` creates the user from tapfinger.sysusers.conf. systemd-analyze
//! comes with Debian's `systemd` package; `.ci/run` installs it where it is missing, and the test
//! fails without it.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/systemd")
}

fn tool(name: &str) -> Command {
    let found = Command::new(name).arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "this test needs `{name}` (Debian package systemd), as CI has"
    );
    Command::new(name)
}

#[test]
fn the_service_units_verify_without_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let verify = |units: &[PathBuf]| {
        let out = tool("systemd-analyze")
            .args(["verify", "--man=no"])
            .args(units)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), said)
    };
    let mut units = Vec::new();
    for (unit, bin) in [
        ("tapfinger-agent.service", "tapfinger-agent"),
        ("tapfinger-coordinator.service", "tapfinger-coordinator"),
    ] {
        let text = std::fs::read_to_string(deploy().join(unit)).unwrap();
        let installed = format!("/usr/local/bin/{bin} ");
        assert!(text.contains(&installed), "{unit} runs {installed}");
        let path = dir.join(unit);
        std::fs::write(&path, text.replace(&installed, "/bin/true ")).unwrap();
        units.push(path);
    }
    let (ok, said) = verify(&units);
    assert!(ok && said.trim().is_empty(), "{said}");
    // The verdict is in the messages: a unit with a misspelt key draws one.
    let bad = dir.join("bad.service");
    let text = std::fs::read_to_string(&units[0]).unwrap();
    std::fs::write(&bad, text.replace("KillMode=process", "KillMod=process")).unwrap();
    let (_, said) = verify(&[bad]);
    assert!(said.contains("KillMod"), "{said}");
}

#[test]
fn the_sysusers_file_creates_the_service_user() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    let conf = deploy()
        .join("tapfinger.sysusers.conf")
        .canonicalize()
        .unwrap();
    let out = tool("systemd-sysusers")
        .arg(format!("--root={}", root.display()))
        .arg(&conf)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("tapfinger:") && l.contains(":/var/lib/tapfinger:")),
        "{passwd}"
    );
    // The tasks' user, the one agent.toml's task_user names.
    assert!(
        passwd.lines().any(|l| l.starts_with("tapfinger-task:")),
        "{passwd}"
    );
    let agent_toml = std::fs::read_to_string(deploy().join("../agent.toml")).unwrap();
    assert!(agent_toml.contains("task_user = \"tapfinger-task\""));
}
