//! The Python task kit (`python/tapfinger_task`) under a real agent: a Python task that follows
//! its share with the kit, and how many threads it runs, judged from what the task printed
//! itself. The agent's default policy re-shares a box's CPUs among its running tasks every
//! slot (as `agent_elastic` shows from the cgroups' quotas): alone, the task holds the box's 4
//! cores; beside a second task, fewer; alone again, 4.
//!
//! Needs Python 3 and writable cgroups (CI has both); without them the test fails and says so.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;
use tapfinger::spec::TaskSpec;
use tapfinger_agent::exec::Cgroups;
use tapfinger_tests::{Exec, Local, finished, wait};

/// The kit's folder in the repository.
fn kit() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("python")
}

/// A Python task that keeps a worker count at its share's whole cores with the kit and prints
/// it (`threads=N`) with a progress line every 50 ms for about `secs` seconds.
fn follower(secs: u32) -> TaskSpec {
    let script = format!(
        r#"import time
import tapfinger_task as tf
n = [tf.threads()]
tf.follow_threads(lambda k: n.__setitem__(0, k), interval=0.02)
steps = {steps}
for i in range(steps):
    print(f"threads={{n[0]}}", flush=True)
    tf.report((i + 1) / steps)
    time.sleep(0.05)
"#,
        steps = secs * 20
    );
    let toml = format!(
        "command = [\"python3\", \"-c\", '''\n{script}''']\nmin_demand = {{ cpu = 1, mem = 1 }}\n\
         env = {{ PYTHONPATH = \"{}\" }}\n",
        kit().display()
    );
    TaskSpec::from_toml(&toml).unwrap()
}

/// A task that only takes a core for about `secs` seconds.
fn sleeper(secs: u32) -> TaskSpec {
    TaskSpec::from_toml(&format!(
        "command = [\"sleep\", \"{secs}\"]\nmin_demand = {{ cpu = 1, mem = 1 }}\n"
    ))
    .unwrap()
}

/// The worker counts a task printed, in order.
fn counts(logs: &Path, task: tapfinger::TaskId) -> Vec<u32> {
    let text = std::fs::read_to_string(logs.join(format!("{}.stdout", task.0))).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.strip_prefix("threads="))
        .filter_map(|q| q.trim().parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_task_s_threads_follow_its_share_through_the_kit() {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output();
    assert!(
        python.is_ok_and(|o| o.status.success()),
        "this test needs python3 (CI installs it)"
    );
    let group = format!("tapfinger-python-test-{}", std::process::id());
    if let Cgroups::Unavailable(why) = Cgroups::detect(Path::new("/sys/fs/cgroup"), &group) {
        panic!("this test needs writable cgroups (CI has them): {why}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().to_path_buf();
    let (a, _) = Local::new("a", Exec::Cgroups(logs.clone(), group.clone()))
        .start()
        .await;
    let first = a.submit(follower(8)).await.unwrap();
    let mut alone = false;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if counts(&logs, first).contains(&4) {
            alone = true;
            break;
        }
    }
    assert!(
        alone,
        "the lone task never ran 4 workers: {:?}",
        counts(&logs, first)
    );
    a.submit(sleeper(2)).await.unwrap();
    wait(&[&a], Duration::from_secs(60), "both tasks", |s| {
        finished(s).len() >= 2
    })
    .await;
    let c = counts(&logs, first);
    eprintln!("worker counts of the Python task: {c:?}");
    let at4 = c.iter().position(|n| *n == 4).unwrap();
    let fewer = c[at4..].iter().position(|n| *n < 4).map(|i| i + at4);
    assert!(fewer.is_some(), "the workers never went down: {c:?}");
    assert!(
        c[fewer.unwrap()..].contains(&4),
        "the workers never came back to 4: {c:?}"
    );
    assert!(c.iter().all(|n| (1..=4).contains(n)), "{c:?}");
    drop(a);
    for h in ["", "cpu", "memory"] {
        let _ = std::fs::remove_dir(Path::new("/sys/fs/cgroup").join(h).join(&group));
    }
}
