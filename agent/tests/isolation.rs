//! GPU isolation for real, without a GPU: `/dev/full` (character device 1:7) stands in for a GPU.
//! A task that was not given it cannot open it; a task given it can. The verdict comes from what
//! each task's own shell wrote (whether its `open` succeeded), not from the executor.
//!
//! Two mechanisms, each checked where the kernel offers it: the process executor with the
//! machine's cgroups (v1's `devices` controller on a v1 or hybrid machine, the eBPF filter on a
//! v2 one), and the cgroup v2 device filter on its own (the unified hierarchy of a hybrid machine,
//! or the root of a v2 one). These tests need root, as CI has; they fail, saying why, where the
//! mechanism is missing, never pass silently.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tapfinger::TaskId;
use tapfinger::spec::TaskSpec;
use tapfinger_agent::devices::{DevicePolicy, DeviceRule, Filter};
use tapfinger_agent::exec::{Allocation, Cgroups, Devices, ExecEvent, Executor, ProcessExecutor};
use tokio::sync::mpsc;

/// `/dev/full`: a character device no base policy allows.
const FULL: (u32, u32) = (1, 7);

/// A shell line that records in `out` whether `/dev/full` and `/dev/null` could be opened.
fn probe(out: &Path) -> String {
    format!(
        "if head -c1 /dev/full >/dev/null 2>&1; then f=opened; else f=denied; fi; \
         if head -c0 /dev/null 2>/dev/null; then n=opened; else n=denied; fi; \
         echo \"$f $n\" > '{}'",
        out.display()
    )
}

fn spec(cmd: &str) -> TaskSpec {
    TaskSpec::from_toml(&format!("command = [\"sh\", \"-c\", {cmd:?}]")).unwrap()
}

async fn exited(rx: &mut mpsc::Receiver<ExecEvent>, want: TaskId) -> Option<i32> {
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("the task did not end in time")
            .expect("the executor's channel closed");
        if let ExecEvent::Exited { task, code, .. } = ev
            && task == want
        {
            return code;
        }
    }
}

#[tokio::test]
async fn a_task_opens_only_the_device_it_was_given() {
    let root = Path::new("/sys/fs/cgroup");
    let prefix = format!("tapfinger-iso-{}", std::process::id());
    let cg = Cgroups::detect(root, &prefix);
    if let Cgroups::Unavailable(why) = &cg {
        panic!("this test needs writable cgroups, as CI has: {why}");
    }
    let devices = Devices::detect(root, &prefix, matches!(cg, Cgroups::V2(_)));
    if let Devices::Unavailable(why) = &devices {
        panic!("this test needs a device mechanism (cgroup v1 devices or a v2 filter): {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    // "GPU 0" of this box is /dev/full.
    let mut ex = ProcessExecutor::new(cg.clone(), dir.path().join("logs"), tx).with_devices(
        devices.clone(),
        BTreeMap::from([(0, FULL)]),
        Vec::new(),
    );
    let without = dir.path().join("without");
    let with = dir.path().join("with");
    ex.start(
        TaskId(1),
        &spec(&probe(&without)),
        &Allocation {
            cpus: 1.0,
            ..Allocation::default()
        },
    )
    .unwrap();
    assert_eq!(exited(&mut rx, TaskId(1)).await, Some(0));
    ex.start(
        TaskId(2),
        &spec(&probe(&with)),
        &Allocation {
            cpus: 1.0,
            gpus: vec![0],
            ..Allocation::default()
        },
    )
    .unwrap();
    assert_eq!(exited(&mut rx, TaskId(2)).await, Some(0));
    let read = |p: &PathBuf| std::fs::read_to_string(p).unwrap().trim().to_string();
    assert_eq!(read(&without), "denied opened", "{}", devices.describe());
    assert_eq!(read(&with), "opened opened", "{}", devices.describe());
    // A GPU the box has no device node for is refused at start, not run unisolated.
    let e = ex
        .start(
            TaskId(3),
            &spec("true"),
            &Allocation {
                cpus: 1.0,
                gpus: vec![5],
                ..Allocation::default()
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("GPU 5"), "{e}");
    // Nothing is left of the tasks' groups.
    if let Devices::V1(d) = &devices {
        assert!(!d.join("task-1").exists() && !d.join("task-2").exists());
        let _ = std::fs::remove_dir(d);
    }
    match &cg {
        Cgroups::V2(d) => {
            let _ = std::fs::remove_dir(d);
        }
        Cgroups::V1 { cpu, memory } => {
            let _ = std::fs::remove_dir(cpu);
            if let Some(m) = memory {
                let _ = std::fs::remove_dir(m);
            }
        }
        Cgroups::Unavailable(_) => {}
    }
}

/// Where a cgroup v2 hierarchy is mounted: the root on a v2 machine, `unified` on a hybrid one.
fn v2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, ty) = (f.next()?, f.next()?, f.next()?);
        (ty == "cgroup2").then(|| PathBuf::from(dir))
    })
}

#[test]
fn the_v2_device_filter_refuses_what_it_does_not_list() {
    let Some(root) = v2_root() else {
        panic!("this test needs a cgroup v2 hierarchy (the root, or `unified` on a hybrid host)");
    };
    let devices = Devices::detect(Path::new("/sys/fs/cgroup"), "unused", true);
    if let Devices::Unavailable(why) = &devices {
        panic!("this test needs the v2 device filter (root, kernel 5.7+): {why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let base = root.join(format!("tapfinger-filter-{}", std::process::id()));
    let mut results = Vec::new();
    for (name, gpus) in [("none", vec![]), ("full", vec![FULL])] {
        let group = base.join(name);
        std::fs::create_dir_all(&group).unwrap();
        let policy = DevicePolicy::for_task(&gpus, &[DeviceRule::char(195, 255)]);
        let applied = devices
            .apply("unused", std::slice::from_ref(&group), &policy)
            .unwrap();
        assert_eq!(applied.filter.as_ref(), Some(&group));
        let filter = Filter::attach(&policy, &group).unwrap();
        let out = dir.path().join(name);
        // The task joins its group, then opens: what it writes is the verdict.
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > '{}/cgroup.procs' && {}",
                group.display(),
                probe(&out)
            ))
            .status()
            .unwrap();
        assert!(status.success());
        results.push(std::fs::read_to_string(&out).unwrap().trim().to_string());
        drop(filter);
        let _ = std::fs::remove_dir(&group);
    }
    // The production path: the task's supervisor attaches the filter the executor describes to
    // it (`--device-filter`, `--device-rule`), then starts the task, which joins the group.
    for (name, gpus) in [("sup-none", vec![]), ("sup-full", vec![FULL])] {
        let group = base.join(name);
        std::fs::create_dir_all(&group).unwrap();
        let out = dir.path().join(name);
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tapfinger-agent"));
        cmd.arg("supervise")
            .arg("--lease")
            .arg(dir.path().join("lease"))
            .args(["--autonomy-ms", "60000", "--owner", "me"])
            .arg("--exit-file")
            .arg(dir.path().join(format!("{name}.exit")))
            .arg("--stdout")
            .arg(dir.path().join(format!("{name}.stdout")))
            .arg("--stderr")
            .arg(dir.path().join(format!("{name}.stderr")))
            .arg("--device-filter")
            .arg(&group);
        for line in DevicePolicy::for_task(&gpus, &[]).v1_lines() {
            cmd.args(["--device-rule", &line]);
        }
        std::fs::write(dir.path().join("lease"), "me").unwrap();
        let status = cmd
            .arg("--")
            .args(["sh", "-c"])
            .arg(format!(
                "echo $$ > '{}/cgroup.procs' && {}",
                group.display(),
                probe(&out)
            ))
            .status()
            .unwrap();
        assert!(status.success(), "{name}: {status:?}");
        results.push(std::fs::read_to_string(&out).unwrap().trim().to_string());
        let _ = std::fs::remove_dir(&group);
    }
    let _ = std::fs::remove_dir(&base);
    assert_eq!(
        results,
        [
            "denied opened",
            "opened opened",
            "denied opened",
            "opened opened"
        ]
    );
}
