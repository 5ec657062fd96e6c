//! `tapfinger-agent`: the daemon for every edge box (`run`), and the CLI that talks to a running
//! daemon's local API (`submit`, `tasks`, `show`, `node`, `peers`). Thin: the work is in the
//! library (`tapfinger_agent::run` and the modules it assembles).

use tapfinger_agent::config::AgentConfig;
use tapfinger_agent::discovery;

use clap::{Parser, Subcommand};

mod cli_remote;
use cli_remote::{Client, call, task_command, workload};

#[derive(Parser)]
#[command(
    name = "tapfinger-agent",
    version,
    about = "tapfinger edge agent: negotiates tasks with its peers over libp2p and runs them with enforced shares"
)]
struct Cli {
    // The subcommand (a `//` comment: clap shows doc comments as help).
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the daemon until SIGINT/SIGTERM (running tasks are handed back on exit).
    Run {
        /// Path to agent.toml.
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// Overrides `name`.
        #[arg(long)]
        name: Option<String>,
        /// Overrides `listen` (repeatable).
        #[arg(long)]
        listen: Vec<libp2p::Multiaddr>,
        /// Overrides `bootstrap` (repeatable).
        #[arg(long)]
        bootstrap: Vec<libp2p::Multiaddr>,
        /// Overrides `api`.
        #[arg(long)]
        api: Option<String>,
        /// Overrides `data_dir`.
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
        /// Overrides `cluster_key_file`.
        #[arg(long)]
        cluster_key_file: Option<std::path::PathBuf>,
        /// Overrides `policy` (`tapfinger`, the default, or a baseline name).
        #[arg(long)]
        policy: Option<String>,
        /// Overrides `model` (a checkpoint directory from `tapfinger-sim train`).
        #[arg(long)]
        model: Option<std::path::PathBuf>,
        /// Any setting of agent.toml as KEY=VALUE (dotted keys, TOML values), e.g.
        /// `--set slot_ms=2000 --set reserve.cpu=1 --set labels.site=plant-3` (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Overrides `log_format`.
        #[arg(long, value_enum)]
        log_format: Option<tapfinger_agent::config::LogFormat>,
    },
    /// The demo workload: train a small MLP (burn, CPU) on generated data, printing
    /// `TAPFINGER progress=...` lines; its speed follows the CPU share it is given.
    #[cfg(feature = "dev")]
    Demo(tapfinger_agent::demo::DemoArgs),
    /// A small multi-process job that really rendezvouses: submit it as a gang (`[gang]` in
    /// the spec); its members exchange their ranks over TCP via MASTER_ADDR and MASTER_PORT.
    #[cfg(feature = "dev")]
    DemoGang(tapfinger_agent::demo_gang::DemoGangArgs),
    /// Run one task under supervision (started by the agent for every task; not for people).
    #[command(hide = true)]
    Supervise(tapfinger_agent::supervise::SuperviseArgs),
    /// Run a task's command so that it dies with its supervisor (started by the supervisor; not
    /// for people).
    #[command(hide = true)]
    Guard(tapfinger_agent::guard::GuardArgs),
    /// Run this box's members of a gang, one process per rank (started by the agent; not for
    /// people).
    #[command(hide = true)]
    GangLaunch {
        /// The members' command.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
    /// Submit a task spec (TOML) to a running agent.
    Submit {
        /// The task spec.
        file: std::path::PathBuf,
        #[command(flatten)]
        client: Client,
    },
    /// List the tasks a running agent knows.
    Tasks {
        /// Skip this many tasks (pages of the listing, by id).
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// At most this many tasks (the API's page size at most).
        #[arg(long)]
        limit: Option<usize>,
        /// Only tasks in this state: pending, running, gang, succeeded, failed, cancelled.
        #[arg(long)]
        state: Option<String>,
        /// Only tasks of this name.
        #[arg(long)]
        name: Option<String>,
        /// Only tasks of this class (the spec's `type`).
        #[arg(long)]
        class: Option<String>,
        /// Only tasks on (or that ran on) the box of this name.
        #[arg(long = "box")]
        box_name: Option<String>,
        /// Redraw the listing in place every 2 seconds, until interrupted.
        #[arg(long, short)]
        watch: bool,
        #[command(flatten)]
        client: Client,
    },
    /// Show one task.
    Show {
        /// Task id, or the name of exactly one task.
        id: String,
        #[command(flatten)]
        client: Client,
    },
    /// Cancel a task (it stops wherever it runs).
    Cancel {
        /// Task id, or the name of exactly one task.
        id: String,
        #[command(flatten)]
        client: Client,
    },
    /// Print a task's logs (from the agent that ran it).
    Logs {
        /// Task id, or the name of exactly one task.
        id: String,
        /// Keep printing what the task writes until it ends; then exit 0 if it succeeded, 4 if
        /// it failed or was cancelled.
        #[arg(long, short)]
        follow: bool,
        #[command(flatten)]
        client: Client,
    },
    /// Show the agent's node, with the addresses other boxes join it by (`--bootstrap`).
    Node {
        /// Print only the address another box's `--bootstrap` takes (its first address off
        /// loopback, else its first), for scripts.
        #[arg(long)]
        address: bool,
        #[command(flatten)]
        client: Client,
    },
    /// List the agent's live peers.
    Peers {
        #[command(flatten)]
        client: Client,
    },
    /// What the speed estimator holds of each task class: samples, estimated slots alone at the
    /// class's minimum and at twice it, and what a re-allocation and a start-up cost.
    Classes {
        #[command(flatten)]
        client: Client,
    },
    /// The policy version in use (`policy`), or go back to the previous one (`policy rollback`;
    /// the version rolled back from and older ones are refused from then on).
    Policy {
        /// `show` (default) or `rollback`.
        #[arg(default_value = "show")]
        action: String,
        #[command(flatten)]
        client: Client,
    },
    /// Check a configuration file and print what this box would offer the cluster.
    Check {
        /// Path to agent.toml (default: built-in defaults).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
    },
    /// Repair a task journal the agent refuses to open, accepting what is lost: keep a copy of
    /// it beside it, then keep every record that checks out (prints each record dropped with its
    /// task id and name, and the commits missing). Works on any bytes. Stop the agent first.
    RepairJournal {
        /// The journal (`<data_dir>/tasks.journal`).
        path: std::path::PathBuf,
    },
    /// Read a task journal: `dump` prints its records as JSON lines (commit number and record;
    /// records that do not check out are reported on stderr and skipped).
    Journal {
        /// `dump`.
        action: String,
        /// The journal (`<data_dir>/tasks.journal`).
        path: std::path::PathBuf,
    },
    /// The cluster's observed workload, for its twin: `export` writes the tasks that arrived in
    /// the last `--since` (their arrivals, classes, demands, runs and outcomes), every box heard
    /// of and the speed estimator's figures, as JSON that `tapfinger-sim import --format
    /// tapfinger` replays.
    Workload {
        /// `export`.
        action: String,
        /// How far back: seconds, or with a unit `s`, `m`, `h`, `d` (e.g. `6h`).
        #[arg(long, default_value = "6h", value_parser = tapfinger_agent::client::parse_duration)]
        since: u64,
        /// Write it here instead of stdout.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        #[command(flatten)]
        client: Client,
    },
    /// Make the cluster's secrets, each a new file of mode 0600 (an existing file is never
    /// overwritten): the swarm key every box of a cluster shares (`cluster_key_file`), and, with
    /// `--token`, a bearer token for the HTTP API (`api_token_file`). With no option: the swarm
    /// key at /etc/tapfinger/swarm.key.
    Keygen {
        /// Where to write a new swarm key.
        #[arg(long)]
        swarm_key: Option<std::path::PathBuf>,
        /// Where to write a new API token.
        #[arg(long)]
        token: Option<std::path::PathBuf>,
    },
    /// Print the CPU cores, memory and GPUs this box would offer.
    Discover {
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

fn load_config(path: Option<&std::path::Path>, set: &[String]) -> anyhow::Result<AgentConfig> {
    use anyhow::Context;
    match path {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            Ok(AgentConfig::from_toml_with(&text, set)
                .with_context(|| format!("{}", p.display()))?)
        }
        None if set.is_empty() => Ok(AgentConfig::default()),
        None => Ok(AgentConfig::from_toml_with("", set)?),
    }
}

fn keygen(
    swarm_key: Option<std::path::PathBuf>,
    token: Option<std::path::PathBuf>,
) -> anyhow::Result<()> {
    use tapfinger_net::secret;
    let swarm_key = match (&swarm_key, &token) {
        (None, None) => Some(std::path::PathBuf::from("/etc/tapfinger/swarm.key")),
        _ => swarm_key,
    };
    if let Some(p) = &swarm_key {
        secret::write_private(p, &secret::new_swarm_key()?)?;
        println!(
            "swarm key  {} (copy it to every box of the cluster; set cluster_key_file to it)",
            p.display()
        );
    }
    if let Some(p) = &token {
        secret::write_private(p, &secret::new_token()?)?;
        println!(
            "API token  {} (set api_token_file to it; clients pass --token-file)",
            p.display()
        );
    }
    Ok(())
}

/// Run one of the helper processes (gang launcher, guard, supervisor) on a single-threaded
/// runtime (the guard's parent-death signal is tied to the thread that started its child, so one
/// thread it is), and exit with its code.
fn exit_with(run: impl std::future::Future<Output = i32>) -> ! {
    let code = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(|rt| rt.block_on(run))
        .unwrap_or(1);
    std::process::exit(code)
}

fn check(path: Option<&std::path::Path>) -> anyhow::Result<()> {
    let cfg = load_config(path, &[])?;
    if let Some(warning) = cfg.open_cluster()? {
        println!("warning  {warning}");
    }
    let d = discovery::discover()?;
    let offer = cfg.offer(&d)?;
    println!("name     {}", cfg.name);
    println!("cluster  {}", cfg.cluster);
    // As `run` sets them: the GPU model from NVML unless configured.
    println!(
        "labels   {:?}",
        d.labels_with_gpu_model(&cfg.labels, offer.gpus)
    );
    println!(
        "offer    {} CPU(s), {} GPU(s), {:.1} GiB memory",
        offer.cpus,
        offer.gpus,
        offer.memory_bytes as f64 / f64::from(1u32 << 30)
    );
    tapfinger_agent::policy::build(&cfg.policy, cfg.model.as_deref(), 10)?;
    match &cfg.model {
        Some(m) => println!("policy   {} ({})", cfg.policy, m.display()),
        None => println!("policy   {}", cfg.policy),
    }
    if let Some(note) = &d.gpu_note {
        println!("note     {note}");
    }
    Ok(())
}

fn repair_journal(path: &std::path::Path) -> anyhow::Result<()> {
    // Not while an agent uses the journal.
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let _lock = tapfinger_agent::store::lock::lock(dir)?;
    let r = tapfinger_agent::store::compact::repair(path)?;
    println!("kept     {} records", r.kept);
    match &r.backup {
        Some(b) => println!("copy     {} (the journal as it was)", b.display()),
        None => println!("copy     none (there was no journal)"),
    }
    println!(
        "dropped  {} record(s) that do not check out",
        r.dropped.len()
    );
    for b in &r.dropped {
        // A task named in a dropped record may need to be submitted again.
        println!("  {}: {}", b.describe(), b.text);
    }
    for (a, b) in &r.missing {
        println!("missing  commits {a}..{b} (which tasks they held is not known here)");
    }
    if !r.outcomes_from_runs.is_empty() {
        println!(
            "outcomes {} task(s) that ran here and ended, from their exit records (not run again)",
            r.outcomes_from_runs.len()
        );
    }
    Ok(())
}

fn journal(action: &str, path: &std::path::Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        action == "dump",
        "journal: unknown action `{action}` (dump)"
    );
    let bytes = std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let d = tapfinger_agent::store::frame::dump(&bytes);
    let mut out = std::io::stdout().lock();
    for line in &d.lines {
        use std::io::Write;
        writeln!(out, "{line}")?;
    }
    for b in &d.bad {
        eprintln!("{}: does not check out: {}", b.describe(), b.text);
    }
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Check { config } => check(config.as_deref()),
        Cmd::RepairJournal { path } => repair_journal(&path),
        Cmd::Journal { action, path } => journal(&action, &path),
        Cmd::Keygen { swarm_key, token } => keygen(swarm_key, token),
        #[cfg(feature = "dev")]
        Cmd::Demo(args) => tapfinger_agent::demo::run(&args, &mut std::io::stdout()).map(|_| ()),
        #[cfg(feature = "dev")]
        Cmd::DemoGang(args) => std::process::exit(tapfinger_agent::demo_gang::run(&args)),
        Cmd::GangLaunch { command } => {
            exit_with(async move { tapfinger_agent::gang_launch::run(&command).await })
        }
        Cmd::Guard(args) => exit_with(tapfinger_agent::guard::run(args)),
        Cmd::Supervise(args) => exit_with(tapfinger_agent::supervise::run(args)),
        Cmd::Run {
            config,
            name,
            listen,
            bootstrap,
            api,
            data_dir,
            cluster_key_file,
            policy,
            model,
            set,
            log_format,
        } => load_config(config.as_deref(), &set).and_then(|mut cfg| {
            if let Some(v) = name {
                cfg.name = v;
            }
            if !listen.is_empty() {
                cfg.listen = listen;
            }
            if !bootstrap.is_empty() {
                cfg.bootstrap = bootstrap;
            }
            if let Some(v) = api {
                cfg.api = v;
            }
            if let Some(v) = data_dir {
                cfg.data_dir = v;
            }
            if let Some(v) = cluster_key_file {
                cfg.cluster_key_file = Some(v);
            }
            if let Some(v) = policy {
                cfg.policy = v;
            }
            if let Some(v) = model {
                cfg.model = Some(v);
            }
            if let Some(v) = log_format {
                cfg.log_format = v;
            }
            tapfinger_agent::run::init_logging(cfg.log_format);
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(tapfinger_agent::run::run(cfg))
        }),
        Cmd::Submit { file, client } => (|| {
            let text = std::fs::read_to_string(&file)?;
            let mut spec = tapfinger::spec::TaskSpec::from_toml(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            // The submitter the size history keys on: who ran the command, unless said.
            if spec.submitter.trim().is_empty() {
                spec.submitter = std::env::var("USER")
                    .or_else(|_| std::env::var("LOGNAME"))
                    .unwrap_or_default();
            }
            call(
                &client,
                "POST",
                "/v1/tasks",
                Some(serde_json::to_string(&spec)?),
            )
        })(),
        cmd @ (Cmd::Tasks { .. } | Cmd::Show { .. } | Cmd::Cancel { .. } | Cmd::Logs { .. }) => {
            task_command(cmd)
        }
        Cmd::Node {
            address: false,
            client,
        } => call(&client, "GET", "/v1/node", None),
        Cmd::Node {
            address: true,
            client,
        } => cli_remote::join_address(&client),
        Cmd::Workload {
            action,
            since,
            out,
            client,
        } => workload(&action, since, out.as_deref(), &client),
        Cmd::Peers { client } => call(&client, "GET", "/v1/peers", None),
        Cmd::Classes { client } => call(&client, "GET", "/v1/classes", None),
        Cmd::Policy { action, client } => match action.as_str() {
            "show" => call(&client, "GET", "/v1/policy", None),
            "rollback" => call(&client, "POST", "/v1/policy/rollback", None),
            other => Err(anyhow::anyhow!(
                "policy: unknown action `{other}` (show or rollback)"
            )),
        },
        Cmd::Discover { json } => discovery::discover().and_then(|d| {
            if json {
                println!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                println!("cpus    {}", d.cpus);
                println!(
                    "memory  {:.1} GiB",
                    d.memory_bytes as f64 / f64::from(1u32 << 30)
                );
                println!("gpus    {}", d.gpus.len());
                for g in &d.gpus {
                    println!(
                        "  #{} {} ({:.1} GiB)",
                        g.index,
                        g.model,
                        g.memory_bytes as f64 / f64::from(1u32 << 30)
                    );
                }
                if let Some(note) = &d.gpu_note {
                    println!("note    {note}");
                }
            }
            Ok(())
        }),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
