//! The generator's measured classes: Synergy's CPU × memory profiles and Pollux's single-box
//! data-parallel profiles, read from the files the presets embed and scaled to a class's time
//! alone ([`super`] draws when to use them).

use rand::RngExt as _;
use std::fmt::Write as _;

/// Synergy's measured CPU × memory profiles (`sim/presets/edge_synergy.csv`, derived from
/// msr-fiddle/synergy, MIT licence: see `sim/presets/README.md` and the licence file there):
/// the file the edge-synergy preset embeds, not a second copy.
fn synergy_csv() -> &'static str {
    crate::presets::PRESET_FILES
        .iter()
        .find(|(name, _)| *name == "edge_synergy.csv")
        .map_or("", |(_, text)| text)
}
/// Pollux's single-box data-parallel profiles (`sim/presets/pollux_single_node.csv`: step time
/// at 1–4 GPUs on one box per model and per-GPU batch size, from petuum/adaptdl, Apache 2.0: see
/// `sim/presets/README.md` and the licence file there).
const POLLUX_CSV: &str = include_str!("../../presets/pollux_single_node.csv");
/// The minimum demand of a Pollux class in generated units: 2 cores, 1 GPU, 8 memory units.
pub(super) const POLLUX_MIN: [u32; 3] = [2, 1, 8];

/// A Pollux profile drawn at random: (model, batch, CSV rows named `name` with seconds scaled
/// to `t0` on one GPU). A job is a fixed number of samples: its time at `g` GPUs is
/// proportional to `step_time(g) / g` (each step does `g × batch` samples).
pub(super) fn pollux_profile(
    rng: &mut tapfinger::Rng,
    name: &str,
    t0: f64,
) -> (String, String, String) {
    let rows: Vec<(&str, &str, u32, f64)> = POLLUX_CSV
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((
                *f.first()?,
                *f.get(1)?,
                f.get(2)?.parse().ok()?,
                f.get(3)?.parse().ok()?,
            ))
        })
        .collect();
    let profiles: Vec<(&str, &str)> = rows
        .iter()
        .filter(|r| r.2 == 1)
        .map(|r| (r.0, r.1))
        .collect();
    let (model, batch) = profiles[rng.random_range(0..profiles.len())];
    let mine: Vec<(u32, f64)> = rows
        .iter()
        .filter(|r| r.0 == model && r.1 == batch)
        .map(|r| (r.2, r.3 / f64::from(r.2)))
        .collect();
    let one = mine.iter().find(|r| r.0 == 1).map_or(1.0, |r| r.1);
    let [cpu, _, mem] = POLLUX_MIN;
    let mut out = String::from("type,cpu,gpu,mem,seconds\n");
    for (g, per) in mine {
        let _ = writeln!(out, "{name},{cpu},{g},{mem},{:.3}", t0 * per / one);
    }
    (model.to_string(), batch.to_string(), out)
}

/// The models in it.
pub(super) const SYNERGY_MODELS: [&str; 3] = ["res18", "lstm", "m5"];
/// Its memory unit (GB: 1/24 of a 500 GB server) and ours (4 GiB, in GB).
const SYNERGY_MEM_GB: f64 = 20.8333;
const MEM_UNIT_GB: f64 = 4.0 * 1.073_741_824;
/// The minimum demand of a Synergy class in generated units: 2 cores, 1 GPU, 3 Synergy units
/// of memory (62.5 GB = 15 of ours); its seconds are scaled to `t0` there.
pub(super) const SYNERGY_MIN: [u32; 3] = [2, 1, 15];

/// Synergy profile `model` with its memory in generated units and seconds scaled to `t0` at
/// [`SYNERGY_MIN`], as CSV rows named `name`.
pub(super) fn synergy_rows(model: &str, name: &str, t0: f64) -> String {
    let rows: Vec<(u32, u32, u32, f64)> = synergy_csv()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f.first() == Some(&model)).then(|| {
                let mem: f64 = f[3].parse().unwrap_or(0.0);
                (
                    f[1].parse().unwrap_or(0),
                    f[2].parse().unwrap_or(0),
                    (mem * SYNERGY_MEM_GB / MEM_UNIT_GB).round() as u32,
                    f[4].parse().unwrap_or(f64::NAN),
                )
            })
        })
        .collect();
    let reference = rows
        .iter()
        .find(|r| [r.0, r.1, r.2] == SYNERGY_MIN)
        .map_or(1.0, |r| r.3);
    let mut out = String::from("type,cpu,gpu,mem,seconds\n");
    for (cpu, gpu, mem, secs) in rows {
        let _ = writeln!(out, "{name},{cpu},{gpu},{mem},{:.3}", t0 * secs / reference);
    }
    out
}
