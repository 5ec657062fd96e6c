//! The GRU of the forecast ([`super`]): from the last [`GruFit::window`] intervals — each
//! interval's one-step error of ARIMA and its count — the next interval's error. The counts are
//! an input because what ARIMA's linear model misses is often the regime the series is in (a
//! burst), which recent levels show. One GRU layer and a linear read-out, trained with Adam on
//! mean squared error over every window of the training history (each input and the target
//! standardized), full batch, a fixed number of epochs: small and deterministic.

use burn::module::Module;
use burn::nn::{Gru, GruConfig, Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor, TensorData};

/// How the GRU is sized and trained.
#[derive(Debug, Clone, PartialEq)]
pub struct GruFit {
    /// Errors it reads per forecast.
    pub window: usize,
    /// Hidden units.
    pub hidden: usize,
    /// Full-batch Adam steps.
    pub epochs: usize,
    /// Learning rate.
    pub lr: f64,
}

impl Default for GruFit {
    fn default() -> Self {
        Self {
            window: 30,
            hidden: 16,
            epochs: 150,
            lr: 0.01,
        }
    }
}

#[derive(Module, Debug)]
struct Net {
    gru: Gru,
    head: Linear,
}

impl Net {
    /// `x`: `[batch, window, 1]` → `[batch]`.
    fn forward(&self, x: Tensor<3>) -> Tensor<1> {
        let [b, w, _] = x.dims();
        let h = self.gru.forward(x, None);
        let hidden = h.dims()[2];
        let last = h.narrow(1, w - 1, 1).reshape([b, hidden]);
        self.head.forward(last).reshape([b])
    }
}

/// The trained GRU.
#[derive(Debug)]
pub struct ResidualGru {
    net: Net,
    window: usize,
    /// The training errors' standard deviation (error inputs and outputs are scaled by it; 0:
    /// untrained, it predicts 0).
    scale: f64,
    /// The training counts' mean and standard deviation (count inputs are standardized).
    level: (f64, f64),
}

/// Mean and standard deviation.
fn moments(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    (
        mean,
        (v.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / n).sqrt(),
    )
}

impl ResidualGru {
    /// Train on `errors` (ARIMA's one-step errors, oldest first) and the `counts` of the same
    /// intervals, initial weights from `seed`. With fewer intervals than a window and one
    /// target, or errors that never vary, an untrained net that predicts 0.
    pub fn train(errors: &[f64], counts: &[f64], cfg: &GruFit, seed: u64) -> Self {
        let device = Device::flex().autodiff();
        device.seed(seed);
        let w = cfg.window.max(1);
        let mut net = Net {
            gru: GruConfig::new(2, cfg.hidden, true).init(&device),
            head: LinearConfig::new(cfg.hidden, 1).init(&device),
        };
        let (_, sd) = moments(errors);
        let level = moments(counts);
        let mut out = Self {
            net: net.valid(),
            window: w,
            scale: 0.0,
            level,
        };
        if errors.len() <= w || counts.len() != errors.len() || sd < 1e-9 {
            return out;
        }
        out.scale = sd;
        let b = errors.len() - w;
        let xs: Vec<f32> = (0..b)
            .flat_map(|i| out.inputs(errors, counts, i + w))
            .collect();
        let ys: Vec<f32> = (0..b).map(|i| (errors[i + w] / sd) as f32).collect();
        let x = Tensor::<3>::from_data(TensorData::new(xs, [b, w, 2]), &device);
        let y = Tensor::<1>::from_data(TensorData::new(ys, [b]), &device);
        let mut optim: ModuleOptimizer = AdamConfig::new().init();
        for _ in 0..cfg.epochs {
            let diff = net.forward(x.clone()) - y.clone();
            let loss = (diff.clone() * diff).mean();
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optim.step(cfg.lr, net, grads);
        }
        out.net = net.valid();
        out
    }

    /// The standardized window before interval `t`: (error, count) per interval.
    fn inputs(&self, errors: &[f64], counts: &[f64], t: usize) -> Vec<f32> {
        let (mean, sd) = self.level;
        let sd = sd.max(1e-9);
        (t - self.window..t)
            .flat_map(|i| {
                [
                    (errors[i] / self.scale) as f32,
                    ((counts[i] - mean) / sd) as f32,
                ]
            })
            .collect()
    }

    /// The predicted error at every interval `t` in `from..=errors.len()` (the last one is the
    /// interval after the history), each from the window of errors before it; 0 where fewer
    /// than a window precede it.
    /// `counts` are the series' counts of the same intervals as `errors`.
    pub fn predict_all(&self, errors: &[f64], counts: &[f64], from: usize) -> Vec<f64> {
        let w = self.window;
        let upto = errors.len() + 1;
        let mut out = vec![0.0; upto.saturating_sub(from)];
        let ts: Vec<usize> = (from..upto).filter(|&t| t >= w).collect();
        if ts.is_empty() || self.scale == 0.0 || counts.len() != errors.len() {
            return out;
        }
        let device = Device::flex();
        let xs: Vec<f32> = ts
            .iter()
            .flat_map(|&t| self.inputs(errors, counts, t))
            .collect();
        let x = Tensor::<3>::from_data(TensorData::new(xs, [ts.len(), w, 2]), &device);
        let ys = self
            .net
            .forward(x)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap_or_default();
        for (&t, y) in ts.iter().zip(ys) {
            out[t - from] = f64::from(y) * self.scale;
        }
        out
    }
}
