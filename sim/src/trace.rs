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
//!
//! Three more columns may follow, each at most once, in any order, named in the header: `min`
//! and `max`, the task's own minimum and maximum demand (grid units per resource kind, separated
//! by spaces, as `2 1 4`; empty: its type's), and `priority`, its priority class (empty: its
//! type's). A task's own demands lie within its type's: the type's table covers them, and the
//! type's minimum is what the simulator's lower bound starts from. A cluster's twin writes them
//! where its tasks of one class asked for different amounts or ran at different priorities.
//! Two more, `submitter` and `job`, name who submitted the task and the recurring job it is an
//! instance of (empty: not said), as a spec's fields do: the key the cluster's size history
//! learns under ([`tapfinger::sizes`]), what an importer keeps of a trace's user, job name and
//! group columns. No comma in them (the importers write one as `_`).
//!
//! A row may be a gang (a multi-box job): `[[trace.gangs]]` entries name the row (`row`, 1 for
//! the first row after the header), its `shape` (as a user submits it: workers, parameter
//! servers, their demands, the compute time and gradient size it states), the worker
//! `iterations` it does, and, if not the stated one, its true `compute_seconds` per iteration.
//! The row's `min` and `max` are ignored (a member's demand is the shape's) and the scenario
//! must have a `[gangs]` section (the links and the placer); its `share` then draws more gangs
//! among the other rows, 0 for none. A cluster's twin writes its observed gangs so.

use serde::Deserialize;
use std::path::Path;
use tapfinger::Resources;

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
    /// The rows that are gangs.
    #[serde(default)]
    pub gangs: Vec<TraceGang>,
}

/// A row that is a gang (module doc).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceGang {
    /// The row, 1 for the first after the header.
    pub row: usize,
    /// Its shape.
    pub shape: tapfinger::placement::gang::GangShape,
    /// Worker iterations it does.
    pub iterations: f64,
    /// True seconds of compute per iteration (default: the shape's stated).
    #[serde(default)]
    pub compute_seconds: Option<f64>,
}

impl TraceGang {
    /// What the simulator keeps secret of it.
    pub fn truth(&self) -> crate::gangs::GangTruth {
        crate::gangs::GangTruth {
            iterations: self.iterations,
            compute_seconds: self.compute_seconds.unwrap_or(self.shape.compute_seconds),
        }
    }
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
    /// Its own minimum demand (`None`: its type's).
    pub min: Option<Resources>,
    /// Its own maximum demand (`None`: its type's).
    pub max: Option<Resources>,
    /// Its own priority class (`None`: its type's).
    pub priority: Option<u8>,
    /// Its gang, if it is one.
    pub gang: Option<Box<TraceGang>>,
    /// Who submitted it, where the trace says (the size history's key; never its size).
    pub submitter: Option<String>,
    /// The recurring job it is an instance of, where the trace says.
    pub job: Option<String>,
}

impl TraceTask {
    /// Its identity as an agent's spec would give it (`None`: the trace says nothing).
    pub fn identity(&self) -> Option<tapfinger::sizes::Identity> {
        (self.submitter.is_some() || self.job.is_some()).then(|| tapfinger::sizes::Identity {
            submitter: self.submitter.clone(),
            job: self.job.clone(),
        })
    }
}

impl TraceTask {
    /// Whether a node with `labels` satisfies the task's requirement.
    pub fn admits(&self, labels: &[String]) -> bool {
        self.require.is_empty() || self.require.iter().any(|r| labels.contains(r))
    }
}

/// The columns after the first four, in the header's order.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Extra {
    Min,
    Max,
    Priority,
    Submitter,
    Job,
}

const HEADER: &str = "arrival,type,size,require";

/// The header's optional columns, or why it is not a trace's header.
fn header(line: &str) -> Result<Vec<Extra>, String> {
    let bad = || {
        format!(
            "line 1: the header must be `{HEADER}`, optionally followed by `min`, `max`, `priority`, `submitter` and `job`, got `{line}`"
        )
    };
    let cols: Vec<&str> = line.split(',').map(str::trim).collect();
    if cols.len() < 4 || cols[..4].join(",") != HEADER {
        return Err(bad());
    }
    let mut extra = Vec::new();
    for c in &cols[4..] {
        let e = match *c {
            "min" => Extra::Min,
            "max" => Extra::Max,
            "priority" => Extra::Priority,
            "submitter" => Extra::Submitter,
            "job" => Extra::Job,
            _ => return Err(bad()),
        };
        if extra.contains(&e) {
            return Err(format!("line 1: column `{c}` twice"));
        }
        extra.push(e);
    }
    Ok(extra)
}

/// Grid units per kind, separated by spaces (`kinds` of them); empty: `None`.
fn demand(field: &str, kinds: usize) -> Result<Option<Resources>, String> {
    if field.is_empty() {
        return Ok(None);
    }
    let units = field
        .split_whitespace()
        .map(|u| u.parse::<u32>().map_err(|e| format!("{u:?}: {e}")))
        .collect::<Result<Vec<u32>, String>>()?;
    if units.len() != kinds {
        return Err(format!(
            "{field:?}: {} amounts, the scenario has {kinds} resource kinds",
            units.len()
        ));
    }
    Ok(Some(Resources(units)))
}

/// Parse a trace: `types` are the scenario's type names, `kinds` its number of resource kinds,
/// `dir` resolves `csv`. Errors name the line and the column.
pub fn parse(
    spec: &TraceSpec,
    types: &[String],
    kinds: usize,
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
    let extra = header(lines.next().map(|(_, l)| l.trim()).unwrap_or_default())?;
    let mut out = Vec::new();
    for (i, line) in lines {
        let at = |col: &str, why: String| format!("line {}, column {col}: {why}", i + 1);
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 4 + extra.len() {
            return Err(format!(
                "line {}: {} fields, expected {}",
                i + 1,
                f.len(),
                4 + extra.len()
            ));
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
        let mut task = TraceTask {
            arrival,
            ty,
            size,
            require,
            min: None,
            max: None,
            priority: None,
            gang: None,
            submitter: None,
            job: None,
        };
        for (e, field) in extra.iter().zip(&f[4..]) {
            match e {
                Extra::Min => task.min = demand(field, kinds).map_err(|w| at("min", w))?,
                Extra::Max => task.max = demand(field, kinds).map_err(|w| at("max", w))?,
                Extra::Submitter => {
                    task.submitter = Some(field.to_string()).filter(|f| !f.is_empty())
                }
                Extra::Job => task.job = Some(field.to_string()).filter(|f| !f.is_empty()),
                Extra::Priority if field.is_empty() => {}
                Extra::Priority => {
                    task.priority = Some(
                        field
                            .parse::<u8>()
                            .map_err(|e| at("priority", format!("{field:?}: {e}")))?,
                    )
                }
            }
        }
        if let (Some(lo), Some(hi)) = (&task.min, &task.max)
            && !lo.fits_in(hi)
        {
            return Err(at("max", format!("{hi} is below the minimum {lo}")));
        }
        out.push(task);
    }
    if out.is_empty() {
        return Err("no rows".into());
    }
    for g in &spec.gangs {
        let bad = |why: String| Err(format!("gang of row {}: {why}", g.row));
        let Some(task) = g.row.checked_sub(1).and_then(|i| out.get_mut(i)) else {
            return bad(format!("the trace has rows 1 to {}", out.len()));
        };
        if task.gang.is_some() {
            return bad("a second gang for the row".into());
        }
        if let Err(e) = tapfinger::placement::gang::validate(&g.shape) {
            return bad(e);
        }
        if g.shape.worker_demand.len() != kinds || g.shape.ps_demand.len() != kinds {
            return bad(format!(
                "its demands must name the scenario's {kinds} resource kinds"
            ));
        }
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if !positive(g.iterations) || !g.compute_seconds.is_none_or(positive) {
            return bad("iterations and compute_seconds must be numbers > 0".into());
        }
        task.gang = Some(Box::new(g.clone()));
    }
    // By arrival; a stable sort keeps the file's order among equal arrivals.
    out.sort_by_key(|t| t.arrival);
    Ok(out)
}
