//! The cluster a trace is replayed on: the built-in one sized to the trace, another scenario's
//! boxes, or the trace's own node list (Alibaba 2023's `openb_node_list_gpu_node.csv`).

use super::formats::{bad, number};
use super::{ImportError, Job};
use std::collections::BTreeMap;

/// A box of the replay cluster.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Host {
    /// Its name in the scenario.
    pub name: String,
    /// CPU, GPU and memory units (GPU units of `gpu_step`).
    pub capacity: [u32; 3],
    /// Labels the trace's constraints match (e.g. the GPU model).
    pub labels: Vec<String>,
    /// Identical copies.
    pub count: u32,
    /// Its GPUs' model (the scenario node's `gpu_model`).
    pub gpu_model: Option<String>,
}

/// Which boxes to replay on.
#[derive(Debug, Clone)]
pub enum ClusterChoice {
    /// The built-in cluster ([`Knobs`]).
    BuiltIn(Knobs),
    /// Another scenario's boxes and labels; its resources must include cpu and mem.
    Scenario(Box<crate::Scenario>),
    /// A node list in Alibaba 2023's layout (`sn,cpu_milli,memory_mib,gpu,model`).
    NodeList(String),
}

/// The built-in cluster: CPU boxes and GPU boxes, each GPU box labelled with one of the trace's
/// GPU models (most frequent first, in turn; a job that accepts several models counts for each).
#[derive(Debug, Clone, PartialEq)]
pub struct Knobs {
    /// CPU-only boxes.
    pub cpu_boxes: u32,
    /// GPU boxes (`None`: 4, or one per GPU model the trace names if more, so that every job
    /// naming a model has a box of it).
    pub gpu_boxes: Option<u32>,
    /// GPUs per GPU box (`None`: 4, or the trace's largest GPU job if more).
    pub gpus_per_box: Option<u32>,
    /// The GPU boxes' models, in turn (Gavel: the GPU types its run times are measured on);
    /// empty: the trace's GPU models, most frequent first.
    pub models: Vec<String>,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            cpu_boxes: 4,
            gpu_boxes: None,
            gpus_per_box: None,
            models: Vec::new(),
        }
    }
}

/// A built-in CPU box at least: cores, GiB.
pub const CPU_BOX: [u32; 2] = [32, 128];
/// A built-in GPU box at least: cores, GPUs, GiB.
pub const GPU_BOX: [u32; 3] = [32, 4, 256];

/// The boxes for `choice`, the GPU unit `gpu_step` (GPUs per grid unit), sized to `jobs`.
pub(super) fn hosts(
    choice: &ClusterChoice,
    gpu_step: f64,
    jobs: &[Job],
) -> Result<Vec<Host>, ImportError> {
    let units = |gpus: f64| (gpus / gpu_step).round() as u32;
    match choice {
        ClusterChoice::Scenario(sc) => from_scenario(sc),
        ClusterChoice::NodeList(text) => node_list(text, units),
        ClusterChoice::BuiltIn(k) => Ok(built_in(k, jobs, units)),
    }
}

fn from_scenario(sc: &crate::Scenario) -> Result<Vec<Host>, ImportError> {
    let names = sc.kind_names();
    let idx = |k: &str| names.iter().position(|n| n == k);
    let (Some(cpu), Some(mem)) = (idx("cpu"), idx("mem")) else {
        return Err(ImportError::BadOption(format!(
            "--cluster {}: its resources must include cpu and mem (and may include gpu); it has {}",
            sc.name,
            names.join(", ")
        )));
    };
    let gpu = idx("gpu");
    Ok(sc
        .nodes
        .iter()
        .map(|n| Host {
            name: n.name.clone(),
            capacity: [
                n.capacity.get(cpu),
                gpu.map_or(0, |g| n.capacity.get(g)),
                n.capacity.get(mem),
            ],
            labels: n.labels.clone(),
            count: 1,
            gpu_model: n.gpu_model.clone(),
        })
        .collect())
}

/// Alibaba 2023's node list; identical boxes (capacity and model) become one entry with a
/// count, named after the first of them.
fn node_list(text: &str, units: impl Fn(f64) -> u32) -> Result<Vec<Host>, ImportError> {
    const C: [&str; 5] = ["sn", "cpu_milli", "memory_mib", "gpu", "model"];
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .map(|(_, l)| l.split(',').map(str::trim).collect())
        .unwrap_or_default();
    let pos = C
        .iter()
        .map(|c| {
            header
                .iter()
                .position(|h| h == c)
                .ok_or_else(|| bad(1, c, format!("the node list's header has no column {c:?}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut groups: BTreeMap<([u32; 3], String), Host> = BTreeMap::new();
    for (i, l) in lines {
        let n = i + 1;
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        if f.len() != header.len() {
            return Err(bad(
                n,
                "(row)",
                format!("{} fields, the header has {}", f.len(), header.len()),
            ));
        }
        let cpu = (number(f[pos[1]], n, C[1])? / 1000.0).floor() as u32;
        let mem = (number(f[pos[2]], n, C[2])? / 1024.0).floor() as u32;
        let gpus = number(f[pos[3]], n, C[3])?;
        let model = f[pos[4]];
        let labels = if model.is_empty() || model == "nan" || gpus == 0.0 {
            Vec::new()
        } else {
            vec![model.to_string()]
        };
        let capacity = [cpu, units(gpus), mem];
        groups
            .entry((capacity, labels.join(",")))
            .and_modify(|h| h.count += 1)
            .or_insert(Host {
                name: f[pos[0]].to_string(),
                capacity,
                gpu_model: labels.first().cloned(),
                labels,
                count: 1,
            });
    }
    if groups.is_empty() {
        return Err(ImportError::BadOption(
            "--nodes: the node list has no boxes".into(),
        ));
    }
    let mut hosts: Vec<Host> = groups.into_values().collect();
    hosts.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(hosts)
}

/// The built-in cluster, each box at least as large as the largest job of its kind.
fn built_in(k: &Knobs, jobs: &[Job], units: impl Fn(f64) -> u32) -> Vec<Host> {
    let most = |gpu: bool, f: &dyn Fn(&Job) -> f64| {
        jobs.iter()
            .filter(|j| (j.gpu > 0.0) == gpu)
            .map(f)
            .fold(0.0, f64::max)
            .ceil() as u32
    };
    let mut models: BTreeMap<&str, usize> = BTreeMap::new();
    for j in jobs.iter().filter(|j| j.gpu > 0.0) {
        // `a|b`: either model will do (Alibaba 2023); each counts.
        for m in j.gpu_type.iter().flat_map(|g| g.split('|')) {
            *models.entry(m).or_default() += 1;
        }
    }
    let mut by_count: Vec<(&str, usize)> = models.into_iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    // The models asked for (Gavel's `--gpu-model` types) are the boxes', in their order, even
    // where some jobs name only some of them (a job that cannot run on a K80 requires the
    // others: the K80 boxes are still there).
    if !k.models.is_empty() {
        by_count = k.models.iter().map(|m| (m.as_str(), 0)).collect();
    }
    let cpu_box = [
        CPU_BOX[0].max(most(false, &|j| j.cpu)),
        0,
        CPU_BOX[1].max(most(false, &|j| j.mem_gib)),
    ];
    let gpus = k
        .gpus_per_box
        .unwrap_or_else(|| GPU_BOX[1].max(most(true, &|j| j.gpu)));
    let gpu_box = [
        GPU_BOX[0].max(most(true, &|j| j.cpu)),
        units(f64::from(gpus)),
        GPU_BOX[2].max(most(true, &|j| j.mem_gib)),
    ];
    let mut boxes: Vec<Host> = (0..k.cpu_boxes)
        .map(|i| Host {
            name: format!("cpu-{i}"),
            capacity: cpu_box,
            labels: Vec::new(),
            count: 1,
            gpu_model: None,
        })
        .collect();
    let gpu_boxes = k.gpu_boxes.map_or(4.max(by_count.len()), |n| n as usize);
    for i in 0..gpu_boxes {
        let model = by_count
            .get(i % by_count.len().max(1))
            .map(|(m, _)| m.to_string());
        boxes.push(Host {
            name: format!("gpu-{i}"),
            capacity: gpu_box,
            labels: model.iter().cloned().collect(),
            count: 1,
            gpu_model: model,
        });
    }
    boxes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(cpu: f64, gpu: f64, mem: f64) -> Job {
        Job {
            arrival_s: 0.0,
            duration_s: 1.0,
            cpu,
            mem_gib: mem,
            gpu,
            gpu_type: None,
            class: None,
            pace: Default::default(),
            user: None,
            job: None,
        }
    }

    #[test]
    fn the_built_in_cluster_holds_the_largest_job() {
        let jobs = [
            job(88.0, 8.0, 320.0),
            job(64.0, 0.0, 500.0),
            job(2.0, 0.5, 4.0),
        ];
        let h = built_in(&Knobs::default(), &jobs, |g| (g / 0.25) as u32);
        assert_eq!(h.len(), 8);
        assert_eq!(h[0].capacity, [64, 0, 500]);
        assert_eq!(h[7].capacity, [88, 32, 320], "8 GPUs in quarters");
        let small = built_in(
            &Knobs {
                cpu_boxes: 1,
                gpu_boxes: Some(2),
                gpus_per_box: Some(2),
                models: vec!["v100".into()],
            },
            &[job(1.0, 1.0, 1.0)],
            |g| g as u32,
        );
        assert_eq!(small.len(), 3);
        assert_eq!(small[1].capacity, [32, 2, 256]);
        assert_eq!(small[1].labels, ["v100"]);
        // A GPU box for every model the trace names.
        let models: Vec<Job> = ["A", "B", "C", "D", "E|A"]
            .iter()
            .map(|m| Job {
                gpu_type: Some(m.to_string()),
                ..job(1.0, 1.0, 1.0)
            })
            .collect();
        let h = built_in(&Knobs::default(), &models, |g| g as u32);
        let labels: Vec<&str> = h[4..].iter().map(|b| b.labels[0].as_str()).collect();
        assert_eq!(labels, ["A", "B", "C", "D", "E"]);
    }

    #[test]
    fn a_node_list_groups_identical_boxes_and_names_bad_lines() {
        let text = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,64000,262144,2,P100\nn2,96000,786432,8,V100M32\nn3,32000,131072,0,nan\n";
        let h = node_list(text, |g| g as u32).unwrap();
        assert_eq!(h.len(), 3);
        let p100 = h.iter().find(|h| h.labels == ["P100"]).unwrap();
        assert_eq!((p100.count, p100.capacity), (2, [64, 2, 256]));
        assert!(
            h.iter()
                .any(|h| h.labels.is_empty() && h.capacity == [32, 0, 128])
        );
        let e = node_list("sn,cpu_milli,memory_mib,gpu,model\nn0,x,1,0,nan\n", |g| {
            g as u32
        })
        .unwrap_err();
        assert!(e.to_string().starts_with("line 2, column cpu_milli"), "{e}");
        let e = node_list("sn,cpu,memory_mib,gpu,model\n", |g| g as u32).unwrap_err();
        assert!(e.to_string().contains("no column \"cpu_milli\""), "{e}");
    }

    #[test]
    fn the_models_asked_for_are_the_gpu_boxes_even_where_jobs_name_fewer() {
        let mut j = job(1.0, 1.0, 1.0);
        // A job that cannot run on a K80 requires the other two.
        j.gpu_type = Some("v100|p100".into());
        let k = Knobs {
            gpu_boxes: Some(3),
            models: ["v100", "p100", "k80"].map(String::from).to_vec(),
            ..Knobs::default()
        };
        let h = built_in(&k, &[j], |g| g as u32);
        let models: Vec<Option<&str>> = h.iter().map(|b| b.gpu_model.as_deref()).collect();
        assert_eq!(&models[4..], [Some("v100"), Some("p100"), Some("k80")]);
    }
}
