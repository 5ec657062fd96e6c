//! Gavel's job traces and measured throughputs (Narayanan et al., OSDI 2020).
//!
//! A trace is tab-separated, one job per line, in one of the layouts Gavel's own `parse_trace`
//! has read over its history (told apart by their column count):
//!
//! - 7 columns (`traces/msr/`): job_type, command, num_steps_arg, needs_data_dir, total_steps,
//!   arrival_time, scale_factor;
//! - 9 columns: job_type, command, num_steps_arg, needs_data_dir, total_steps, scale_factor,
//!   priority_weight, SLO, arrival_time;
//! - 10 columns (`traces/physical_cluster/`): job_type, command, working_directory,
//!   num_steps_arg, needs_data_dir, total_steps, scale_factor, priority_weight, SLO,
//!   arrival_time.
//!
//! A trace records steps, not time: a job's run time is its steps over the throughput Gavel
//! measured for its model on the chosen GPU type at its scale factor (GPUs), alone on those
//! GPUs. The measured table ships in the binary (`sim/data/gavel/throughputs.csv`, extracted
//! from Gavel's `simulation_throughputs.json`, MIT); `--throughputs` reads that JSON itself.

use super::formats::{Read, bad, number};
use super::{ImportError, Job};
use std::collections::BTreeMap;

/// The GPU types Gavel measured.
pub const GPU_TYPES: &[&str] = &["k80", "p100", "v100"];

/// Steps per second alone, by GPU type, then (job type, scale factor).
#[derive(Debug, Clone, PartialEq)]
pub struct Throughputs(BTreeMap<String, BTreeMap<(String, u32), f64>>);

/// The shipped extract of Gavel's measured throughputs.
const SHIPPED: &str = include_str!("../../data/gavel/throughputs.csv");

impl Throughputs {
    /// The shipped table (Gavel's consolidated K80, P100 and V100 figures).
    pub fn shipped() -> Self {
        let mut t: BTreeMap<String, BTreeMap<(String, u32), f64>> = BTreeMap::new();
        for line in SHIPPED.lines().skip(1).filter(|l| !l.is_empty()) {
            let f: Vec<&str> = line.split(',').collect();
            // The shipped file is checked by a test; a malformed line cannot reach users.
            let (Some(sf), Some(v)) = (
                f.get(2).and_then(|s| s.parse().ok()),
                f.get(3).and_then(|s| s.parse().ok()),
            ) else {
                continue;
            };
            t.entry(f[0].to_string())
                .or_default()
                .insert((f[1].to_string(), sf), v);
        }
        Self(t)
    }

    /// Gavel's `simulation_throughputs.json` as published: `{gpu: {"('<job type>', sf)":
    /// {"null": steps per second alone, ...}}}`.
    pub fn from_json(text: &str) -> Result<Self, ImportError> {
        let raw: BTreeMap<String, BTreeMap<String, serde_json::Value>> = serde_json::from_str(text)
            .map_err(|e| ImportError::Row {
                line: e.line(),
                column: format!("{} (character)", e.column()),
                reason: e.to_string(),
            })?;
        let mut t: BTreeMap<String, BTreeMap<(String, u32), f64>> = BTreeMap::new();
        for (gpu, jobs) in raw {
            for (key, v) in jobs {
                let parsed = parse_key(&key)
                    .zip(v.get("null").and_then(serde_json::Value::as_f64))
                    .ok_or_else(|| {
                        ImportError::BadOption(format!(
                            "throughputs: {gpu} {key:?}: expected a key ('<job type>', <scale factor>) with a \"null\" figure"
                        ))
                    })?;
                t.entry(gpu.clone()).or_default().insert(parsed.0, parsed.1);
            }
        }
        Ok(Self(t))
    }

    /// Steps per second of `job_type` at `scale` GPUs of type `gpu` (0: it cannot run there).
    pub fn get(&self, gpu: &str, job_type: &str, scale: u32) -> Option<f64> {
        self.0
            .get(gpu)?
            .get(&(job_type.to_string(), scale))
            .copied()
    }

    /// Whether the table has `job_type` on `gpu` at any scale factor.
    pub fn knows(&self, gpu: &str, job_type: &str) -> bool {
        self.0
            .get(gpu)
            .is_some_and(|m| m.keys().any(|(j, _)| j == job_type))
    }

    /// The (job type, scale factor) pairs measured on `gpu`, in order.
    pub fn jobs(&self, gpu: &str) -> Vec<(String, u32)> {
        self.0
            .get(gpu)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The GPU types the table covers.
    pub fn gpu_types(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// `('<job type>', <scale factor>)` → its parts.
fn parse_key(key: &str) -> Option<(String, u32)> {
    let inner = key.strip_prefix("('")?.strip_suffix(')')?;
    let (job, sf) = inner.rsplit_once("', ")?;
    Some((job.to_string(), sf.trim().parse().ok()?))
}

/// Positions of (job_type, total_steps, scale_factor, arrival_time) in a layout of `n` columns.
fn layout(n: usize) -> Option<[usize; 4]> {
    match n {
        7 => Some([0, 4, 6, 5]),
        9 => Some([0, 4, 5, 8]),
        10 => Some([0, 5, 6, 9]),
        _ => None,
    }
}

/// Read a Gavel trace for a cluster of GPU types `gpus`: run times on the first from `table`,
/// and each job's speed on the others relative to it (a job the table says cannot run on one
/// of them, or was not measured there at its scale factor, requires the others).
pub(super) fn read(text: &str, gpus: &[String], table: &Throughputs) -> Result<Read, ImportError> {
    let Some(gpu) = gpus.first().map(String::as_str) else {
        return Err(ImportError::BadOption(
            "--gpu-model: give at least one GPU type".into(),
        ));
    };
    for g in gpus {
        if !table.0.contains_key(g) {
            return Err(ImportError::BadOption(format!(
                "--gpu-model {g:?}: the throughputs cover {}",
                table.gpu_types().join(", ")
            )));
        }
        if gpus.iter().filter(|x| *x == g).count() > 1 {
            return Err(ImportError::BadOption(format!(
                "--gpu-model {g:?} is named twice"
            )));
        }
    }
    const NAMES: [&str; 4] = ["job_type", "total_steps", "scale_factor", "arrival_time"];
    let mut read = Read::default();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim_end_matches(['\r', '\n']);
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let Some(pos) = layout(f.len()) else {
            return Err(bad(
                n,
                "(row)",
                format!(
                    "{} tab-separated fields; Gavel's layouts have 7 (msr), 9 or 10 (physical_cluster)",
                    f.len()
                ),
            ));
        };
        let get = |k: usize| f[pos[k]].trim();
        let job_type = get(0);
        let steps = number(get(1), n, NAMES[1])?;
        let scale = number(get(2), n, NAMES[2])?;
        if scale < 1.0 || scale.fract() != 0.0 {
            return Err(bad(
                n,
                NAMES[2],
                format!("{scale} is not a whole number ≥ 1"),
            ));
        }
        let scale = scale as u32;
        let arrival = number(get(3), n, NAMES[3])?;
        read.entries += 1;
        let Some(rate) = table.get(gpu, job_type, scale) else {
            if table.knows(gpu, job_type) {
                read.skip(&format!(
                    "no throughput measured on {gpu} at the job's scale factor"
                ));
                continue;
            }
            return Err(bad(
                n,
                NAMES[0],
                format!(
                    "no measured throughput for {job_type:?} on {gpu} (pass Gavel's simulation_throughputs.json with --throughputs if it has one)"
                ),
            ));
        };
        if rate <= 0.0 {
            read.skip(&format!(
                "cannot run on {gpu} (no throughput measured there)"
            ));
            continue;
        }
        if steps <= 0.0 {
            read.skip("duration is not positive");
            continue;
        }
        // Its speed on the other types relative to the first; where it cannot run on one,
        // it requires the types it can.
        let pace: BTreeMap<String, f64> = gpus[1..]
            .iter()
            .filter_map(|g| {
                let r = table.get(g, job_type, scale).filter(|r| *r > 0.0)?;
                Some((g.clone(), r / rate))
            })
            .collect();
        let gpu_type = (pace.len() + 1 < gpus.len()).then(|| {
            std::iter::once(gpu)
                .chain(pace.keys().map(String::as_str))
                .collect::<Vec<_>>()
                .join("|")
        });
        read.jobs.push(Job {
            arrival_s: arrival,
            duration_s: steps / rate,
            cpu: 0.0,
            mem_gib: 0.0,
            gpu: f64::from(scale),
            gpu_type,
            class: Some(job_type.to_string()),
            pace,
            // The job type is the class already; Gavel's traces name no user.
            user: None,
            job: None,
        });
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v100() -> Vec<String> {
        vec!["v100".to_string()]
    }

    #[test]
    fn the_shipped_table_is_gavels_and_reads_whole() {
        let t = Throughputs::shipped();
        assert_eq!(t.gpu_types(), GPU_TYPES);
        let lines = SHIPPED.lines().skip(1).filter(|l| !l.is_empty()).count();
        let read: usize = t.0.values().map(BTreeMap::len).sum();
        assert_eq!(read, lines, "every line of the shipped table is read");
        // Figures as in Gavel's file (ResNet-18 at batch 16 on one V100; at batch 64 on a K80).
        assert_eq!(
            t.get("v100", "ResNet-18 (batch size 16)", 1),
            Some(32.353384328946916)
        );
        assert!(t.get("k80", "ResNet-18 (batch size 64)", 1).unwrap() < 10.0);
    }

    #[test]
    fn json_keys_are_read_as_gavel_writes_them() {
        let j =
            r#"{"v100": {"('LM (batch size 5)', 2)": {"null": 3.5, "('A3C', 1)": [1.0, 2.0]}}}"#;
        let t = Throughputs::from_json(j).unwrap();
        assert_eq!(t.get("v100", "LM (batch size 5)", 2), Some(3.5));
        let e = Throughputs::from_json(r#"{"v100": {"LM": {"null": 1.0}}}"#).unwrap_err();
        assert!(e.to_string().contains("expected a key"), "{e}");
    }

    #[test]
    fn each_layout_is_read_by_its_column_count_and_others_are_refused() {
        let t = Throughputs::shipped();
        let rate = t.get("v100", "A3C", 1).unwrap();
        let seven = "A3C\tcmd\t--steps\t1\t1000\t30.5\t1\n";
        let nine = "A3C\tcmd\t--steps\t1\t1000\t1\t1\t-1\t30.5\n";
        let ten = "A3C\tcmd\tdir\t--steps\t1\t1000\t1\t1\t-1.000000\t30.5\n";
        for text in [seven, nine, ten] {
            let r = read(text, &v100(), &t).unwrap();
            assert_eq!(r.jobs.len(), 1, "{text}");
            assert_eq!(r.jobs[0].arrival_s, 30.5);
            assert!((r.jobs[0].duration_s - 1000.0 / rate).abs() < 1e-9);
            assert_eq!(r.jobs[0].gpu, 1.0);
        }
        let six = "A3C\tcmd\t--steps\t1000\t30.5\t1\n";
        let e = read(&format!("{seven}{six}"), &v100(), &t).unwrap_err();
        assert!(e.to_string().starts_with("line 2"), "{e}");
        assert!(e.to_string().contains("6 tab-separated fields"), "{e}");
        let e = read("Nope\tcmd\t--steps\t1\t1000\t0\t1\n", &v100(), &t).unwrap_err();
        assert!(e.to_string().contains("no measured throughput"), "{e}");
        // A known job type at a scale factor Gavel did not measure is counted, not guessed.
        let r = read(
            "Recommendation (batch size 1024)\tcmd\t-n\t1\t1000\t0\t4\n",
            &v100(),
            &t,
        )
        .unwrap();
        assert_eq!((r.entries, r.jobs.len()), (1, 0));
        assert!(r.skipped[0].0.contains("scale factor"), "{:?}", r.skipped);
        let e = read(seven, &["a100".to_string()], &t).unwrap_err();
        assert!(e.to_string().contains("k80, p100, v100"), "{e}");
    }

    #[test]
    fn on_several_gpu_types_a_job_runs_at_each_one_s_measured_speed() {
        let t = Throughputs::shipped();
        let gpus: Vec<String> = ["v100", "k80", "p100"].map(String::from).to_vec();
        let r = read("A3C\tcmd\t--steps\t1\t1000\t30.5\t1\n", &gpus, &t).unwrap();
        let j = &r.jobs[0];
        let v = t.get("v100", "A3C", 1).unwrap();
        assert!(
            (j.duration_s - 1000.0 / v).abs() < 1e-9,
            "run time on the first type"
        );
        for g in ["k80", "p100"] {
            let want = t.get(g, "A3C", 1).unwrap() / v;
            assert!((j.pace[g] - want).abs() < 1e-12, "{g}: {:?}", j.pace);
        }
        assert_eq!(j.gpu_type, None, "it runs on every type");
        let e = read("", &["v100".to_string(), "v100".to_string()], &t).unwrap_err();
        assert!(e.to_string().contains("named twice"), "{e}");
    }
}
