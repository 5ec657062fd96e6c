//! What NVML tells the agent, as plain data: a GPU of the box ([`Gpu`], for discovery) and a
//! process on one ([`ProcUse`], for the GPU use of tasks), and the stand-in that tests on
//! machines without a GPU give instead ([`FakeNvml`], named by [`FAKE_NVML`]). A leaf module:
//! discovery and the GPU-use probe both read it.

use serde::{Deserialize, Serialize};

/// One GPU as NVML reports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Gpu {
    /// Device index.
    pub index: u32,
    /// Model name.
    pub model: String,
    /// Total memory in bytes.
    pub memory_bytes: u64,
    /// Minor number of its device node (`/dev/nvidia<minor>`, major 195), which the task's
    /// device policy allows; `None` when NVML does not say (the index is assumed).
    pub minor: Option<u32>,
}

/// One process on one device, as NVML reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcUse {
    /// Process id.
    pub pid: u32,
    /// Device index (NVML's).
    pub device: u32,
    /// Its share of the device's SMs busy over the last sample period, in percent (`None`: not
    /// reported, e.g. no sample since the last one).
    #[serde(default)]
    pub sm_percent: Option<u32>,
    /// Device memory it holds, in bytes (`None`: not reported).
    #[serde(default)]
    pub memory_bytes: Option<u64>,
}

/// The environment variable naming a stand-in for NVML ([`FakeNvml`]), for tests. Read only by
/// a build with the feature `dev`: a packaged agent never advertises GPUs from a file.
pub const FAKE_NVML: &str = "TAPFINGER_FAKE_NVML";

/// The file [`FAKE_NVML`] names, in a build with the feature `dev`; always `None` in one
/// without it, which warns once if the variable is set (it is ignored there).
pub fn fake_nvml_path() -> Option<std::ffi::OsString> {
    let path = std::env::var_os(FAKE_NVML)?;
    if cfg!(feature = "dev") {
        return Some(path);
    }
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            "{FAKE_NVML} is set but this agent was built without the feature `dev`: ignored, GPUs come from NVML"
        );
    });
    None
}

/// What a stand-in for NVML says: the box's GPUs and the processes on them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FakeNvml {
    /// The GPUs discovery reports.
    #[serde(default)]
    pub gpus: Vec<Gpu>,
    /// The processes the probe samples.
    #[serde(default)]
    pub processes: Vec<ProcUse>,
}

/// The stand-in [`FAKE_NVML`] names, if it is set (an unreadable file is an empty one).
pub fn fake_nvml() -> Option<FakeNvml> {
    let path = fake_nvml_path()?;
    Some(read_fake(std::path::Path::new(&path)))
}

pub(crate) fn read_fake(path: &std::path::Path) -> FakeNvml {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}
