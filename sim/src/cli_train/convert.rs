//! `tapfinger-sim convert-model DIR`: a checkpoint folder of an older version, whose weights are a
//! burn record (`model.bpk`), gets them as `model.safetensors`, the file every build reads (the
//! record is kept; the optimizer's state, `optim.bpk`, stays a burn record, read only to resume).

use anyhow::{Result, bail};
use std::path::PathBuf;
use tapfinger::model::checkpoint::{self, CONFIG_FILE, MODEL_FILE, RECORD_FILE};

/// Arguments of `convert-model`.
#[derive(clap::Args)]
pub(crate) struct ConvertArgs {
    /// Checkpoint folders to convert.
    #[arg(required = true, value_name = "DIR")]
    dirs: Vec<PathBuf>,
}

/// Convert each folder; one already converted is left alone and said so.
pub(crate) fn convert(a: ConvertArgs) -> Result<()> {
    for dir in &a.dirs {
        let (record, target) = (dir.join(RECORD_FILE), dir.join(MODEL_FILE));
        if target.exists() {
            println!("{}: already has {MODEL_FILE}", dir.display());
            continue;
        }
        if !record.exists() {
            bail!("{}: no {RECORD_FILE} to convert", dir.display());
        }
        let json = std::fs::read_to_string(dir.join(CONFIG_FILE))
            .map_err(|e| anyhow::anyhow!("{}: {e}", dir.join(CONFIG_FILE).display()))?;
        let bytes =
            std::fs::read(&record).map_err(|e| anyhow::anyhow!("{}: {e}", record.display()))?;
        let weights = checkpoint::convert_legacy(bytes, &json, &record.display().to_string())?;
        std::fs::write(&target, weights)
            .map_err(|e| anyhow::anyhow!("{}: {e}", target.display()))?;
        println!("{}: wrote {MODEL_FILE}", dir.display());
    }
    Ok(())
}
