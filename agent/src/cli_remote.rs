//! The binary's commands that talk to a running agent's HTTP API (`tasks`, `show`, `cancel`,
//! `logs`, `node`, `peers`, `classes`, `policy`, `workload export`): how a request is made and
//! how its answer is printed. A module of the `tapfinger-agent` binary, not of the library;
//! the requests and the renderings themselves are the library's (`tapfinger_agent::client`).

use crate::Cmd;
use std::io::Write as _;

#[derive(clap::Args)]
pub(crate) struct Client {
    /// The agent's API address.
    #[arg(long, default_value = "127.0.0.1:7601")]
    pub(crate) api: String,
    /// Bearer token file (when the API requires one).
    #[arg(long)]
    pub(crate) token_file: Option<std::path::PathBuf>,
    /// Print the API's JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The task commands of the CLI: `tasks`, `show`, `cancel`, `logs`.
pub(crate) fn task_command(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Tasks {
            offset,
            limit,
            state,
            name,
            class,
            box_name,
            watch,
            client,
        } => {
            let mut q: Vec<(&str, String)> = vec![("offset", offset.to_string())];
            q.extend(limit.map(|l| ("limit", l.to_string())));
            q.extend(state.map(|v| ("state", v)));
            q.extend(name.map(|v| ("name", v)));
            q.extend(class.map(|v| ("class", v)));
            q.extend(box_name.map(|v| ("box", v)));
            serde_urlencoded::to_string(&q)
                .map_err(anyhow::Error::from)
                .and_then(|q| {
                    let path = format!("/v1/tasks?{q}");
                    if !watch {
                        return call(&client, "GET", &path, None);
                    }
                    loop {
                        // Home and clear, then the listing: redrawn in place.
                        print!("\x1b[H\x1b[2J");
                        call(&client, "GET", &path, None)?;
                        std::thread::sleep(std::time::Duration::from_secs(2));
                    }
                })
        }
        Cmd::Show { id, client } => task_arg(&client, &id).and_then(|id| {
            call(&client, "GET", &format!("/v1/tasks/{id}"), None)?;
            if !client.json {
                why_it_failed(&client, id)?;
            }
            Ok(())
        }),
        Cmd::Cancel { id, client } => task_arg(&client, &id)
            .and_then(|id| call(&client, "DELETE", &format!("/v1/tasks/{id}"), None)),
        Cmd::Logs {
            id,
            follow: false,
            client,
        } => task_arg(&client, &id)
            .and_then(|id| call(&client, "GET", &format!("/v1/tasks/{id}/logs"), None)),
        Cmd::Logs {
            id,
            follow: true,
            client,
        } => task_arg(&client, &id).and_then(|id| follow(&client, id)),
        // `main` hands this function the task commands only.
        _ => anyhow::bail!("not a task command"),
    }
}

impl Client {
    /// What a request needs: a runtime for its one connection, and the token if one is given.
    pub(crate) fn session(&self) -> anyhow::Result<(tokio::runtime::Runtime, Option<String>)> {
        let token = match &self.token_file {
            Some(p) => Some(tapfinger_net::secret::read_token(p)?),
            None => None,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok((rt, token))
    }
}

/// The body of `GET path` from the agent, or an error naming the API and its answer.
fn get_ok(client: &Client, path: &str) -> anyhow::Result<String> {
    let (rt, token) = client.session()?;
    let (status, body) = rt.block_on(tapfinger_agent::client::http(
        &client.api,
        "GET",
        path,
        None,
        token.as_deref(),
    ))?;
    if !(200..300).contains(&status) {
        anyhow::bail!("{}: HTTP {status}: {}", client.api, body.trim());
    }
    Ok(body)
}

/// `node --address`: the one address another box's `--bootstrap` takes, as the agent gives it
/// (its first off loopback, else its first: a box elsewhere cannot reach a loopback address).
pub(crate) fn join_address(client: &Client) -> anyhow::Result<()> {
    let node: tapfinger_agent::api::NodeInfo = serde_json::from_str(&get_ok(client, "/v1/node")?)?;
    match tapfinger_agent::client::join_address(&node.addresses) {
        Some(a) => {
            println!("{a}");
            Ok(())
        }
        None => anyhow::bail!(
            "{}: the agent listens on no address yet (its network has not started)",
            client.api
        ),
    }
}

/// Under `show` of a failed task, why: the last lines it wrote (its standard error's, else its
/// output's), where the start failed the agent's own line among them, so that the reason is
/// where the user looks first, not only in `logs`.
fn why_it_failed(client: &Client, id: u64) -> anyhow::Result<()> {
    let (rt, token) = client.session()?;
    let get = |path: String| {
        rt.block_on(tapfinger_agent::client::http(
            &client.api,
            "GET",
            &path,
            None,
            token.as_deref(),
        ))
    };
    let (status, body) = get(format!("/v1/tasks/{id}"))?;
    let failed = (200..300).contains(&status)
        && serde_json::from_str::<tapfinger_agent::api::TaskInfo>(&body)
            .is_ok_and(|t| matches!(t.status, tapfinger_agent::api::TaskStatus::Failed(_)));
    if !failed {
        return Ok(());
    }
    let (status, body) = get(format!("/v1/tasks/{id}/logs"))?;
    let logs = serde_json::from_str::<tapfinger_agent::api::TaskLogs>(&body).ok();
    let text = match logs {
        Some(l) if (200..300).contains(&status) => tapfinger_agent::client::last_lines(&l, 5),
        // The logs are on a box that does not answer: say so rather than nothing.
        _ => format!("(its logs could not be read: HTTP {status})"),
    };
    println!(
        "{:<12} {}",
        "why",
        text.replace('\n', &format!("\n{:<12} ", ""))
    );
    Ok(())
}

/// `logs --follow`: the task's output as it comes; exits 4 when it failed or was cancelled.
fn follow(client: &Client, id: u64) -> anyhow::Result<()> {
    let (rt, token) = client.session()?;
    let status = rt.block_on(tapfinger_agent::client::follow_logs(
        &client.api,
        token.as_deref(),
        tapfinger::TaskId(id),
        std::time::Duration::from_secs(1),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    ))?;
    if !matches!(status, tapfinger_agent::api::TaskStatus::Succeeded(_)) {
        eprintln!("task {id} ended: {}", serde_json::to_string(&status)?);
        std::process::exit(tapfinger_agent::client::EXIT_TASK_FAILED);
    }
    Ok(())
}

/// The task id a command line names (an id, or a name exactly one task has).
fn task_arg(client: &Client, arg: &str) -> anyhow::Result<u64> {
    let (rt, token) = client.session()?;
    let id = rt.block_on(tapfinger_agent::client::resolve(
        &client.api,
        token.as_deref(),
        arg,
    ))?;
    Ok(id.0)
}

/// `workload export`: the agent's observed workload, to a file or stdout.
pub(crate) fn workload(
    action: &str,
    since_s: u64,
    out: Option<&std::path::Path>,
    client: &Client,
) -> anyhow::Result<()> {
    if action != "export" {
        anyhow::bail!("unknown action {action:?}: `workload export`");
    }
    let body = get_ok(client, &format!("/v1/workload?since_s={since_s}"))?;
    match out {
        Some(p) => {
            std::fs::write(p, &body)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", p.display()))?;
            let n = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["tasks"].as_array().map(Vec::len))
                .unwrap_or(0);
            eprintln!("wrote {n} tasks to {}", p.display());
        }
        None => println!("{body}"),
    }
    Ok(())
}

pub(crate) fn call(
    client: &Client,
    method: &str,
    path: &str,
    body: Option<String>,
) -> anyhow::Result<()> {
    let (rt, token) = client.session()?;
    let (status, body) = rt.block_on(tapfinger_agent::client::http(
        &client.api,
        method,
        path,
        body,
        token.as_deref(),
    ))?;
    let pretty = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or(body);
    if (200..300).contains(&status) {
        let render: Option<fn(&serde_json::Value) -> Option<String>> = match path {
            _ if client.json => None,
            // `submit`: the new task's id alone, for scripts (`--json` for the answer).
            "/v1/tasks" if method == "POST" => Some(tapfinger_agent::client::submitted_id),
            _ if method != "GET" => None,
            p if p.starts_with("/v1/tasks?") || p == "/v1/tasks" => {
                Some(tapfinger_agent::client::tasks_table)
            }
            p if p.ends_with("/logs") => Some(tapfinger_agent::client::logs_text),
            p if p.starts_with("/v1/tasks/") => Some(tapfinger_agent::client::task_lines),
            "/v1/peers" => Some(tapfinger_agent::client::peers_table),
            "/v1/classes" => Some(tapfinger_agent::client::classes_table),
            "/v1/node" => Some(tapfinger_agent::client::node_lines),
            _ => None,
        };
        let table = render.and_then(|f| {
            serde_json::from_str(&pretty)
                .ok()
                .and_then(|v: serde_json::Value| f(&v))
        });
        // A reader that went away (`| head`) is not an error worth a panic.
        let mut out = std::io::stdout().lock();
        match writeln!(out, "{}", table.unwrap_or(pretty)) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
            _ => Ok(()),
        }
    } else {
        anyhow::bail!("HTTP {status}: {pretty}")
    }
}
