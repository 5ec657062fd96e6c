//! Fractions of a GPU through the agent binary, where no GPU is: a stand-in for NVML
//! (`TAPFINGER_FAKE_NVML`: one 16 GiB GPU, and the processes on it) and a stand-in for
//! `nvidia-cuda-mps-control` that records each call. One agent process with `gpu_step = 0.25`,
//! its supervisors and guards as in production, runs a 0.25 and a 0.75 task at once. Judged from
//! what the tasks wrote of their own environment and what the stand-in recorded, in order: one
//! daemon started before the tasks, each task an MPS client held to its share, the daemon told to
//! quit after both ended; and from the API: the box says it shares GPUs, and shows a task's GPU
//! use from the stand-in's samples. An agent killed while a fractional task runs, and started
//! again, adopts the task and its MPS client: no second daemon, and the one there is told to
//! quit after the task ends.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tapfinger-agent");

#[path = "support/process.rs"]
mod process;
use process::{Agent, agent_command, free_port, http, json, start_agent, wait_until};

fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A task asking for `gpu` of a GPU: it records its start, its CUDA environment and its end.
fn spec(name: &str, gpu: f64, secs: f64, dir: &Path) -> String {
    let ev = dir.join("events").display().to_string();
    let script = format!(
        "echo $$ > {d}/{name}.pid; echo start {name} >> {ev}; env | grep ^CUDA | sort > {d}/{name}.env; \
         sleep {secs}; echo end {name} >> {ev}",
        d = dir.display()
    );
    serde_json::json!({
        "name": name,
        "command": ["sh", "-c", script],
        "min_demand": { "cpu": 1, "gpu": gpu, "mem": 1 },
    })
    .to_string()
}

/// A box of one 16 GiB GPU for the agent binary: its folder (the tasks' and the stand-in's
/// records, the data directory), the stand-in control program and NVML file, its addresses.
struct GpuBox {
    dir: PathBuf,
    control: PathBuf,
    nvml: PathBuf,
    api: String,
    p2p: u16,
}

/// The stand-in NVML's GPU.
const GPU: &str =
    r#"{"index": 0, "model": "Stand-in GPU", "memory_bytes": 17179869184, "minor": 0}"#;

impl GpuBox {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tf-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let control = dir.join("nvidia-cuda-mps-control");
        std::fs::write(
            &control,
            format!(
                "#!/bin/sh\nin=''\nif [ \"$1\" != -d ]; then in=$(cat); fi\n\
                 echo \"mps $* dev=$CUDA_VISIBLE_DEVICES in=$in\" >> {}\n",
                dir.join("events").display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o755)).unwrap();
        let nvml = dir.join("nvml.json");
        std::fs::write(&nvml, format!(r#"{{"gpus": [{GPU}]}}"#)).unwrap();
        Self {
            dir,
            control,
            nvml,
            api: format!("127.0.0.1:{}", free_port()),
            p2p: free_port(),
        }
    }

    /// The agent with `gpu_step = 0.25`, its API answering (again on the same data directory
    /// after a kill).
    fn start(&self) -> Agent {
        let mut cmd = agent_command(BIN, "box", &self.dir, self.p2p, &self.api, "min");
        cmd.args(["--set", "gpu_step=0.25", "--set", "offer.mem_gb=4"])
            .args([
                "--set",
                &format!("mps_control=\"{}\"", self.control.display()),
            ])
            .env("TAPFINGER_FAKE_NVML", &self.nvml);
        start_agent(cmd, &self.api)
    }

    /// Submit a task asking for `gpu` of a GPU for `secs` seconds; its id.
    fn submit(&self, name: &str, gpu: f64, secs: f64) -> u64 {
        let body = Some(spec(name, gpu, secs, &self.dir));
        let (code, body) = http(&self.api, "POST", "/v1/tasks", body).unwrap();
        assert_eq!(code, 201, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
            .as_u64()
            .unwrap()
    }

    fn succeeded(&self, id: u64) -> bool {
        json(&self.api, &format!("/v1/tasks/{id}")).is_some_and(|t| t["state"] == "succeeded")
    }
}

#[test]
fn the_agent_binary_runs_fractions_under_mps_and_shows_their_gpu_use() {
    let b = GpuBox::new("gpu-shares");
    let (dir, events, nvml, api) = (&b.dir, b.dir.join("events"), &b.nvml, &b.api);
    let _agent = b.start();
    let node = json(api, "/v1/node").unwrap();
    assert_eq!(node["labels"]["gpu_shares"], "mps", "{node}");
    assert_eq!(node["labels"]["gpu_model"], "Stand-in GPU", "{node}");
    assert_eq!(node["capacity"][1], 4, "one GPU in quarters: {node}");
    let sharing = node["security"]["gpu_sharing"].as_str().unwrap_or("");
    assert!(sharing.contains("MPS shares of 1/4 GPU"), "{node}");

    let quarter = b.submit("quarter", 0.25, 6.0);
    let rest = b.submit("rest", 0.75, 6.0);
    // While the quarter runs, the stand-in says its process uses 21 % of the SMs and 2 GiB.
    wait_until(Duration::from_secs(30), "the quarter task to start", || {
        dir.join("quarter.pid").exists()
    });
    let pid = std::fs::read_to_string(dir.join("quarter.pid")).unwrap();
    let proc = format!(
        r#"{{"pid": {}, "device": 0, "sm_percent": 21, "memory_bytes": 2147483648}}"#,
        pid.trim()
    );
    std::fs::write(
        nvml,
        format!(r#"{{"gpus": [{GPU}], "processes": [{proc}]}}"#),
    )
    .unwrap();
    wait_until(Duration::from_secs(20), "the quarter's GPU use", || {
        json(api, &format!("/v1/tasks/{quarter}")).is_some_and(|t| {
            t["gpu_use"]["sm_percent"] == 21 && t["gpu_use"]["memory_bytes"] == 2147483648u64
        })
    });
    wait_until(Duration::from_secs(60), "both tasks to succeed", || {
        b.succeeded(quarter) && b.succeeded(rest)
    });
    wait_until(
        Duration::from_secs(10),
        "the daemon to be told to quit",
        || lines(&events).iter().any(|l| l.ends_with("in=quit")),
    );

    let ev = lines(&events);
    let at = |e: &str| {
        ev.iter()
            .position(|l| l == e)
            .unwrap_or_else(|| panic!("no `{e}` in {ev:#?}"))
    };
    let (start, quit) = ("mps -d dev=0 in=", "mps  dev=0 in=quit");
    assert_eq!(ev.iter().filter(|l| *l == start).count(), 1, "{ev:#?}");
    assert_eq!(ev.iter().filter(|l| *l == quit).count(), 1, "{ev:#?}");
    for name in ["quarter", "rest"] {
        assert!(at(start) < at(&format!("start {name}")), "{ev:#?}");
        assert!(at(&format!("end {name}")) < at(quit), "{ev:#?}");
    }
    assert!(at("start rest") < at("end quarter"), "at once: {ev:#?}");
    let pipe = dir.join("data/mps/0/pipe").display().to_string();
    for (name, percent, mib) in [("quarter", 25, 4096), ("rest", 75, 12288)] {
        let env = lines(&dir.join(format!("{name}.env")));
        for want in [
            format!("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={percent}"),
            format!("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={mib}M"),
            format!("CUDA_MPS_PIPE_DIRECTORY={pipe}"),
            "CUDA_VISIBLE_DEVICES=0".into(),
        ] {
            assert!(env.contains(&want), "{name} lacks {want}: {env:#?}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Killed while a fractional task runs, the agent is started again on its data directory: it
/// adopts the task (its supervisor kept it running) and the task's MPS client, so it starts no
/// second daemon, and tells the daemon to quit once the task has ended.
#[test]
fn a_restarted_agent_adopts_a_fractional_task_and_its_daemon() {
    let b = GpuBox::new("gpu-restart");
    let events = b.dir.join("events");
    let agent = b.start();
    let id = b.submit("long", 0.25, 6.0);
    wait_until(Duration::from_secs(30), "the task to start", || {
        lines(&events).iter().any(|l| l == "start long")
    });
    drop(agent); // SIGKILL: the task's supervisor keeps it running
    let _again = b.start();
    wait_until(
        Duration::from_secs(60),
        "the adopted task to succeed",
        || b.succeeded(id),
    );
    wait_until(
        Duration::from_secs(10),
        "the daemon to be told to quit",
        || lines(&events).iter().any(|l| l.ends_with("in=quit")),
    );
    let ev = lines(&events);
    let count = |e: &str| ev.iter().filter(|l| *l == e).count();
    assert_eq!(count("mps -d dev=0 in="), 1, "one daemon: {ev:#?}");
    assert_eq!(count("start long"), 1, "adopted, not run again: {ev:#?}");
    let end = ev.iter().position(|l| l == "end long").unwrap();
    let quit = ev.iter().position(|l| l.ends_with("in=quit")).unwrap();
    assert!(end < quit, "{ev:#?}");
    assert_eq!(count("mps  dev=0 in=quit"), 1, "{ev:#?}");
    let _ = std::fs::remove_dir_all(&b.dir);
}
