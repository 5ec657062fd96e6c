//! The CLI as a script uses it: the agent binary on 127.0.0.1, and the `tapfinger-agent` client
//! commands run as processes. Judged from their output and their exit codes (0 done, 1 an error,
//! 2 a usage error, 4 a followed task that failed): a task found by name, an ambiguous or
//! unknown name refused with the ids, `logs --follow` printing a task's output until it ends,
//! filters, `--json`, `tasks --watch` redrawing in place, `submit` printing the id, and a second
//! box joining by the address `node` prints.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tapfinger-agent");

#[path = "support/process.rs"]
mod process;
use process::{agent_command, free_port, start_agent};

/// `tapfinger-agent ARGS --api API`, run to its end.
fn cli(api: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .args(["--api", api])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A spec file for task `name`: it prints `line 1` to `line 4` a quarter second apart, then
/// exits with `exit`.
fn spec(dir: &Path, name: &str, exit: i32) -> String {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "name = \"{name}\"\ntype = \"etl\"\ncommand = [\"sh\", \"-c\", \
             \"for i in 1 2 3 4; do echo line $i; sleep 0.25; done; exit {exit}\"]\n\
             min_demand = {{ cpu = 1 }}\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[test]
fn the_cli_finds_follows_filters_and_says_so_in_its_exit_code() {
    let dir = std::env::temp_dir().join(format!("tf-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let api = format!("127.0.0.1:{}", free_port());
    let cmd = agent_command(BIN, "box-1", &dir, free_port(), &api, "first-fit-max");
    let _agent = start_agent(cmd, &api);

    let ok = cli(&api, &["submit", &spec(&dir, "good", 0)]);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    // `submit` prints the new task's id alone (`--json` for the API's answer).
    let id: u64 = text(&ok.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("submit printed {:?}: {e}", text(&ok.stdout)));
    // Followed by name: its lines in order, then exit 0.
    let f = cli(&api, &["logs", "good", "--follow"]);
    assert_eq!(f.status.code(), Some(0), "{}", text(&f.stderr));
    let lines: Vec<String> = text(&f.stdout)
        .lines()
        .filter(|l| l.starts_with("line"))
        .map(str::to_string)
        .collect();
    assert_eq!(lines, ["line 1", "line 2", "line 3", "line 4"]);
    let s = cli(&api, &["show", &id.to_string()]);
    assert!(text(&s.stdout).contains("good"), "{}", text(&s.stdout));
    // A task that fails: exit 4.
    assert!(
        cli(&api, &["submit", &spec(&dir, "bad", 3)])
            .status
            .success()
    );
    let f = cli(&api, &["logs", "bad", "-f"]);
    assert_eq!(f.status.code(), Some(4), "{}", text(&f.stderr));
    // `show` of a failed task says why: the last lines it wrote.
    let why = |name: &str| {
        let shown = text(&cli(&api, &["show", name]).stdout);
        shown
            .find("\nwhy ")
            .map(|i| shown[i..].to_string())
            .unwrap_or_else(|| panic!("no why: {shown}"))
    };
    let said = why("bad");
    assert!(said.trim_end().ends_with("line 4"), "{said}");
    // A command that is not there: the task fails, and `show` says which and why.
    let missing = dir.join("missing.toml");
    std::fs::write(
        &missing,
        "name = \"missing\"\ncommand = [\"no-such-interpreter-tf\", \"x.py\"]\nmin_demand = { cpu = 1 }\n",
    )
    .unwrap();
    assert!(
        cli(&api, &["submit", &missing.display().to_string()])
            .status
            .success()
    );
    let g = cli(&api, &["logs", "missing", "-f"]);
    assert_eq!(g.status.code(), Some(4), "{}", text(&g.stderr));
    let said = why("missing");
    assert!(said.contains("no-such-interpreter-tf"), "{said}");
    assert!(
        text(&f.stderr).contains("\"exit_code\":3"),
        "{}",
        text(&f.stderr)
    );

    // `show` by name, as text; an unknown name and an ambiguous one are errors (exit 1).
    let s = cli(&api, &["show", "good"]);
    assert_eq!(s.status.code(), Some(0));
    let out = text(&s.stdout);
    assert!(
        out.contains("good") && out.contains("succeeded on box-1"),
        "{out}"
    );
    let s = cli(&api, &["show", "nosuch"]);
    assert_eq!(s.status.code(), Some(1));
    assert!(text(&s.stderr).contains("nosuch"), "{}", text(&s.stderr));
    let twice = spec(&dir, "twice", 0);
    let ids: Vec<String> = (0..2)
        .map(|_| {
            let o = cli(&api, &["submit", &twice, "--json"]);
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            v["id"].to_string()
        })
        .collect();
    let s = cli(&api, &["cancel", "twice"]);
    assert_eq!(s.status.code(), Some(1));
    let err = text(&s.stderr);
    assert!(ids.iter().all(|id| err.contains(id.as_str())), "{err}");

    // Filters, `--json`, and a bad filter (exit 1) and a bad flag (exit 2).
    let t = cli(&api, &["tasks", "--state", "failed"]);
    let table = text(&t.stdout);
    assert!(table.contains("bad") && !table.contains("good"), "{table}");
    let t = cli(&api, &["tasks", "--class", "etl", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&t.stdout).unwrap();
    assert_eq!(v["total"], 4, "{v}");
    assert_eq!(
        cli(&api, &["tasks", "--state", "lost"]).status.code(),
        Some(1)
    );
    assert_eq!(cli(&api, &["tasks", "--nope"]).status.code(), Some(2));

    // `tasks --watch` redraws in place until stopped.
    let mut w = Command::new(BIN)
        .args(["tasks", "--watch", "--api", &api])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(4500));
    let _ = w.kill();
    let out = text(&w.wait_with_output().unwrap().stdout);
    assert!(out.matches("\x1b[H\x1b[2J").count() >= 2, "{out:?}");
    assert!(out.contains("good"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `node` prints the address other boxes join by, and a second box started with
/// `--bootstrap` and that address as `node --address` printed it joins: each lists the other
/// among its peers. No log is read.
#[test]
fn a_second_box_joins_by_the_address_node_prints() {
    let dir = std::env::temp_dir().join(format!("tf-cli-join-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (first, second) = (dir.join("first"), dir.join("second"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    let (api1, p2p1) = (format!("127.0.0.1:{}", free_port()), free_port());
    let _a = start_agent(
        agent_command(BIN, "box-1", &first, p2p1, &api1, "first-fit-max"),
        &api1,
    );
    // The address, once the network listens (the API may answer a moment before).
    let mut address = String::new();
    for _ in 0..100 {
        let o = cli(&api1, &["node", "--address"]);
        if o.status.success() {
            address = text(&o.stdout).trim().to_string();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        address.starts_with(&format!("/ip4/127.0.0.1/tcp/{p2p1}/p2p/")),
        "{address:?}"
    );
    let shown = text(&cli(&api1, &["node"]).stdout);
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("address") && l.ends_with(&address)),
        "{shown}"
    );
    let api2 = format!("127.0.0.1:{}", free_port());
    let mut cmd = agent_command(BIN, "box-2", &second, free_port(), &api2, "first-fit-max");
    cmd.args(["--bootstrap", &address]);
    let _b = start_agent(cmd, &api2);
    let joined = (0..100).any(|_| {
        let seen = |api: &str, other: &str| text(&cli(api, &["peers"]).stdout).contains(other);
        let both = seen(&api1, "box-2") && seen(&api2, "box-1");
        if !both {
            std::thread::sleep(Duration::from_millis(100));
        }
        both
    });
    assert!(joined, "{}", text(&cli(&api2, &["peers"]).stdout));
    let _ = std::fs::remove_dir_all(&dir);
}
