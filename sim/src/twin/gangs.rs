//! The twin's gangs: the `[gangs]` section that gives the scenario the cluster's link speeds,
//! and a `[[trace.gangs]]` entry per observed gang — its shape as submitted and the work its
//! runs measured ([`tapfinger::twin::gang_works`]), at the compute time its shape states.

use serde::Serialize;
use std::fmt::Write as _;
use tapfinger::placement::gang::GangShape;
use tapfinger::twin::Workload;

/// One `[[trace.gangs]]` entry as written.
#[derive(Serialize)]
struct Entry<'a> {
    row: usize,
    iterations: f64,
    shape: &'a GangShape,
}

#[derive(Serialize)]
struct Gangs<'a> {
    gangs: Vec<Entry<'a>>,
}

#[derive(Serialize)]
struct Trace<'a> {
    trace: Gangs<'a>,
}

/// Slots of work of the workload's gangs, each at its most workers on one box (what the twin's
/// horizon must leave room for beside its single tasks).
pub(super) fn serial_slots(w: &Workload, works: &[Option<f64>]) -> f64 {
    let Some(links) = w.links else {
        return 0.0;
    };
    w.tasks
        .iter()
        .zip(works)
        .filter_map(|(t, iterations)| {
            let s = t.gang.as_deref()?;
            let per_second = f64::from(s.workers.1.max(1))
                / (s.compute_seconds + 2.0 * s.gradient_bytes / links.internal);
            Some((iterations.as_ref()? / (per_second * w.slot_seconds)).ceil())
        })
        .sum()
}

/// The `[gangs]` section of `w`'s twin, if `w` holds a gang: its links, `share = 0` (every gang
/// is the trace's), and ranges that cover the trace's gangs (which the section requires; with
/// no share, nothing is drawn from them).
pub(super) fn write_section(t: &mut String, w: &Workload) -> Result<(), String> {
    let shapes: Vec<&GangShape> = w.tasks.iter().filter_map(|x| x.gang.as_deref()).collect();
    let Some(first) = shapes.first() else {
        return Ok(());
    };
    let Some(links) = w.links else {
        return Err("the workload holds gangs but no link speeds".into());
    };
    let max_workers = shapes
        .iter()
        .map(|s| s.workers.1)
        .max()
        .unwrap_or(1)
        .clamp(1, 64);
    let mut worker = Vec::new();
    let mut ps = Vec::new();
    for (k, kind) in w.kinds.iter().enumerate() {
        let lo = shapes
            .iter()
            .map(|s| s.worker_demand.get(k))
            .min()
            .unwrap_or(0);
        let hi = shapes
            .iter()
            .map(|s| s.worker_demand.get(k))
            .max()
            .unwrap_or(0);
        worker.push(format!("{} = [{lo}, {hi}]", super::quote(&kind.name)));
        ps.push(format!(
            "{} = {}",
            super::quote(&kind.name),
            first.ps_demand.get(k).max(first.worker_demand.get(k))
        ));
    }
    let _ = writeln!(
        t,
        "\n# The cluster's gangs are the trace's (`[[trace.gangs]]`): none is drawn.\n[gangs]\nshare = 0.0\ninternal = {:?}\nexternal = {:?}\nmax_workers = {max_workers}\nworker_demand = {{ {} }}\nps_demand = {{ {} }}\nwork_slots = [{:?}, {:?}]",
        links.internal,
        links.external,
        worker.join(", "),
        ps.join(", "),
        tapfinger::twin::GANG_WORK_SLOTS,
        tapfinger::twin::GANG_WORK_SLOTS,
    );
    Ok(())
}

/// The `[[trace.gangs]]` entries of `w`'s twin (its trace's rows are `w`'s tasks in order),
/// after the trace's rows.
pub(super) fn write_entries(
    t: &mut String,
    w: &Workload,
    works: &[Option<f64>],
) -> Result<(), String> {
    let gangs: Vec<Entry> = w
        .tasks
        .iter()
        .zip(works)
        .enumerate()
        .filter_map(|(i, (task, iterations))| {
            Some(Entry {
                row: i + 1,
                iterations: (*iterations)?,
                shape: task.gang.as_deref()?,
            })
        })
        .collect();
    if gangs.is_empty() {
        return Ok(());
    }
    let text = toml::to_string(&Trace {
        trace: Gangs { gangs },
    })
    .map_err(|e| format!("the twin's gangs: {e}"))?;
    let _ = write!(t, "\n{text}");
    Ok(())
}
