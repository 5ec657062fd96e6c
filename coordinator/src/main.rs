//! `tapfinger-coordinator`: `run` (the daemon), `train` (offline: the same learner fed by
//! simulated agents), `status` (ask a running coordinator).

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use tapfinger_coordinator::config::CoordinatorConfig;
use tapfinger_coordinator::learner::Learner;

#[derive(Parser)]
#[command(
    name = "tapfinger-coordinator",
    version,
    about = "tapfinger coordinator: trains the shared policy from agents' experience and rolls out better weights"
)]
struct Cli {
    // The subcommand (a `//` comment: clap shows doc comments as help).
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the daemon until SIGINT/SIGTERM.
    Run {
        /// Path to coordinator.toml (default: built-in defaults).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Overrides `data_dir`.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Overrides `cluster_key_file`.
        #[arg(long)]
        cluster_key_file: Option<PathBuf>,
        /// An agent's peer id allowed to connect and send experience (repeatable; overrides
        /// `allow_peers`).
        #[arg(long = "allow-peer", value_name = "PEER_ID")]
        allow_peers: Vec<libp2p::PeerId>,
    },
    /// Offline training: the coordinator's learner fed by simulated agents of a scenario;
    /// writes the same checkpoint format (`DIR/trainer/`, `DIR/published/v<N>/`).
    Train {
        /// Scenario (preset or TOML file) whose agents are simulated.
        #[arg(long, default_value = "edge-agent")]
        scenario: String,
        /// Updates to run.
        #[arg(long, default_value_t = 5)]
        updates: u64,
        /// Simulated episodes per update.
        #[arg(long, default_value_t = 2)]
        episodes: u64,
        /// Output directory (resumed if it holds a checkpoint).
        #[arg(long, default_value = "out/coordinator")]
        out: PathBuf,
        /// Start model: `shipped` or a checkpoint directory.
        #[arg(long, default_value = "shipped")]
        start: String,
    },
    /// Print a running coordinator's status.
    Status {
        /// API address.
        #[arg(long, default_value = "127.0.0.1:7701")]
        api: String,
        /// Bearer token file (when the API requires one).
        #[arg(long)]
        token_file: Option<PathBuf>,
    },
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Run {
            config,
            data_dir,
            cluster_key_file,
            allow_peers,
        } => run(config, data_dir, cluster_key_file, allow_peers),
        Cmd::Train {
            scenario,
            updates,
            episodes,
            out,
            start,
        } => train(scenario, updates, episodes, out, start),
        Cmd::Status { api, token_file } => status(&api, token_file.as_deref()),
    };
    if let Err(e) = r {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    cluster_key_file: Option<PathBuf>,
    allow_peers: Vec<libp2p::PeerId>,
) -> anyhow::Result<()> {
    let mut cfg = match config {
        Some(p) => CoordinatorConfig::from_toml(&std::fs::read_to_string(&p)?)?,
        None => CoordinatorConfig::default(),
    };
    if let Some(d) = data_dir {
        cfg.data_dir = d;
    }
    if let Some(k) = cluster_key_file {
        cfg.cluster_key_file = Some(k);
    }
    if !allow_peers.is_empty() {
        cfg.allow_peers = allow_peers;
    }
    tapfinger_net::log::init_logging(tapfinger_net::log::LogFormat::Human);
    // Before anything is bound: an open coordinator nobody asked for never starts.
    if let Some(warning) = cfg.open_cluster()? {
        tracing::warn!("{warning}");
    }
    let token = match &cfg.api_token_file {
        Some(p) => Some(tapfinger_net::secret::read_token(p)?),
        None => None,
    };
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let (key, net) = tapfinger_coordinator::serve::start_network(&cfg).await?;
        tracing::info!(peer_id = %key.public().to_peer_id(), "coordinator starting (agents set coordinator.peer to this id)");
        let mut c = tapfinger_coordinator::serve::spawn(cfg.clone(), key, net)?;
        let api = tapfinger_coordinator::api::api(&cfg.api, c.shared.clone(), token);
        tokio::select! {
            r = api => r,
            // Never up with learning dead: exit non-zero, and the supervisor restarts it.
            why = c.stopped() => Err(anyhow::anyhow!("the coordinator stopped: {why}")),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}

fn train(
    scenario: String,
    updates: u64,
    episodes: u64,
    out: PathBuf,
    start: String,
) -> anyhow::Result<()> {
    let cfg = CoordinatorConfig {
        data_dir: out.clone(),
        scenario,
        start,
        // Offline, every candidate is judged but the run does not stop at a refusal.
        ..CoordinatorConfig::default()
    };
    let mut l = Learner::open(cfg, libp2p::identity::Keypair::generate_ed25519())?;
    println!(
        "start: validation avg JCT {:.3} slots (version {})",
        l.state.published_jct, l.state.version
    );
    for u in 0..updates {
        let mut batches = Vec::new();
        for e in 0..episodes {
            batches.extend(l.simulated_batches((1 << 42) + l.iteration() * episodes + e)?);
        }
        let eval = l.update(batches, None)?;
        println!(
            "update {}: candidate {:.3} vs published {:.3} -> {}",
            u + 1,
            eval.candidate_jct,
            eval.published_jct,
            match eval.version {
                Some(v) => format!("published as version {v}"),
                None => "refused".into(),
            }
        );
    }
    println!("checkpoint: {}", out.join("trainer").display());
    Ok(())
}

fn status(api: &str, token_file: Option<&std::path::Path>) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let auth = match token_file {
        Some(p) => format!(
            "Authorization: Bearer {}\r\n",
            tapfinger_net::secret::read_token(p)?
        ),
        None => String::new(),
    };
    let mut s = std::net::TcpStream::connect(api)
        .map_err(|e| anyhow::anyhow!("cannot reach the coordinator at {api}: {e}"))?;
    write!(
        s,
        "GET /v1/status HTTP/1.1\r\nHost: {api}\r\n{auth}Connection: close\r\n\r\n"
    )?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    let json = body.split("\r\n\r\n").nth(1).unwrap_or("");
    println!("{json}");
    Ok(())
}
