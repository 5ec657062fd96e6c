//! `tapfinger-agent`: the daemon for every edge box. Work in progress (issue #4): today it reports
//! the resources it would offer (`tapfinger-agent discover`). The negotiation it will run is the
//! sans-IO protocol of the `tapfinger` crate, the same one the simulator drives.

use tapfinger_agent::discovery;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tapfinger-agent",
    version,
    about = "tapfinger edge agent (work in progress: resource discovery only)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the CPU cores, memory and GPUs this box would offer.
    Discover {
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.cmd {
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
