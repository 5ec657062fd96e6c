//! The GRU of the forecast ([`super`]): from the last [`GruFit::window`] intervals — each
//! interval's one-step error of ARIMA and its count — the next interval's error. The counts are
//! an input because what ARIMA's linear model misses is often the regime the series is in (a
//! burst), which recent levels show. One GRU layer and a linear read-out, trained with Adam on
//! mean squared error over every window of the training history (each input and the target
//! standardized), full batch, a fixed number of epochs: small and deterministic.
//!
//! Why written out here rather than in a deep-learning crate: the network is one 16-unit layer
//! over 2 inputs, and its forward pass, backpropagation through time and Adam are a page of
//! loops, while the crates that would do it (burn, candle) compile for minutes and would be the
//! only reason an agent or the simulator built them. The unit tests check every gradient against
//! finite differences, so the page is checked where a crate's would be trusted.
//!
//! The cell is PyTorch's `nn.GRU` (reset gate applied after the hidden product):
//! `r = σ(W_r x + U_r h + b_r)`, `z = σ(W_z x + U_z h + b_z)`,
//! `n = tanh(W_n x + b_n + r ⊙ (U_n h + c_n))`, `h' = (1 − z) ⊙ n + z ⊙ h`; the read-out is
//! `y = v · h_last + c`. Initial weights uniform in ±1/√hidden (PyTorch's), from the seed.

use rand::{RngExt, SeedableRng};

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

/// Inputs per interval: the standardized error and count.
const INPUTS: usize = 2;

/// The network's parameters, one flat vector (so that Adam is one loop), laid out as
/// `W` (3 gates × hidden × inputs, gates r, z, n), `U` (3 × hidden × hidden), `b` (3 × hidden),
/// `c_n` (hidden), `v` (hidden), `c` (1).
#[derive(Debug, Clone)]
struct Net {
    h: usize,
    p: Vec<f64>,
}

/// What a forward pass keeps of one step for the backward pass.
#[derive(Clone)]
struct Step {
    /// The hidden state before the step.
    prev: Vec<f64>,
    r: Vec<f64>,
    z: Vec<f64>,
    n: Vec<f64>,
    /// `U_n h + c_n`.
    a: Vec<f64>,
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

impl Net {
    fn size(h: usize) -> usize {
        3 * h * INPUTS + 3 * h * h + 3 * h + h + h + 1
    }
    // Offsets of the parts of the flat vector.
    fn w(&self) -> usize {
        0
    }
    fn u(&self) -> usize {
        3 * self.h * INPUTS
    }
    fn b(&self) -> usize {
        self.u() + 3 * self.h * self.h
    }
    fn cn(&self) -> usize {
        self.b() + 3 * self.h
    }
    fn v(&self) -> usize {
        self.cn() + self.h
    }
    fn c(&self) -> usize {
        self.v() + self.h
    }

    fn init(h: usize, seed: u64) -> Self {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let k = 1.0 / (h.max(1) as f64).sqrt();
        let p = (0..Self::size(h))
            .map(|_| rng.random_range(-k..=k))
            .collect();
        Self { h, p }
    }

    /// One step from hidden state `prev` on input `x`.
    fn step(&self, x: &[f64], prev: &[f64]) -> Step {
        let h = self.h;
        let p = &self.p;
        let gate = |g: usize, j: usize, with_u: bool| {
            let w = &p[self.w() + (g * h + j) * INPUTS..][..INPUTS];
            let mut s = p[self.b() + g * h + j] + w.iter().zip(x).map(|(a, b)| a * b).sum::<f64>();
            if with_u {
                let u = &p[self.u() + (g * h + j) * h..][..h];
                s += u.iter().zip(prev).map(|(a, b)| a * b).sum::<f64>();
            }
            s
        };
        let r: Vec<f64> = (0..h).map(|j| sigmoid(gate(0, j, true))).collect();
        let z: Vec<f64> = (0..h).map(|j| sigmoid(gate(1, j, true))).collect();
        let a: Vec<f64> = (0..h)
            .map(|j| {
                let u = &p[self.u() + (2 * h + j) * h..][..h];
                p[self.cn() + j] + u.iter().zip(prev).map(|(a, b)| a * b).sum::<f64>()
            })
            .collect();
        let n: Vec<f64> = (0..h)
            .map(|j| (gate(2, j, false) + r[j] * a[j]).tanh())
            .collect();
        Step {
            prev: prev.to_vec(),
            r,
            z,
            n,
            a,
        }
    }

    /// The hidden state after a step.
    fn next(s: &Step) -> Vec<f64> {
        (0..s.n.len())
            .map(|j| (1.0 - s.z[j]) * s.n[j] + s.z[j] * s.prev[j])
            .collect()
    }

    /// The prediction for one window (`w × INPUTS`, oldest first), and the steps taken.
    fn forward(&self, xs: &[f64]) -> (f64, Vec<Step>) {
        let mut hid = vec![0.0; self.h];
        let steps: Vec<Step> = xs
            .chunks(INPUTS)
            .map(|x| {
                let s = self.step(x, &hid);
                hid = Self::next(&s);
                s
            })
            .collect();
        let v = &self.p[self.v()..][..self.h];
        let y = self.p[self.c()] + v.iter().zip(&hid).map(|(a, b)| a * b).sum::<f64>();
        (y, steps)
    }

    /// Add to `grad` the gradient of `dy · y` for one window (backpropagation through time).
    fn backward(&self, xs: &[f64], steps: &[Step], dy: f64, grad: &mut [f64]) {
        let h = self.h;
        let p = &self.p;
        let Some(last) = steps.last() else {
            grad[self.c()] += dy;
            return;
        };
        let hid = Self::next(last);
        for j in 0..h {
            grad[self.v() + j] += dy * hid[j];
        }
        grad[self.c()] += dy;
        let mut dh: Vec<f64> = (0..h).map(|j| dy * p[self.v() + j]).collect();
        for (s, x) in steps.iter().zip(xs.chunks(INPUTS)).rev() {
            let mut dprev: Vec<f64> = (0..h).map(|j| dh[j] * s.z[j]).collect();
            // Pre-activation gradients of the three gates.
            let mut pre = [vec![0.0; h], vec![0.0; h], vec![0.0; h]];
            for j in 0..h {
                let dn = dh[j] * (1.0 - s.z[j]);
                let dz = dh[j] * (s.prev[j] - s.n[j]);
                let dn_pre = dn * (1.0 - s.n[j] * s.n[j]);
                let dr = dn_pre * s.a[j];
                let da = dn_pre * s.r[j];
                pre[0][j] = dr * s.r[j] * (1.0 - s.r[j]);
                pre[1][j] = dz * s.z[j] * (1.0 - s.z[j]);
                pre[2][j] = dn_pre;
                // `a = U_n h + c_n`.
                grad[self.cn() + j] += da;
                let row = self.u() + (2 * h + j) * h;
                for k in 0..h {
                    grad[row + k] += da * s.prev[k];
                    dprev[k] += da * p[row + k];
                }
            }
            for (g, d) in pre.iter().enumerate() {
                for j in 0..h {
                    grad[self.b() + g * h + j] += d[j];
                    let w = self.w() + (g * h + j) * INPUTS;
                    for (i, xi) in x.iter().enumerate() {
                        grad[w + i] += d[j] * xi;
                    }
                    if g < 2 {
                        let row = self.u() + (g * h + j) * h;
                        for k in 0..h {
                            grad[row + k] += d[j] * s.prev[k];
                            dprev[k] += d[j] * p[row + k];
                        }
                    }
                }
            }
            dh = dprev;
        }
    }

    /// Mean squared error over the windows `xs` (`b × w × INPUTS`) against `ys`, and its
    /// gradient.
    fn loss_and_grad(&self, xs: &[f64], ys: &[f64]) -> (f64, Vec<f64>) {
        let mut grad = vec![0.0; self.p.len()];
        let per = xs.len() / ys.len().max(1);
        let b = ys.len().max(1) as f64;
        let mut loss = 0.0;
        for (x, y) in xs.chunks(per).zip(ys) {
            let (out, steps) = self.forward(x);
            loss += (out - y) * (out - y) / b;
            self.backward(x, &steps, 2.0 * (out - y) / b, &mut grad);
        }
        (loss, grad)
    }
}

/// Adam with the usual moments (β₁ 0.9, β₂ 0.999, ε 1e-8).
struct Adam {
    m: Vec<f64>,
    v: Vec<f64>,
    t: i32,
}

impl Adam {
    fn new(n: usize) -> Self {
        Self {
            m: vec![0.0; n],
            v: vec![0.0; n],
            t: 0,
        }
    }

    fn step(&mut self, p: &mut [f64], g: &[f64], lr: f64) {
        const B1: f64 = 0.9;
        const B2: f64 = 0.999;
        self.t += 1;
        let (c1, c2) = (1.0 - B1.powi(self.t), 1.0 - B2.powi(self.t));
        for i in 0..p.len() {
            self.m[i] = B1 * self.m[i] + (1.0 - B1) * g[i];
            self.v[i] = B2 * self.v[i] + (1.0 - B2) * g[i] * g[i];
            p[i] -= lr * (self.m[i] / c1) / ((self.v[i] / c2).sqrt() + 1e-8);
        }
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
        let w = cfg.window.max(1);
        let mut out = Self {
            net: Net::init(cfg.hidden.max(1), seed),
            window: w,
            scale: 0.0,
            level: moments(counts),
        };
        let (_, sd) = moments(errors);
        if errors.len() <= w || counts.len() != errors.len() || sd < 1e-9 {
            return out;
        }
        out.scale = sd;
        let b = errors.len() - w;
        let xs: Vec<f64> = (0..b)
            .flat_map(|i| out.inputs(errors, counts, i + w))
            .collect();
        let ys: Vec<f64> = (0..b).map(|i| errors[i + w] / sd).collect();
        let mut adam = Adam::new(out.net.p.len());
        for _ in 0..cfg.epochs {
            let (_, grad) = out.net.loss_and_grad(&xs, &ys);
            adam.step(&mut out.net.p, &grad, cfg.lr);
        }
        out
    }

    /// The standardized window before interval `t`: (error, count) per interval.
    fn inputs(&self, errors: &[f64], counts: &[f64], t: usize) -> Vec<f64> {
        let (mean, sd) = self.level;
        let sd = sd.max(1e-9);
        (t - self.window..t)
            .flat_map(|i| [errors[i] / self.scale, (counts[i] - mean) / sd])
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
        if self.scale == 0.0 || counts.len() != errors.len() {
            return out;
        }
        for t in (from..upto).filter(|&t| t >= w) {
            let (y, _) = self.net.forward(&self.inputs(errors, counts, t));
            out[t - from] = y * self.scale;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every parameter's gradient against a central finite difference of the loss.
    #[test]
    fn backpropagation_matches_finite_differences() {
        let net = Net::init(5, 7);
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let (b, w) = (3, 6);
        let xs: Vec<f64> = (0..b * w * INPUTS)
            .map(|_| rng.random_range(-1.5..1.5))
            .collect();
        let ys: Vec<f64> = (0..b).map(|_| rng.random_range(-1.0..1.0)).collect();
        let (_, grad) = net.loss_and_grad(&xs, &ys);
        let eps = 1e-6;
        for (i, g) in grad.iter().enumerate() {
            let (mut up, mut down) = (net.clone(), net.clone());
            up.p[i] += eps;
            down.p[i] -= eps;
            let numeric =
                (up.loss_and_grad(&xs, &ys).0 - down.loss_and_grad(&xs, &ys).0) / (2.0 * eps);
            assert!(
                (numeric - g).abs() <= 1e-6 + 1e-4 * numeric.abs(),
                "parameter {i}: backprop {g} vs numeric {numeric}"
            );
        }
    }

    #[test]
    fn training_lowers_the_loss_and_is_deterministic() {
        // Errors that follow the counts' regime: a GRU can learn them, a constant cannot.
        let counts: Vec<f64> = (0..200)
            .map(|t| if (t / 20) % 2 == 0 { 3.0 } else { 12.0 })
            .collect();
        let errors: Vec<f64> = counts
            .iter()
            .enumerate()
            .map(|(t, c)| (c - 7.5) * 0.3 + ((t * 31) % 7) as f64 * 0.05)
            .collect();
        let cfg = GruFit {
            window: 8,
            hidden: 6,
            epochs: 60,
            lr: 0.02,
        };
        let a = ResidualGru::train(&errors, &counts, &cfg, 5);
        let b = ResidualGru::train(&errors, &counts, &cfg, 5);
        assert_eq!(a.net.p, b.net.p);
        let untrained = ResidualGru {
            net: Net::init(6, 5),
            ..ResidualGru::train(
                &errors,
                &counts,
                &GruFit {
                    epochs: 0,
                    ..cfg.clone()
                },
                5,
            )
        };
        let mse = |g: &ResidualGru| {
            let p = g.predict_all(&errors, &counts, 0);
            (8..errors.len())
                .map(|t| (p[t] - errors[t]).powi(2))
                .sum::<f64>()
        };
        assert!(
            mse(&a) < 0.5 * mse(&untrained),
            "{} vs {}",
            mse(&a),
            mse(&untrained)
        );
    }

    #[test]
    fn too_little_history_predicts_zero() {
        let g = ResidualGru::train(&[1.0, 2.0], &[3.0, 4.0], &GruFit::default(), 1);
        assert_eq!(g.predict_all(&[1.0, 2.0], &[3.0, 4.0], 0), vec![0.0; 3]);
    }
}
