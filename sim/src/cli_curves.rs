//! `tapfinger-sim curves`: training runs plotted side by side.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// Arguments of `curves`.
#[derive(clap::Args)]
pub(crate) struct CurvesArgs {
    /// A run as LABEL=DIR (a training output folder); repeat for several.
    #[arg(long = "run", required = true)]
    runs: Vec<String>,
    /// The SVG file to write.
    #[arg(long)]
    out: PathBuf,
}

/// `curves`.
pub(crate) fn curves(a: CurvesArgs) -> Result<()> {
    let CurvesArgs { runs, out } = a;
    let mut series = Vec::new();
    for r in &runs {
        let (label, dir) = r
            .split_once('=')
            .with_context(|| format!("--run {r:?}: expected LABEL=DIR"))?;
        let curve = tapfinger_sim::train::read_curve(Path::new(dir))?;
        let pts = tapfinger_sim::train::ratio_curve(&curve);
        if pts.is_empty() {
            bail!("--run {r:?}: its curve has no reference JCT (trained before it was kept)");
        }
        series.push((label.to_string(), pts));
    }
    tapfinger_sim::plot::line_chart(
        &out,
        &format!(
            "training JCT over {}'s on the same workloads",
            tapfinger_sim::train::REFERENCE
        ),
        "iteration",
        "ratio (mean of the last 10 iterations)",
        &series,
    )?;
    println!("wrote {}", out.display());
    Ok(())
}
