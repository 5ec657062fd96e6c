//! The training network's weights as safetensors (feature `train`): what a checkpoint holds and
//! the decision pass reads ([`super::infer::Infer::from_safetensors`]). Written and read with
//! burn's own store (`burn::store::SafetensorsStore`), so a tensor's name is its module path;
//! the decision pass reads the same names without burn.

use super::NetConfig;
use super::infer::{Infer, PAD_SCORE};
use super::network::Net;
use burn::nn::activation::Activation;
use burn::store::{ModuleSnapshot, SafetensorsStore};
use burn::tensor::Device;

impl Net {
    /// The weights as a safetensors file (the critic's included, so training resumes whole).
    pub fn to_safetensors(&self) -> Result<Vec<u8>, String> {
        let mut store = SafetensorsStore::from_bytes(None);
        self.save_into(&mut store).map_err(|e| e.to_string())?;
        store.get_bytes().map_err(|e| e.to_string())
    }

    /// The network of `cfg` with the weights of a safetensors file. Every tensor must be there
    /// with its shape; a file without the critic's (one written for deciding alone) is refused.
    pub fn from_safetensors(
        bytes: Vec<u8>,
        cfg: &NetConfig,
        device: &Device,
    ) -> Result<Self, String> {
        let mut net = Self::new(cfg, device);
        let mut store = SafetensorsStore::from_bytes(Some(bytes));
        let applied = net.load_from(&mut store).map_err(|e| e.to_string())?;
        if !applied.errors.is_empty() {
            return Err(applied
                .errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; "));
        }
        Ok(net)
    }

    /// This network's weights for deciding without burn ([`Infer`]), handed over through its
    /// safetensors bytes (the reader every shipped model and checkpoint goes through); `None`
    /// if they cannot be written or read, or a layer has a form the decision pass does not
    /// compute (pre-norm, quiet softmax, another activation, another padding score or head
    /// count: never what [`Net::new`] builds).
    pub fn infer(&self, cfg: &NetConfig) -> Option<Infer> {
        let forms = self.window_enc.layers.iter().all(|l| {
            !l.norm_first
                && !l.mha.quiet_softmax
                && matches!(l.pwff.activation, Activation::Gelu(_))
                && l.mha.min_float as f32 == PAD_SCORE
                && l.mha.n_heads == cfg.heads
        });
        if !forms {
            return None;
        }
        Infer::from_safetensors(&self.to_safetensors().ok()?, cfg).ok()
    }
}
