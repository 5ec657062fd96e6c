//! A scenario's recorded workload: instead of drawing arrivals (Poisson, bursts) and sizes, an
//! episode replays a list of tasks — what `tapfinger-sim import` makes of a published cluster
//! trace ([`crate::import`]).
//!
//! In the scenario file, `[trace]` holds CSV with the header `arrival,type,size,require`
//! (inline as `rows`, or a file beside the scenario as `csv`): the arrival slot, the name of a
//! task type of the scenario, the task's work relative to its type's (1: the type's table time),
//! and a node label it requires (empty: none; `a|b`: any of them; nodes carry `labels`). Rows may
//! come in any order; the episode takes them by arrival (ties keep their order), the first
//! `tasks` of them. Every workload seed replays the same tasks: the seed only drives the
//! policies' own randomness.

use serde::Deserialize;
use std::path::Path;

/// The TOML form: exactly one of `rows` and `csv`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSpec {
    /// The CSV text.
    #[serde(default)]
    pub rows: Option<String>,
    /// A CSV file, relative to the scenario file.
    #[serde(default)]
    pub csv: Option<String>,
}

/// One recorded task.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceTask {
    /// Arrival slot.
    pub arrival: u64,
    /// Task type index.
    pub ty: usize,
    /// Work relative to its type's.
    pub size: f64,
    /// Node labels it may run on (any of them; empty: every node).
    pub require: Vec<String>,
}

impl TraceTask {
    /// Whether a node with `labels` satisfies the task's requirement.
    pub fn admits(&self, labels: &[String]) -> bool {
        self.require.is_empty() || self.require.iter().any(|r| labels.contains(r))
    }
}

/// Parse a trace: `types` are the scenario's type names, `dir` resolves `csv`. Errors name the
/// line and the column.
pub fn parse(
    spec: &TraceSpec,
    types: &[String],
    dir: Option<&Path>,
) -> Result<Vec<TraceTask>, String> {
    let text = match (&spec.rows, &spec.csv) {
        (Some(r), None) => r.clone(),
        (None, Some(f)) => {
            let path = dir.unwrap_or(Path::new(".")).join(f);
            std::fs::read_to_string(&path).map_err(|e| format!("csv {}: {e}", path.display()))?
        }
        _ => return Err("give exactly one of `rows` (the CSV text) and `csv` (a file)".into()),
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let header = lines.next().map(|(_, l)| l.trim()).unwrap_or_default();
    if header != "arrival,type,size,require" {
        return Err(format!(
            "line 1: the header must be `arrival,type,size,require`, got `{header}`"
        ));
    }
    let mut out = Vec::new();
    for (i, line) in lines {
        let at = |col: &str, why: String| format!("line {}, column {col}: {why}", i + 1);
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 4 {
            return Err(format!("line {}: {} fields, expected 4", i + 1, f.len()));
        }
        let arrival = f[0]
            .parse::<u64>()
            .map_err(|e| at("arrival", format!("{:?}: {e}", f[0])))?;
        let ty = types.iter().position(|t| t == f[1]).ok_or_else(|| {
            at(
                "type",
                format!("{:?} is not a task type of this scenario", f[1]),
            )
        })?;
        let size = f[2]
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0)
            .ok_or_else(|| at("size", format!("{:?} is not a number > 0", f[2])))?;
        let require = f[3]
            .split('|')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        out.push(TraceTask {
            arrival,
            ty,
            size,
            require,
        });
    }
    if out.is_empty() {
        return Err("no rows".into());
    }
    // By arrival; a stable sort keeps the file's order among equal arrivals.
    out.sort_by_key(|t| t.arrival);
    Ok(out)
}
