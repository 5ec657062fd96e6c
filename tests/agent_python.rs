//! The Python task kit (`python/tapfinger_task`) under a real agent.
//!
//! - A Python task that follows its share with the kit, and how many threads its computing
//!   thread runs (OpenMP's count, read in that thread), judged from what the task printed itself. The agent's default policy re-shares a box's CPUs among
//!   its running tasks every slot (as `agent_elastic` shows from the cgroups' quotas): alone,
//!   the task holds the box's 4 cores; beside a second task, fewer; alone again, 4. Needs
//!   writable cgroups (CI has them); without them it fails and says so.
//! - The Python client against the agent's API with a token: it submits (a dict and a TOML
//!   file), follows a task's output to its end, lists, cancels, and reads the API's refusals.
//! - The NumPy example (`examples/python/train_numpy.py`) on two agents, preempted by an urgent
//!   task: it saves on SIGTERM and resumes at the step it saved; and submitted twice with one
//!   spec, once to each box: both succeed, each result fenced in its own folder. Need NumPy.
//!
//! All need Python 3 (CI installs it and NumPy) and fail, saying so, without it.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;
use tapfinger::spec::TaskSpec;
use tapfinger_tests::{Exec, Local, finished, wait};

/// The kit's folder in the repository.
fn kit() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("python")
}

/// A Python task that follows its share with the kit and prints, every 50 ms for about `secs`
/// seconds, the thread count its computing thread runs (`threads=N`: OpenMP's count, a setting
/// of each thread, read in the loop that reports, after the report that applies a re-share).
fn follower(secs: u32) -> TaskSpec {
    let script = format!(
        r#"import ctypes, time
import tapfinger_task as kit
gomp = ctypes.CDLL("libgomp.so.1")  # an OpenMP runtime, as PyTorch or MKL load one
kit.follow_threads(interval=0.02)
steps = {steps}
for i in range(steps):
    kit.report((i + 1) / steps)
    print(f"threads={{gomp.omp_get_max_threads()}}", flush=True)
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

fn needs_numpy() {
    needs_python();
    let numpy = std::process::Command::new("python3")
        .args(["-c", "import numpy"])
        .status();
    assert!(
        numpy.is_ok_and(|s| s.success()),
        "this test needs NumPy for python3 (.ci/run installs it)"
    );
}

fn needs_python() {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output();
    assert!(
        python.is_ok_and(|o| o.status.success()),
        "this test needs python3 (CI installs it)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_task_s_threads_follow_its_share_through_the_kit() {
    needs_python();
    let group = tapfinger_tests::test_cgroup("python");
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().to_path_buf();
    let (a, _) = Local::new("a", Exec::Cgroups(logs.clone(), group.clone()))
        .start()
        .await;
    let first = a.submit(follower(8)).await.unwrap();
    let alone = tapfinger_tests::poll_until(Duration::from_secs(10), || {
        counts(&logs, first).contains(&4)
    })
    .await;
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
    tapfinger_tests::remove_test_cgroup(&group);
}

/// What the client script does against the agent, one JSON line per step.
const CLIENT: &str = r#"
import io, json, sys, time
from tapfinger_task.client import ApiError, Client

api, token_file, toml_spec = sys.argv[1:4]
c = Client(api, token_file=token_file)
hello = {"name": "hello", "min_demand": {"cpu": 1, "mem": 1},
         "command": ["sh", "-c", "echo one; echo two >&2; sleep 0.3; echo three"]}
tid = c.submit(hello)
out, err = io.StringIO(), io.StringIO()
ended = c.follow("hello", out=out, err=err, every=0.1)
print(json.dumps({"id": tid, "state": ended["state"], "out": out.getvalue(), "err": err.getvalue()}))
long = c.submit(toml_spec)
while c.show(long)["state"] != "running":
    time.sleep(0.05)
# Its expected finish, as the agent estimates it (a number of seconds).
expected = c.show(long).get("expected_finish_s")
c.cancel(long)
done = [t["id"] for t in c.tasks(state="succeeded")]
print(json.dumps({"cancelled": c.show(long)["state"], "succeeded": done, "expected": expected}))
try:
    c.submit({"command": ["x"], "min_demand": {"cpu": 1}, "gpus": 2})
except ApiError as e:
    print(json.dumps({"refused": e.status, "field": e.field}))
try:
    Client(api).node()
except ApiError as e:
    print(json.dumps({"without_token": e.status}))
# A task whose name is digits (and no task's id): addressed by its name.
digits = c.submit({"name": "2024", "min_demand": {"cpu": 1, "mem": 1}, "command": ["sleep", "60"]})
found = c.show("2024")["id"]
c.cancel("2024")
print(json.dumps({"by_name": found == digits, "then": c.show(digits)["state"]}))
try:
    Client(api, token_file=token_file + ".missing")
except OSError as e:
    print(json.dumps({"missing_token": str(e), "kind": type(e).__name__}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_submits_follows_lists_and_cancels() {
    needs_python();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let logs = dir.join("logs");
    let (a, _) = Local::new("a", Exec::Processes(logs.clone())).start().await;
    let token = "a-token-of-at-least-thirty-two-bytes!".to_string();
    let app = tapfinger_agent::api::router(tapfinger_tests::api_state(
        &a,
        Some(token.clone()),
        Some(logs),
    ));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = l.local_addr().unwrap().to_string();
    tokio::spawn(tapfinger_agent::api::serve(l, app));
    std::fs::write(dir.join("token"), &token).unwrap();
    std::fs::write(
        dir.join("long.toml"),
        "name = \"long\"\ncommand = [\"sleep\", \"60\"]\nmin_demand = { cpu = 1, mem = 1 }\n",
    )
    .unwrap();
    let out = tokio::process::Command::new("python3")
        .args(["-B", "-c", CLIENT, &api])
        .arg(dir.join("token"))
        .arg(dir.join("long.toml"))
        .env("PYTHONPATH", kit())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("the client script ends")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6, "{lines:?} {stderr}");
    let followed = &lines[0];
    assert_eq!(followed["state"], "succeeded", "{followed}");
    let (o, e) = (
        followed["out"].as_str().unwrap(),
        followed["err"].as_str().unwrap(),
    );
    assert!(
        o.contains("one\n") && o.contains("three\n") && !o.contains("two"),
        "{o}"
    );
    assert!(e.contains("two\n"), "{e}");
    assert_eq!(lines[1]["cancelled"], "cancelled");
    assert!(
        lines[1]["expected"].as_f64().is_some_and(|s| s > 0.0),
        "{}",
        lines[1]
    );
    assert_eq!(lines[1]["succeeded"], serde_json::json!([followed["id"]]));
    assert_eq!(lines[2]["refused"], 400);
    assert!(lines[2]["field"].is_string(), "{}", lines[2]);
    assert_eq!(lines[3]["without_token"], 401);
    assert_eq!(lines[4]["by_name"], true, "{}", lines[4]);
    assert_eq!(lines[4]["then"], "cancelled", "{}", lines[4]);
    assert_eq!(lines[5]["kind"], "FileNotFoundError", "{}", lines[5]);
    let said = lines[5]["missing_token"].as_str().unwrap();
    assert!(
        said.contains("API token file") && said.contains("token.missing"),
        "{said}"
    );
    // The agent's own account agrees with what the client saw.
    let s = tapfinger_tests::statuses(&[&a]);
    assert_eq!(finished(&s).len(), 1, "{s:#?}");
    a.shutdown().await;
}

/// The NumPy example (`examples/python/train_numpy.py`) as a batch task of class 2 taking the
/// box's 4 cores, checkpoints in `ckpt`, `steps` steps.
fn numpy_example(ckpt: &Path, steps: u32) -> TaskSpec {
    let repo = kit().parent().unwrap().to_path_buf();
    let toml = format!(
        "name = \"train\"\ncommand = [\"python3\", \"{script}\"]\n\
         min_demand = {{ cpu = 4, mem = 1 }}\nmax_demand = {{ gpu = 0 }}\npriority = 2\n\
         resumable = true\ngrace_seconds = 10\n\
         env = {{ PYTHONPATH = \"{kit}\", TAPFINGER_CHECKPOINT_DIR = \"{ckpt}\", STEPS = \"{steps}\", \
         ROWS = \"4000\", HIDDEN = \"32\", CKPT_EVERY = \"10\", OPENBLAS_NUM_THREADS = \"1\" }}\n",
        script = repo.join("examples/python/train_numpy.py").display(),
        kit = kit().display(),
        ckpt = ckpt.display(),
    );
    TaskSpec::from_toml(&toml).unwrap()
}

/// A preempted NumPy training job, submitted to one of two agents and run by the other, saves
/// on SIGTERM, and its next run resumes from that step: judged from what the job printed (its
/// log) and the result it wrote through the fenced file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_numpy_job_resumes_where_it_saved_and_its_result_is_fenced() {
    needs_numpy();
    let tmp = tempfile::tempdir().unwrap();
    let (logs, ckpt) = (tmp.path().join("logs"), tmp.path().join("ckpt"));
    // Two agents: box a of 4 cores, box b of 2; the job, submitted to b, can run on a only.
    let locals = [("a", 4), ("b", 2)].map(|(name, cpus)| {
        let mut l = Local::new(name, Exec::Processes(logs.clone()));
        l.preempt = true;
        l.capacity = tapfinger::Resources(vec![cpus, 1, 8]);
        l
    });
    let agents = tapfinger_tests::start_all(locals.into()).await;
    let (a, b) = (&agents[0], &agents[1]);
    let train = b.submit(numpy_example(&ckpt, 400)).await.unwrap();
    let log =
        || std::fs::read_to_string(logs.join(format!("{}.stdout", train.0))).unwrap_or_default();
    // Past its first checkpoints, then an urgent task that needs the whole box.
    wait(
        &[a, b],
        Duration::from_secs(60),
        "the job past step 30",
        |_| log().contains("checkpoint=0.075"),
    )
    .await;
    let urgent = b
        .submit(
            TaskSpec::from_toml(
                "command = [\"sleep\", \"1\"]\nmin_demand = { cpu = 4, mem = 1 }\npriority = 0\n",
            )
            .unwrap(),
        )
        .await
        .unwrap();
    wait(&[a, b], Duration::from_secs(120), "both tasks", |s| {
        let f = finished(s);
        f.contains(&train) && f.contains(&urgent)
    })
    .await;
    // Both ran on box a, the only one with 4 cores.
    let s = tapfinger_tests::statuses(&[a]);
    assert!(
        s[0].finished_here.contains(&train) && s[0].finished_here.contains(&urgent),
        "{s:#?}"
    );
    let text = log();
    let starts: Vec<&str> = text
        .lines()
        .filter(|l| *l == "fresh start" || l.starts_with("resumed at step"))
        .collect();
    assert_eq!(starts.len(), 2, "{text}");
    assert_eq!(starts[0], "fresh start");
    let resumed: u32 = starts[1]
        .strip_prefix("resumed at step ")
        .unwrap()
        .parse()
        .unwrap();
    assert!((30..400).contains(&resumed), "{text}");
    // The first run reported the checkpoint it saved on SIGTERM.
    let cut = text.find("resumed at step").unwrap();
    let saved = format!("checkpoint={}", f64::from(resumed) / 400.0);
    assert!(
        text[..cut].contains(&saved),
        "no `{saved}` before the resume: {text}"
    );
    // The result, in the task's own folder: all 400 steps, written by the second run, whose
    // epoch is the higher, and fenced as this task's.
    let (result, owner, fenced) = fenced_result(&ckpt, train);
    assert_eq!(result["steps"], 400);
    assert_eq!(owner, train.0);
    assert_eq!(result["epoch"].as_u64(), Some(fenced));
    assert!(fenced >> 32 >= 2, "the second start's epoch: {fenced:#x}");
    for x in agents {
        x.shutdown().await;
    }
}

/// What task `id` wrote through the fenced file in its own folder under `ckpt`: the result, and
/// the task and epoch recorded beside it.
fn fenced_result(ckpt: &Path, id: tapfinger::TaskId) -> (serde_json::Value, u64, u64) {
    let dir = ckpt.join(format!("task-{}", id.0));
    let read = |name: &str| -> serde_json::Value {
        let text = std::fs::read_to_string(dir.join(name))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join(name).display()));
        serde_json::from_str(&text).unwrap()
    };
    let (result, fence) = (read("results.json"), read("results.json.epoch"));
    (
        result,
        fence["task"].as_u64().unwrap(),
        fence["epoch"].as_u64().unwrap(),
    )
}

/// The NumPy example submitted twice with one spec (so one `TAPFINGER_CHECKPOINT_DIR`), once to
/// each of two boxes: both succeed, each with its result in its own folder, fenced as its own
/// (a spec's checkpoint folder once held one result for every submission, and the later task's
/// lower epoch was refused at its very end). Judged from the files the tasks wrote and their
/// own output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_numpy_example_submitted_twice_on_two_boxes_succeeds_both_times() {
    needs_numpy();
    let tmp = tempfile::tempdir().unwrap();
    let (logs, ckpt) = (tmp.path().join("logs"), tmp.path().join("ckpt"));
    let locals = ["a", "b"].map(|name| {
        let mut l = Local::new(name, Exec::Processes(logs.clone()));
        l.capacity = tapfinger::Resources(vec![4, 1, 8]);
        l
    });
    let agents = tapfinger_tests::start_all(locals.into()).await;
    let (a, b) = (&agents[0], &agents[1]);
    let first = a.submit(numpy_example(&ckpt, 100)).await.unwrap();
    let second = b.submit(numpy_example(&ckpt, 100)).await.unwrap();
    wait(&[a, b], Duration::from_secs(120), "both tasks", |s| {
        let f = finished(s);
        f.contains(&first) && f.contains(&second)
    })
    .await;
    // Each needs a whole box: submitted together, they ran side by side, one on each.
    let s = tapfinger_tests::statuses(&[a, b]);
    assert!(
        s.iter().all(|st| st.finished_here.len() == 1),
        "{:?}",
        s.iter().map(|st| &st.finished_here).collect::<Vec<_>>()
    );
    for id in [first, second] {
        let out =
            std::fs::read_to_string(logs.join(format!("{}.stdout", id.0))).unwrap_or_default();
        let err =
            std::fs::read_to_string(logs.join(format!("{}.stderr", id.0))).unwrap_or_default();
        assert!(
            !err.contains("Error") && out.contains("\"steps\": 100"),
            "task {}: {out}\n{err}",
            id.0
        );
        let (result, owner, fenced) = fenced_result(&ckpt, id);
        assert_eq!(result["steps"], 100);
        assert_eq!(owner, id.0);
        assert_eq!(result["epoch"].as_u64(), Some(fenced));
    }
    for x in agents {
        x.shutdown().await;
    }
}
