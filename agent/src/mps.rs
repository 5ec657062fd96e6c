//! NVIDIA MPS (Multi-Process Service) for fractional GPU shares: the control daemon of each GPU
//! that holds fractional tasks, and the environment that makes a task an MPS client held to its
//! share.
//!
//! - One control daemon per device (`nvidia-cuda-mps-control -d`, started with
//!   `CUDA_VISIBLE_DEVICES` naming only that device), with its pipe and log folders under the
//!   agent's data directory (`mps/<device>/pipe`, `mps/<device>/log`), started when the first
//!   fractional task is placed on the device and stopped (`quit` on its standard input) when the
//!   last one has ended.
//! - A client reaches its device's daemon through `CUDA_MPS_PIPE_DIRECTORY`; it sees the one
//!   device the daemon serves, as device 0 (`CUDA_VISIBLE_DEVICES=0`, relative to the daemon's
//!   list). `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` caps its share of the device's streaming
//!   multiprocessors, and `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` its device memory. MPS fixes both
//!   when the client starts, so a re-share of a fractional task takes a restart, as a change of
//!   whole devices does.
//!
//! The daemon program is whatever the configuration names (by default found on `PATH`), so a
//! stand-in can record what the agent asks of it where no GPU is.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The control program's usual name.
pub const CONTROL: &str = "nvidia-cuda-mps-control";

/// What can go wrong with MPS.
#[derive(Debug, thiserror::Error)]
pub enum MpsError {
    /// The control program is not there.
    #[error("the MPS control program `{0}` is not installed (not found on PATH or not executable)")]
    Missing(String),
    /// A daemon could not be started or stopped.
    #[error("MPS on GPU {device}: {reason}")]
    Daemon {
        /// The device.
        device: u32,
        /// What happened.
        reason: String,
    },
    /// A share outside (0, 1).
    #[error("an MPS share must be a fraction of one GPU, in (0, 1); got {0}")]
    Share(f64),
}

/// The control daemons of this box's GPUs.
#[derive(Debug)]
pub struct Mps {
    /// The control program (a path, or a name looked up on `PATH`).
    program: PathBuf,
    /// Where each device's pipe and log folders go.
    dir: PathBuf,
    /// Fractional tasks per device whose daemon runs.
    clients: BTreeMap<u32, usize>,
}

/// `program` as it would run: itself if it names a path, else the first executable of that name
/// on `PATH`.
fn resolve(program: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.components().count() > 1 {
        return executable(program).then(|| program.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| executable(p))
}

impl Mps {
    /// MPS through `program`, its folders under `dir`; an error if the program is not there
    /// (the box then offers whole devices only).
    pub fn new(program: &Path, dir: &Path) -> Result<Self, MpsError> {
        let program =
            resolve(program).ok_or_else(|| MpsError::Missing(program.display().to_string()))?;
        Ok(Self {
            program,
            dir: dir.to_path_buf(),
            clients: BTreeMap::new(),
        })
    }

    fn pipe(&self, device: u32) -> PathBuf {
        self.dir.join(device.to_string()).join("pipe")
    }

    fn log(&self, device: u32) -> PathBuf {
        self.dir.join(device.to_string()).join("log")
    }

    /// The control program's environment for `device`'s daemon.
    fn control(&self, device: u32) -> Command {
        let mut c = Command::new(&self.program);
        // NVML's numbering, as the agent's device indices are (CUDA's own is fastest first).
        c.env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            .env("CUDA_VISIBLE_DEVICES", device.to_string())
            .env("CUDA_MPS_PIPE_DIRECTORY", self.pipe(device))
            .env("CUDA_MPS_LOG_DIRECTORY", self.log(device))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    }

    /// A fractional task placed on `device`: its daemon runs from now on (started if this is the
    /// device's first client).
    pub fn acquire(&mut self, device: u32) -> Result<(), MpsError> {
        let n = self.clients.get(&device).copied().unwrap_or(0);
        if n == 0 {
            let err = |reason: String| MpsError::Daemon { device, reason };
            for d in [self.pipe(device), self.log(device)] {
                std::fs::create_dir_all(&d).map_err(|e| err(format!("{}: {e}", d.display())))?;
            }
            let out = self
                .control(device)
                .arg("-d")
                .stdin(Stdio::null())
                .output()
                .map_err(|e| err(format!("cannot run {}: {e}", self.program.display())))?;
            if !out.status.success() {
                return Err(err(format!(
                    "`{} -d` failed ({}): {}",
                    self.program.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
        }
        self.clients.insert(device, n + 1);
        Ok(())
    }

    /// A fractional task on `device` has ended: its daemon stops with the device's last client.
    pub fn release(&mut self, device: u32) -> Result<(), MpsError> {
        let Some(n) = self.clients.get(&device).copied() else {
            return Ok(());
        };
        if n > 1 {
            self.clients.insert(device, n - 1);
            return Ok(());
        }
        self.clients.remove(&device);
        let err = |reason: String| MpsError::Daemon { device, reason };
        let mut child = self
            .control(device)
            .stdin(Stdio::piped())
            .spawn()
            .map_err(|e| err(format!("cannot run {}: {e}", self.program.display())))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(b"quit\n")
                .map_err(|e| err(format!("cannot ask the daemon to quit: {e}")))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| err(format!("cannot ask the daemon to quit: {e}")))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(err(format!(
                "`quit` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }

    /// A fractional task on `device` adopted after a restart of the agent: the daemon started
    /// for it then still runs (it is a daemon), so it is counted, not started again.
    pub fn adopt(&mut self, device: u32) {
        *self.clients.entry(device).or_default() += 1;
    }

    /// Stop the daemons of `devices` that have no client here but whose pipe folder exists: a
    /// previous run of the agent started them, and their clients ended while it was down.
    /// Failures are logged, not returned: such a daemon may have died with the box.
    pub fn stop_idle(&mut self, devices: &[u32]) {
        for &d in devices {
            if self.clients.contains_key(&d) || !self.pipe(d).is_dir() {
                continue;
            }
            self.clients.insert(d, 1);
            if let Err(e) = self.release(d) {
                tracing::debug!(device = d, error = %e, "no MPS daemon left to stop");
            }
        }
    }

    /// Devices whose daemon runs, with their clients.
    pub fn running(&self) -> &BTreeMap<u32, usize> {
        &self.clients
    }

    /// The environment that makes a task a client of `device`'s daemon holding `share` of it
    /// (of its compute, and of its `memory_bytes` of memory, unless `memory_limit` says how much).
    pub fn client_env(
        &self,
        device: u32,
        share: f64,
        memory_bytes: u64,
        memory_limit: Option<u64>,
    ) -> Result<Vec<(String, String)>, MpsError> {
        if !(share > 0.0 && share < 1.0) {
            return Err(MpsError::Share(share));
        }
        // Whole percent, at least 1: MPS takes an integer.
        let percent = ((share * 100.0).round() as u32).clamp(1, 100);
        let limit = memory_limit.unwrap_or((memory_bytes as f64 * share) as u64);
        let mib = (limit >> 20).max(1);
        Ok(vec![
            // The daemon serves this one device; a client numbers it 0.
            ("CUDA_VISIBLE_DEVICES".into(), "0".into()),
            (
                "CUDA_MPS_PIPE_DIRECTORY".into(),
                self.pipe(device).display().to_string(),
            ),
            (
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(),
                percent.to_string(),
            ),
            (
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(),
                format!("0={mib}M"),
            ),
        ])
    }
}

/// How this box gives its GPUs: grid units per device (1 / the cluster's `gpu_step`), and the
/// MPS daemons where a device may be shared.
#[derive(Debug)]
pub struct GpuShares {
    /// Grid units of one device (1: whole devices only, cluster-wide).
    pub per_device: u32,
    /// The MPS daemons; `None`: this box gives whole devices only.
    pub mps: Option<Mps>,
    /// Each offered device's memory in bytes (a share's memory limit is its part of it).
    pub memory: BTreeMap<u32, u64>,
    /// How GPUs are shared here, or why they are not, for the log, `GET /v1/node` and the
    /// dashboard.
    pub note: String,
}

impl Default for GpuShares {
    fn default() -> Self {
        Self {
            per_device: 1,
            mps: None,
            memory: BTreeMap::new(),
            note: "whole devices (gpu_step = 1)".into(),
        }
    }
}

impl GpuShares {
    /// The sharing of `gpus` (the offered devices: index, memory) where a device is
    /// `per_device` units: MPS through `program` with its folders under `dir` if a device may be
    /// shared and the program is there; whole devices otherwise, saying why.
    pub fn setup(per_device: u32, program: &Path, dir: &Path, gpus: &[(u32, u64)]) -> Self {
        let memory = gpus.iter().copied().collect();
        let whole = |note: String| Self {
            per_device: per_device.max(1),
            mps: None,
            memory: BTreeMap::new(),
            note,
        };
        if per_device <= 1 {
            return Self::default();
        }
        if gpus.is_empty() {
            return whole("no GPU offered".into());
        }
        match Mps::new(program, dir) {
            Ok(mps) => Self {
                per_device,
                mps: Some(mps),
                memory,
                note: format!("MPS shares of 1/{per_device} GPU ({})", program.display()),
            },
            Err(e) => whole(format!(
                "whole devices only: {e}; tasks asking for a fraction of a GPU run on other boxes"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for `nvidia-cuda-mps-control` that records each call (its arguments, the
    /// daemon's device and pipe folder, and what came on its standard input) in `calls`.
    fn stand_in(dir: &Path, exit: i32) -> PathBuf {
        let p = dir.join(CONTROL);
        let calls = dir.join("calls");
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\nin=''\nif [ \"$1\" != -d ]; then in=$(cat); fi\n\
                 echo \"args=$* dev=$CUDA_VISIBLE_DEVICES pipe=$CUDA_MPS_PIPE_DIRECTORY in=$in\" >> {}\n\
                 exit {exit}\n",
                calls.display()
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        p
    }

    fn calls(dir: &Path) -> Vec<String> {
        std::fs::read_to_string(dir.join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// One daemon per device, started with its first client and stopped after its last; the
    /// other device's daemon is its own.
    #[test]
    fn a_daemon_per_device_runs_from_the_first_client_to_the_last() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = tmp.path();
        let program = stand_in(dir, 0);
        let mut mps = Mps::new(&program, &dir.join("mps")).unwrap_or_else(|e| panic!("{e}"));
        mps.acquire(0).unwrap_or_else(|e| panic!("{e}"));
        mps.acquire(0).unwrap_or_else(|e| panic!("{e}"));
        mps.acquire(1).unwrap_or_else(|e| panic!("{e}"));
        let pipe0 = dir.join("mps/0/pipe").display().to_string();
        let pipe1 = dir.join("mps/1/pipe").display().to_string();
        assert_eq!(
            calls(dir),
            vec![
                format!("args=-d dev=0 pipe={pipe0} in="),
                format!("args=-d dev=1 pipe={pipe1} in="),
            ]
        );
        assert!(dir.join("mps/0/log").is_dir());
        mps.release(0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(calls(dir).len(), 2, "a client remains on GPU 0");
        mps.release(0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(calls(dir)[2], format!("args= dev=0 pipe={pipe0} in=quit"));
        assert_eq!(mps.running().keys().copied().collect::<Vec<_>>(), vec![1]);
        // A release with no client is nothing.
        mps.release(0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(calls(dir).len(), 3);
    }

    /// A client's environment: its device's pipe, its share as a whole percentage, its share of
    /// the device's memory (or the limit asked for); no share outside (0, 1).
    #[test]
    fn a_client_is_held_to_its_share_of_compute_and_memory() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = tmp.path();
        let mps = Mps::new(&stand_in(dir, 0), &dir.join("mps")).unwrap_or_else(|e| panic!("{e}"));
        let env: BTreeMap<String, String> = mps
            .client_env(2, 0.25, 80 << 30, None)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .collect();
        assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
        assert_eq!(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=20480M");
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "0");
        assert_eq!(
            env["CUDA_MPS_PIPE_DIRECTORY"],
            dir.join("mps/2/pipe").display().to_string()
        );
        let env: BTreeMap<String, String> = mps
            .client_env(2, 0.75, 80 << 30, Some(4 << 30))
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .collect();
        assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "75");
        assert_eq!(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=4096M");
        for bad in [0.0, 1.0, 1.5, f64::NAN] {
            assert!(mps.client_env(0, bad, 1 << 30, None).is_err(), "{bad}");
        }
    }

    /// No control program: an error naming it (the box offers whole devices only). A daemon
    /// that does not start: an error with what the program said.
    #[test]
    fn a_missing_program_or_a_failed_start_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = tmp.path();
        let e = Mps::new(Path::new("no-such-mps-control-program"), dir).unwrap_err();
        assert!(e.to_string().contains("no-such-mps-control-program"), "{e}");
        let mut mps =
            Mps::new(&stand_in(dir, 3), &dir.join("mps")).unwrap_or_else(|e| panic!("{e}"));
        let e = mps.acquire(0).unwrap_err();
        assert!(e.to_string().contains("GPU 0"), "{e}");
        assert!(
            mps.running().is_empty(),
            "a daemon that failed counts no client"
        );
    }

    /// After a restart of the agent: a daemon with an adopted client is counted, not started
    /// again; one a previous run left without clients (its pipe folder there) is told to quit;
    /// a device that never had one is left alone.
    #[test]
    fn a_restarted_agent_adopts_clients_and_stops_idle_daemons() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = tmp.path();
        let program = stand_in(dir, 0);
        let mut before = Mps::new(&program, &dir.join("mps")).unwrap_or_else(|e| panic!("{e}"));
        before.acquire(0).unwrap_or_else(|e| panic!("{e}"));
        before.acquire(1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(calls(dir).len(), 2);
        // The agent restarts: device 1's client still runs, device 0's ended meanwhile.
        let mut after = Mps::new(&program, &dir.join("mps")).unwrap_or_else(|e| panic!("{e}"));
        after.adopt(1);
        after.stop_idle(&[0, 1, 2]);
        let pipe0 = dir.join("mps/0/pipe").display().to_string();
        assert_eq!(
            calls(dir)[2..],
            [format!("args= dev=0 pipe={pipe0} in=quit")],
            "only the idle daemon is stopped"
        );
        assert_eq!(after.running().keys().copied().collect::<Vec<_>>(), vec![1]);
        after.release(1).unwrap_or_else(|e| panic!("{e}"));
        assert!(calls(dir)[3].ends_with("in=quit"), "{:?}", calls(dir));
    }
}
