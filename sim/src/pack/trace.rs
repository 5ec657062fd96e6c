//! Reading the node and pod lists of Alibaba's GPU cluster trace 2023
//! (`cluster-trace-gpu-v2023/csv/`) for the packing benchmark: columns are found by name, so
//! every pod list reads, the `multigpu*` ones (which have no times) included. Only what
//! placement needs is read: the requests, the GPU count and share, and the GPU models a pod
//! accepts.

use super::PackError;

/// One box of the node list (`sn,cpu_milli,memory_mib,gpu,model`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// `sn`.
    pub name: String,
    /// CPU in thousandths of a core.
    pub cpu_milli: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// GPU devices.
    pub gpus: u32,
    /// The devices' model; `None` on a box without GPUs or with the column empty.
    pub model: Option<String>,
}

/// One pod of a pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSpec {
    /// `name`.
    pub name: String,
    /// CPU in thousandths of a core.
    pub cpu_milli: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// GPU devices (0: a CPU pod).
    pub num_gpu: u32,
    /// Thousandths of each device: below 1000 a share of one device, 1000 whole devices.
    pub gpu_milli: u32,
    /// The GPU models the pod may run on (`gpu_spec`, `|`-separated); empty: any.
    pub gpu_spec: Vec<String>,
}

impl PodSpec {
    /// Thousandths of a device the pod asks for in all.
    pub fn total_gpu_milli(&self) -> u64 {
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }

    /// Whether the pod asks for a share of one device.
    pub fn is_share(&self) -> bool {
        self.num_gpu == 1 && self.gpu_milli < 1000
    }
}

/// A CSV file's rows with their columns found by name.
struct Table<'a> {
    file: &'a str,
    header: Vec<&'a str>,
    rows: Vec<(usize, Vec<&'a str>)>,
}

impl<'a> Table<'a> {
    fn read(file: &'a str, text: &'a str) -> Result<Self, PackError> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let Some((_, head)) = lines.next() else {
            return Err(PackError::Empty { file: file.into() });
        };
        let header: Vec<&str> = head.split(',').map(str::trim).collect();
        let mut rows = Vec::new();
        for (i, l) in lines {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            if f.len() != header.len() {
                return Err(PackError::Row {
                    file: file.into(),
                    line: i + 1,
                    reason: format!("{} fields, the header has {}", f.len(), header.len()),
                });
            }
            rows.push((i + 1, f));
        }
        if rows.is_empty() {
            return Err(PackError::Empty { file: file.into() });
        }
        Ok(Self { file, header, rows })
    }

    /// The position of `column`, which the layout needs.
    fn column(&self, column: &str) -> Result<usize, PackError> {
        self.header
            .iter()
            .position(|h| *h == column)
            .ok_or_else(|| PackError::Header {
                file: self.file.into(),
                missing: column.into(),
                found: self.header.join(","),
            })
    }

    fn number(&self, line: usize, column: &str, v: &str) -> Result<u64, PackError> {
        // The trace writes whole numbers; a float with no fraction (`8.0`) reads too.
        let parsed = v
            .parse::<u64>()
            .ok()
            .or_else(|| {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.fract() == 0.0 && *x >= 0.0 && *x < 9.0e15)
                    .map(|x| x as u64)
            })
            .ok_or_else(|| format!("{column} = {v:?} is not a non-negative whole number"));
        parsed.map_err(|reason| PackError::Row {
            file: self.file.into(),
            line,
            reason,
        })
    }
}

/// Read a node list (`openb_node_list_gpu_node.csv`, `openb_node_list_all_node.csv`).
pub fn read_nodes(file: &str, text: &str) -> Result<Vec<NodeSpec>, PackError> {
    let t = Table::read(file, text)?;
    let [sn, cpu, mem, gpu, model] =
        ["sn", "cpu_milli", "memory_mib", "gpu", "model"].map(|c| t.column(c));
    let (sn, cpu, mem, gpu, model) = (sn?, cpu?, mem?, gpu?, model?);
    let mut nodes = Vec::with_capacity(t.rows.len());
    for (line, f) in &t.rows {
        let gpus = t.number(*line, "gpu", f[gpu])?;
        let gpus = u32::try_from(gpus).map_err(|_| PackError::Row {
            file: file.into(),
            line: *line,
            reason: format!("gpu = {gpus} is too many devices"),
        })?;
        let m = f[model];
        nodes.push(NodeSpec {
            name: f[sn].to_string(),
            cpu_milli: t.number(*line, "cpu_milli", f[cpu])?,
            memory_mib: t.number(*line, "memory_mib", f[mem])?,
            gpus,
            model: (gpus > 0 && !m.is_empty() && m != "nan").then(|| m.to_string()),
        });
    }
    Ok(nodes)
}

/// Read a pod list (`openb_pod_list_*.csv`); `gpu_spec` and every time column are optional.
pub fn read_pods(file: &str, text: &str) -> Result<Vec<PodSpec>, PackError> {
    let t = Table::read(file, text)?;
    let [name, cpu, mem, num, milli] =
        ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"].map(|c| t.column(c));
    let (name, cpu, mem, num, milli) = (name?, cpu?, mem?, num?, milli?);
    let spec = t.column("gpu_spec").ok();
    let mut pods = Vec::with_capacity(t.rows.len());
    for (line, f) in &t.rows {
        let bad = |reason: String| PackError::Row {
            file: file.into(),
            line: *line,
            reason,
        };
        let num_gpu = t.number(*line, "num_gpu", f[num])?;
        let num_gpu = u32::try_from(num_gpu).map_err(|_| bad(format!("num_gpu = {num_gpu}")))?;
        let gpu_milli = t.number(*line, "gpu_milli", f[milli])?;
        let gpu_milli = match (num_gpu, gpu_milli) {
            (0, _) => 0,
            (_, 0) => return Err(bad("num_gpu > 0 with gpu_milli = 0".into())),
            (_, m) if m > 1000 => {
                return Err(bad(format!("gpu_milli = {m} is more than one device")));
            }
            (n, m) if n > 1 && m < 1000 => {
                return Err(bad(format!(
                    "{n} GPUs of {m} thousandths each: more than one GPU is whole devices"
                )));
            }
            (_, m) => m as u32,
        };
        let gpu_spec = spec
            .map(|s| {
                f[s].split('|')
                    .map(str::trim)
                    .filter(|m| !m.is_empty() && *m != "nan")
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        pods.push(PodSpec {
            name: f[name].to_string(),
            cpu_milli: t.number(*line, "cpu_milli", f[cpu])?,
            memory_mib: t.number(*line, "memory_mib", f[mem])?,
            num_gpu,
            gpu_milli,
            gpu_spec,
        });
    }
    Ok(pods)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Rows in the exact layouts of cluster-trace-gpu-v2023/csv (hand-written, not the trace's).
    const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,64000,262144,2,P100
openb-node-0001,96000,786432,8,G2
openb-node-0002,32000,131072,0,
";
    const DEFAULT: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0
openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061
openb-pod-0002,8000,30720,8,1000,V100M16|V100M32,LS,Running,1,2,1
openb-pod-0003,4000,8192,0,0,,BE,Running,5,9,5
";
    const MULTIGPU: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli
openb-pod-0000,12000,16384,1,1000
openb-pod-0001,6000,12288,2,1000
";

    #[test]
    fn reads_the_node_list() {
        let n = read_nodes("nodes.csv", NODES).unwrap();
        assert_eq!(n.len(), 3);
        assert_eq!(n[1].gpus, 8);
        assert_eq!(n[1].model.as_deref(), Some("G2"));
        assert_eq!(n[2].model, None);
        assert_eq!(n[0].memory_mib, 262_144);
    }

    #[test]
    fn reads_every_pod_layout() {
        let p = read_pods("default.csv", DEFAULT).unwrap();
        assert_eq!(p.len(), 4);
        assert!(p[1].is_share());
        assert_eq!(p[2].gpu_spec, vec!["V100M16", "V100M32"]);
        assert_eq!(p[2].total_gpu_milli(), 8000);
        assert_eq!(p[3].gpu_milli, 0);
        let m = read_pods("multigpu50.csv", MULTIGPU).unwrap();
        assert_eq!(m[1].num_gpu, 2);
        assert!(m[1].gpu_spec.is_empty());
    }

    #[test]
    fn errors_name_the_file_line_and_column() {
        let e = read_pods("p.csv", "name,cpu_milli,memory_mib,num_gpu\nx,1,1,1\n").unwrap_err();
        assert!(e.to_string().contains("gpu_milli"), "{e}");
        let e = read_pods(
            "p.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,1,1,2,500\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        assert!(e.to_string().contains("whole devices"), "{e}");
        let e =
            read_nodes("n.csv", "sn,cpu_milli,memory_mib,gpu,model\nn,1.5,1,1,T4\n").unwrap_err();
        assert!(e.to_string().contains("cpu_milli"), "{e}");
        assert!(read_nodes("n.csv", "sn,cpu_milli,memory_mib,gpu,model\n").is_err());
    }
}
