//! The `gen-gavel:N` family: clusters of mixed GPU types and jobs after Gavel's (Narayanan et
//! al., OSDI 2020), their speeds from Gavel's measured throughputs.
//!
//! What it draws, from a stream of its own:
//!
//! - 3–12 GPU boxes, each of one GPU type (K80, P100 or V100; every type present once there are
//!   three boxes), with 1, 2, 4 or 8 GPUs, 8 cores and 16 memory units (4 GiB each) per GPU;
//! - 3–12 job classes, each one of Gavel's measured job types at a scale factor (GPUs) drawn as
//!   Gavel's generator draws it (1: 70 %, 2: 10 %, 4: 15 %, 8: 5 %; Philly's distribution), of
//!   the (type, scale factor) pairs measured on all three GPU types and held by some box; a
//!   class asks for exactly that many GPUs, one core and one memory unit per GPU, and cannot be
//!   resized (`min_demand = max_demand`), as a data-parallel job of a fixed scale factor is;
//! - each class's run time alone on V100s from Gavel's duration distribution (10^U(1.5, 3)
//!   minutes, or 10^U(3, 4) one time in five), its speed on the other types the ratio of Gavel's
//!   measured throughputs (`gpu_speed`: from 0.07× to 2.3× the V100's in the shipped table);
//! - heavy-tailed task sizes (Pareto, shape 1.3–2.5, capped at 10–30×) in half the scenarios,
//!   bursty arrivals in half, slots of 6 minutes, and an offered load of 0.4–1.2 (over 1: a
//!   queue that deepens for the whole episode) counted at the cluster's bottleneck: the GPUs of
//!   the boxes that can run each class ([`gpu_slots_per_arrival`]);
//! - a start-up that costs 0–20 % of a run's first slot (`start_weight` 0.8–1: 0–72 s of model
//!   loading); re-shares never happen (no class can be resized), so `switch_weight` is 1.
//!
//! Tasks never share a GPU here (whole devices), so Gavel's co-location throughputs do not
//! arise. Seeds from [`super::HELD_OUT_FROM`] up are held out, as in every family.

use crate::import::gavel::Throughputs;
use rand::RngExt as _;
use std::fmt::Write as _;

/// Seconds per slot.
const SLOT_SECONDS: f64 = 360.0;

/// The GPU types a box is drawn from; run times are the first's.
const TYPES: [&str; 3] = ["v100", "p100", "k80"];

/// A drawn GPU box: its type and GPUs.
struct GpuBox {
    model: &'static str,
    gpus: u32,
}

/// A drawn class: Gavel's job type, its scale factor, run time alone on V100s (seconds) and
/// its speed on each type relative to the V100.
struct JobClass {
    job: String,
    scale: u32,
    seconds: f64,
    speed: [f64; 3],
}

/// Gavel's scale-factor distribution (`_generate_scale_factor`).
fn scale_factor(rng: &mut tapfinger::Rng) -> u32 {
    match rng.random_range(0.0..1.0) {
        r if r < 0.7 => 1,
        r if r < 0.8 => 2,
        r if r < 0.95 => 4,
        _ => 8,
    }
}

/// Gavel's duration distribution (`_generate_duration`), seconds.
fn duration(rng: &mut tapfinger::Rng) -> f64 {
    let exp = if rng.random_bool(0.2) {
        rng.random_range(3.0..4.0)
    } else {
        rng.random_range(1.5..3.0)
    };
    60.0 * 10f64.powf(exp)
}

/// The (job type, scale factor) pairs measured on every GPU type, with their speeds relative
/// to the V100's, in the table's order.
fn measured(table: &Throughputs) -> Vec<(String, u32, [f64; 3])> {
    table
        .jobs(TYPES[0])
        .into_iter()
        .filter_map(|(job, scale)| {
            let rates = TYPES.map(|g| table.get(g, &job, scale).unwrap_or(0.0));
            (rates.iter().all(|r| *r > 0.0)).then(|| (job, scale, rates.map(|r| r / rates[0])))
        })
        .collect()
}

/// The offered load of one arrival per slot: at its bottleneck, the GPU-slots asked of the boxes
/// that can run them per GPU those boxes have. A class of `s` GPUs runs only on boxes of at least
/// `s` GPUs (and uses `⌊g/s⌋·s` of a box's `g`), at its time there; so for each scale `s` the
/// classes of at least `s` GPUs (arrivals uniform over the classes) ask, per arrival, `Σ scale ×
/// time` — their time the mean over the boxes that can run them, weighted by the GPUs each can
/// use — of the GPUs on boxes of at least `s`. The load is the largest of those ratios: counting
/// the whole cluster's GPUs for a class only an 8-GPU K80 box can run would call a queue that
/// deepens for the whole episode a load of 0.7.
fn gpu_slots_per_arrival(boxes: &[GpuBox], classes: &[JobClass]) -> f64 {
    let k = classes.len().max(1) as f64;
    let asked = |c: &JobClass| -> Option<f64> {
        let (mut gpus, mut time) = (0.0, 0.0);
        for b in boxes.iter().filter(|b| b.gpus >= c.scale) {
            let t = TYPES.iter().position(|t| *t == b.model).unwrap_or(0);
            let usable = f64::from(b.gpus / c.scale * c.scale);
            gpus += usable;
            time += usable * c.seconds / SLOT_SECONDS / c.speed[t];
        }
        (gpus > 0.0).then(|| f64::from(c.scale) * time / gpus / k)
    };
    [1, 2, 4, 8]
        .into_iter()
        .map(|s| {
            let held: f64 = boxes
                .iter()
                .filter(|b| b.gpus >= s)
                .map(|b| f64::from(b.gpus))
                .sum();
            let asked: f64 = classes
                .iter()
                .filter(|c| c.scale >= s)
                .filter_map(asked)
                .sum();
            if held > 0.0 { asked / held } else { 0.0 }
        })
        .fold(0.0, f64::max)
}

/// Draw scenario `seed` of the family: its TOML text and offered load.
pub(super) fn draw(seed: u64) -> super::Drawn {
    let mut rng = tapfinger::seeded_rng(seed ^ 0x6761_7665_6C2D_6765);
    let n = rng.random_range(3..=12usize);
    let boxes: Vec<GpuBox> = (0..n)
        .map(|i| GpuBox {
            // Every type once first, then any.
            model: TYPES[if i < 3 { i } else { rng.random_range(0..3) }],
            gpus: [1, 2, 4, 8][rng.random_range(0..4)],
        })
        .collect();
    let table = Throughputs::shipped();
    let pairs = measured(&table);
    let most = boxes.iter().map(|b| b.gpus).max().unwrap_or(1);
    let mut classes: Vec<JobClass> = Vec::new();
    for _ in 0..rng.random_range(3..=12usize) {
        // A scale factor some box holds, then one of the job types measured at it.
        let scale = scale_factor(&mut rng).min(most);
        let at: Vec<&(String, u32, [f64; 3])> = pairs.iter().filter(|p| p.1 == scale).collect();
        if at.is_empty() {
            continue;
        }
        let (job, scale, speed) = at[rng.random_range(0..at.len())];
        classes.push(JobClass {
            job: job.clone(),
            scale: *scale,
            seconds: duration(&mut rng),
            speed: *speed,
        });
    }
    let load = rng.random_range(0.4..1.2);
    let lambda = load / gpu_slots_per_arrival(&boxes, &classes).max(1e-9);
    let tasks = n as u32 * rng.random_range(8..=24u32);
    let burst = rng.random_bool(0.5).then(|| {
        (
            rng.random_range(2.0..10.0),
            rng.random_range(2.0..10.0),
            rng.random_range(5.0..40.0),
        )
    });
    let heavy = rng
        .random_bool(0.5)
        .then(|| (rng.random_range(1.3..2.5), rng.random_range(10.0..30.0)));
    let start_weight = rng.random_range(0.8..=1.0);
    let toml = write(
        seed,
        &boxes,
        &classes,
        [lambda, load, start_weight],
        tasks,
        burst,
        heavy,
    );
    super::Drawn { toml, load }
}

/// The scenario's TOML text.
fn write(
    seed: u64,
    boxes: &[GpuBox],
    classes: &[JobClass],
    [lambda, load, start_weight]: [f64; 3],
    tasks: u32,
    burst: Option<(f64, f64, f64)>,
    heavy: Option<(f64, f64)>,
) -> String {
    let family = super::Family::Gavel;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# Generated scenario {seed} (`tapfinger-sim generate{} --seed {seed}`).{}\n# Speeds: Gavel's measured throughputs. Contains data from stanford-futuredata/gavel\n# (https://github.com/stanford-futuredata/gavel, commit c4fa400), Copyright (c) 2020 Stanford\n# Future Data Systems, licensed under the MIT License.",
        family.flag(),
        if seed >= super::HELD_OUT_FROM {
            " Held out: never train on it."
        } else {
            ""
        }
    );
    let _ = writeln!(t, "name = \"{}\"", family.scenario(seed));
    let _ = writeln!(
        t,
        "description = \"generated (gavel): {} GPU boxes of mixed types, {} job classes, offered load {load:.2}\"",
        boxes.len(),
        classes.len()
    );
    let _ = writeln!(
        t,
        "lambda = {lambda:.6}\ntasks = {tasks}\nwindow = 10\nslot_seconds = {SLOT_SECONDS}\nstart_weight = {start_weight:.3}\nmax_slots = 1000000"
    );
    super::write_spread(&mut t, burst, heavy, None);
    let _ = writeln!(
        t,
        "resources = [\n  {{ name = \"cpu\", unit = \"core\" }},\n  {{ name = \"gpu\", unit = \"GPU\" }},\n  {{ name = \"mem\", unit = \"GiB\", step = 4.0 }},\n]\n"
    );
    for (i, b) in boxes.iter().enumerate() {
        let g = b.gpus;
        let _ = writeln!(
            t,
            "[[nodes]]\nname = \"{}-{i}\"\ncapacity = [{}, {g}, {}]\ngpu_model = \"{}\"\n",
            b.model,
            8 * g,
            16 * g,
            b.model
        );
    }
    let present: Vec<usize> = (0..TYPES.len())
        .filter(|k| boxes.iter().any(|b| b.model == TYPES[*k]))
        .collect();
    for (i, c) in classes.iter().enumerate() {
        let s = c.scale;
        let speeds: Vec<String> = present
            .iter()
            .map(|&k| format!("{} = {:.6}", TYPES[k], c.speed[k]))
            .collect();
        let _ = writeln!(
            t,
            "# {} at {s} GPU(s)\n[[task_types]]\nname = \"c{i}\"\nmin_demand = [{s}, {s}, {s}]\nmax_demand = [{s}, {s}, {s}]\ngpu_speed = {{ {} }}\nspeed = {{ model = \"table\", rows = \"type,cpu,gpu,mem,seconds\\nc{i},{s},{s},{s},{:.3}\\n\" }}\n",
            c.job,
            speeds.join(", "),
            c.seconds
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_loads_with_mixed_types_and_gavel_s_speeds() {
        let table = Throughputs::shipped();
        for seed in 0..40 {
            let d = draw(seed);
            let sc = crate::Scenario::from_toml(&d.toml, "gen-gavel", None)
                .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", d.toml));
            let models: std::collections::BTreeSet<_> = sc
                .nodes
                .iter()
                .filter_map(|n| n.gpu_model.clone())
                .collect();
            assert_eq!(models.len(), 3, "seed {seed}: every type present");
            assert!(!sc.types.is_empty());
            for t in &sc.types {
                assert_eq!(Some(&t.min_demand), t.max_demand.as_ref(), "not resizable");
                assert!((t.gpu_speed["v100"] - 1.0).abs() < 1e-6);
            }
            assert!((0.4..1.2).contains(&d.load));
        }
        // A class's K80 speed is Gavel's: ResNet-18 at batch 16 on one GPU, wherever drawn.
        let k80 = table.get("k80", "ResNet-18 (batch size 16)", 1).unwrap()
            / table.get("v100", "ResNet-18 (batch size 16)", 1).unwrap();
        let pairs = measured(&table);
        let r = pairs
            .iter()
            .find(|p| p.0 == "ResNet-18 (batch size 16)" && p.1 == 1)
            .unwrap();
        assert!((r.2[2] - k80).abs() < 1e-12);
        assert_eq!(draw(7).toml, draw(7).toml, "deterministic");
    }

    /// A class only an 8-GPU K80 box can run asks its GPUs alone: the offered load is that box's,
    /// not the cluster's (which would call an overloaded box a load well under 1).
    #[test]
    fn the_offered_load_counts_the_boxes_that_can_run_each_class() {
        let boxes = [
            GpuBox {
                model: "v100",
                gpus: 1,
            },
            GpuBox {
                model: "p100",
                gpus: 1,
            },
            GpuBox {
                model: "k80",
                gpus: 8,
            },
        ];
        let class = |scale, seconds| JobClass {
            job: "j".into(),
            scale,
            seconds,
            speed: [1.0, 0.5, 0.1],
        };
        let classes = [class(1, 360.0), class(8, 3600.0)];
        // The 8-GPU class: 10 slots on V100s, 100 on the K80s, on the 8 K80s only; half the
        // arrivals are of it.
        let at_8 = 8.0 * 100.0 * 0.5 / 8.0;
        let per = gpu_slots_per_arrival(&boxes, &classes);
        assert!((per - at_8).abs() < 1e-9, "{per} vs {at_8}");
        // Counting the whole cluster's GPUs for every class would say far less.
        let whole = (8.0 * 100.0 * 0.5 + 0.5 * (1.0 + 2.0 + 8.0 * 10.0) / 10.0) / 10.0;
        assert!(per > 1.2 * whole, "{per} vs {whole}");
    }
}
