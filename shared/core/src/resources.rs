//! Resource kinds, allocation grids and resource vectors.
//!
//! A resource vector counts **grid units** per kind (e.g. one unit = 1 CPU core, or 1/4 of a GPU,
//! or 1 GiB of memory). Making the grid step part of the kind's description is what makes
//! "fine-grained" allocation a configuration rather than a special case. This module knows nothing
//! about tasks or nodes; it only does exact integer arithmetic on vectors.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Errors from resource arithmetic and validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// Two vectors over different numbers of kinds were combined.
    #[error("resource vector has {got} kinds, expected {expected}")]
    Arity {
        /// Kinds expected by the resource space.
        expected: usize,
        /// Kinds in the vector.
        got: usize,
    },
    /// A subtraction would go below zero.
    #[error("not enough {kind}: need {need} units, have {have}")]
    Insufficient {
        /// Name or index of the kind.
        kind: String,
        /// Units requested.
        need: u32,
        /// Units available.
        have: u32,
    },
    /// Invalid description of a resource kind.
    #[error("invalid resource kind {name:?}: {reason}")]
    InvalidKind {
        /// Kind name.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// One kind of resource and its allocation grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceKind {
    /// Short name, e.g. `cpu`, `gpu`, `mem`.
    pub name: String,
    /// Human unit of one grid step, e.g. `core`, `GPU`, `GiB`.
    #[serde(default)]
    pub unit: String,
    /// Size of one grid unit in natural units (1.0 for whole cores; 0.25 for quarter GPUs).
    #[serde(default = "one")]
    pub step: f64,
}

/// 1.0, a serde default (here and in [`crate::view::TaskEstimate::size`]).
pub(crate) fn one() -> f64 {
    1.0
}

/// The ordered list of resource kinds used by a cluster. Every [`Resources`] vector of that
/// cluster has one entry per kind, in this order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceSpace {
    /// The kinds, in the order every `Resources` vector follows.
    kinds: Vec<ResourceKind>,
}

impl ResourceSpace {
    /// A space from kinds; names must be unique and non-empty, steps positive and finite.
    pub fn new(kinds: Vec<ResourceKind>) -> Result<Self, ResourceError> {
        if kinds.is_empty() {
            return Err(ResourceError::InvalidKind {
                name: String::new(),
                reason: "at least one resource kind is required".into(),
            });
        }
        for (i, k) in kinds.iter().enumerate() {
            if k.name.trim().is_empty() {
                return Err(ResourceError::InvalidKind {
                    name: k.name.clone(),
                    reason: "empty name".into(),
                });
            }
            if !(k.step.is_finite() && k.step > 0.0) {
                return Err(ResourceError::InvalidKind {
                    name: k.name.clone(),
                    reason: format!("step must be a positive number, got {}", k.step),
                });
            }
            if kinds[..i].iter().any(|o| o.name == k.name) {
                return Err(ResourceError::InvalidKind {
                    name: k.name.clone(),
                    reason: "duplicate name".into(),
                });
            }
        }
        Ok(Self { kinds })
    }

    /// The usual CPU + GPU space of the TapFinger experiments (whole cores, whole GPUs).
    pub fn cpu_gpu() -> Self {
        Self {
            kinds: vec![
                ResourceKind {
                    name: "cpu".into(),
                    unit: "core".into(),
                    step: 1.0,
                },
                ResourceKind {
                    name: "gpu".into(),
                    unit: "GPU".into(),
                    step: 1.0,
                },
            ],
        }
    }

    /// [`Self::cpu_gpu`] with GPUs in quarters (tests of fractional GPU demands).
    #[cfg(test)]
    pub(crate) fn cpu_gpu_quarters() -> Self {
        let mut s = Self::cpu_gpu();
        s.kinds[1].step = 0.25;
        s
    }

    /// The kinds' names, in order.
    pub fn kind_names(&self) -> Vec<String> {
        self.kinds().iter().map(|k| k.name.clone()).collect()
    }

    /// The kinds, in order.
    pub fn kinds(&self) -> &[ResourceKind] {
        &self.kinds
    }

    /// Number of kinds.
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Always false for a valid space (kept for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// Index of the kind with this name.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.kinds.iter().position(|k| k.name == name)
    }

    /// Check that a vector belongs to this space.
    pub fn check(&self, r: &Resources) -> Result<(), ResourceError> {
        if r.len() != self.len() {
            return Err(ResourceError::Arity {
                expected: self.len(),
                got: r.len(),
            });
        }
        Ok(())
    }
}

/// A vector of grid units, one entry per resource kind.
// Deliberately not `Ord`: a lexicographic `min`/`max` would silently shadow the entry-wise
// `min_each`/`max_each` that allocation code means.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct Resources(pub Vec<u32>);

impl Resources {
    /// A zero vector over `n` kinds.
    pub fn zeros(n: usize) -> Self {
        Self(vec![0; n])
    }

    /// Number of kinds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for a vector over zero kinds.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Units of kind `k`.
    pub fn get(&self, k: usize) -> u32 {
        self.0.get(k).copied().unwrap_or(0)
    }

    /// True if every entry is ≤ the matching entry of `other` (and arities agree).
    pub fn fits_in(&self, other: &Resources) -> bool {
        self.len() == other.len() && self.0.iter().zip(&other.0).all(|(a, b)| a <= b)
    }

    /// True if every entry is zero.
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|&x| x == 0)
    }

    /// Entry-wise sum.
    pub fn checked_add(&self, other: &Resources) -> Result<Resources, ResourceError> {
        if self.len() != other.len() {
            return Err(ResourceError::Arity {
                expected: self.len(),
                got: other.len(),
            });
        }
        Ok(Resources(
            self.0
                .iter()
                .zip(&other.0)
                .map(|(a, b)| a.saturating_add(*b))
                .collect(),
        ))
    }

    /// Entry-wise sum, each entry at most `u32::MAX` (entries of `self` beyond `other`'s kinds
    /// stay). For planning figures, where an overflow cannot be a real allocation anyway.
    pub fn saturating_add(&self, other: &Resources) -> Resources {
        let mut d = self.clone();
        for (x, y) in d.0.iter_mut().zip(&other.0) {
            *x = x.saturating_add(*y);
        }
        d
    }

    /// Entry-wise difference, each entry at least 0 (entries of `self` beyond `other`'s kinds
    /// stay): what is left of `self` once `other` is taken, where taking too much leaves none.
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        let mut d = self.clone();
        for (x, y) in d.0.iter_mut().zip(&other.0) {
            *x = x.saturating_sub(*y);
        }
        d
    }

    /// Entry-wise difference; an error if any entry would go negative.
    pub fn checked_sub(&self, other: &Resources) -> Result<Resources, ResourceError> {
        if self.len() != other.len() {
            return Err(ResourceError::Arity {
                expected: self.len(),
                got: other.len(),
            });
        }
        let mut out = Vec::with_capacity(self.len());
        for (k, (a, b)) in self.0.iter().zip(&other.0).enumerate() {
            if b > a {
                return Err(ResourceError::Insufficient {
                    kind: format!("kind #{k}"),
                    need: *b,
                    have: *a,
                });
            }
            out.push(a - b);
        }
        Ok(Resources(out))
    }

    /// Entry-wise minimum.
    pub fn min_each(&self, other: &Resources) -> Resources {
        Resources(
            self.0
                .iter()
                .zip(&other.0)
                .map(|(a, b)| (*a).min(*b))
                .collect(),
        )
    }

    /// Entry-wise maximum.
    pub fn max_each(&self, other: &Resources) -> Resources {
        Resources(
            self.0
                .iter()
                .zip(&other.0)
                .map(|(a, b)| (*a).max(*b))
                .collect(),
        )
    }

    /// The TapFinger headroom ρ = min over kinds with a positive demand of free / demand.
    /// Kinds the task does not need are ignored; a task needing nothing has infinite headroom,
    /// reported as `f64::MAX` so the value stays finite for serialization.
    pub fn headroom(&self, demand: &Resources) -> f64 {
        let mut rho = f64::MAX;
        for (f, d) in self.0.iter().zip(&demand.0) {
            if *d > 0 {
                rho = rho.min(f64::from(*f) / f64::from(*d));
            }
        }
        rho
    }

    /// Largest entry-wise share of `self` relative to `capacity` (the dominant share of DRF).
    pub fn dominant_share(&self, capacity: &Resources) -> f64 {
        self.0
            .iter()
            .zip(&capacity.0)
            .filter(|(_, c)| **c > 0)
            .map(|(a, c)| f64::from(*a) / f64::from(*c))
            .fold(0.0, f64::max)
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(")?;
        for (i, v) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ",")?;
            }
            write!(f, "{v}")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_is_exact_and_checked() {
        let a = Resources(vec![4, 2]);
        let b = Resources(vec![1, 2]);
        assert_eq!(a.checked_sub(&b).unwrap(), Resources(vec![3, 0]));
        assert!(b.checked_sub(&a).is_err());
        assert!(b.fits_in(&a));
        assert!(!a.fits_in(&b));
        assert!(a.checked_add(&Resources(vec![1])).is_err());
    }

    /// The saturating forms floor at 0 and cap at `u32::MAX` per entry, where the checked ones
    /// refuse.
    #[test]
    fn saturating_arithmetic_floors_and_caps() {
        let a = Resources(vec![4, 2]);
        let b = Resources(vec![1, 3]);
        assert_eq!(a.saturating_sub(&b), Resources(vec![3, 0]));
        assert_eq!(a.saturating_add(&b), Resources(vec![5, 5]));
        let big = Resources(vec![u32::MAX, 0]);
        assert_eq!(big.saturating_add(&b), Resources(vec![u32::MAX, 3]));
    }

    #[test]
    fn headroom_ignores_kinds_not_demanded() {
        let free = Resources(vec![8, 2, 0]);
        assert_eq!(free.headroom(&Resources(vec![2, 1, 0])), 2.0);
        assert_eq!(free.headroom(&Resources(vec![2, 0, 0])), 4.0);
    }

    #[test]
    fn space_rejects_bad_kinds() {
        let k = |n: &str, s: f64| ResourceKind {
            name: n.into(),
            unit: String::new(),
            step: s,
        };
        assert!(ResourceSpace::new(vec![]).is_err());
        assert!(ResourceSpace::new(vec![k("cpu", 0.0)]).is_err());
        assert!(ResourceSpace::new(vec![k("cpu", 1.0), k("cpu", 1.0)]).is_err());
        assert!(ResourceSpace::new(vec![k("cpu", 1.0), k("gpu", 0.25)]).is_ok());
    }
}
