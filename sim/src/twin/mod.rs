//! The cluster's twin in the simulator: an episode's workload as its agents observed it
//! ([`observe`]), and any observed workload — the agents' `workload export` or an episode's —
//! written as a scenario that replays it ([`scenario_toml`], `tapfinger-sim import --format
//! tapfinger`).
//!
//! The scenario replays the workload's arrivals (`[trace]`) on its boxes, each class's speed the
//! estimator's figures (a table over the allocations the workload recorded figures for, shaped
//! by the fastest GPU model the class was measured on, at the fastest model's pace) and its
//! `gpu_speed` on each model the figures' ratio at its minimum demand, each task's size what its
//! runs measured ([`tapfinger::twin::sizes`]), its reachable boxes by label, its own demands and
//! priority where not its class's, the start-up and re-share costs the estimator measured, and,
//! where every task declared its work, `declare_work` (the estimator's figures are then per
//! unit of work, and the twin's tasks declare theirs as the cluster's did), and each observed
//! gang as a gang of the trace with the work its runs measured, on the links it ran with
//! (the `gangs` module).
//! Nothing of the episode's true speed model reaches it: what the twin knows is what the
//! estimator learned from progress.

mod gangs;

use crate::episode::Observer;
use crate::{EpisodeResult, SimError, Simulator};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use tapfinger::twin::{Context, NodeRecord, Recorder, Workload};
use tapfinger::{NodeId, Policy, TaskId};

/// An observer that records the episode's twin. It holds what the agents know of the cluster
/// beside the tasks — the slot's length, the kinds, the boxes — and not the scenario: its task
/// types' speed models are out of its reach.
struct Twin {
    slot_seconds: f64,
    kinds: Vec<tapfinger::ResourceKind>,
    nodes: Vec<NodeRecord>,
    recorder: Recorder,
    workload: Option<Workload>,
    /// The estimator as the episode left it.
    estimator: Option<tapfinger::estimate::Estimator>,
    /// The size book as the episode left it.
    sizes: Option<tapfinger::sizes::SizeBook>,
    /// The link speeds gangs are placed with (the agents' configuration).
    links: Option<tapfinger::placement::gang::Links>,
}

impl Twin {
    /// The boxes, kinds and slot of `sim`'s scenario (as the agents' heartbeats and
    /// configuration carry them).
    fn new(sim: &Simulator) -> Self {
        let sc = sim.scenario();
        Self {
            slot_seconds: sc.slot_seconds,
            kinds: sc.space.kinds().to_vec(),
            nodes: sc
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| NodeRecord {
                    id: NodeId(i as u32),
                    name: n.name.clone(),
                    capacity: n.capacity.clone(),
                    gpu_model: n.gpu_model.clone(),
                })
                .collect(),
            recorder: Recorder::new(),
            workload: None,
            estimator: None,
            sizes: None,
            links: sc.gangs.as_ref().map(|g| g.links),
        }
    }
}

impl Observer for Twin {
    fn progressed(&mut self, slot: u64, task: TaskId, _progress: f64, finished: bool) {
        if finished {
            self.recorder.finish(task, slot + 1, Some(0));
        }
    }

    fn twin(&mut self) -> Option<&mut Recorder> {
        Some(&mut self.recorder)
    }

    fn ended(&mut self, slots: u64, estimator: &tapfinger::estimate::Estimator) {
        let ctx = Context {
            sizes: self.sizes.as_ref(),
            slot_seconds: self.slot_seconds,
            kinds: self.kinds.clone(),
            nodes: self.nodes.clone(),
            estimator,
            links: self.links,
        };
        self.workload = Some(self.recorder.export(0, slots, &ctx));
        self.estimator = Some(estimator.clone());
    }

    fn sizes(&mut self, book: &tapfinger::sizes::SizeBook) {
        self.sizes = Some(book.clone());
    }
}

/// One episode of `policies` on workload `seed`, and its twin: the whole episode's workload as
/// its agents observed it.
pub fn observe(
    sim: &Simulator,
    policies: Vec<Box<dyn Policy>>,
    seed: u64,
) -> Result<(EpisodeResult, Workload), SimError> {
    observe_warm(sim, policies, seed, None).map(|(r, w, _)| (r, w))
}

/// [`observe`] with the agents' speed estimator starting from `warm` (what it learned before:
/// [`Simulator::run_warm`]), and that estimator as the episode left it.
pub fn observe_warm(
    sim: &Simulator,
    policies: Vec<Box<dyn Policy>>,
    seed: u64,
    warm: Option<&tapfinger::estimate::Estimator>,
) -> Result<(EpisodeResult, Workload, tapfinger::estimate::Estimator), SimError> {
    observe_learned(sim, policies, seed, warm).map(|(r, w, e, _)| (r, w, e))
}

/// [`observe_warm`], and the size book as the episode left it (what the agents learned of
/// their tasks' sizes, to start the next stretch of a deployment from: [`Simulator::with_sizes`]).
pub fn observe_learned(
    sim: &Simulator,
    policies: Vec<Box<dyn Policy>>,
    seed: u64,
    warm: Option<&tapfinger::estimate::Estimator>,
) -> Result<
    (
        EpisodeResult,
        Workload,
        tapfinger::estimate::Estimator,
        tapfinger::sizes::SizeBook,
    ),
    SimError,
> {
    let mut twin = Twin::new(sim);
    let r = sim.run_warm(policies, seed, &mut twin, warm)?;
    // Every episode that returns Ok ended through `Observer::ended`; an empty workload here
    // would say that one did not, rather than panic.
    let w = twin.workload.unwrap_or_else(|| Workload {
        sizes: None,
        format: tapfinger::twin::FORMAT.into(),
        slot_seconds: twin.slot_seconds,
        from_slot: 0,
        to_slot: 0,
        kinds: twin.kinds,
        nodes: Vec::new(),
        classes: Vec::new(),
        tasks: Vec::new(),
        links: None,
    });
    Ok((
        r,
        w,
        twin.estimator.unwrap_or_default(),
        twin.sizes.unwrap_or_default(),
    ))
}

/// The speed estimator the cluster held when it exported `w`, as far as its figures say, for the
/// simulator `twin` of `w` ([`scenario_toml`]: its task types are `w`'s classes in order): each
/// class's figures on each GPU model it had samples on, one sample a row. A deployment's
/// agents never start a window knowing nothing: the twin's do not either, so the policies'
/// views on the twin show what they showed on the cluster (models with no samples of a class
/// are left to the estimator's own extrapolation, as on the cluster).
pub fn warm_estimator(w: &Workload, twin: &Simulator) -> tapfinger::estimate::Estimator {
    use tapfinger::estimate::{Estimator, GpuModel, KindMap};
    let mut e = Estimator::new(KindMap::from_names(&twin.scenario().kind_names()));
    let mut id = u64::MAX;
    for (i, c) in w.classes.iter().enumerate() {
        let mut task = tapfinger::Task {
            id: TaskId(id),
            ty: tapfinger::TaskTypeId(i as u16),
            min_demand: c.min_demand.clone(),
            max_demand: c.max_demand.clone(),
            priority: 0,
            reachable: Vec::new(),
            arrival: 0,
            gang: None,
        };
        for m in c.speeds.iter().filter(|m| m.samples > 0) {
            let model = m.gpu_model.as_deref().map_or(GpuModel::NONE, GpuModel::of);
            for (a, slots) in &m.rows {
                if slots.is_finite() && *slots > 0.0 {
                    // A task of its own for every sample: samples of one task would pair.
                    task.id = TaskId(id);
                    id = id.wrapping_sub(1);
                    e.observe_on(&task, model, a, 1.0, *slots);
                    e.forget(task.id);
                }
            }
        }
    }
    e
}

/// The size book the cluster exported with `w` (`Workload::sizes`), for the simulator `twin`
/// of `w` ([`scenario_toml`]: its task types are `w`'s classes in order, its names spelt as
/// its CSV takes them): what the twin's agents start knowing of sizes, as
/// [`warm_estimator`] is for speeds. `None` where the workload carries no book.
pub fn warm_sizes(w: &Workload) -> Option<tapfinger::sizes::SizeBook> {
    let index: BTreeMap<u16, u16> = w
        .classes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.id, u16::try_from(i).unwrap_or(u16::MAX)))
        .collect();
    w.sizes
        .as_ref()
        .map(|b| b.renumbered(|c| index.get(&c).copied(), sanitize))
}

fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The label that names box `name` (a task's reachable boxes become `require` labels).
fn box_label(name: &str) -> String {
    format!("box={name}")
}

/// The scenario (TOML) that replays workload `w`, named `name`.
pub fn scenario_toml(w: &Workload, name: &str) -> Result<String, String> {
    w.check()?;
    if w.tasks.is_empty() {
        return Err("the workload holds no task".into());
    }
    let sizes = tapfinger::twin::sizes(w);
    let works = tapfinger::twin::gang_works(w);
    let node_names: BTreeMap<NodeId, &str> =
        w.nodes.iter().map(|n| (n.id, n.name.as_str())).collect();
    let class_names: BTreeMap<u16, String> = w
        .classes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.id, format!("{}-{i}", sanitize(&c.name))))
        .collect();
    let t0 = w.tasks.iter().map(|t| t.arrival).min().unwrap_or(0);
    let span = w.tasks.iter().map(|t| t.arrival - t0).max().unwrap_or(0) + 1;
    let mean = |f: &dyn Fn(&tapfinger::twin::ClassRecord) -> f64| {
        let (mut s, mut n) = (0.0, 0.0);
        for t in &w.tasks {
            if let Some(c) = w.classes.iter().find(|c| c.id == t.class) {
                s += f(c);
                n += 1.0;
            }
        }
        if n > 0.0 { s / n } else { 0.0 }
    };
    let start_weight = (1.0 - mean(&|c| c.start_cost)).clamp(0.05, 1.0);
    let switch_weight = (1.0 - mean(&|c| c.switch_cost)).clamp(0.05, 1.0);
    let serial: f64 = w
        .tasks
        .iter()
        .zip(&sizes)
        .filter(|(t, _)| t.gang.is_none())
        .map(|(t, s)| {
            let slowest = w
                .classes
                .iter()
                .find(|c| c.id == t.class)
                .and_then(|c| c.speeds.first())
                .and_then(|m| m.rows.first())
                .map_or(1.0, |r| r.1);
            (slowest * s).ceil()
        })
        .sum::<f64>()
        + gangs::serial_slots(w, &works);
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# The cluster's twin (`tapfinger-sim import --format tapfinger`): {} tasks observed in slots {}..{}.\n# Speeds are the cluster's speed estimator's figures; sizes what each task's runs measured.",
        w.tasks.len(),
        w.from_slot,
        w.to_slot
    );
    let _ = writeln!(t, "name = {}", quote(name));
    let _ = writeln!(
        t,
        "description = {}",
        quote(&format!(
            "twin of {} boxes, {} classes, {} tasks",
            w.nodes.len(),
            w.classes.len(),
            w.tasks.len()
        ))
    );
    let _ = writeln!(
        t,
        "lambda = {}\ntasks = {}\nslot_seconds = {}\nstart_weight = {start_weight:.4}\nswitch_weight = {switch_weight:.4}\nreachability = \"all\"\nmax_slots = {}",
        (w.tasks.len() as f64 / span as f64).max(1e-6),
        w.tasks.len(),
        w.slot_seconds,
        100_000u64.max(span * 20 + serial as u64 * 4 + 1000)
    );
    // Where every task declared its work, the twin's tasks declare theirs too (their sizes), so
    // that its estimator measures per unit of work as the cluster's did and its policies see
    // the estimates the cluster's saw.
    if w.tasks
        .iter()
        .filter(|t| t.gang.is_none())
        .all(|t| t.work.is_some())
    {
        let _ = writeln!(t, "declare_work = true");
    }
    let kinds: Vec<String> = w
        .kinds
        .iter()
        .map(|k| {
            format!(
                "  {{ name = {}, unit = {}, step = {} }},",
                quote(&k.name),
                quote(&k.unit),
                k.step
            )
        })
        .collect();
    let _ = writeln!(t, "resources = [\n{}\n]", kinds.join("\n"));
    for n in &w.nodes {
        let _ = writeln!(
            t,
            "\n[[nodes]]\nname = {}\ncapacity = {:?}\nlabels = [{}]",
            quote(&n.name),
            n.capacity.0,
            quote(&box_label(&n.name))
        );
        if let Some(m) = &n.gpu_model {
            let _ = writeln!(t, "gpu_model = {}", quote(m));
        }
    }
    for c in &w.classes {
        write_class(&mut t, w, c, &class_names[&c.id])?;
    }
    gangs::write_section(&mut t, w)?;
    write_trace(&mut t, w, &sizes, &node_names, &class_names, t0);
    gangs::write_entries(&mut t, w, &works)?;
    Ok(t)
}

/// The `[trace]` of workload `w`'s twin: a row per task (arrivals from `t0`), with `sizes`.
fn write_trace(
    t: &mut String,
    w: &Workload,
    sizes: &[f64],
    node_names: &BTreeMap<NodeId, &str>,
    class_names: &BTreeMap<u16, String>,
    t0: u64,
) {
    // A task's own demands and priority where they are not its class's (the class holds the
    // least minimum and the largest maximum of its tasks): the columns only where some task's
    // differ, so a workload of uniform classes writes the plain trace.
    let class_of =
        |task: &tapfinger::twin::TaskRecord| w.classes.iter().find(|c| c.id == task.class);
    let own = |task: &tapfinger::twin::TaskRecord| {
        // A gang's demands are its shape's.
        task.gang.is_none()
            && class_of(task).is_some_and(|c| {
                c.min_demand != task.min_demand
                    || c.max_demand != task.max_demand
                    || task.priority != 0
            })
    };
    let per_task = w.tasks.iter().any(own);
    let units =
        |r: &tapfinger::Resources| r.0.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
    // Who submitted each task and its recurring job, where some task's spec said: what the
    // size history keys on (names as the CSV takes them, [`sanitize`]).
    let named = w.tasks.iter().any(|t| t.identity.is_some());
    let _ = writeln!(
        *t,
        "\n[trace]\nrows = \"\"\"\narrival,type,size,require{}{}",
        if per_task { ",min,max,priority" } else { "" },
        if named { ",submitter,job" } else { "" }
    );
    let everywhere = w.nodes.len();
    for (task, size) in w.tasks.iter().zip(sizes) {
        let require: Vec<String> =
            if task.reachable.is_empty() || task.reachable.len() >= everywhere {
                Vec::new()
            } else {
                task.reachable
                    .iter()
                    .filter_map(|n| node_names.get(n).map(|s| box_label(s)))
                    .collect()
            };
        let extra = if per_task && task.gang.is_some() {
            format!(",,,{}", task.priority)
        } else if per_task {
            format!(
                ",{},{},{}",
                units(&task.min_demand),
                task.max_demand.as_ref().map_or(String::new(), units),
                task.priority
            )
        } else {
            String::new()
        };
        let who = if named {
            let id = task.identity.as_ref();
            let name = |n: Option<&String>| n.map_or(String::new(), |n| sanitize(n));
            format!(
                ",{},{}",
                name(id.and_then(|i| i.submitter.as_ref())),
                name(id.and_then(|i| i.job.as_ref()))
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            *t,
            "{},{},{},{}{extra}{who}",
            task.arrival - t0,
            class_names[&task.class],
            size,
            require.join("|")
        );
    }
    let _ = writeln!(t, "\"\"\"");
}

/// A name a scenario's CSV and TOML take as it is: letters, digits, `-` and `_`.
fn sanitize(s: &str) -> String {
    let v: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if v.is_empty() { "class".into() } else { v }
}

/// Class `c`'s `[[task_types]]`: its table's shape from the fastest GPU model it has samples on
/// (else the one it was seen most on), expressed at the pace of the fastest model the estimator
/// has figures for, and its pace on the others relative to that. Why the fastest: the simulator
/// checks that some box can finish a task of the type within its horizon at the table's speeds,
/// and its clairvoyant reference tabulates the table itself; a long job measured only on a slow
/// model (a Gavel job on K80s: 102,000 slots there, 21,000 on a V100) would be refused, where on
/// the model that runs it fastest it fits. The speed on every listed model is the same either
/// way (table × pace): only the unit changes.
fn write_class(
    t: &mut String,
    w: &Workload,
    c: &tapfinger::twin::ClassRecord,
    name: &str,
) -> Result<(), String> {
    let at_min = |m: &&tapfinger::twin::ModelSpeeds| m.rows.first().map_or(f64::INFINITY, |r| r.1);
    let Some(reference) = c
        .speeds
        .iter()
        .filter(|m| m.samples > 0 && m.gpu_model.is_some() && at_min(m) > 0.0)
        .min_by(|a, b| at_min(a).total_cmp(&at_min(b)))
        .or_else(|| c.speeds.first())
    else {
        return Err(format!("class {}: no speed figures", c.name));
    };
    let count = w.tasks.iter().filter(|x| x.class == c.id).count();
    let header: Vec<&str> = w.kinds.iter().map(|k| k.name.as_str()).collect();
    let mut rows = format!("type,{},seconds\\n", header.join(","));
    // The fastest model's figure at the least allocation (the unit of the table below).
    let base = match reference.gpu_model {
        Some(_) => c
            .speeds
            .iter()
            .filter(|m| m.gpu_model.is_some())
            .map(|m| at_min(&m))
            .filter(|x| *x > 0.0 && x.is_finite())
            .fold(at_min(&reference), f64::min),
        None => at_min(&reference),
    };
    let scale = match reference.rows.first() {
        Some(r) if r.1 > 0.0 && base.is_finite() => base / r.1,
        _ => 1.0,
    };
    let base = if base.is_finite() { base } else { 1.0 };
    for (a, slots) in seen_rows(w, c, &reference.rows)? {
        let slots = slots * scale;
        let cells: Vec<String> = a.iter().map(u32::to_string).collect();
        let _ = write!(
            rows,
            "{name},{},{}\\n",
            cells.join(","),
            (slots * w.slot_seconds).max(1e-9)
        );
    }
    let _ = writeln!(
        t,
        "\n[[task_types]]\nname = {}\nweight = {}\nmin_demand = {:?}",
        quote(name),
        count.max(1),
        c.min_demand.0
    );
    if let Some(m) = &c.max_demand {
        let _ = writeln!(t, "max_demand = {:?}", m.0);
    }
    let paces: Vec<String> = c
        .speeds
        .iter()
        .filter_map(|m| {
            let model = m.gpu_model.as_ref()?;
            let at_min = m.rows.first()?.1;
            (at_min > 0.0).then(|| format!("{} = {}", quote(model), base / at_min))
        })
        .collect();
    if !paces.is_empty() {
        let _ = writeln!(t, "gpu_speed = {{ {} }}", paces.join(", "));
    }
    let _ = writeln!(t, "speed = {{ model = \"table\", rows = \"{rows}\" }}");
    Ok(())
}

/// The most of each kind class `c`'s tasks ran with in `w` (`None`: none of them ran).
fn most_seen(w: &Workload, c: &tapfinger::twin::ClassRecord) -> Option<Vec<u32>> {
    let mut most: Option<Vec<u32>> = None;
    for r in w
        .tasks
        .iter()
        .filter(|t| t.class == c.id)
        .flat_map(|t| &t.runs)
        .filter(|r| r.to > r.from)
    {
        let m = most.get_or_insert_with(|| r.alloc.0.clone());
        for (x, v) in m.iter_mut().zip(&r.alloc.0) {
            *x = (*x).max(*v);
        }
    }
    most
}

/// Class `c`'s table for the twin: the estimator's `rows`, cut at the most of each kind its
/// tasks were seen running with (a row there interpolated from the estimator's, as the
/// simulator interpolates a table), so that the simulator, which clamps a table above its
/// largest value, credits no allocation with a speed-up beyond what the cluster ran it at.
/// Why: above that the estimator's figures are its fit's extrapolation — with too few
/// allocations seen, its prior's shape — and a twin that believed them would flatter every
/// policy that hands out more than the one that ran (a guard judging on it switches to a policy
/// that then does worse). A class none of whose tasks ran keeps the estimator's rows.
fn seen_rows(
    w: &Workload,
    c: &tapfinger::twin::ClassRecord,
    rows: &[(tapfinger::Resources, f64)],
) -> Result<Vec<(Vec<u32>, f64)>, String> {
    let all = || rows.iter().map(|(a, s)| (a.0.clone(), *s)).collect();
    let Some(most) = most_seen(w, c) else {
        return Ok(all());
    };
    let n = w.kinds.len();
    let mut axes: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (a, _) in rows {
        for (axis, v) in axes.iter_mut().zip(&a.0) {
            axis.push(*v);
        }
    }
    for (axis, m) in axes.iter_mut().zip(&most) {
        axis.sort_unstable();
        axis.dedup();
        let first = axis.first().copied().unwrap_or(0);
        axis.retain(|v| v <= m);
        // The largest seen (never below the table: allocations start at the minimum demand).
        axis.push((*m).max(first));
        axis.dedup();
    }
    // Nothing above what ran: the estimator's rows as they are.
    if rows
        .iter()
        .all(|(a, _)| a.0.iter().zip(&most).all(|(v, m)| v <= m))
    {
        return Ok(all());
    }
    // The estimator's table as the simulator reads it, to interpolate the cut.
    let names: Vec<String> = w.kinds.iter().map(|k| k.name.clone()).collect();
    let mut csv = format!("type,{},seconds\n", names.join(","));
    for (a, s) in rows {
        let cells: Vec<String> = a.0.iter().map(u32::to_string).collect();
        let _ = writeln!(csv, "x,{},{}", cells.join(","), s.max(1e-12));
    }
    let table = crate::speed::TableModel::parse(&csv, "the estimator's figures", "x", &names, 0.0)
        .map_err(|e| format!("class {}: {e}", c.name))?;
    let mut out: Vec<(Vec<u32>, f64)> = vec![(Vec::new(), 0.0)];
    for axis in &axes {
        out = out
            .into_iter()
            .flat_map(|(p, _)| {
                axis.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push(*v);
                    (q, 0.0)
                })
            })
            .collect();
    }
    for (a, s) in &mut out {
        *s = table
            .seconds(&tapfinger::Resources(a.clone()))
            .ok_or_else(|| format!("class {}: no figure at {a:?}", c.name))?;
    }
    Ok(out)
}
