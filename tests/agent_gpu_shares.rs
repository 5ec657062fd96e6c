//! Fractions of a GPU on a real agent (real processes, the agent's daemon loop), with a
//! stand-in for `nvidia-cuda-mps-control` where no GPU is: the stand-in and the tasks write what
//! they were asked and what they saw to one events file, in the order it happened, so the
//! judgement rests on the tasks' own environment, not on the agent's account of it.
//!
//! One box with one GPU (device 7) shared in quarters: a 0.25 and a 0.75 task run at once as
//! clients of one MPS daemon, each held to its share; a whole-device task never runs while the
//! daemon serves them. A box without the control program shares nothing
//! and refuses a fraction, naming the field. Two boxes that pack shares keep a device whole for
//! a whole-GPU task that two boxes stating headroom make wait.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;
use tapfinger::TaskId;
use tapfinger::spec::TaskSpec;
use tapfinger_agent::daemon::{Agent, SubmitError};
use tapfinger_tests::{Exec, Local, statuses};

/// A stand-in control program: appends `mps <args> dev=<device> pipe=<folder> in=<stdin>` to
/// `events` (stdin is read only when not started as a daemon, as the real one reads commands).
fn stand_in(dir: &Path, events: &Path) -> PathBuf {
    let p = dir.join("nvidia-cuda-mps-control");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\nin=''\nif [ \"$1\" != -d ]; then in=$(cat); fi\n\
             echo \"mps $* dev=$CUDA_VISIBLE_DEVICES pipe=$CUDA_MPS_PIPE_DIRECTORY in=$in\" >> {}\n",
            events.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// A task `name` asking for `gpu` GPUs: it writes `start`, its CUDA environment to `<name>.env`,
/// sleeps `secs`, then writes `end`.
fn task(name: &str, gpu: f64, secs: f64, dir: &Path) -> TaskSpec {
    let events = dir.join("events");
    let script = format!(
        "echo start {name} >> {ev}; env | grep ^CUDA | sort > {env}; sleep {secs}; echo end {name} >> {ev}",
        ev = events.display(),
        env = dir.join(format!("{name}.env")).display()
    );
    let mut s = TaskSpec::from_toml(&format!(
        "name = \"{name}\"\nmin_demand = {{ cpu = 1, gpu = {gpu}, mem = 1 }}\n"
    ))
    .unwrap();
    s.command = vec!["sh".into(), "-c".into(), script];
    s
}

fn events(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("events"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn env(dir: &Path, name: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(format!("{name}.env")))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// One box of `gpus` GPUs (devices 7, ...) in quarters, 4 cores and 8 GiB, running real
/// processes under the `min` policy, its MPS control program `mps_control`.
fn quarter_box(dir: &Path, gpus: u32, mps_control: PathBuf) -> Local {
    let mut local = Local::new("a", Exec::Processes(dir.join("logs")));
    local.policy = "min".into();
    local.capacity = tapfinger::Resources(vec![4, 4 * gpus, 8]);
    local.gpu_step = 0.25;
    local.mps_control = Some(mps_control);
    local
}

/// Poll until `n` tasks have finished on `agent` (60 s at most).
async fn until_finished(agent: &Agent, n: usize) {
    let end = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let s = statuses(&[agent]);
        if s[0].finished_here.len() >= n {
            return;
        }
        assert!(tokio::time::Instant::now() < end, "timed out: {:#?}", s[0]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The position of the first event equal to `e`.
fn at(ev: &[String], e: &str) -> usize {
    ev.iter()
        .position(|x| x == e)
        .unwrap_or_else(|| panic!("no `{e}` in {ev:#?}"))
}

/// A box of one GPU in quarters: one MPS daemon serves both fractional tasks at once, each
/// client held to its share of compute and memory; it quits after the last; the whole-device
/// task runs outside the daemon's life, seeing its device and no MPS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fractional_tasks_share_a_gpu_under_one_mps_daemon() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let program = stand_in(dir, &dir.join("events"));
    let local = quarter_box(dir, 1, program);
    let (agent, _) = local.start().await;
    let ids: Vec<TaskId> = {
        let mut ids = Vec::new();
        for (name, gpu, secs) in [
            ("quarter", 0.25, 1.5),
            ("rest", 0.75, 1.5),
            ("whole", 1.0, 0.5),
        ] {
            ids.push(agent.submit(task(name, gpu, secs, dir)).await.unwrap());
            // In this order into the queue.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        ids
    };
    until_finished(&agent, ids.len()).await;
    let ev = events(dir);
    let pipe = dir.join("mps/7/pipe").display().to_string();
    let daemon = format!("mps -d dev=7 pipe={pipe} in=");
    let quit = format!("mps  dev=7 pipe={pipe} in=quit");
    assert_eq!(ev.iter().filter(|e| **e == daemon).count(), 1, "{ev:#?}");
    assert_eq!(ev.iter().filter(|e| **e == quit).count(), 1, "{ev:#?}");
    let (d, q) = (at(&ev, &daemon), at(&ev, &quit));
    for name in ["quarter", "rest"] {
        assert!(
            d < at(&ev, &format!("start {name}")),
            "daemon first: {ev:#?}"
        );
        assert!(
            at(&ev, &format!("end {name}")) < q,
            "quit after the last: {ev:#?}"
        );
    }
    // Both shares at once: each started before the other ended.
    assert!(at(&ev, "start quarter") < at(&ev, "end rest"), "{ev:#?}");
    assert!(at(&ev, "start rest") < at(&ev, "end quarter"), "{ev:#?}");
    // The whole device is used before the daemon starts or after it quits (the policy may
    // take the queue in either order), never while it serves clients.
    assert!(
        at(&ev, "end whole") < d || q < at(&ev, "start whole"),
        "a whole device never meets MPS clients: {ev:#?}"
    );
    for (name, percent, mib) in [("quarter", 25, 4096), ("rest", 75, 12288)] {
        let e = env(dir, name);
        for want in [
            format!("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={percent}"),
            format!("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={mib}M"),
            format!("CUDA_MPS_PIPE_DIRECTORY={pipe}"),
            "CUDA_VISIBLE_DEVICES=0".to_string(),
        ] {
            assert!(e.contains(&want), "{name} lacks {want}: {e:#?}");
        }
    }
    let whole = env(dir, "whole");
    assert!(
        whole.contains(&"CUDA_VISIBLE_DEVICES=7".to_string()),
        "{whole:#?}"
    );
    assert!(
        !whole.iter().any(|l| l.starts_with("CUDA_MPS")),
        "{whole:#?}"
    );
    agent.shutdown().await;
}

/// A box whose MPS control program is missing keeps the quarter step but shares nothing: a
/// fraction is refused at submit, naming the field; a whole device runs as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_without_mps_refuses_a_fraction_and_runs_whole_devices() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let local = quarter_box(dir, 1, dir.join("no-such-mps-control"));
    let (agent, _) = local.start().await;
    match agent.submit(task("half", 0.5, 0.1, dir)).await {
        Err(SubmitError::Refused(e)) => {
            assert_eq!(e.field, "min_demand.gpu", "{e}");
            assert!(e.message.contains("gpu_shares"), "{e}");
        }
        other => panic!("a fraction on a box without MPS: {other:?}"),
    }
    agent.submit(task("whole", 1.0, 0.1, dir)).await.unwrap();
    until_finished(&agent, 1).await;
    assert!(env(dir, "whole").contains(&"CUDA_VISIBLE_DEVICES=7".to_string()));
    assert!(
        !dir.join("mps").exists(),
        "no MPS folders on a box without MPS"
    );
    agent.shutdown().await;
}

/// Two GPUs with three quarters used on each: the box's units show half a GPU free, but no
/// device has it. A half-GPU task placed there goes back to the queue rather than failing, and
/// runs once a device has room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_no_single_device_holds_waits_in_the_queue() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let program = stand_in(dir, &dir.join("events"));
    let local = quarter_box(dir, 2, program);
    let (agent, _) = local.start().await;
    for (name, gpu, secs) in [("a", 0.75, 1.5), ("b", 0.75, 1.5), ("half", 0.5, 0.1)] {
        agent.submit(task(name, gpu, secs, dir)).await.unwrap();
        // Each started before the next arrives (slots of 150 ms).
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    until_finished(&agent, 3).await;
    let ev = events(dir);
    let ends = at(&ev, "end a").min(at(&ev, "end b"));
    assert!(
        at(&ev, "start b") < at(&ev, "end a"),
        "a and b at once: {ev:#?}"
    );
    assert!(
        ends < at(&ev, "start half"),
        "half waits for a device: {ev:#?}"
    );
    let e = env(dir, "half");
    assert!(
        e.contains(&"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50".to_string()),
        "{e:#?}"
    );
    agent.shutdown().await;
}

/// What a task uses of its GPU reaches the node's status (what `show`, the API and the
/// dashboard read) and `/metrics`, from a stand-in for NVML's process samples: the task's own
/// process counts, a process of no task does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_s_gpu_use_is_shown() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let program = stand_in(dir, &dir.join("events"));
    let nvml = dir.join("nvml.json");
    let mut local = quarter_box(dir, 1, program);
    local.fake_nvml = Some(nvml.clone());
    let (agent, _) = local.start().await;
    let mut spec = task("busy", 0.25, 8.0, dir);
    let pid_file = dir.join("busy.pid");
    spec.command[2] = format!("echo $$ > {}; {}", pid_file.display(), spec.command[2]);
    let id = agent.submit(spec).await.unwrap();
    let end = tokio::time::Instant::now() + Duration::from_secs(30);
    let pid: u32 = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break p;
        }
        assert!(tokio::time::Instant::now() < end, "the task never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let samples = format!(
        r#"{{"processes": [
            {{"pid": {pid}, "device": 7, "sm_percent": 23, "memory_bytes": 3221225472}},
            {{"pid": 1, "device": 7, "sm_percent": 50, "memory_bytes": 1073741824}}]}}"#
    );
    std::fs::write(&nvml, samples).unwrap();
    let want = tapfinger_agent::gpu_use::TaskGpuUse {
        sm_percent: 23,
        memory_bytes: 3 << 30,
        devices: vec![7],
    };
    loop {
        let s = statuses(&[&agent]);
        if s[0].gpu_use.get(&id) == Some(&want) {
            assert_eq!(s[0].gpu_use.len(), 1, "{:?}", s[0].gpu_use);
            break;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "never shown: {:?}",
            s[0].gpu_use
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = agent.metrics.render();
    assert!(
        metrics.contains("tapfinger_tasks_gpu_sm_percent 23"),
        "{metrics}"
    );
    assert!(metrics.contains("tapfinger_tasks_on_gpus 1"), "{metrics}");
    agent.shutdown().await;
}

/// Two boxes of one GPU in quarters, two half-GPU tasks a moment apart, then a whole-GPU one:
/// the halves' MPS pipe folders (each box's own) and the start of the whole-GPU task.
async fn halves_then_a_whole(pack: bool) -> (Vec<String>, Vec<String>, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let locals = ["a", "b"].map(|name| {
        let own = dir.join(name);
        std::fs::create_dir_all(&own).unwrap();
        let mut local = quarter_box(&own, 1, stand_in(&own, &dir.join("events")));
        local.name = name.into();
        local.pack_shares = pack;
        local
    });
    let agents = tapfinger_tests::start_all(locals.into()).await;
    for (name, gpu, secs) in [("h1", 0.5, 3.0), ("h2", 0.5, 3.0), ("whole", 1.0, 0.1)] {
        agents[0].submit(task(name, gpu, secs, dir)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    let all: Vec<&Agent> = agents.iter().collect();
    let end = tokio::time::Instant::now() + Duration::from_secs(60);
    while tapfinger_tests::finished(&statuses(&all)).len() < 3 {
        assert!(
            tokio::time::Instant::now() < end,
            "timed out: {:#?}",
            events(dir)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pipe = |name: &str| -> Vec<String> {
        env(dir, name)
            .into_iter()
            .filter(|l| l.starts_with("CUDA_MPS_PIPE_DIRECTORY="))
            .collect()
    };
    let out = (pipe("h1"), pipe("h2"), events(dir));
    for a in agents {
        a.shutdown().await;
    }
    out
}

/// Boxes that pack shares (`pack_shares`) put the second half beside the first, where it
/// leaves no device part-used, so the whole-GPU task starts while both halves run; boxes that
/// state their headroom spread the halves, and the whole-GPU task waits for one to end.
/// Judged from the tasks' own environment and events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boxes_that_pack_shares_keep_a_device_whole() {
    let (h1, h2, ev) = halves_then_a_whole(true).await;
    assert!(!h1.is_empty() && h1 == h2, "one box: {h1:?} {h2:?}");
    assert!(at(&ev, "start whole") < at(&ev, "end h1"), "{ev:#?}");
    let (h1, h2, ev) = halves_then_a_whole(false).await;
    assert!(
        !h1.is_empty() && !h2.is_empty() && h1 != h2,
        "{h1:?} {h2:?}"
    );
    assert!(at(&ev, "start whole") > at(&ev, "end h1"), "{ev:#?}");
}
