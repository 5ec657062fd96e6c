//! The CLI side of the agent's subcommands (`tasks`, `show`, `node`, ...): one HTTP request to
//! the local agent's API, and the tables its answers are printed as.

use anyhow::Context;
use tapfinger::TaskId;

/// One request to the agent's API for the CLI subcommands (HTTP/1.1 over TCP, no TLS: the API
/// listens on loopback or behind a token), with hyper's client: any framing the server chooses
/// (length or chunked) is read. Returns the status code and the body.
pub async fn http(
    api: &str,
    method: &str,
    path: &str,
    body: Option<String>,
    token: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    use http_body_util::{BodyExt, Full};
    let stream = tokio::net::TcpStream::connect(api).await.with_context(|| {
        format!("cannot reach the agent's API at {api} (is `tapfinger-agent run` running?)")
    })?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .context("HTTP handshake with the agent's API")?;
    let conn = tokio::spawn(conn);
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, api)
        .header(hyper::header::CONTENT_TYPE, "application/json");
    if let Some(t) = token {
        req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .body(Full::new(hyper::body::Bytes::from(
            body.unwrap_or_default(),
        )))
        .context("building the request")?;
    let resp = sender
        .send_request(req)
        .await
        .context("the agent's API did not answer")?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .context("reading the agent's answer")?
        .to_bytes();
    conn.abort();
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// User text (a task's name, class, a box's name) as a terminal may show it: control
/// characters (an escape sequence, a newline that would start a fake row) are written as
/// escapes (`\u{1b}`, `\n`), never sent to the terminal.
pub fn shown(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The task a command line names: an id (digits, known to the agent), else the one task of that
/// name. A name several tasks share is an error listing their ids; so is one no task has.
pub async fn resolve(api: &str, token: Option<&str>, arg: &str) -> anyhow::Result<TaskId> {
    if let Ok(id) = arg.parse::<u64>() {
        let (code, _) = http(api, "GET", &format!("/v1/tasks/{id}"), None, token).await?;
        if code == 200 {
            return Ok(TaskId(id));
        }
    }
    let query = serde_urlencoded::to_string([("name", arg)])?;
    let (code, body) = http(api, "GET", &format!("/v1/tasks?{query}"), None, token).await?;
    anyhow::ensure!(code == 200, "HTTP {code}: {body}");
    let page: crate::api::TaskPage = serde_json::from_str(&body)?;
    match &page.tasks[..] {
        [one] => Ok(TaskId(one.id)),
        [] => anyhow::bail!("no task has the id or name {arg:?}"),
        many => {
            let ids: Vec<String> = many.iter().map(|t| t.id.to_string()).collect();
            anyhow::bail!(
                "{} tasks are named {arg:?}: {}{}; give an id",
                page.total,
                ids.join(", "),
                if page.total > many.len() { ", ..." } else { "" }
            )
        }
    }
}

/// The exit code of `logs --follow` when the task failed or was cancelled (0: it succeeded; 1:
/// any error of the command itself; 2: a usage error).
pub const EXIT_TASK_FAILED: i32 = 4;

/// Follow task `id`'s logs: write what it writes (its stdout to `out`, its stderr to `err`) as it
/// comes, asking every `every`, until it has ended and all it wrote is written; its last status.
/// Only the agent that runs a task has its logs: following one that ran elsewhere is an error
/// naming that box.
pub async fn follow_logs(
    api: &str,
    token: Option<&str>,
    id: TaskId,
    every: std::time::Duration,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> anyhow::Result<crate::api::TaskStatus> {
    use crate::api::{TaskInfo, TaskLogs, TaskStatus};
    let (mut from_out, mut from_err): (Option<u64>, Option<u64>) = (None, None);
    loop {
        // The state before the logs: what a task wrote before it ended is read after its end
        // is seen, so nothing is left unprinted.
        let (code, body) = http(api, "GET", &format!("/v1/tasks/{}", id.0), None, token).await?;
        anyhow::ensure!(code == 200, "HTTP {code}: {body}");
        let info: TaskInfo = serde_json::from_str(&body)?;
        let ended = matches!(
            info.status,
            TaskStatus::Succeeded(_) | TaskStatus::Failed(_) | TaskStatus::Cancelled(_)
        );
        let mut q: Vec<(&str, u64)> = Vec::new();
        q.extend(from_out.map(|o| ("stdout_from", o)));
        q.extend(from_err.map(|e| ("stderr_from", e)));
        let path = format!(
            "/v1/tasks/{}/logs?{}",
            id.0,
            serde_urlencoded::to_string(&q)?
        );
        let (code, body) = http(api, "GET", &path, None, token).await?;
        match code {
            200 => {
                let l: TaskLogs = serde_json::from_str(&body)?;
                out.write_all(l.stdout.as_bytes())?;
                err.write_all(l.stderr.as_bytes())?;
                out.flush()?;
                err.flush()?;
                from_out = Some(l.stdout_size);
                from_err = Some(l.stderr_size);
            }
            // Not started yet, or not here.
            404 if !ended => {}
            // The agent asked the box that ran it (info.box_name) and says why there are none.
            404 if from_out.is_none() => anyhow::bail!(
                "no logs of task {} (it ran on {}): {}",
                id.0,
                info.box_name.as_deref().unwrap_or("another box"),
                serde_json::from_str::<crate::api::ErrorBody>(&body)
                    .map_or(body.clone(), |e| e.error)
            ),
            _ => anyhow::bail!("HTTP {code}: {body}"),
        }
        if ended {
            return Ok(info.status);
        }
        tokio::time::sleep(every).await;
    }
}

/// `GET /v1/tasks/{id}` as `key value` lines for people (`tapfinger-agent show`); None if the
/// body is not a [`crate::api::TaskInfo`].
pub fn task_lines(body: &serde_json::Value) -> Option<String> {
    use crate::api::{TaskInfo, TaskStatus};
    let t: TaskInfo = serde_json::from_value(body.clone()).ok()?;
    let mut rows: Vec<(&str, String)> = vec![
        ("id", t.id.to_string()),
        ("name", shown(&t.name)),
        (
            "class",
            if t.class.is_empty() {
                "-".into()
            } else {
                shown(&t.class)
            },
        ),
        ("priority", t.priority.to_string()),
    ];
    if let Some(a) = t.age_s {
        rows.push(("submitted", format!("{} ago", human_duration(a))));
    }
    if let Some(r) = t.running_s {
        rows.push(("running for", human_duration(r)));
    }
    // Estimates, marked as such: queue order at minimum demand (docs/AGENT.md).
    if let Some(s) = t.expected_start_s {
        rows.push(("expected start", format!("in ~{}", human_duration(s))));
    }
    if let Some(f) = t.expected_finish_s {
        rows.push(("expected finish", format!("in ~{}", human_duration(f))));
    }
    let at = shown(&t.box_name.clone().unwrap_or_default());
    let ended = |what: &str, e: &crate::api::Ended| {
        let code = e
            .exit_code
            .map_or("no exit code".into(), |c| format!("exit code {c}"));
        format!(
            "{what} on {} ({code})",
            if at.is_empty() {
                e.node.to_string()
            } else {
                at.clone()
            }
        )
    };
    let units = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    match &t.status {
        TaskStatus::Pending => rows.push(("state", "pending".into())),
        TaskStatus::Running {
            node,
            alloc,
            progress,
        } => {
            let on = if at.is_empty() {
                node.to_string()
            } else {
                at.clone()
            };
            rows.push(("state", format!("running on {on}")));
            rows.push(("share c,g,m", units(alloc)));
            rows.push(("progress", format!("{:.0}%", progress * 100.0)));
        }
        TaskStatus::Gang { members, progress } => {
            rows.push(("state", format!("running as a gang of {}", members.len())));
            rows.push(("progress", format!("{:.0}%", progress * 100.0)));
        }
        TaskStatus::Succeeded(e) => rows.push(("state", ended("succeeded", e))),
        TaskStatus::Failed(e) => rows.push(("state", ended("failed", e))),
        TaskStatus::Cancelled(e) => rows.push(("state", ended("cancelled", e))),
    }
    if let Some(g) = &t.gpu_use {
        let devices: Vec<String> = g.devices.iter().map(u32::to_string).collect();
        rows.push((
            "gpu use",
            format!(
                "{}% SM, {} on GPU {}",
                g.sm_percent,
                human_bytes(g.memory_bytes),
                devices.join(",")
            ),
        ));
    }
    if !t.metrics.is_empty() {
        let m: Vec<String> = t.metrics.iter().map(|(k, v)| format!("{k}={v}")).collect();
        rows.push(("metrics", m.join(" ")));
    }
    if t.converging {
        rows.push(("converging", "yes (its loss has plateaued)".into()));
    }
    if t.preempted > 0 {
        rows.push((
            "preempted",
            format!(
                "{} time(s), {:.0}% of a run lost",
                t.preempted,
                t.work_lost * 100.0
            ),
        ));
    }
    Some(
        rows.iter()
            .map(|(k, v)| format!("{k:<12} {v}"))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// `GET /v1/tasks/{id}/logs` as people read it: its standard output, then its standard error
/// under a `--- stderr ---` line (where it wrote any); None if the body is not a
/// [`crate::api::TaskLogs`].
pub fn logs_text(body: &serde_json::Value) -> Option<String> {
    let l: crate::api::TaskLogs = serde_json::from_value(body.clone()).ok()?;
    let mut text = l.stdout.trim_end_matches('\n').to_string();
    if !l.stderr.is_empty() {
        text.push_str("\n--- stderr ---\n");
        text.push_str(l.stderr.trim_end_matches('\n'));
    }
    Some(text)
}

/// Seconds for people: `42s`, `3m12s`, `2h05m`, `3d04h`.
pub fn human_duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// Bytes for people: B, KiB, MiB, GiB.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `GET /v1/tasks` as a table for people (`tapfinger-agent tasks`); None if the body is not a
/// [`crate::api::TaskPage`], in which case the CLI prints the JSON as is.
pub fn tasks_table(body: &serde_json::Value) -> Option<String> {
    use crate::api::{TaskPage, TaskStatus};
    let page: TaskPage = serde_json::from_value(body.clone()).ok()?;
    let mut out = format!(
        "{:<22} {:<16} {:<12} {:<10} {:<12} {:<14} {:>8} {:>8} {:>9} {:>9}\n",
        "ID",
        "NAME",
        "CLASS",
        "STATE",
        "BOX",
        "ALLOC c,g,m",
        "PROGRESS",
        "AGE",
        "STARTS IN",
        "ENDS IN"
    );
    for t in &page.tasks {
        let (state, node, alloc, progress) = match &t.status {
            TaskStatus::Pending => ("pending", None, String::new(), String::new()),
            TaskStatus::Running {
                node,
                alloc,
                progress,
            } => (
                "running",
                Some(*node),
                alloc
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                format!("{:.0}%", progress * 100.0),
            ),
            TaskStatus::Gang { members, progress } => (
                "gang",
                members.first().map(|(n, _)| *n),
                format!("{} members", members.len()),
                format!("{:.0}%", progress * 100.0),
            ),
            TaskStatus::Succeeded(e) => ("succeeded", Some(e.node), String::new(), String::new()),
            TaskStatus::Failed(e) => ("failed", Some(e.node), String::new(), String::new()),
            TaskStatus::Cancelled(e) => ("cancelled", Some(e.node), String::new(), String::new()),
        };
        // The box's name where the agent knows it, else its id.
        let at = shown(
            &t.box_name
                .clone()
                .or_else(|| node.map(|n| n.to_string()))
                .unwrap_or_default(),
        );
        out.push_str(&format!(
            "{:<22} {:<16} {:<12} {:<10} {:<12} {:<14} {:>8} {:>8} {:>9} {:>9}\n",
            t.id,
            shown(&t.name),
            if t.class.is_empty() {
                "-".into()
            } else {
                shown(&t.class)
            },
            state,
            at,
            alloc,
            progress,
            t.age_s.map(human_duration).unwrap_or_default(),
            t.expected_start_s
                .map(|s| format!("~{}", human_duration(s)))
                .unwrap_or_default(),
            t.expected_finish_s
                .map(|s| format!("~{}", human_duration(s)))
                .unwrap_or_default(),
        ));
    }
    out.push_str(&format!("{} task(s)", page.tasks.len()));
    if let Some(next) = page.next_offset {
        out.push_str(&format!(" of {}; more with --offset {next}", page.total));
    }
    Some(out)
}

/// `GET /v1/peers` as a table for people (`tapfinger-agent peers`); None if the body is not a
/// [`crate::api::Peers`].
pub fn peers_table(body: &serde_json::Value) -> Option<String> {
    let page: crate::api::Peers = serde_json::from_value(body.clone()).ok()?;
    let units = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let mut out = format!(
        "{:<11} {:<20} {:<14} {:<14}\n",
        "NODE", "NAME", "CAPACITY c,g,m", "FREE c,g,m"
    );
    for p in &page.peers {
        out.push_str(&format!(
            "{:<11} {:<20} {:<14} {:<14}\n",
            p.id,
            shown(&p.name),
            units(&p.capacity),
            units(&p.free)
        ));
    }
    out.push_str(&format!("{} peer(s)", page.peers.len()));
    Some(out)
}

/// `GET /v1/classes` as an aligned table (`tapfinger-agent classes`); None if the body is not
/// a [`crate::api::Classes`]. A class the estimator has no sample of shows the prior's figures,
/// marked `prior`.
pub fn classes_table(body: &serde_json::Value) -> Option<String> {
    let page: crate::api::Classes = serde_json::from_value(body.clone()).ok()?;
    let mut out = format!(
        "{:<20} {:<14} {:>7} {:<12} {:>9} {:>9} {:>7} {:>7}\n",
        "CLASS", "GPU MODEL", "SAMPLES", "MIN c,g,m", "T@MIN", "T@2xMIN", "SWITCH", "START"
    );
    for c in &page.classes {
        let name = if c.name.is_empty() {
            "(unnamed)".into()
        } else {
            shown(&c.name)
        };
        let e = &c.estimate;
        let min = e.min.map(|m| format!("{m}")).join(",");
        let prior = if e.fitted { "" } else { " prior" };
        // A class is learned per GPU model its tasks ran on: a row per model.
        let model = if c.gpu_model.is_empty() {
            "-"
        } else {
            &c.gpu_model
        };
        out.push_str(&format!(
            "{:<20} {:<14} {:>7} {:<12} {:>9.2} {:>9.2} {:>7.2} {:>7.2}{prior}\n",
            name,
            model,
            e.samples,
            min,
            e.slots_at_min,
            e.slots_at_double,
            e.switch_cost,
            e.start_cost
        ));
    }
    out.push_str(&format!(
        "{} row(s); T: estimated slots alone; SWITCH, START: fraction of a slot lost",
        page.classes.len()
    ));
    Some(out)
}

/// The last `n` lines a task's last attempt wrote that say something (no progress lines): its
/// standard error's, else its output's (`show` of a failed task); "(it wrote nothing)" where
/// both are empty.
pub fn last_lines(logs: &crate::api::TaskLogs, n: usize) -> String {
    let said = |s: &str| -> Vec<String> {
        let last = s.rfind(crate::logs::ATTEMPT_MARK).map_or(s, |i| &s[i..]);
        last.lines()
            .filter(|l| {
                !l.trim().is_empty()
                    && !l.starts_with("TAPFINGER ")
                    && !l.starts_with(crate::logs::ATTEMPT_MARK)
            })
            .map(str::to_string)
            .collect()
    };
    let mut lines = said(&logs.stderr);
    if lines.is_empty() {
        lines = said(&logs.stdout);
    }
    if lines.is_empty() {
        return "(it wrote nothing)".into();
    }
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The id of a task the API accepted (`POST /v1/tasks`'s answer), as `submit` prints it.
pub fn submitted_id(body: &serde_json::Value) -> Option<String> {
    body["id"].as_u64().map(|id| id.to_string())
}

/// Of a node's addresses (`/ip4/…/p2p/<peer id>`), the one to join it by: the first off
/// loopback (another box cannot reach a loopback address), else the first.
pub fn join_address(addresses: &[String]) -> Option<&str> {
    let loopback = |a: &str| a.starts_with("/ip4/127.") || a.starts_with("/ip6/::1/");
    addresses
        .iter()
        .find(|a| !loopback(a))
        .or_else(|| addresses.first())
        .map(String::as_str)
}

/// `GET /v1/node` as aligned `key  value` lines (`tapfinger-agent node`); None if the body is not
/// a [`crate::api::NodeInfo`].
pub fn node_lines(body: &serde_json::Value) -> Option<String> {
    let n: crate::api::NodeInfo = serde_json::from_value(body.clone()).ok()?;
    let units = |v: &Option<Vec<u32>>| {
        v.as_ref().map_or("-".to_string(), |v| {
            v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        })
    };
    let mut text = format!(
        "{:<18} {}\n{:<18} {}\n{:<18} {}\n{:<18} {}\n{:<18} {}\n{:<18} {}",
        "name",
        shown(&n.name),
        "id",
        n.id.map_or("-".to_string(), |i| i.to_string()),
        "capacity",
        units(&n.capacity),
        "used",
        units(&n.used),
        "peers",
        n.peers,
        "dropped_messages",
        n.dropped_messages
    );
    for a in &n.addresses {
        text.push_str(&format!("\n{:<18} {a}", "address"));
    }
    if let Some(model) = n.labels.get(tapfinger::estimate::GPU_MODEL_LABEL) {
        text.push_str(&format!("\n{:<18} {model}", "gpu_model"));
    }
    if !n.policy.is_empty() {
        text.push_str(&format!("\n{:<18} {}", "policy", n.policy));
    }
    let others: Vec<String> = n
        .labels
        .iter()
        .filter(|(k, _)| k.as_str() != tapfinger::estimate::GPU_MODEL_LABEL)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !others.is_empty() {
        text.push_str(&format!("\n{:<18} {}", "labels", others.join(" ")));
    }
    if let Some(sec) = &n.security {
        let network = if sec.open_cluster {
            "OPEN CLUSTER (no cluster key: any host that reaches it can run commands here)"
                .to_string()
        } else if sec.cluster_key {
            match sec.allowlist {
                0 => "cluster key".to_string(),
                n => format!("cluster key, {n} peer(s) allowed"),
            }
        } else {
            "loopback only".to_string()
        };
        text.push_str(&format!(
            "\n{:<18} {network}\n{:<18} {}\n{:<18} {}",
            "network",
            "api_token",
            if sec.api_token {
                "required"
            } else {
                "none (loopback)"
            },
            "gpu_isolation",
            sec.gpu_isolation
        ));
        if !sec.gpu_sharing.is_empty() {
            text.push_str(&format!("\n{:<18} {}", "gpu_sharing", sec.gpu_sharing));
        }
    }
    if let Some(h) = &n.storage {
        let free = h
            .free_bytes
            .map(|f| format!(", {} free", human_bytes(f)))
            .unwrap_or_default();
        let state = match &h.failing {
            Some(why) if h.full => format!(
                "STORAGE FULL in {} ({why}{free}): new tasks are refused, {} record(s) wait in memory",
                h.data_dir.display(),
                h.backlog
            ),
            Some(why) => format!(
                "FAILING in {} ({why}{free}): new tasks are refused, {} record(s) wait in memory",
                h.data_dir.display(),
                h.backlog
            ),
            None => format!("ok ({}{free})", h.data_dir.display()),
        };
        text.push_str(&format!("\n{:<18} {state}", "storage"));
    }
    if let Some(e) = &n.start_estimates {
        text.push_str(&format!(
            "\n{:<18} off by {} (median), {} (p90) over the latest {} task(s) started",
            "start_estimates",
            human_duration(e.median_abs_error_s),
            human_duration(e.p90_abs_error_s),
            e.tasks
        ));
    }
    Some(text)
}

#[cfg(test)]
mod table_tests {
    /// A name with a terminal escape and a newline is shown escaped: it neither clears the
    /// screen nor adds a row of its own.
    #[test]
    fn user_text_reaches_the_terminal_escaped() {
        let evil = "job\u{1b}[2J\nfake 1 succeeded";
        let v = serde_json::json!({"tasks": [{
            "id": 7, "name": evil, "class": "etl\u{7}", "box": "box\r2", "priority": 0,
            "state": "pending"
        }], "total": 1, "next_offset": null});
        let t = super::tasks_table(&v).unwrap();
        assert!(!t.chars().any(|c| c.is_control() && c != '\n'), "{t:?}");
        assert_eq!(t.lines().count(), 3, "{t}");
        assert!(t.contains("job\\u{1b}[2J\\nfake"), "{t}");
        let v = serde_json::json!({"id": 7, "name": evil, "class": "", "priority": 0, "state": "pending"});
        let t = super::task_lines(&v).unwrap();
        assert!(!t.contains('\u{1b}'), "{t:?}");
    }

    /// A task for people: its names, where it runs, its share, its GPU use in human sizes;
    /// logs as text with standard error after a marker line.
    #[test]
    fn a_task_and_its_logs_read_as_text() {
        let v = serde_json::json!({
            "id": 7, "name": "job3", "class": "etl", "box": "box-2", "priority": 0,
            "state": "running", "node": 5, "alloc": [2, 1, 4], "progress": 0.42,
            "gpu_use": {"sm_percent": 23, "memory_bytes": 3221225472u64, "devices": [0]},
            "metrics": {"loss": 1.5}
        });
        let t = super::task_lines(&v).unwrap();
        for want in [
            "job3",
            "etl",
            "running on box-2",
            "2,1,4",
            "42%",
            "23% SM, 3.0 GiB on GPU 0",
            "loss=1.5",
        ] {
            assert!(t.contains(want), "{want}: {t}");
        }
        let l = super::logs_text(&serde_json::json!({
            "id": 7, "stdout": "a\nb\n", "stderr": "oops\n"
        }))
        .unwrap();
        assert_eq!(l, "a\nb\n--- stderr ---\noops");
        assert_eq!(super::human_bytes(512), "512 B");
        assert_eq!(super::human_bytes(3 << 20), "3.0 MiB");
        assert_eq!(super::human_duration(42.0), "42s");
        assert_eq!(super::human_duration(192.0), "3m12s");
        assert_eq!(super::human_duration(7500.0), "2h05m");
        assert_eq!(super::human_duration(273_600.0), "3d04h");
    }

    #[test]
    fn classes_render_as_a_table() {
        let v = serde_json::json!({"classes": [
            {"name": "bert-finetune", "class": 1030, "gpu_model": 7, "gpu_model_name": "NVIDIA H200",
             "samples": 12, "hints": 0,
             "min": [2.0, 1.0, 1.0], "fitted": true, "slots_at_min": 12.0,
             "slots_at_double": 9.0, "switch_cost": 0.25, "start_cost": 0.5},
            {"name": "", "class": 0, "samples": 0, "hints": 0, "min": [1.0, 0.0, 1.0],
             "fitted": false, "slots_at_min": 10.0, "slots_at_double": 8.5,
             "switch_cost": 0.0, "start_cost": 0.0}
        ]});
        let t = super::classes_table(&v).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[0].starts_with("CLASS"));
        assert!(lines[1].starts_with("bert-finetune") && lines[1].contains("2,1,1"));
        assert!(
            lines[1].contains("NVIDIA H200") && lines[2].contains(" - "),
            "{t}"
        );
        assert!(
            lines[1].contains("12.00") && lines[1].contains("0.25") && lines[1].contains("0.50")
        );
        assert!(lines[2].starts_with("(unnamed)") && lines[2].ends_with("prior"));
        assert!(lines[3].starts_with("2 row(s)"));
        assert!(super::classes_table(&serde_json::json!({"peers": []})).is_none());
    }

    #[test]
    fn tasks_render_as_a_table() {
        let v = serde_json::json!({"tasks": [
            {"id": 7, "state": "running", "node": 3, "alloc": [2, 0, 2], "progress": 0.25},
            {"id": 8, "state": "pending", "expected_start_s": 90.0, "expected_finish_s": 7260.0}
        ], "total": 2, "next_offset": null});
        let t = super::tasks_table(&v).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("ID"));
        assert!(
            lines[1].contains("running") && lines[1].contains("2,0,2") && lines[1].contains("25%")
        );
        assert!(lines[2].starts_with("8 ") && lines[2].contains("pending"));
        assert!(lines[0].ends_with("STARTS IN   ENDS IN"), "{t}");
        assert!(lines[2].ends_with("~1m30s    ~2h01m"), "{t}");
        assert_eq!(lines[3], "2 task(s)");
        assert!(super::tasks_table(&serde_json::json!({"x": 1})).is_none());
        let p = serde_json::json!({"peers": [{"id": 5, "name": "box-b", "capacity": [4, 1, 8], "free": [2, 1, 6]}]});
        let t = super::peers_table(&p).unwrap();
        assert!(
            t.contains("box-b") && t.contains("4,1,8") && t.contains("2,1,6"),
            "{t}"
        );
        assert!(t.ends_with("1 peer(s)"));
        let n = super::node_lines(&serde_json::json!({
            "id": 3, "name": "box-3", "capacity": [4, 1, 8], "used": null, "peers": 2,
            "dropped_messages": 0
        }))
        .unwrap();
        assert_eq!(n.lines().count(), 6);
        assert!(n.contains("4,1,8") && n.contains("peers"), "{n}");
        assert!(n.contains("name               box-3"), "{n}");
        // The box's GPU model on a line of its own; its other labels after.
        let n = super::node_lines(&serde_json::json!({
            "id": 3, "capacity": [4, 1, 8], "used": null, "peers": 2, "dropped_messages": 0,
            "labels": {"gpu_model": "NVIDIA H200", "site": "plant-3"}
        }))
        .unwrap();
        assert_eq!(n.lines().count(), 8, "{n}");
        assert!(n.contains("gpu_model          NVIDIA H200"), "{n}");
        assert!(n.contains("labels             site=plant-3"), "{n}");
    }
}

#[cfg(test)]
mod client_tests {
    use super::http;

    /// The CLI's client reads a chunked answer (a streamed body has no Content-Length).
    #[tokio::test]
    async fn the_client_reads_chunked_responses() {
        let chunks = futures::stream::iter(
            ["{\"a\":", "1,", "\"b\":2}"]
                .map(|c| Ok::<_, std::io::Error>(axum::body::Bytes::from_static(c.as_bytes()))),
        );
        let body = std::sync::Arc::new(std::sync::Mutex::new(Some(axum::body::Body::from_stream(
            chunks,
        ))));
        let app = axum::Router::new().route(
            "/x",
            axum::routing::get(move || {
                let b = body
                    .lock()
                    .ok()
                    .and_then(|mut b| b.take())
                    .unwrap_or_default();
                async move { b }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move { axum::serve(l, app).await });
        let (code, text) = http(&addr, "GET", "/x", None, None).await.unwrap();
        assert_eq!((code, text.as_str()), (200, "{\"a\":1,\"b\":2}"));
    }
}

/// A duration in whole seconds: a number of seconds, or one with a unit `s`, `m`, `h` or `d`
/// (`90`, `30m`, `6h`, `2d`).
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (n, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: expected a whole number with s, m, h or d (e.g. 6h)"))?;
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        u => return Err(format!("{s:?}: unknown unit {u:?} (s, m, h or d)")),
    };
    n.checked_mul(per).ok_or_else(|| format!("{s:?}: too long"))
}
