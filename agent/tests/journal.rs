//! The agent binary with a damaged task journal of an older agent (`tasks.jsonl`, bare JSON
//! lines): it moves it to `tasks.journal`, refuses to start, naming the line and the repair
//! command, and starts after `tapfinger-agent repair-journal`, with every readable task, the
//! journal migrated to checksummed records.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tapfinger-agent");

fn accepted(id: u64) -> String {
    format!(
        r#"{{"accepted":{{"task":{{"id":{id},"ty":0,"min_demand":[1,0,0],"max_demand":null,"priority":0,"reachable":[1],"arrival":0}},"spec":{{"command":["true"],"min_demand":{{"cpu":1}}}}}}}}"#
    )
}

fn start(dir: &Path) -> std::process::Child {
    Command::new(BIN)
        .args(["run", "--data-dir"])
        .arg(dir)
        .args(["--api", "127.0.0.1:0", "--listen", "/ip4/127.0.0.1/tcp/0"])
        .args(["--policy", "first-fit-max"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_damaged_journal_stops_the_agent_until_it_is_repaired() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let old = dir.join("tasks.jsonl");
    let journal = dir.join("tasks.journal");
    let text = format!(
        "{}\n{{\"accepted\": garbage\n{}\n",
        accepted(1),
        accepted(2)
    );
    std::fs::write(&old, text).unwrap();

    let out = start(dir).wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started on a damaged journal: {err}");
    assert!(
        err.contains("line 2") && err.contains("tapfinger-agent repair-journal"),
        "{err}"
    );
    // Nothing was lost by refusing.
    assert!(
        std::fs::read_to_string(&journal)
            .unwrap()
            .contains("garbage")
    );

    let out = Command::new(BIN)
        .arg("repair-journal")
        .arg(&journal)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("kept     2 records") && said.contains("line 2"),
        "{said}"
    );
    let backups = std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("tasks.journal.corrupt-")
        })
        .count();
    assert_eq!(backups, 1);

    // Now it starts and keeps running (it is stopped here after a few seconds).
    let mut child = start(dir);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the repaired agent exited ({status}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    let _ = child.wait();
}
