//! Speed models: how fast a task progresses under an allocation. Simulation only — policies never
//! see these; only the simulator (and the clairvoyant reference, which says so) reads them.
//!
//! Two forms: the TapFinger synthetic formula `Δp = tanh(Σ_k w_k·a_k)·sqrt(1.2 − p) + b`, and a
//! measured table (CSV: `type`, one column per resource kind in grid units, `seconds`) on a
//! rectilinear grid, interpolated multilinearly in *speed* (1/time) between measured points and
//! clamped above the largest measured value of each kind. An allocation below the table's
//! smallest value of any kind makes no progress.

use std::collections::BTreeMap;
use std::path::Path;
use tapfinger::Resources;

/// Errors while loading a measured table.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// File could not be read.
    #[error("cannot read table {path}: {source}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Malformed content.
    #[error("table {path}, line {line}: {reason}")]
    Malformed {
        /// Path.
        path: String,
        /// 1-based line number (1 = header).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The grid is incomplete or the type is absent.
    #[error("table {path}: {reason}")]
    Incomplete {
        /// Path.
        path: String,
        /// What is missing.
        reason: String,
    },
}

/// Where a table comes from (see [`TableModel::from_source`]).
#[derive(Debug, Clone, Copy)]
pub struct TableSource<'a> {
    /// A CSV path (relative to `dir`, or the name of an embedded file).
    pub csv: Option<&'a str>,
    /// Inline CSV text.
    pub rows: Option<&'a str>,
    /// The scenario file's folder (`None`: an embedded preset or generated scenario).
    pub dir: Option<&'a std::path::Path>,
    /// Embedded files by name.
    pub embedded: &'a [(&'a str, &'a str)],
}

/// A measured table for one task type on a complete rectilinear grid.
#[derive(Debug, Clone, PartialEq)]
pub struct TableModel {
    /// Sorted distinct measured values (grid units) per resource kind.
    pub axes: Vec<Vec<u32>>,
    /// Seconds per configuration, row-major over `axes`.
    pub seconds: Vec<f64>,
    /// Start-up overhead added to every run, in seconds.
    pub startup_seconds: f64,
}

impl TableModel {
    /// Parse `text` (CSV with a header) and keep the rows of `row_type`; `kinds` names the resource
    /// columns. `path` is only used in messages.
    pub fn parse(
        text: &str,
        path: &str,
        row_type: &str,
        kinds: &[String],
        startup_seconds: f64,
    ) -> Result<Self, TableError> {
        let malformed = |line: usize, reason: String| TableError::Malformed {
            path: path.into(),
            line,
            reason,
        };
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let Some((_, header)) = lines.next() else {
            return Err(malformed(
                1,
                "empty file (a header `type,<kinds>,seconds` is required)".into(),
            ));
        };
        let cols: Vec<&str> = header.split(',').map(str::trim).collect();
        let find = |name: &str| cols.iter().position(|c| *c == name);
        let type_col = find("type").ok_or_else(|| malformed(1, "missing column `type`".into()))?;
        let secs_col =
            find("seconds").ok_or_else(|| malformed(1, "missing column `seconds`".into()))?;
        let kind_cols: Vec<usize> = kinds
            .iter()
            .map(|k| {
                find(k).ok_or_else(|| {
                    malformed(
                        1,
                        format!("missing column `{k}` (one column per resource kind)"),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        let mut points: BTreeMap<Vec<u32>, f64> = BTreeMap::new();
        for (i, line) in lines {
            let n = i + 1;
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            if f.len() != cols.len() {
                return Err(malformed(
                    n,
                    format!("{} fields, header has {}", f.len(), cols.len()),
                ));
            }
            if f[type_col] != row_type {
                continue;
            }
            let mut cfg = Vec::with_capacity(kinds.len());
            for (k, &c) in kind_cols.iter().enumerate() {
                let v: u32 = f[c].parse().map_err(|_| {
                    malformed(
                        n,
                        format!(
                            "column `{}`: {:?} is not a non-negative integer (grid units)",
                            kinds[k], f[c]
                        ),
                    )
                })?;
                cfg.push(v);
            }
            let s: f64 = f[secs_col]
                .parse()
                .map_err(|_| malformed(n, format!("seconds: {:?} is not a number", f[secs_col])))?;
            if !(s.is_finite() && s > 0.0) {
                return Err(malformed(n, format!("seconds must be positive, got {s}")));
            }
            if points.insert(cfg.clone(), s).is_some() {
                return Err(malformed(
                    n,
                    format!("duplicate configuration {cfg:?} for type {row_type}"),
                ));
            }
        }
        if points.is_empty() {
            return Err(TableError::Incomplete {
                path: path.into(),
                reason: format!("no rows for type {row_type:?}"),
            });
        }
        let axes: Vec<Vec<u32>> = (0..kinds.len())
            .map(|k| {
                let mut v: Vec<u32> = points.keys().map(|c| c[k]).collect();
                v.sort_unstable();
                v.dedup();
                v
            })
            .collect();
        let mut seconds = Vec::new();
        let mut missing = Vec::new();
        for cfg in grid(&axes) {
            match points.get(&cfg) {
                Some(s) => seconds.push(*s),
                None => {
                    missing.push(format!("{cfg:?}"));
                    seconds.push(f64::NAN);
                }
            }
        }
        if !missing.is_empty() {
            let shown: Vec<String> = missing.iter().take(10).cloned().collect();
            return Err(TableError::Incomplete {
                path: path.into(),
                reason: format!(
                    "type {row_type}: the measured values do not form a complete grid; {} configuration(s) missing ({} order): {}{}",
                    missing.len(),
                    kinds.join(","),
                    shown.join(" "),
                    if missing.len() > 10 { " ..." } else { "" }
                ),
            });
        }
        Ok(Self {
            axes,
            seconds,
            startup_seconds,
        })
    }

    /// Load from a file.
    pub fn load(
        path: &Path,
        row_type: &str,
        kinds: &[String],
        startup_seconds: f64,
    ) -> Result<Self, TableError> {
        let text = std::fs::read_to_string(path).map_err(|source| TableError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(
            &text,
            &path.display().to_string(),
            row_type,
            kinds,
            startup_seconds,
        )
    }

    /// The table a scenario names: a file beside it (`csv` with `dir`), an embedded preset file
    /// (`csv` without `dir`), or inline CSV text (`rows`); exactly one of `csv` and `rows`.
    pub fn from_source(
        src: &TableSource<'_>,
        row_type: &str,
        kinds: &[String],
        startup_seconds: f64,
    ) -> Result<Self, TableError> {
        match (src.csv, src.rows, src.dir) {
            (None, Some(text), _) => Self::parse(text, "inline rows", row_type, kinds, startup_seconds),
            (Some(csv), None, Some(d)) => Self::load(&d.join(csv), row_type, kinds, startup_seconds),
            (Some(csv), None, None) => match src.embedded.iter().find(|(n, _)| *n == csv) {
                Some((_, text)) => Self::parse(text, csv, row_type, kinds, startup_seconds),
                None => Err(TableError::Incomplete {
                    path: csv.into(),
                    reason: "no such embedded file".into(),
                }),
            },
            _ => Err(TableError::Incomplete {
                path: src.csv.unwrap_or("(none)").into(),
                reason: "a table speed model needs exactly one of `csv` (a file) and `rows` (the CSV text)".into(),
            }),
        }
    }

    /// Seconds to complete the whole task alone with allocation `a` (start-up included);
    /// `None` if `a` is below the smallest measured value of some kind.
    pub fn seconds(&self, a: &Resources) -> Option<f64> {
        // Per kind: bracketing indices and weight of the upper one.
        let mut brackets = Vec::with_capacity(self.axes.len());
        for (k, axis) in self.axes.iter().enumerate() {
            let v = a.get(k);
            let first = *axis.first()?;
            if v < first {
                return None;
            }
            let hi = axis.partition_point(|x| *x < v).min(axis.len() - 1);
            if axis[hi] == v || hi == 0 || v > *axis.last()? {
                brackets.push((hi, hi, 0.0));
            } else {
                let (x0, x1) = (f64::from(axis[hi - 1]), f64::from(axis[hi]));
                brackets.push((hi - 1, hi, (f64::from(v) - x0) / (x1 - x0)));
            }
        }
        // Multilinear interpolation of speed over the 2^k corners.
        let mut speed = 0.0;
        for corner in 0..(1usize << brackets.len()) {
            let mut w = 1.0;
            let mut flat = 0;
            for (k, &(lo, hi, t)) in brackets.iter().enumerate() {
                let up = corner >> k & 1 == 1;
                w *= if up { t } else { 1.0 - t };
                flat = flat * self.axes[k].len() + if up { hi } else { lo };
            }
            if w > 0.0 {
                speed += w / self.seconds[flat];
            }
        }
        Some(1.0 / speed + self.startup_seconds)
    }
}

/// Every configuration of a rectilinear grid, row-major.
fn grid(axes: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new()];
    for axis in axes {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                axis.iter()
                    .map(move |v| [prefix.clone(), vec![*v]].concat())
            })
            .collect();
    }
    out
}

/// The most slots a task may need alone: a task type that needs more at every allocation
/// cannot run (its lower bound is not computed beyond it). `tapfinger-sim import` chooses its
/// slot length so that every task of a trace fits.
pub const HORIZON_SLOTS: u64 = 100_000;

/// How a task type progresses.
#[derive(Debug, Clone, PartialEq)]
pub enum SpeedModel {
    /// TapFinger's synthetic formula.
    Synthetic {
        /// Weight per resource kind inside the tanh.
        w: Vec<f64>,
        /// Constant progress per slot.
        b: f64,
    },
    /// A measured table.
    Table(TableModel),
}

impl SpeedModel {
    /// Progress made in one slot of `slot_seconds` at progress `p` with allocation `a` (assumed to
    /// satisfy the task's true need).
    pub fn delta(&self, a: &Resources, p: f64, slot_seconds: f64) -> f64 {
        match self {
            SpeedModel::Synthetic { w, b } => {
                let x: f64 = w
                    .iter()
                    .enumerate()
                    .map(|(k, wk)| wk * f64::from(a.get(k)))
                    .sum();
                x.tanh() * (1.2 - p).max(0.0).sqrt() + b
            }
            SpeedModel::Table(t) => t.seconds(a).map_or(0.0, |s| slot_seconds / s),
        }
    }

    /// The most progress one slot with allocation `a` makes at any progress: both models are
    /// fastest at the start (the synthetic one slows as a task progresses; a table is constant).
    /// What [`crate::bound`]'s areas divide by, so that no schedule beats them.
    pub fn peak_delta(&self, a: &Resources, slot_seconds: f64) -> f64 {
        self.delta(a, 0.0, slot_seconds)
    }

    /// Whole slots a task needs alone with allocation `a` (the same stepping as the simulator),
    /// and the fractional time a profiler would measure. `None` if it never finishes.
    pub fn isolated(&self, a: &Resources, slot_seconds: f64) -> Option<(u64, f64)> {
        self.isolated_sized(a, slot_seconds, 1.0)
    }

    /// [`SpeedModel::isolated`] for a task `size` times its type's work (progress per slot
    /// divided by `size`, as the simulator steps a sized task).
    pub fn isolated_sized(
        &self,
        a: &Resources,
        slot_seconds: f64,
        size: f64,
    ) -> Option<(u64, f64)> {
        let mut p = 0.0;
        for slot in 1..=HORIZON_SLOTS {
            let d = self.delta(a, p, slot_seconds) / size;
            if d <= 0.0 {
                return None;
            }
            if p + d >= 1.0 {
                let frac = (slot - 1) as f64 + (1.0 - p) / d;
                return Some((slot, frac));
            }
            p += d;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds() -> Vec<String> {
        vec!["cpu".into(), "gpu".into()]
    }

    #[test]
    fn synthetic_matches_reference_formula() {
        let img = SpeedModel::Synthetic {
            w: vec![0.0, 0.0],
            b: 0.25,
        };
        assert_eq!(img.isolated(&Resources(vec![2, 1]), 1.0).unwrap().0, 4);
        let lm = SpeedModel::Synthetic {
            w: vec![0.0, 1.0 / 16.0],
            b: 0.0,
        };
        let d = lm.delta(&Resources(vec![2, 16]), 0.0, 1.0);
        assert!((d - 1f64.tanh() * 1.2f64.sqrt()).abs() < 1e-12);
        let fast = lm.isolated(&Resources(vec![2, 16]), 1.0).unwrap().0;
        let slow = lm.isolated(&Resources(vec![2, 1]), 1.0).unwrap().0;
        assert!(fast < slow, "{fast} vs {slow}");
    }

    #[test]
    fn table_interpolates_and_clamps() {
        let csv = "type,cpu,gpu,seconds\nA,1,1,100\nA,3,1,50\nA,1,2,60\nA,3,2,30\nB,1,1,5\n";
        let t = TableModel::parse(csv, "t.csv", "A", &kinds(), 10.0).unwrap();
        assert_eq!(t.seconds(&Resources(vec![1, 1])), Some(110.0));
        // Halfway in cpu between 100 s and 50 s: speed (0.01 + 0.02)/2 = 0.015 → 66.7 s.
        let mid = t.seconds(&Resources(vec![2, 1])).unwrap() - 10.0;
        assert!((mid - 1.0 / 0.015).abs() < 1e-9);
        // Above the largest value: clamped.
        assert_eq!(t.seconds(&Resources(vec![9, 9])), Some(40.0));
        // Below the smallest: no progress.
        assert_eq!(t.seconds(&Resources(vec![0, 1])), None);
        let m = SpeedModel::Table(t);
        assert_eq!(m.isolated(&Resources(vec![0, 1]), 5.0), None);
        assert_eq!(m.isolated(&Resources(vec![3, 2]), 5.0).unwrap().0, 8);
    }

    #[test]
    fn malformed_tables_are_reported() {
        let k = kinds();
        let err = |csv: &str| {
            TableModel::parse(csv, "t.csv", "A", &k, 0.0)
                .unwrap_err()
                .to_string()
        };
        assert!(err("").contains("empty"));
        assert!(err("type,cpu,seconds\n").contains("missing column `gpu`"));
        assert!(err("type,cpu,gpu,seconds\nA,1,x,3\n").contains("line 2"));
        assert!(err("type,cpu,gpu,seconds\nA,1,1,-3\n").contains("positive"));
        assert!(err("type,cpu,gpu,seconds\nA,1,1,3\nA,1,1,4\n").contains("duplicate"));
        assert!(err("type,cpu,gpu,seconds\nB,1,1,3\n").contains("no rows"));
        let e = err("type,cpu,gpu,seconds\nA,1,1,3\nA,2,2,4\n");
        assert!(e.contains("2 configuration(s) missing"), "{e}");
        assert!(err("type,cpu,gpu,seconds\nA,1,1\n").contains("3 fields"));
    }
}
