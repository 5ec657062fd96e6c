//! Validation of a parsed scenario file ([`Scenario::from_file`]): every number a user can get
//! wrong is refused with a message that names the field.

use super::*;
use crate::presets::PRESET_FILES;
use tapfinger::NodeId;

impl Scenario {
    /// Validate a parsed file.
    pub fn from_file(
        f: ScenarioFile,
        origin: &str,
        dir: Option<&Path>,
    ) -> Result<Self, ScenarioError> {
        let invalid = |field: String, reason: String| ScenarioError::Invalid {
            origin: origin.into(),
            field,
            reason,
        };
        let space = ResourceSpace::new(f.resources.clone()).map_err(|e| match e {
            ResourceError::InvalidKind { name, reason } => {
                invalid(format!("resources ({name:?})"), reason)
            }
            other => invalid("resources".into(), other.to_string()),
        })?;
        let c = Checker {
            origin,
            names: space.kinds().iter().map(|k| k.name.clone()).collect(),
        };
        c.scalars(&f)?;
        let nodes = c.nodes(&f)?;
        if f.task_types.is_empty() {
            return Err(invalid(
                "task_types".into(),
                "at least one task type is required".into(),
            ));
        }
        if f.task_types.len() > usize::from(u16::MAX) {
            return Err(invalid("task_types".into(), "too many task types".into()));
        }
        let mut types = f
            .task_types
            .iter()
            .enumerate()
            .map(|(i, t)| c.task_type(i, t, &nodes, f.slot_seconds, dir))
            .collect::<Result<Vec<_>, _>>()?;
        let capacities: Vec<Resources> = nodes.iter().map(|n| n.capacity.clone()).collect();
        super::sharing::check_shares(&space, &capacities, &mut types)
            .map_err(|(field, reason)| invalid(field, reason))?;
        let colocation =
            super::sharing::colocation(&f).map_err(|(field, reason)| invalid(field, reason))?;
        for (p, v) in &f.published {
            if !v.is_finite() || *v < 0.0 {
                return Err(invalid(
                    format!("published.{p}"),
                    format!("must be a non-negative number, got {v}"),
                ));
            }
        }
        let trace = match &f.trace {
            Some(spec) => {
                let names: Vec<String> = types.iter().map(|t| t.name.clone()).collect();
                let rows = crate::trace::parse(spec, &names, space.len(), dir)
                    .map_err(|reason| invalid("trace".into(), reason))?;
                check_trace(&rows, &types, &nodes)
                    .map_err(|reason| invalid("trace".into(), reason))?;
                if usize::try_from(f.tasks).unwrap_or(usize::MAX) > rows.len() {
                    return Err(invalid(
                        "tasks".into(),
                        format!("{} is more than the trace's {} rows", f.tasks, rows.len()),
                    ));
                }
                Some(rows)
            }
            None => None,
        };
        let gangs = f
            .gangs
            .as_ref()
            .map(|g| g.check(&c.names))
            .transpose()
            .map_err(|(field, reason)| invalid(field, reason))?;
        check_trace_gangs(trace.as_deref().unwrap_or_default(), gangs.as_ref(), &nodes)
            .map_err(|reason| invalid("trace.gangs".into(), reason))?;
        let (priorities, checkpoint_slots) = c.priorities(&f)?;
        let shrink = f
            .shrink
            .map(|x| x.check())
            .transpose()
            .map_err(|(field, reason)| invalid(field, reason))?;
        let reward = f.reward.unwrap_or_default();
        reward
            .check()
            .map_err(|(field, reason)| invalid(field, reason))?;
        Ok(Scenario {
            name: f.name,
            description: f.description,
            space,
            nodes,
            types,
            lambda: f.lambda,
            tasks: u32::try_from(f.tasks).unwrap_or(u32::MAX),
            window: usize::try_from(f.window).unwrap_or(10),
            switch_weight: f.switch_weight,
            start_weight: f.start_weight,
            slot_seconds: f.slot_seconds,
            memory: f.memory,
            reachability: f.reachability,
            max_slots: u64::try_from(f.max_slots).unwrap_or(u64::MAX),
            published: f.published,
            profile_hints: f.profile_hints,
            declare_work: f.declare_work,
            pack_shares: false,
            burst: f.burst,
            task_size: f.task_size,
            trace,
            gangs,
            priorities,
            checkpoint_slots,
            preempt_grace_slots: f
                .priorities
                .as_ref()
                .map_or(0, |p| p.grace_slots.max(0) as u64),
            forecast_interval_slots: None,
            cluster_reward: false,
            reserve: false,
            shrink,
            reward,
            colocation,
        })
    }
}

/// What every check reads: where the file came from and its resource kinds.
struct Checker<'a> {
    /// File or preset, for the messages.
    origin: &'a str,
    /// The resource kinds' names, in order.
    names: Vec<String>,
}

impl Checker<'_> {
    fn invalid(&self, field: String, reason: String) -> ScenarioError {
        ScenarioError::Invalid {
            origin: self.origin.into(),
            field,
            reason,
        }
    }

    /// A resource vector of the file's kinds: one entry per kind, none negative; all zero only
    /// where `allow_zero_all`.
    fn vector(
        &self,
        field: String,
        v: &[i64],
        allow_zero_all: bool,
    ) -> Result<Resources, ScenarioError> {
        let (n, names) = (self.names.len(), &self.names);
        if v.len() != n {
            return Err(self.invalid(
                field,
                format!(
                    "has {} entries, expected {} ({})",
                    v.len(),
                    n,
                    names.join(", ")
                ),
            ));
        }
        let mut out = Vec::with_capacity(n);
        for (k, x) in v.iter().enumerate() {
            if *x < 0 {
                return Err(self.invalid(field, format!("{} is {x}; must be ≥ 0", names[k])));
            }
            out.push(u32::try_from(*x).map_err(|_| {
                self.invalid(field.clone(), format!("{} is too large: {x}", names[k]))
            })?);
        }
        if !allow_zero_all && out.iter().all(|x| *x == 0) {
            return Err(self.invalid(field, "must not be all zero".into()));
        }
        Ok(Resources(out))
    }

    /// The file's single numbers: arrivals, sizes, window, weights, slot length, horizon.
    fn scalars(&self, f: &ScenarioFile) -> Result<(), ScenarioError> {
        let invalid = |field: String, reason: String| self.invalid(field, reason);
        if let Some(reason) = f.burst.as_ref().and_then(|b| b.invalid()) {
            return Err(invalid("burst".into(), reason));
        }
        if let Some(reason) = f.task_size.as_ref().and_then(|b| b.invalid()) {
            return Err(invalid("task_size".into(), reason));
        }
        if !(f.lambda.is_finite() && f.lambda > 0.0) {
            return Err(invalid(
                "lambda".into(),
                format!("arrival rate must be > 0, got {}", f.lambda),
            ));
        }
        if f.tasks <= 0 || f.tasks > 10_000_000 {
            return Err(invalid(
                "tasks".into(),
                format!("must be between 1 and 10000000, got {}", f.tasks),
            ));
        }
        if f.window <= 0 || f.window > 1000 {
            return Err(invalid(
                "window".into(),
                format!("must be between 1 and 1000, got {}", f.window),
            ));
        }
        if !(f.switch_weight > 0.0 && f.switch_weight <= 1.0) {
            return Err(invalid(
                "switch_weight".into(),
                format!("must be in (0, 1], got {}", f.switch_weight),
            ));
        }
        if !(f.start_weight > 0.0 && f.start_weight <= 1.0) {
            return Err(invalid(
                "start_weight".into(),
                format!("must be in (0, 1], got {}", f.start_weight),
            ));
        }
        if !(f.slot_seconds.is_finite() && f.slot_seconds > 0.0) {
            return Err(invalid(
                "slot_seconds".into(),
                format!("must be > 0, got {}", f.slot_seconds),
            ));
        }
        if f.max_slots <= 0 {
            return Err(invalid(
                "max_slots".into(),
                format!("must be > 0, got {}", f.max_slots),
            ));
        }
        Ok(())
    }

    /// The nodes, each `count` of a spec expanded into numbered copies.
    fn nodes(&self, f: &ScenarioFile) -> Result<Vec<NodeDef>, ScenarioError> {
        let invalid = |field: String, reason: String| self.invalid(field, reason);
        if f.nodes.is_empty() {
            return Err(invalid(
                "nodes".into(),
                "the cluster is empty: at least one node is required".into(),
            ));
        }
        let mut nodes = Vec::new();
        for (i, spec) in f.nodes.iter().enumerate() {
            let cap = self.vector(format!("nodes[{i}].capacity"), &spec.capacity, false)?;
            if spec.count <= 0 || spec.count > 10_000 {
                return Err(invalid(
                    format!("nodes[{i}].count"),
                    format!("must be between 1 and 10000, got {}", spec.count),
                ));
            }
            for c in 0..spec.count {
                let name = if spec.count > 1 {
                    format!("{}-{c}", spec.name)
                } else {
                    spec.name.clone()
                };
                nodes.push(NodeDef {
                    name,
                    capacity: cap.clone(),
                    labels: spec.labels.clone(),
                    gpu_model: spec.gpu_model.clone(),
                });
            }
        }
        Ok(nodes)
    }

    /// Task type `i`: its demands (the minimum must fit some node, the need some node within the
    /// cap), weight, speed model, priority class and learning curve.
    fn task_type(
        &self,
        i: usize,
        t: &TaskTypeSpec,
        nodes: &[NodeDef],
        slot_seconds: f64,
        dir: Option<&Path>,
    ) -> Result<TaskType, ScenarioError> {
        let invalid = |field: String, reason: String| self.invalid(field, reason);
        let field = |s: &str| format!("task_types[{i}] ({}).{s}", t.name);
        let min = self.vector(field("min_demand"), &t.min_demand, false)?;
        if !nodes.iter().any(|nd| min.fits_in(&nd.capacity)) {
            return Err(invalid(
                field("min_demand"),
                format!("{min} is larger than every node's capacity"),
            ));
        }
        let max = match &t.max_demand {
            Some(m) => {
                let m = self.vector(field("max_demand"), m, false)?;
                if !min.fits_in(&m) {
                    return Err(invalid(
                        field("max_demand"),
                        format!("{m} is below the minimum demand {min}"),
                    ));
                }
                Some(m)
            }
            None => None,
        };
        let need = match &t.need {
            Some(v) => {
                let need = self.vector(field("need"), v, true)?;
                let both = need.max_each(&min);
                if !nodes.iter().any(|nd| {
                    both.fits_in(&nd.capacity.min_each(max.as_ref().unwrap_or(&nd.capacity)))
                }) {
                    return Err(invalid(
                        field("need"),
                        format!("{need} cannot be met on any node within the cap"),
                    ));
                }
                need
            }
            None => min.clone(),
        };
        if !(t.weight.is_finite() && t.weight > 0.0) {
            return Err(invalid(
                field("weight"),
                format!("must be > 0, got {}", t.weight),
            ));
        }
        let speed = self.speed(t, &field, nodes, max.as_ref(), slot_seconds, dir)?;
        tapfinger::task::check_class(i64::from(t.priority))
            .map_err(|m| invalid(field("priority"), m))?;
        let curve = t
            .curve
            .map(|c| c.check())
            .transpose()
            .map_err(|(f, m)| invalid(field(&f), m))?;
        for (model, x) in &t.gpu_speed {
            if !(x.is_finite() && *x > 0.0) {
                return Err(invalid(
                    field(&format!("gpu_speed.{model}")),
                    format!("must be a finite number > 0, got {x}"),
                ));
            }
            if !nodes.iter().any(|n| n.gpu_model.as_ref() == Some(model)) {
                return Err(invalid(
                    field(&format!("gpu_speed.{model}")),
                    "no node has this gpu_model".into(),
                ));
            }
        }
        Ok(TaskType {
            name: t.name.clone(),
            weight: t.weight,
            min_demand: min,
            max_demand: max,
            need,
            priority: t.priority,
            curve,
            speed,
            gpu_speed: t.gpu_speed.clone(),
        })
    }

    /// A task type's speed model: a synthetic formula with sane weights, or a measured table
    /// that some node can run the type on.
    fn speed(
        &self,
        t: &TaskTypeSpec,
        field: &dyn Fn(&str) -> String,
        nodes: &[NodeDef],
        max: Option<&Resources>,
        slot_seconds: f64,
        dir: Option<&Path>,
    ) -> Result<SpeedModel, ScenarioError> {
        let invalid = |field: String, reason: String| self.invalid(field, reason);
        let n = self.names.len();
        Ok(match &t.speed {
            SpeedSpec::Synthetic { w, b } => {
                if w.len() != n {
                    return Err(invalid(
                        field("speed.w"),
                        format!("has {} entries, expected {n}", w.len()),
                    ));
                }
                if w.iter().any(|x| !x.is_finite() || *x < 0.0) || !b.is_finite() || *b < 0.0 {
                    return Err(invalid(
                        field("speed"),
                        "weights and b must be finite and ≥ 0".into(),
                    ));
                }
                if *b == 0.0 && w.iter().all(|x| *x == 0.0) {
                    return Err(invalid(
                        field("speed"),
                        "w and b are all zero: the task would never progress".into(),
                    ));
                }
                SpeedModel::Synthetic {
                    w: w.clone(),
                    b: *b,
                }
            }
            SpeedSpec::Table {
                csv,
                rows,
                row_type,
                startup_seconds,
            } => {
                if !(startup_seconds.is_finite() && *startup_seconds >= 0.0) {
                    return Err(invalid(
                        field("speed.startup_seconds"),
                        format!("must be ≥ 0, got {startup_seconds}"),
                    ));
                }
                let row = row_type.clone().unwrap_or_else(|| t.name.clone());
                let source = crate::speed::TableSource {
                    csv: csv.as_deref(),
                    rows: rows.as_deref(),
                    dir,
                    embedded: PRESET_FILES,
                };
                let table = TableModel::from_source(&source, &row, &self.names, *startup_seconds)
                    .map_err(|source| ScenarioError::Table {
                    origin: self.origin.into(),
                    source,
                })?;
                let model = SpeedModel::Table(table);
                if !nodes.iter().any(|nd| {
                    model
                        .isolated(
                            &nd.capacity.min_each(max.unwrap_or(&nd.capacity)),
                            slot_seconds,
                        )
                        .is_some()
                }) {
                    return Err(invalid(
                        field("speed"),
                        "no node can run this type at any allocation the table covers".into(),
                    ));
                }
                model
            }
        })
    }

    /// The priority settings, and how often preempted tasks checkpoint (when preemption is on).
    fn priorities(
        &self,
        f: &ScenarioFile,
    ) -> Result<(tapfinger::ledger::Priorities, Option<u64>), ScenarioError> {
        let invalid = |field: String, reason: String| self.invalid(field, reason);
        let priorities = match &f.priorities {
            None => tapfinger::ledger::Priorities::default(),
            Some(p) if p.aging_slots < 0 => {
                return Err(invalid(
                    "priorities.aging_slots".into(),
                    format!("must be 0 (never) or more slots, got {}", p.aging_slots),
                ));
            }
            Some(p) if p.checkpoint_slots < 1 => {
                return Err(invalid(
                    "priorities.checkpoint_slots".into(),
                    format!("must be 1 or more slots, got {}", p.checkpoint_slots),
                ));
            }
            Some(p) if p.grace_slots < 0 => {
                return Err(invalid(
                    "priorities.grace_slots".into(),
                    format!("must be 0 or more slots, got {}", p.grace_slots),
                ));
            }
            Some(p) if p.preempt && !p.honour => {
                return Err(invalid(
                    "priorities.preempt".into(),
                    "preemption needs the classes honoured (honour = true)".into(),
                ));
            }
            Some(p) => tapfinger::ledger::Priorities {
                honour: p.honour,
                aging_slots: (p.aging_slots > 0).then_some(p.aging_slots as u64),
            },
        };
        let checkpoint_slots = f
            .priorities
            .as_ref()
            .filter(|p| p.preempt)
            .map(|p| p.checkpoint_slots as u64);
        Ok((priorities, checkpoint_slots))
    }
}

/// The nodes that can ever run a task of type `def` needing a node that `admits` (its request
/// *and* its true need must fit: a task re-queued after running out of memory asks for its need).
pub(crate) fn hosts(
    nodes: &[NodeDef],
    def: &TaskType,
    admits: impl Fn(&[String]) -> bool,
) -> Vec<NodeId> {
    hosts_of(nodes, def, &def.min_demand, admits)
}

/// [`hosts`] for a task of type `def` asking for at least `min` (a recorded task's own).
pub(crate) fn hosts_of(
    nodes: &[NodeDef],
    def: &TaskType,
    min: &Resources,
    admits: impl Fn(&[String]) -> bool,
) -> Vec<NodeId> {
    let must_fit = min.max_each(&def.need);
    nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| must_fit.fits_in(&n.capacity) && admits(&n.labels))
        .map(|(i, _)| NodeId(i as u32))
        .collect()
}

/// Why a recorded workload cannot run on its scenario's nodes (a task no node can ever host).
fn check_trace(
    trace: &[crate::trace::TraceTask],
    types: &[TaskType],
    nodes: &[NodeDef],
) -> Result<(), String> {
    // A gang's members have the shape's demands ([`check_trace_gangs`]).
    for t in trace.iter().filter(|t| t.gang.is_none()) {
        let def = &types[t.ty];
        let min = t.min.as_ref().unwrap_or(&def.min_demand);
        let within = |r: &Resources| {
            def.min_demand.fits_in(r) && def.max_demand.as_ref().is_none_or(|m| r.fits_in(m))
        };
        for (what, r) in [("minimum", &t.min), ("maximum", &t.max)] {
            if let Some(r) = r
                && !within(r)
            {
                return Err(format!(
                    "a task of type {:?} arriving at slot {} asks for a {what} of {r}, outside its type's demands ({} to {})",
                    def.name,
                    t.arrival,
                    def.min_demand,
                    def.max_demand
                        .as_ref()
                        .map_or("any amount".to_string(), |m| m.to_string())
                ));
            }
        }
        if hosts_of(nodes, def, min, |l| t.admits(l)).is_empty() {
            return Err(format!(
                "a task of type {:?} arriving at slot {} (requiring {:?}) fits no node that carries the label",
                def.name, t.arrival, t.require
            ));
        }
    }
    Ok(())
}

/// Why a trace's gangs cannot run: the scenario says no link speeds (no `[gangs]` section), or
/// a gang could never fit the boxes that carry its label, even all free.
fn check_trace_gangs(
    trace: &[crate::trace::TraceTask],
    gangs: Option<&crate::gangs::Gangs>,
    nodes: &[NodeDef],
) -> Result<(), String> {
    for t in trace {
        let Some(g) = &t.gang else {
            continue;
        };
        let Some(section) = gangs else {
            return Err(
                "the trace has gangs: the scenario needs a `[gangs]` section (its links and placer; `share = 0` draws no more)"
                    .into(),
            );
        };
        let boxes: Vec<Resources> = nodes
            .iter()
            .filter(|n| t.admits(&n.labels))
            .map(|n| n.capacity.clone())
            .collect();
        if let Some(why) = g.shape.never_fits(&boxes, section.links) {
            return Err(format!("the gang of row {} can never run: {why}", g.row));
        }
    }
    Ok(())
}
