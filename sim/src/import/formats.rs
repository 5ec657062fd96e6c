//! Readers of published cluster traces, each turning its rows into [`Job`]s. The columns each
//! format uses are documented in docs/TRACES.md; a row that cannot be read is an error naming its
//! line and column, a row that is well-formed but unusable (unfinished, zero duration) is skipped
//! and counted.

use super::{ImportError, Job};
use chrono::NaiveDateTime;

/// The formats `tapfinger-sim import --format` reads.
pub const FORMATS: &[&str] = &[
    "alibaba-2020",
    "alibaba-2020-sim",
    "alibaba-2023",
    "philly",
    "helios",
    "gavel",
];

/// What a reader gives back: the jobs it read and what it left out, so that `entries` =
/// jobs + every count left out.
#[derive(Debug, Default)]
pub(super) struct Read {
    /// The jobs that can be replayed.
    pub jobs: Vec<Job>,
    /// Entries read (rows; Alibaba 2020: instances).
    pub entries: usize,
    /// Entries left out, by reason.
    pub skipped: Vec<(String, usize)>,
}

impl Read {
    /// Count one entry left out for `why`.
    pub(super) fn skip(&mut self, why: &str) {
        self.skip_n(why, 1);
    }

    /// Count `n` entries left out for `why`.
    pub(super) fn skip_n(&mut self, why: &str, n: usize) {
        match self.skipped.iter_mut().find(|(w, _)| w == why) {
            Some((_, k)) => *k += n,
            None => self.skipped.push((why.to_string(), n)),
        }
    }

    /// Count one entry and keep its job.
    fn keep(&mut self, job: Job) {
        self.entries += 1;
        self.jobs.push(job);
    }

    /// Count one entry and leave it out for `why`.
    fn drop(&mut self, why: &str) {
        self.entries += 1;
        self.skip(why);
    }
}

pub(super) fn bad(line: usize, column: &str, reason: impl Into<String>) -> ImportError {
    ImportError::Row {
        line,
        column: column.into(),
        reason: reason.into(),
    }
}

/// Seconds since the epoch from a number of seconds or a `YYYY-MM-DD HH:MM:SS` datetime.
fn seconds(v: &str) -> Result<f64, String> {
    if let Ok(x) = v.parse::<f64>() {
        return Ok(x);
    }
    NaiveDateTime::parse_from_str(v, "%Y-%m-%d %H:%M:%S")
        .map(|t| t.and_utc().timestamp() as f64)
        .map_err(|e| format!("{v:?} is neither seconds nor a datetime: {e}"))
}

pub(super) fn number(v: &str, line: usize, column: &str) -> Result<f64, ImportError> {
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| bad(line, column, format!("{v:?} is not a number ≥ 0")))
}

/// A trace's user or job field as a trace row carries it (no comma, quote or line break).
pub(super) fn identity_field(v: &str) -> String {
    v.trim()
        .chars()
        .map(|c| {
            if matches!(c, ',' | '"' | '\n' | '\r') {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// A CSV (or TSV) table: the named columns' positions, from a header if the first line is one,
/// else the given order.
struct Table<'a> {
    /// Data rows with their line numbers (for errors that name the line).
    rows: Vec<(usize, Vec<&'a str>)>,
    /// Column of each named field, in the order asked for.
    pos: Vec<usize>,
    /// The header's fields (empty: the file has none).
    header: Vec<&'a str>,
}

impl<'a> Table<'a> {
    fn read(
        text: &'a str,
        sep: char,
        columns: &[&str],
        header_required: bool,
    ) -> Result<Self, ImportError> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim_end_matches('\r')))
            .filter(|(_, l)| !l.trim().is_empty())
            .peekable();
        let first: Vec<&str> = lines
            .peek()
            .map(|(_, l)| l.split(sep).map(str::trim).collect())
            .unwrap_or_default();
        let has_header = first.iter().any(|f| *f == columns[0]) || header_required;
        let pos = if has_header {
            let pos = columns
                .iter()
                .map(|c| {
                    first
                        .iter()
                        .position(|f| f == c)
                        .ok_or_else(|| bad(1, c, format!("the header has no column {c:?}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            lines.next();
            pos
        } else {
            (0..columns.len()).collect()
        };
        let need = pos.iter().max().copied().unwrap_or(0) + 1;
        let mut rows = Vec::new();
        for (n, l) in lines {
            let f: Vec<&str> = l.split(sep).map(str::trim).collect();
            if f.len() < need {
                return Err(bad(
                    n,
                    columns[pos.iter().position(|p| *p >= f.len()).unwrap_or(0)],
                    format!("the row has {} fields, at least {need} expected", f.len()),
                ));
            }
            rows.push((n, f));
        }
        let header = if has_header { first } else { Vec::new() };
        Ok(Self { rows, pos, header })
    }

    fn get<'b>(&self, row: &'b [&'a str], col: usize) -> &'a str {
        row[self.pos[col]]
    }

    /// Column `name` of `row` where the header has it and the row's field is not empty.
    fn optional(&self, row: &[&'a str], name: &str) -> Option<String> {
        let at = self.header.iter().position(|f| *f == name)?;
        row.get(at)
            .map(|v| identity_field(v))
            .filter(|v| !v.is_empty())
    }
}

/// Instances of one Alibaba 2020 row replayed at most (a row may list thousands; the rest are
/// counted as left out).
const MAX_INSTANCES: usize = 1000;

/// Alibaba cluster-trace-gpu-v2020, `pai_task_table` (header optional, as the published file has
/// none): one job per instance, arriving at its start (the table has no submit time). Entries
/// are instances; a row left out counts its instances where it states them.
pub(super) fn alibaba_2020(text: &str) -> Result<Read, ImportError> {
    let head = text.lines().next().unwrap_or_default();
    if head.split(',').any(|f| f.trim() == "submit_time")
        && head.split(',').any(|f| f.trim() == "num_gpu")
    {
        return Err(ImportError::BadOption(
            "this file has the layout of the trace's simulator (`simulator/traces/pai/*.csv`: \
             submit_time, duration, num_cpu, num_gpu), not of `pai_task_table`: use --format \
             alibaba-2020-sim"
                .into(),
        ));
    }
    const C: &[&str] = &[
        "job_name",
        "task_name",
        "inst_num",
        "status",
        "start_time",
        "end_time",
        "plan_cpu",
        "plan_mem",
        "plan_gpu",
        "gpu_type",
    ];
    let t = Table::read(text, ',', C, false)?;
    let mut read = Read::default();
    for (n, r) in &t.rows {
        let n = *n;
        let opt = |i: usize| -> Result<f64, ImportError> {
            let v = t.get(r, i);
            if v.is_empty() {
                Ok(0.0)
            } else {
                number(v, n, C[i])
            }
        };
        let inst = opt(2)?.max(1.0) as usize;
        let mut leave = |why: &str| {
            read.entries += inst;
            read.skip_n(why, inst);
        };
        if t.get(r, 3) != "Terminated" {
            leave("status is not Terminated");
            continue;
        }
        let (start, end) = (t.get(r, 4), t.get(r, 5));
        if start.is_empty() || end.is_empty() {
            leave("no start or end time");
            continue;
        }
        let start = number(start, n, C[4])?;
        let duration = number(end, n, C[5])? - start;
        if duration <= 0.0 {
            leave("duration is not positive");
            continue;
        }
        let gpu_type = Some(t.get(r, 9))
            .filter(|g| !g.is_empty() && *g != "MISC")
            .map(String::from);
        let job = Job {
            arrival_s: start,
            duration_s: duration,
            cpu: opt(6)? / 100.0,
            mem_gib: opt(7)?,
            gpu: opt(8)? / 100.0,
            gpu_type,
            class: None,
            pace: Default::default(),
            // The task table names no user, and its job_name is one run's id, not a job
            // that recurs.
            user: None,
            job: None,
        };
        for _ in 0..inst.min(MAX_INSTANCES) {
            read.keep(job.clone());
        }
        if inst > MAX_INSTANCES {
            read.entries += inst - MAX_INSTANCES;
            read.skip_n(
                &format!("instances of one row beyond the first {MAX_INSTANCES}"),
                inst - MAX_INSTANCES,
            );
        }
    }
    Ok(read)
}

/// A row's duration, or `None` (the row counted as left out) where it is not positive.
fn positive_duration(
    read: &mut Read,
    v: &str,
    line: usize,
    column: &str,
) -> Result<Option<f64>, ImportError> {
    let d = number(v, line, column)?;
    if d <= 0.0 {
        read.drop("duration is not positive");
        return Ok(None);
    }
    Ok(Some(d))
}

/// Alibaba cluster-trace-gpu-v2020's simulator input (`simulator/traces/pai/
/// pai_job_duration_estimate_100K.csv`, the layout its `utils.py` reads; header required): one
/// job per row, arriving at `submit_time` (seconds) and running `duration` seconds with
/// `num_cpu` cores and `num_gpu` GPUs (a fraction below one). The layout states no memory and no
/// GPU model; its `user` and `group` columns, where present, are the task's submitter and
/// recurring job (the group tag of the trace's recurring jobs), its duration estimates are not
/// read.
pub(super) fn alibaba_2020_sim(text: &str) -> Result<Read, ImportError> {
    const C: &[&str] = &["submit_time", "duration", "num_cpu", "num_gpu"];
    let t = Table::read(text, ',', C, true)?;
    let mut read = Read::default();
    for (n, r) in &t.rows {
        let n = *n;
        let Some(duration) = positive_duration(&mut read, t.get(r, 1), n, C[1])? else {
            continue;
        };
        let opt = |i: usize| -> Result<f64, ImportError> {
            let v = t.get(r, i);
            if v.is_empty() {
                Ok(0.0)
            } else {
                number(v, n, C[i])
            }
        };
        read.keep(Job {
            arrival_s: number(t.get(r, 0), n, C[0])?,
            duration_s: duration,
            cpu: opt(2)?,
            mem_gib: 0.0,
            gpu: opt(3)?,
            gpu_type: None,
            class: None,
            pace: Default::default(),
            user: t.optional(r, "user"),
            job: t.optional(r, "group"),
        });
    }
    Ok(read)
}

/// Alibaba cluster-trace-gpu-v2023, `openb_pod_list_default` (header required): a pod arrives at
/// its creation and runs from its scheduling to its deletion. Pods that `Failed` are left out,
/// and so are pods never scheduled (`Pending`) and pods still `Running` when the trace ends
/// (deleted at the trace's last deletion time: their run time is not known).
pub(super) fn alibaba_2023(text: &str) -> Result<Read, ImportError> {
    const C: &[&str] = &[
        "name",
        "cpu_milli",
        "memory_mib",
        "num_gpu",
        "gpu_milli",
        "gpu_spec",
        "creation_time",
        "deletion_time",
        "scheduled_time",
        "pod_phase",
    ];
    let header = text.lines().next().unwrap_or_default();
    let times = ["creation_time", "deletion_time", "scheduled_time"];
    if !times
        .iter()
        .all(|c| header.split(',').any(|h| h.trim() == *c))
    {
        return Err(bad(
            1,
            "creation_time",
            "this file has no times (creation_time, deletion_time, scheduled_time): of the \
             trace's pod lists only openb_pod_list_multigpu* list demands alone; import \
             openb_pod_list_default.csv or a gpuspec*, gpushare* or cpu* list",
        ));
    }
    let t = Table::read(text, ',', C, true)?;
    // The trace's end: pods deleted then were still running.
    let mut end = f64::NEG_INFINITY;
    for (n, r) in &t.rows {
        let d = t.get(r, 7);
        if !d.is_empty() {
            end = end.max(number(d, *n, C[7])?);
        }
    }
    let mut read = Read::default();
    for (n, r) in &t.rows {
        let n = *n;
        let phase = t.get(r, 9);
        match phase {
            "Succeeded" | "Running" => {}
            "Failed" => {
                read.drop("pod_phase Failed");
                continue;
            }
            "Pending" => {
                read.drop("never scheduled (Pending)");
                continue;
            }
            other => {
                return Err(bad(
                    n,
                    C[9],
                    format!("{other:?}: expected Succeeded, Running, Pending or Failed"),
                ));
            }
        }
        let (sched, del) = (t.get(r, 8), t.get(r, 7));
        if sched.is_empty() || del.is_empty() {
            read.drop("never scheduled or never deleted");
            continue;
        }
        let del = number(del, n, C[7])?;
        if phase == "Running" && del >= end {
            read.drop("still running when the trace ends");
            continue;
        }
        let duration = del - number(sched, n, C[8])?;
        if duration <= 0.0 {
            read.drop("duration is not positive");
            continue;
        }
        let gpus = number(t.get(r, 3), n, C[3])?;
        let milli = number(t.get(r, 4), n, C[4])?;
        read.keep(Job {
            arrival_s: number(t.get(r, 6), n, C[6])?,
            duration_s: duration,
            cpu: number(t.get(r, 1), n, C[1])? / 1000.0,
            mem_gib: number(t.get(r, 2), n, C[2])? / 1024.0,
            // gpu_milli is the share of its one GPU a GPU-sharing pod asks for.
            gpu: if gpus <= 1.0 {
                gpus * milli / 1000.0
            } else {
                gpus
            },
            gpu_type: Some(t.get(r, 5))
                .filter(|g| !g.is_empty() && *g != "nan")
                .map(String::from),
            class: None,
            pace: Default::default(),
            user: None,
            job: None,
        });
    }
    Ok(read)
}

/// Helios (`cluster_log.csv`, header required): arrival at submission, the recorded duration;
/// its `user` and `jobname` columns name the submitter and the job.
pub(super) fn helios(text: &str) -> Result<Read, ImportError> {
    const C: &[&str] = &["submit_time", "gpu_num", "cpu_num", "node_num", "duration"];
    let t = Table::read(text, ',', C, true)?;
    let mut read = Read::default();
    for (n, r) in &t.rows {
        let n = *n;
        let Some(duration) = positive_duration(&mut read, t.get(r, 4), n, C[4])? else {
            continue;
        };
        // node_num boxes' worth of work on one box: a multi-node job becomes one large task.
        read.keep(Job {
            arrival_s: seconds(t.get(r, 0)).map_err(|e| bad(n, C[0], e))?,
            duration_s: duration,
            cpu: number(t.get(r, 2), n, C[2])?,
            mem_gib: 0.0,
            gpu: number(t.get(r, 1), n, C[1])?,
            gpu_type: None,
            class: None,
            pace: Default::default(),
            user: t.optional(r, "user"),
            job: t.optional(r, "jobname"),
        });
    }
    Ok(read)
}

#[derive(serde::Deserialize)]
struct PhillyJob {
    /// When the job was submitted (Philly's format).
    submitted_time: String,
    /// Who submitted it (hashed in the published file).
    #[serde(default)]
    user: Option<String>,
    /// Its runs; the first that started is replayed.
    #[serde(default)]
    attempts: Vec<PhillyAttempt>,
}

#[derive(serde::Deserialize)]
struct PhillyAttempt {
    /// When the attempt started (`None`: it never did).
    start_time: Option<String>,
    /// When it ended.
    end_time: Option<String>,
    /// The machines it ran on.
    #[serde(default)]
    detail: Vec<PhillyDetail>,
}

#[derive(serde::Deserialize)]
struct PhillyDetail {
    /// GPUs it held on one machine (counted).
    #[serde(default)]
    gpus: Vec<String>,
}

/// Philly (`cluster_job_log`, a JSON list of jobs): arrival at submission, the last attempt's
/// run time and GPUs (over all its machines), its `user` the submitter.
pub(super) fn philly(text: &str) -> Result<Read, ImportError> {
    let list: Vec<PhillyJob> = serde_json::from_str(text).map_err(|e| ImportError::Row {
        line: e.line(),
        column: format!("{} (character)", e.column()),
        reason: e.to_string(),
    })?;
    let mut read = Read::default();
    for (i, j) in list.iter().enumerate() {
        let entry = |field: &str, reason: String| ImportError::Entry {
            index: i + 1,
            field: field.into(),
            reason,
        };
        let Some(last) = j.attempts.last() else {
            read.drop("no attempt");
            continue;
        };
        let (Some(s), Some(e)) = (&last.start_time, &last.end_time) else {
            read.drop("attempt without start or end");
            continue;
        };
        if s == "None" || e == "None" {
            read.drop("attempt without start or end");
            continue;
        }
        let duration = seconds(e).map_err(|r| entry("end_time", r))?
            - seconds(s).map_err(|r| entry("start_time", r))?;
        if duration <= 0.0 {
            read.drop("duration is not positive");
            continue;
        }
        read.keep(Job {
            arrival_s: seconds(&j.submitted_time).map_err(|r| entry("submitted_time", r))?,
            duration_s: duration,
            cpu: 0.0,
            mem_gib: 0.0,
            gpu: last.detail.iter().map(|d| d.gpus.len()).sum::<usize>() as f64,
            gpu_type: None,
            class: None,
            pace: Default::default(),
            user: j
                .user
                .as_deref()
                .map(identity_field)
                .filter(|u| !u.is_empty()),
            job: None,
        });
    }
    Ok(read)
}
