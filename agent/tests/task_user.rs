//! Tasks under a user of their own (`task_user`), with a real agent process started as root:
//! a task that tries to reach the agent's secrets and files records, in files of its own, what
//! each attempt gave. It runs as that user; it cannot read the identity key, the journal or
//! another task's log, cannot write its share file nor create anything in the data directory
//! (no link where the agent writes); it can read its own share file. Judged from the task's
//! records and the files on disk.
//!
//! Needs root (the agent switches users) and `setpriv` (util-linux); without them it fails,
//! saying so.
#![allow(clippy::unwrap_used)]

#[path = "support/process.rs"]
mod process;

use process::{agent_command, free_port, http, json, start_agent, wait_until};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tapfinger-agent");

/// The probe's script: each line `what rc` (0: it worked).
const PROBE: &str = r#"
out="$1/probe"
id -u > "$1/uid"
try() { what="$1"; shift; if "$@" >/dev/null 2>&1; then echo "$what 0" >> "$out"; else echo "$what 1" >> "$out"; fi; }
try key cat "$2/identity.key"
try journal cat "$2/tasks.journal"
try counter cat "$2/tasks.commit"
try other-log cat "$2/logs/$3.stdout"
try own-share cat "$TAPFINGER_SHARE_FILE"
try write-share sh -c "echo x > '$TAPFINGER_SHARE_FILE'"
try link ln -s /etc/passwd "$2/logs/planted"
try data-dir touch "$2/planted"
try runs-dir touch "$2/runs/planted"
"#;

/// Submit `spec` to the agent at `api` and wait for it to succeed; its id.
fn run_to_success(api: &str, spec: &serde_json::Value) -> u64 {
    let (code, body) = http(api, "POST", "/v1/tasks", Some(spec.to_string())).unwrap();
    assert_eq!(code, 201, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
        .as_u64()
        .unwrap();
    wait_until(Duration::from_secs(30), "the task's success", || {
        json(api, &format!("/v1/tasks/{id}")).is_some_and(|t| t["state"] == "succeeded")
    });
    id
}

#[test]
fn a_task_under_its_own_user_cannot_reach_the_agents_secrets() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test starts an agent that switches users: it needs root (CI runs it as root)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // The task's user must reach its records and its share file: the folders above are
    // passable (the agent keeps what is inside private).
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let rec = dir.join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    std::fs::set_permissions(&rec, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(dir.join("probe.sh"), PROBE).unwrap();
    let (p2p, api) = (free_port(), format!("127.0.0.1:{}", free_port()));
    let mut cmd = agent_command(BIN, "a", dir, p2p, &api, "min");
    cmd.args(["--set", "task_user=\"nobody\""]);
    let agent = start_agent(cmd, &api);
    let data = dir.join("data");
    // A task whose log holds a secret of its own.
    let secret = serde_json::json!({
        "name": "secret",
        "command": ["sh", "-c", "echo the-secret-line"],
        "min_demand": {"cpu": 1},
    });
    let secret_id = run_to_success(&api, &secret);
    let probe = serde_json::json!({
        "name": "probe",
        "command": ["sh", dir.join("probe.sh"), rec, data, secret_id.to_string()],
        "min_demand": {"cpu": 1},
    });
    run_to_success(&api, &probe);
    let uid = std::fs::read_to_string(rec.join("uid")).unwrap();
    assert_eq!(uid.trim(), "65534", "the task ran as nobody");
    let said: BTreeMap<String, String> = std::fs::read_to_string(rec.join("probe"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let expected = [
        ("key", "1"),
        ("journal", "1"),
        ("counter", "1"),
        ("other-log", "1"),
        ("own-share", "0"),
        ("write-share", "1"),
        ("link", "1"),
        ("data-dir", "1"),
        ("runs-dir", "1"),
    ];
    for (what, rc) in expected {
        assert_eq!(
            said.get(what).map(String::as_str),
            Some(rc),
            "{what}: {said:?}"
        );
    }
    // Nothing was planted, and the secret is where it was, the agent's alone.
    assert!(!data.join("logs/planted").exists() && !data.join("planted").exists());
    let mode = |p: &str| {
        std::fs::metadata(data.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    for f in ["identity.key", "tasks.journal", "tasks.commit"] {
        assert_eq!(mode(f), 0o600, "{f}");
    }
    assert_eq!(mode(&format!("logs/{secret_id}.stdout")), 0o600);
    println!(
        "task as uid {}: {said:?} (1: refused; own share file readable)",
        uid.trim()
    );
    drop(agent);
}
