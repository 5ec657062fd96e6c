//! Resource discovery: what this box can offer the cluster. CPU cores and memory from the OS
//! (sysinfo), GPUs through NVML (nvml-wrapper). A box without NVIDIA drivers has no NVML library:
//! that means zero GPUs, never an error.

use serde::Serialize;

pub use crate::nvml::Gpu;

/// What the box has.
#[derive(Debug, Clone, Serialize)]
pub struct Discovered {
    /// Logical CPUs.
    pub cpus: usize,
    /// Total memory in bytes.
    pub memory_bytes: u64,
    /// GPUs (empty without NVML).
    pub gpus: Vec<Gpu>,
    /// Why GPUs could not be listed, if they could not.
    pub gpu_note: Option<String>,
}

/// Discover CPU, memory and GPUs.
pub fn discover() -> anyhow::Result<Discovered> {
    let mut sys = sysinfo::System::new()
        .map_err(|e| anyhow::anyhow!("cannot read system information: {e}"))?;
    sys.refresh_memory();
    sys.refresh_cpu_list(sysinfo::CpuRefreshKind::nothing());
    let cpus = sys
        .cpus()
        .len()
        .max(std::thread::available_parallelism().map_or(1, |n| n.get()));
    let fake = crate::nvml::fake_nvml();
    let (gpus, gpu_note) = match nvml_wrapper::Nvml::init() {
        _ if fake.is_some() => (
            fake.map(|f| f.gpus).unwrap_or_default(),
            Some(format!(
                "GPUs from a stand-in for NVML ({} is set)",
                crate::nvml::FAKE_NVML
            )),
        ),
        Ok(nvml) => {
            let count = nvml.device_count().unwrap_or(0);
            let mut gpus = Vec::new();
            for index in 0..count {
                if let Ok(d) = nvml.device_by_index(index) {
                    gpus.push(Gpu {
                        index,
                        model: d.name().unwrap_or_else(|_| "unknown".into()),
                        memory_bytes: d.memory_info().map_or(0, |m| m.total),
                        minor: d.minor_number().ok(),
                    });
                }
            }
            (gpus, None)
        }
        Err(e) => (
            Vec::new(),
            Some(format!("NVML unavailable ({e}); reporting 0 GPUs")),
        ),
    };
    Ok(Discovered {
        cpus,
        memory_bytes: sys.total_memory(),
        gpus,
        gpu_note,
    })
}

impl Discovered {
    /// `labels` with this box's GPU model under [`tapfinger::estimate::GPU_MODEL_LABEL`]: the
    /// name NVML gives the first of the `offered` GPUs, unless the configuration names one
    /// (an operator may group models NVML names apart) or no GPU is offered. The estimator
    /// learns each class's speed per GPU model, and specs may require the label.
    pub fn labels_with_gpu_model(
        &self,
        labels: &std::collections::BTreeMap<String, String>,
        offered: u32,
    ) -> std::collections::BTreeMap<String, String> {
        let mut labels = labels.clone();
        let key = tapfinger::estimate::GPU_MODEL_LABEL;
        if offered > 0
            && !labels.contains_key(key)
            && let Some(g) = self.gpus.first()
        {
            labels.insert(key.to_string(), g.model.clone());
        }
        labels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_model_label_is_nvml_s_name_unless_configured_or_no_gpu_is_offered() {
        let box_of = |models: &[&str]| Discovered {
            cpus: 8,
            memory_bytes: 1 << 34,
            gpus: models
                .iter()
                .enumerate()
                .map(|(i, m)| Gpu {
                    index: i as u32,
                    model: m.to_string(),
                    memory_bytes: 1 << 34,
                    minor: None,
                })
                .collect(),
            gpu_note: None,
        };
        let key = tapfinger::estimate::GPU_MODEL_LABEL;
        let none = std::collections::BTreeMap::new();
        let h200 = box_of(&["NVIDIA H200"]);
        assert_eq!(h200.labels_with_gpu_model(&none, 1)[key], "NVIDIA H200");
        assert!(!h200.labels_with_gpu_model(&none, 0).contains_key(key));
        assert!(
            !box_of(&[])
                .labels_with_gpu_model(&none, 0)
                .contains_key(key)
        );
        let mut mine = none.clone();
        mine.insert(key.to_string(), "h200".to_string());
        assert_eq!(h200.labels_with_gpu_model(&mine, 1)[key], "h200");
    }
}
