//! Elastic sharing on a real agent: the default policy (the general model, elastic, GPUs held)
//! re-shares a node's CPUs among its running tasks every slot, and the agent changes the CPU
//! quota of a task's cgroup while the task runs. Judged from what the tasks themselves read:
//! every half-tenth of a second each task prints the CPU quota of the cgroup it is in (from
//! `/proc/self/cgroup`), so the evidence is the kernel's, not the agent's account of it.
//!
//! Needs writable cgroups (v1 `cpu` or v2), as CI has; without them the test fails and says so.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;
use tapfinger::spec::TaskSpec;
use tapfinger_tests::{Exec, Local, finished, wait};

/// A task that prints its cgroup's CPU quota (in cores × 100000) for about `secs` seconds.
fn quota_printer(secs: u32) -> TaskSpec {
    quota_task(secs, "", "")
}

/// A task printing, every 50 ms for about `secs` seconds, its cgroup's CPU quota (in cores ×
/// 100000), then `extra` (more shell lines), then a progress line ending with `metrics`.
fn quota_task(secs: u32, extra: &str, metrics: &str) -> TaskSpec {
    let script = format!(
        r#"for i in $(seq 1 {n}); do
  p=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ {{print $3}}' /proc/self/cgroup)
  if [ -n "$p" ]; then q=$(cat /sys/fs/cgroup/cpu$p/cpu.cfs_quota_us); else
    p=$(awk -F: '$1 == "0" {{print $3}}' /proc/self/cgroup); q=$(cut -d' ' -f1 /sys/fs/cgroup$p/cpu.max); fi
  echo "quota=$q"{extra}
  echo "TAPFINGER progress=$(awk "BEGIN {{print $i/{n}}}"){metrics}"
  sleep 0.05
done"#,
        n = secs * 20
    );
    // A literal multi-line TOML string: the script as written, no escapes.
    let toml = format!(
        "command = [\"sh\", \"-c\", '''\n{script}''']\nmin_demand = {{ cpu = 1, mem = 1 }}\n"
    );
    TaskSpec::from_toml(&toml).unwrap()
}

/// The quotas a task printed, in order (cores).
fn quotas(logs: &Path, task: tapfinger::TaskId) -> Vec<f64> {
    let text = std::fs::read_to_string(logs.join(format!("{}.stdout", task.0))).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.strip_prefix("quota="))
        .filter_map(|q| q.trim().parse::<f64>().ok())
        .map(|q| q / 100_000.0)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_s_cpu_quota_follows_the_re_share() {
    let group = tapfinger_tests::test_cgroup("elastic");
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().to_path_buf();
    // One box of 4 cores: the first task alone gets them all, then shares them with a second.
    let (a, _) = Local::new("a", Exec::Cgroups(logs.clone(), group.clone()))
        .start()
        .await;
    let first = a.submit(quota_printer(6)).await.unwrap();
    let alone = tapfinger_tests::poll_until(Duration::from_secs(5), || {
        quotas(&logs, first).contains(&4.0)
    })
    .await;
    assert!(
        alone,
        "the lone task never ran with the box's 4 cores: {:?}",
        quotas(&logs, first)
    );
    let second = a.submit(quota_printer(2)).await.unwrap();
    wait(&[&a], Duration::from_secs(30), "both tasks", |s| {
        finished(s).len() >= 2
    })
    .await;
    let q1 = quotas(&logs, first);
    let q2 = quotas(&logs, second);
    eprintln!("quotas (cores), first task: {q1:?}\nsecond task: {q2:?}");
    // While both ran, each had a share below the whole box, the two within its 4 cores; the
    // first task's quota went down while it ran, and back up once the second had finished.
    let at4 = q1.iter().position(|q| *q == 4.0).unwrap();
    let shared = q1[at4..].iter().position(|q| *q < 4.0).map(|i| i + at4);
    assert!(
        shared.is_some(),
        "the first task's quota never went down: {q1:?}"
    );
    let shared = shared.unwrap();
    assert!(
        q1[shared..].contains(&4.0),
        "the first task never got the box back: {q1:?}"
    );
    assert!(
        q2.iter().all(|q| *q >= 1.0 && *q <= 3.0),
        "the second task ran outside [its minimum, what the first left]: {q2:?}"
    );
    assert!(
        q2.iter().any(|q| q + q1[shared] <= 4.0),
        "no two shares fitted the box: {q1:?} {q2:?}"
    );
    // The agent's parent group (its tasks' groups went with them).
    drop(a);
    tapfinger_tests::remove_test_cgroup(&group);
}

/// A task whose loss stays flat from its first report: it prints its pid, its cgroup's CPU
/// quota and a progress line with `loss=1.0` every 50 ms for about `secs` seconds.
fn flat_loss(secs: u32) -> TaskSpec {
    quota_task(secs, "\n  echo \"pid=$$\"", " loss=1.0")
}

/// With `shrink_converging`, a task whose loss has plateaued gives up a core a slot while it
/// runs, down to its minimum demand: judged from the quotas and the pid it printed itself (one
/// process throughout: no restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_converging_task_s_cpu_quota_steps_down_to_its_minimum_while_it_runs() {
    let group = tapfinger_tests::test_cgroup("shrink");
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().to_path_buf();
    let mut local = Local::new("a", Exec::Cgroups(logs.clone(), group.clone()));
    local.shrink = true;
    let (a, _) = local.start().await;
    let task = a.submit(flat_loss(4)).await.unwrap();
    wait(&[&a], Duration::from_secs(30), "the task", |s| {
        finished(s).contains(&task)
    })
    .await;
    let text = std::fs::read_to_string(logs.join(format!("{}.stdout", task.0))).unwrap();
    let pids: std::collections::BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("pid="))
        .collect();
    let q = quotas(&logs, task);
    eprintln!("quotas (cores): {q:?}; pids {pids:?}");
    assert_eq!(
        pids.len(),
        1,
        "the task ran as more than one process: {pids:?}"
    );
    // Alone on the box it starts with its 4 cores, and once its loss has been flat for a
    // window of reports it steps down, one core at a time, to its minimum of 1, never back up.
    let first = q
        .iter()
        .position(|x| *x == 4.0)
        .expect("never ran with 4 cores");
    let mut steps: Vec<f64> = q[first..].to_vec();
    steps.dedup();
    assert_eq!(steps, vec![4.0, 3.0, 2.0, 1.0], "{q:?}");
    drop(a);
    tapfinger_tests::remove_test_cgroup(&group);
}

/// A task that records each start of its own (its GPU devices, whether it was told to resume)
/// in `marker`, then runs about a second.
fn run_recorder(marker: &Path, resumable: bool) -> TaskSpec {
    let script = format!(
        r#"echo "gpu=$CUDA_VISIBLE_DEVICES resume=$TAPFINGER_RESUME" >> {m}
for i in $(seq 1 20); do echo "TAPFINGER progress=$(awk "BEGIN {{print $i/20}}")"; sleep 0.05; done"#,
        m = marker.display()
    );
    let toml = format!(
        "command = [\"sh\", \"-c\", '''\n{script}''']\nmin_demand = {{ cpu = 1, mem = 1 }}\nresumable = {resumable}\n"
    );
    TaskSpec::from_toml(&toml).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_gpu_share_restarts_a_resumable_task_with_its_devices_and_only_such_a_task() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // One box with one GPU (device 7). A task asking for no GPU starts without one; the
    // re-share that follows gives it the idle GPU, which it can only get by a restart.
    let (a, _) = Local::new("a", Exec::Processes(dir.join("logs")))
        .start()
        .await;
    let resumable = dir.join("resumable.runs");
    a.submit(run_recorder(&resumable, true)).await.unwrap();
    wait(&[&a], Duration::from_secs(30), "the resumable task", |s| {
        !finished(s).is_empty()
    })
    .await;
    let fixed = dir.join("fixed.runs");
    a.submit(run_recorder(&fixed, false)).await.unwrap();
    wait(&[&a], Duration::from_secs(30), "the other task", |s| {
        finished(s).len() >= 2
    })
    .await;
    let runs = |p: &Path| -> Vec<String> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    };
    let (r, f) = (runs(&resumable), runs(&fixed));
    eprintln!("runs of the resumable task: {r:?}\nof the other: {f:?}");
    // The resumable task's last run had the GPU and was told to resume; a run before it (if
    // it got as far as writing) had none. Finished once (the waits above count outcomes).
    assert_eq!(
        r.last().map(String::as_str),
        Some("gpu=7 resume=1"),
        "{r:?}"
    );
    assert!(
        r.len() <= 2 && r[..r.len() - 1].iter().all(|l| l == "gpu= resume="),
        "{r:?}"
    );
    // The other cannot resume: it ran once, without a GPU, never restarted.
    assert_eq!(f, vec!["gpu= resume=".to_string()], "{f:?}");
}
