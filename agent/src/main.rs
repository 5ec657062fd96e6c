//! `tapfinger-agent`: the daemon for every edge box. Work in progress (issue #4): today it reports
//! the resources it would offer (`tapfinger-agent discover`). The negotiation it will run is the
//! sans-IO protocol of the `tapfinger` crate, the same one the simulator drives.

use tapfinger_agent::config::AgentConfig;
use tapfinger_agent::discovery;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tapfinger-agent",
    version,
    about = "tapfinger edge agent (work in progress: discovery and configuration checks; the daemon is not built yet)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Check a configuration file and print what this box would offer the cluster.
    Check {
        /// Path to agent.toml (default: built-in defaults).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
    },
    /// Print the CPU cores, memory and GPUs this box would offer.
    Discover {
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

fn check(path: Option<&std::path::Path>) -> anyhow::Result<()> {
    use anyhow::Context;
    let cfg = match path {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            AgentConfig::from_toml(&text).with_context(|| format!("{}", p.display()))?
        }
        None => AgentConfig::default(),
    };
    let d = discovery::discover()?;
    let offer = cfg.offer(&d)?;
    println!("name     {}", cfg.name);
    println!("cluster  {}", cfg.cluster);
    println!("labels   {:?}", cfg.labels);
    println!(
        "offer    {} CPU(s), {} GPU(s), {:.1} GiB memory",
        offer.cpus,
        offer.gpus,
        offer.memory_bytes as f64 / f64::from(1u32 << 30)
    );
    if let Some(note) = &d.gpu_note {
        println!("note     {note}");
    }
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Check { config } => check(config.as_deref()),
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
