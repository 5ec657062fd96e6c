//! Reading the decision pass's weights from a safetensors file: every tensor the pass reads,
//! by the training network's module path, checked against the shape the configuration gives it.

use super::super::super::batch::EDGE_KINDS;
use super::super::NetConfig;
use super::{EdgeAtt, EncLayer, Han, Infer, Lin, Norm};

/// Why a weights file could not be read for a network configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WeightsError {
    /// Not a safetensors file.
    #[error("not a safetensors weights file ({0})")]
    Format(String),
    /// A tensor the configuration needs is absent.
    #[error(
        "tensor `{0}` is missing (a file of another network, or a checkpoint of an older version)"
    )]
    Missing(String),
    /// A tensor has another shape than the configuration needs.
    #[error("tensor `{name}` has shape {found:?}, the configuration needs {want:?}")]
    Shape {
        /// The tensor.
        name: String,
        /// Its shape in the file.
        found: Vec<usize>,
        /// The shape the configuration gives it.
        want: Vec<usize>,
    },
    /// A tensor is not 32-bit floats.
    #[error("tensor `{name}` holds {dtype}, not 32-bit floats")]
    DType {
        /// The tensor.
        name: String,
        /// What it holds.
        dtype: String,
    },
    /// The configuration itself cannot be built (e.g. heads that do not divide the width).
    #[error("{0}")]
    Config(String),
}

/// The tensors of a safetensors file, read by name and checked against the shape the
/// configuration gives them.
struct Tensors<'a>(safetensors::SafeTensors<'a>);

impl Tensors<'_> {
    fn has(&self, name: &str) -> bool {
        self.0.tensor(name).is_ok()
    }

    fn get(&self, name: &str, want: &[usize]) -> Result<Vec<f32>, WeightsError> {
        let t = self
            .0
            .tensor(name)
            .map_err(|_| WeightsError::Missing(name.to_string()))?;
        if t.dtype() != safetensors::Dtype::F32 {
            return Err(WeightsError::DType {
                name: name.to_string(),
                dtype: format!("{:?}", t.dtype()),
            });
        }
        if t.shape() != want {
            return Err(WeightsError::Shape {
                name: name.to_string(),
                found: t.shape().to_vec(),
                want: want.to_vec(),
            });
        }
        // Safetensors stores little-endian values, without alignment.
        Ok(t.data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// A linear layer `name` (`weight` is `inp × out`, as the training network stores it).
    fn lin(&self, name: &str, inp: usize, out: usize, bias: bool) -> Result<Lin, WeightsError> {
        Ok(Lin {
            w: self.get(&format!("{name}.weight"), &[inp, out])?,
            b: if bias {
                Some(self.get(&format!("{name}.bias"), &[out])?)
            } else {
                None
            },
            inp,
            out,
        })
    }

    /// A layer norm `name` of width `d` (a missing `beta` is zero, as burn builds it without).
    fn norm(&self, name: &str, d: usize) -> Result<Norm, WeightsError> {
        let beta = format!("{name}.beta");
        Ok(Norm {
            gamma: self.get(&format!("{name}.gamma"), &[d])?,
            beta: if self.has(&beta) {
                self.get(&beta, &[d])?
            } else {
                vec![0.0; d]
            },
        })
    }
}

impl Infer {
    /// The network of `cfg` with the weights of a safetensors file (tensor names as the training
    /// network's modules are named: `input.0.weight`, `layers.1.edges.2.msg.bias`,
    /// `window_enc.layers.0.mha.query.weight`, …); every tensor the decision pass reads is checked
    /// against the shape `cfg` gives it. The critic's tensors (`value_*`) may be present and are
    /// not read.
    pub fn from_safetensors(bytes: &[u8], cfg: &NetConfig) -> Result<Self, WeightsError> {
        let t = Tensors(
            safetensors::SafeTensors::deserialize(bytes)
                .map_err(|e| WeightsError::Format(e.to_string()))?,
        );
        let (d, k, heads) = (cfg.width, cfg.dims.kinds, cfg.heads);
        if heads == 0 || d % heads != 0 {
            return Err(WeightsError::Config(format!(
                "{heads} attention heads do not divide the width {d}"
            )));
        }
        let input = (0..4)
            .map(|n| t.lin(&format!("input.{n}"), cfg.dims.feature_width(n), d, true))
            .collect::<Result<_, _>>()?;
        let layers = (0..cfg.layers)
            .map(|l| {
                let p = format!("layers.{l}");
                Ok(Han {
                    edges: (0..EDGE_KINDS.len())
                        .map(|e| {
                            let p = format!("{p}.edges.{e}");
                            Ok(EdgeAtt {
                                msg: t.lin(&format!("{p}.msg"), d, d, true)?,
                                a_src: t.lin(&format!("{p}.a_src"), d, heads, false)?,
                                a_dst: t.lin(&format!("{p}.a_dst"), d, heads, false)?,
                            })
                        })
                        .collect::<Result<_, WeightsError>>()?,
                    sem_w: t.lin(&format!("{p}.sem_w"), d, d, true)?,
                    sem_q: t.lin(&format!("{p}.sem_q"), d, 1, false)?,
                    norms: (0..4)
                        .map(|n| t.norm(&format!("{p}.norms.{n}"), d))
                        .collect::<Result<_, _>>()?,
                })
            })
            .collect::<Result<_, WeightsError>>()?;
        // The window encoder's depth is the file's (the training network builds one layer).
        let mut window_enc = Vec::new();
        while t.has(&format!(
            "window_enc.layers.{}.mha.query.weight",
            window_enc.len()
        )) {
            let p = format!("window_enc.layers.{}", window_enc.len());
            window_enc.push(EncLayer {
                q: t.lin(&format!("{p}.mha.query"), d, d, true)?,
                k: t.lin(&format!("{p}.mha.key"), d, d, true)?,
                v: t.lin(&format!("{p}.mha.value"), d, d, true)?,
                o: t.lin(&format!("{p}.mha.output"), d, d, true)?,
                heads,
                ff_in: t.lin(&format!("{p}.pwff.linear_inner"), d, 2 * d, true)?,
                ff_out: t.lin(&format!("{p}.pwff.linear_outer"), 2 * d, d, true)?,
                norm_1: t.norm(&format!("{p}.norm_1"), d)?,
                norm_2: t.norm(&format!("{p}.norm_2"), d)?,
            });
        }
        if window_enc.is_empty() {
            return Err(WeightsError::Missing(
                "window_enc.layers.0.mha.query.weight".into(),
            ));
        }
        Ok(Self {
            input,
            layers,
            window_enc,
            ptr_slot: t.lin("ptr_slot", d, d, true)?,
            ptr_query: t.lin("ptr_query", d, d, true)?,
            ptr_v: t.lin("ptr_v", d, 1, false)?,
            pass: t.lin("pass", d, 1, true)?,
            alloc_hidden: (0..k)
                .map(|n| t.lin(&format!("alloc_hidden.{n}"), 2 * d + k, d, true))
                .collect::<Result<_, _>>()?,
            alloc_out: (0..k)
                .map(|n| t.lin(&format!("alloc_out.{n}"), d, cfg.max_units + 1, true))
                .collect::<Result<_, _>>()?,
            heads,
            width: d,
            kinds: k,
            window: cfg.dims.window,
            max_units: cfg.max_units,
        })
    }

    /// Units per kind the allocation heads can express.
    pub fn max_units(&self) -> usize {
        self.max_units
    }
}
