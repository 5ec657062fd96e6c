//! SVG plots of a comparison: JCT CDF per policy, tasks in system over time, utilization over
//! time. Rendering only; the numbers come from [`crate::report`].

use crate::env::SlotRecord;
use crate::report::Comparison;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Errors while plotting.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Could not create the output folder.
    #[error("cannot create plot folder {path}: {source}")]
    Dir {
        /// Folder.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Drawing failed.
    #[error("cannot draw {path}: {reason}")]
    Draw {
        /// File.
        path: String,
        /// Cause.
        reason: String,
    },
}

/// Named (x, y) series.
pub type Series = Vec<(String, Vec<(f64, f64)>)>;

/// Draw one SVG line chart.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &Series,
) -> Result<(), PlotError> {
    let err = |e: String| PlotError::Draw {
        path: path.display().to_string(),
        reason: e,
    };
    // The x axis spans the points (a series that starts at 50 % is not drawn from 0); the y
    // axis starts at 0 so that heights compare.
    let (mut x_min, mut x_max, mut y_max) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for (_, pts) in series {
        for (x, y) in pts {
            x_min = x_min.min(*x);
            x_max = x_max.max(*x);
            y_max = y_max.max(*y);
        }
    }
    if !x_min.is_finite() {
        x_min = 0.0;
    }
    if x_max.is_nan() || x_max <= x_min {
        x_max = x_min + 1.0;
    }
    let y_max = if y_max <= 0.0 { 1.0 } else { y_max * 1.05 };
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(x_min..x_max, 0.0..y_max)
        .map_err(|e| err(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| err(e.to_string()))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// One series per policy over the slots of its first-seed episode.
fn first_seed_series(c: &Comparison, y: impl Fn(&SlotRecord) -> f64) -> Series {
    c.results
        .iter()
        .filter_map(|r| {
            r.episodes.first().map(|e| {
                (
                    r.policy.clone(),
                    e.slots.iter().map(|s| (s.slot as f64, y(s))).collect(),
                )
            })
        })
        .collect()
}

/// Write `jct_cdf.svg`, `tasks_in_system.svg` and `utilization_<kind>.svg` into `dir`; returns the
/// files written. Time series use the first seed.
pub fn write_plots(c: &Comparison, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Dir {
        path: dir.display().to_string(),
        source,
    })?;
    let mut files = Vec::new();
    let cdf: Series = c
        .results
        .iter()
        .map(|r| {
            let mut j: Vec<f64> = r
                .episodes
                .iter()
                .flat_map(|e| e.tasks.iter().map(|t| t.jct as f64))
                .collect();
            j.sort_by(f64::total_cmp);
            let n = j.len().max(1) as f64;
            (
                r.policy.clone(),
                j.iter()
                    .enumerate()
                    .map(|(i, x)| (*x, (i + 1) as f64 / n))
                    .collect(),
            )
        })
        .collect();
    let p = dir.join("jct_cdf.svg");
    line_chart(
        &p,
        &format!("{}: JCT CDF (all seeds)", c.scenario),
        "JCT (slots)",
        "fraction of tasks",
        &cdf,
    )?;
    files.push(p);
    let in_sys = first_seed_series(c, |s| f64::from(s.in_system));
    let p = dir.join("tasks_in_system.svg");
    line_chart(
        &p,
        &format!(
            "{}: tasks in system (seed {})",
            c.scenario,
            c.seeds.first().copied().unwrap_or(0)
        ),
        "slot",
        "tasks",
        &in_sys,
    )?;
    files.push(p);
    let kinds: Vec<String> = c
        .results
        .first()
        .map(|r| r.mean.utilization.keys().cloned().collect())
        .unwrap_or_default();
    for (k, kind) in kinds.iter().enumerate() {
        let util = first_seed_series(c, |s| s.utilization.get(k).copied().unwrap_or(0.0));
        let p = dir.join(format!("utilization_{kind}.svg"));
        line_chart(
            &p,
            &format!("{}: {kind} utilization", c.scenario),
            "slot",
            "allocated / capacity",
            &util,
        )?;
        files.push(p);
    }
    Ok(files)
}
