//! The scenario an import writes: the cluster, one task type per demand class with its median
//! run time, and the trace's tasks as `[trace]` rows (sizes at full precision).

use super::cluster::Host;
use super::{ImportOptions, Job, demand_of};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A task type's key: demand, GPU model (where GPUs are asked for) and model name.
type Key = ([u32; 3], Option<String>, Option<String>);

/// The written scenario and how many task types it has.
pub(super) struct Written {
    /// The TOML text.
    pub toml: String,
    /// Task types.
    pub types: usize,
}

fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

impl Written {
    pub(super) fn new(
        opts: &ImportOptions,
        boxes: &[Host],
        gpu_step: f64,
        jobs: &[Job],
        slot_seconds: f64,
        compress: f64,
    ) -> Self {
        let key = |j: &Job| -> Key {
            (
                demand_of(j, gpu_step),
                j.gpu_type.clone().filter(|_| j.gpu > 0.0),
                j.class.clone(),
            )
        };
        let mut classes: BTreeMap<Key, Vec<f64>> = BTreeMap::new();
        for j in jobs {
            classes.entry(key(j)).or_default().push(j.duration_s);
        }
        let paces = gpu_speeds(jobs, boxes, key);
        let median: BTreeMap<Key, f64> = classes
            .into_iter()
            .map(|(k, mut d)| {
                d.sort_by(f64::total_cmp);
                (k, d[d.len() / 2])
            })
            .collect();
        let names: BTreeMap<&Key, String> = median
            .keys()
            .enumerate()
            .map(|(i, k)| (k, format!("c{i}")))
            .collect();
        let t0 = jobs.first().map_or(0.0, |j| j.arrival_s);
        let slot = |j: &Job| ((j.arrival_s - t0) / compress / slot_seconds).floor() as u64;
        let span = jobs.last().map_or(1, |j| slot(j).max(1));
        // Long enough for every task run one after another after the last arrival.
        let serial: f64 = jobs
            .iter()
            .map(|j| (j.duration_s / slot_seconds).ceil())
            .sum();
        let max_slots = 100_000u64.max(span * 100).max(span + serial as u64 + 1000);
        let mut t = String::new();
        let _ = writeln!(
            t,
            "# Imported by `tapfinger-sim import --format {}`: {} tasks.",
            opts.format,
            jobs.len()
        );
        let _ = writeln!(t, "name = {}", quote(&opts.name));
        let _ = writeln!(
            t,
            "description = {}",
            quote(&format!(
                "{} trace, {} tasks, slot {slot_seconds} s, arrivals compressed {compress}x",
                opts.format,
                jobs.len(),
            ))
        );
        // The mean arrival rate (informational: a trace's arrivals are replayed as recorded).
        let _ = writeln!(
            t,
            "lambda = {}",
            (jobs.len() as f64 / span as f64).max(1e-6)
        );
        let _ = writeln!(t, "tasks = {}", jobs.len());
        let _ = writeln!(t, "slot_seconds = {slot_seconds}");
        let _ = writeln!(t, "max_slots = {max_slots}");
        if opts.declare_work {
            // Each task's size is its steps over its type's median job's: what it declares.
            let _ = writeln!(t, "declare_work = true");
        }
        let gpu_unit = if gpu_step == 1.0 {
            String::new()
        } else {
            format!(", step = {gpu_step}")
        };
        let _ = writeln!(
            t,
            "resources = [\n  {{ name = \"cpu\", unit = \"cores\" }},\n  {{ name = \"gpu\", unit = \"GPUs\"{gpu_unit} }},\n  {{ name = \"mem\", unit = \"GiB\" }},\n]"
        );
        write_nodes(&mut t, boxes);
        let mut count: BTreeMap<&String, usize> = BTreeMap::new();
        for j in jobs {
            *count.entry(&names[&key(j)]).or_default() += 1;
        }
        for (k, name) in &names {
            let d = k.0;
            let _ = writeln!(
                t,
                "\n[[task_types]]\nname = {}\nweight = {}\nmin_demand = [{}, {}, {}]\nmax_demand = [{}, {}, {}]\nspeed = {{ model = \"table\", rows = \"type,cpu,gpu,mem,seconds\\n{},{},{},{},{}\\n\" }}{}",
                quote(name),
                count.get(name).copied().unwrap_or(1),
                d[0],
                d[1],
                d[2],
                d[0],
                d[1],
                d[2],
                name,
                d[0],
                d[1],
                d[2],
                median[*k],
                paces[*k]
            );
        }
        // Who submitted each task, where the trace says: the key the size history learns by.
        let identity = jobs.iter().any(|j| j.user.is_some() || j.job.is_some());
        let _ = writeln!(
            t,
            "\n[trace]\nrows = \"\"\"\narrival,type,size,require{}",
            if identity { ",submitter,job" } else { "" }
        );
        for j in jobs {
            let k = key(j);
            let require = j.gpu_type.as_deref().filter(|_| j.gpu > 0.0).unwrap_or("");
            let who = if identity {
                format!(
                    ",{},{}",
                    j.user.as_deref().unwrap_or(""),
                    j.job.as_deref().unwrap_or("")
                )
            } else {
                String::new()
            };
            // Full precision: a task far shorter than its type's median keeps its own size.
            let _ = writeln!(
                t,
                "{},{},{},{}{who}",
                slot(j),
                names[&k],
                j.duration_s / median[&k],
                require
            );
        }
        let _ = writeln!(t, "\"\"\"");
        Self {
            toml: t,
            types: median.len(),
        }
    }
}

/// Per task type, its `gpu_speed` line (empty where it has none): its speed per GPU model
/// relative to its table, on the models some box has. A type's jobs share model name and
/// scale factor, so their paces agree: the first's is the type's.
fn gpu_speeds(jobs: &[Job], boxes: &[Host], key: impl Fn(&Job) -> Key) -> BTreeMap<Key, String> {
    let models: Vec<&String> = boxes.iter().filter_map(|b| b.gpu_model.as_ref()).collect();
    let mut paces: BTreeMap<Key, String> = BTreeMap::new();
    for j in jobs {
        paces.entry(key(j)).or_insert_with(|| {
            let speeds: Vec<String> = j
                .pace
                .iter()
                .filter(|(m, _)| models.contains(m))
                .map(|(m, x)| format!("{} = {x}", quote(m)))
                .collect();
            if speeds.is_empty() {
                String::new()
            } else {
                format!("\ngpu_speed = {{ {} }}", speeds.join(", "))
            }
        });
    }
    paces
}

/// The `[[nodes]]` tables of `boxes`.
fn write_nodes(t: &mut String, boxes: &[Host]) {
    for b in boxes {
        let labels: Vec<String> = b.labels.iter().map(|l| quote(l)).collect();
        let mut count = if b.count > 1 {
            format!("\ncount = {}", b.count)
        } else {
            String::new()
        };
        if let Some(m) = &b.gpu_model {
            let _ = write!(count, "\ngpu_model = {}", quote(m));
        }
        let _ = writeln!(
            t,
            "\n[[nodes]]\nname = {}\ncapacity = [{}, {}, {}]{count}\nlabels = [{}]",
            quote(&b.name),
            b.capacity[0],
            b.capacity[1],
            b.capacity[2],
            labels.join(", ")
        );
    }
}
