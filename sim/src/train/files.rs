//! Checkpoints the trainer writes and resumes from: weights, configuration, optimizer state and
//! the training curve (CSV and SVG).

use super::{Checkpoint, CurvePoint, TrainError, Trainer};
use crate::env::Simulator;
use burn::optim::AdamConfig;
use std::path::Path;
use tapfinger::model::checkpoint::{CONFIG_FILE, MODEL_FILE, OPTIM_FILE, RECORD_FILE, read_files};
use tapfinger::model::net::{Net, NetConfig};

fn read_checkpoint(dir: &Path) -> Result<(NetConfig, Checkpoint), TrainError> {
    let json = dir.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&json).map_err(|e| TrainError::Checkpoint {
        path: json.display().to_string(),
        reason: e.to_string(),
    })?;
    let meta: Checkpoint = serde_json::from_str(&text).map_err(|e| TrainError::Checkpoint {
        path: json.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok((meta.config.net.clone(), meta))
}

impl Trainer {
    /// Write a checkpoint into `dir`: `model.safetensors` (the weights), `model.bpk` (the same as
    /// burn's record, with the parameter ids Adam's moments refer to), `train.json` (configuration,
    /// scenario and iteration), `optim.bpk` (Adam's moments, so that a resumed run continues
    /// exactly where this one stopped), `curve.csv` and `curve.svg`.
    pub fn save(&self, dir: &Path) -> Result<(), TrainError> {
        let err = |path: &Path, reason: String| TrainError::Checkpoint {
            path: path.display().to_string(),
            reason,
        };
        std::fs::create_dir_all(dir).map_err(|e| err(dir, e.to_string()))?;
        let model = dir.join(MODEL_FILE);
        let weights = self
            .inference_net()
            .to_safetensors()
            .map_err(|e| err(&model, e))?;
        std::fs::write(&model, weights).map_err(|e| err(&model, e.to_string()))?;
        // The burn record too: Adam's moments below are keyed by its parameter ids, which the
        // safetensors file does not keep, so only it resumes a run exactly.
        let record = dir.join(RECORD_FILE);
        burn::module::Module::save_file(self.inference_net(), &record)
            .map_err(|e| err(&record, e.to_string()))?;
        let optim = dir.join(OPTIM_FILE);
        self.optim
            .save(&optim)
            .map_err(|e| err(&optim, e.to_string()))?;
        let meta = Checkpoint {
            config: self.cfg.clone(),
            scenario: self.sim.scenario().name.clone(),
            iteration: self.iteration,
            ret_scale: self.ret_scale,
        };
        let json = dir.join(CONFIG_FILE);
        let text = serde_json::to_string_pretty(&meta).map_err(|e| err(&json, e.to_string()))?;
        std::fs::write(&json, text).map_err(|e| err(&json, e.to_string()))?;
        let mut csv = String::from(
            "iteration,avg_jct,episode_return,decisions,policy_loss,value_loss,entropy,phase,eval_jct,reference_jct\n",
        );
        for p in &self.curve {
            csv.push_str(&format!(
                "{},{:.4},{:.2},{},{:.5},{:.5},{:.5},{},{:.4},{:.4}\n",
                p.iteration,
                p.avg_jct,
                p.episode_return,
                p.decisions,
                p.policy_loss,
                p.value_loss,
                p.entropy,
                p.phase,
                p.eval_jct,
                p.reference_jct
            ));
        }
        let curve = dir.join(CURVE_FILE);
        std::fs::write(&curve, csv).map_err(|e| err(&curve, e.to_string()))?;
        let mut series = vec![(
            "avg JCT (training episodes)".to_string(),
            self.curve
                .iter()
                .map(|p| (p.iteration as f64, p.avg_jct))
                .collect::<Vec<_>>(),
        )];
        let eval: Vec<(f64, f64)> = self
            .curve
            .iter()
            .filter(|p| p.eval_jct.is_finite())
            .map(|p| (p.iteration as f64, p.eval_jct))
            .collect();
        if !eval.is_empty() {
            series.push(("avg JCT (greedy, validation)".to_string(), eval));
        }
        crate::plot::line_chart(
            &dir.join("curve.svg"),
            &format!("{}: training curve", meta.scenario),
            "iteration",
            "average JCT (slots)",
            &series,
        )
        .map_err(|e| err(dir, e.to_string()))?;
        let ratio = ratio_curve(&self.curve);
        if !ratio.is_empty() {
            crate::plot::line_chart(
                &dir.join("curve-ratio.svg"),
                &format!(
                    "{}: training JCT over {} on the same workloads",
                    meta.scenario,
                    super::REFERENCE
                ),
                "iteration",
                &format!("avg JCT / {}'s (mean of the last 10)", super::REFERENCE),
                &vec![("learned policy (sampling)".to_string(), ratio)],
            )
            .map_err(|e| err(dir, e.to_string()))?;
        }
        Ok(())
    }

    /// Resume from a checkpoint folder written by [`Trainer::save`].
    pub fn resume(sim: Simulator, dir: &Path) -> Result<Self, TrainError> {
        let (net_cfg, meta) = read_checkpoint(dir)?;
        let curve_text = std::fs::read_to_string(dir.join(CURVE_FILE)).unwrap_or_default();
        let mut t = Trainer::new(sim, meta.config.clone());
        let device = t.device.clone();
        // The burn record where there is one (every folder training wrote): its parameter ids
        // are those Adam's moments refer to. A folder with only the weights (a shipped model's)
        // resumes from them with fresh moments.
        let record = dir.join(RECORD_FILE);
        t.net = if record.exists() {
            burn::module::Module::try_load_file(Net::new(&net_cfg, &device), &record).map_err(
                |e| TrainError::Checkpoint {
                    path: record.display().to_string(),
                    reason: e.to_string(),
                },
            )?
        } else {
            let (weights, _) = read_files(dir).map_err(|e| TrainError::Checkpoint {
                path: e.label,
                reason: e.reason,
            })?;
            Net::from_safetensors(weights, &net_cfg, &device).map_err(|reason| {
                TrainError::Checkpoint {
                    path: dir.join(MODEL_FILE).display().to_string(),
                    reason,
                }
            })?
        };
        // A checkpoint from before the optimizer was saved resumes with fresh moments.
        let optim = dir.join(OPTIM_FILE);
        if optim.exists() {
            let fresh = std::mem::replace(&mut t.optim, AdamConfig::new().init());
            t.optim = fresh.load(&optim).map_err(|e| TrainError::Checkpoint {
                path: optim.display().to_string(),
                reason: e.to_string(),
            })?;
        }
        t.iteration = meta.iteration;
        t.ret_scale = meta.ret_scale;
        t.curve = parse_curve(&curve_text);
        Ok(t)
    }
}

/// Per iteration, the mean over the last (up to) 10 iterations of `avg_jct / reference_jct`,
/// where the reference ran.
pub fn ratio_curve(curve: &[super::CurvePoint]) -> Vec<(f64, f64)> {
    let pts: Vec<(f64, f64)> = curve
        .iter()
        .filter(|p| p.reference_jct.is_finite() && p.reference_jct > 0.0)
        .map(|p| (p.iteration as f64, p.avg_jct / p.reference_jct))
        .collect();
    (0..pts.len())
        .map(|i| {
            let w = &pts[i.saturating_sub(9)..=i];
            (
                pts[i].0,
                w.iter().map(|p| p.1).sum::<f64>() / w.len() as f64,
            )
        })
        .collect()
}

/// The training curve's file in a checkpoint folder.
const CURVE_FILE: &str = "curve.csv";

/// The training curve kept in checkpoint folder `dir`.
pub fn read_curve(dir: &Path) -> Result<Vec<CurvePoint>, TrainError> {
    let path = dir.join(CURVE_FILE);
    std::fs::read_to_string(&path)
        .map(|t| parse_curve(&t))
        .map_err(|e| TrainError::Checkpoint {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
}

/// Rows of `curve.csv` (columns added over time default to NaN).
fn parse_curve(text: &str) -> Vec<CurvePoint> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some(CurvePoint {
                iteration: f.first()?.parse().ok()?,
                avg_jct: f.get(1)?.parse().ok()?,
                episode_return: f.get(2)?.parse().ok()?,
                decisions: f.get(3)?.parse().ok()?,
                policy_loss: f.get(4)?.parse().ok()?,
                value_loss: f.get(5)?.parse().ok()?,
                entropy: f.get(6)?.parse().ok()?,
                phase: f.get(7).unwrap_or(&"ppo").to_string(),
                eval_jct: f.get(8).and_then(|x| x.parse().ok()).unwrap_or(f64::NAN),
                reference_jct: f.get(9).and_then(|x| x.parse().ok()).unwrap_or(f64::NAN),
            })
        })
        .collect()
}
