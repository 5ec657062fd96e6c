//! `tapfinger-sim` command line: list presets, run one episode, compare policies. Thin: it parses
//! arguments and calls the library; every error becomes a message and a non-zero exit.

use anyhow::Result;
use clap::{Parser, Subcommand};
use tapfinger_sim::catalog;

mod cli_compare;
mod cli_curves;
mod cli_deploy;
mod cli_forecast;
mod cli_import;
mod cli_place;
mod cli_plan;
mod cli_progress;
mod cli_train;

#[derive(Parser)]
#[command(
    name = "tapfinger-sim",
    version,
    about = "Simulate and compare tapfinger scheduling policies"
)]
struct Cli {
    // The subcommand (a `//` comment: clap shows doc comments as help).
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the built-in scenario presets.
    Scenarios,
    /// Print generated scenario N as TOML (the scenario `gen:N` wherever a scenario is named;
    /// `gen-wide:N` with --family wide, `gen-long:N` with --family long). Seeds from 10000 up are held out for evaluation: never
    /// train on them.
    Generate {
        /// Generator seed.
        #[arg(long)]
        seed: u64,
        /// The family: base (`gen:N`), wide (`gen-wide:N`: larger boxes, classes that use up to
        /// 16 times their minimum demand) or long (`gen-long:N`: the base family's boxes, tasks
        /// 3-10 times as many slots long).
        #[arg(long, value_enum, default_value_t)]
        family: tapfinger_sim::generate::Family,
    },
    /// Turn a published cluster trace into a scenario that replays it (docs/TRACES.md): prints
    /// the scenario TOML, or writes it to --out; says on stderr what was left out and why.
    Import(cli_import::ImportArgs),
    /// Run one episode of one policy.
    Run(cli_compare::RunArgs),
    /// Compare policies over several seeds (the same workloads for every policy).
    Compare(cli_compare::CompareArgs),
    /// Judge one policy against every baseline on generated scenarios (gen:N): per scenario, its
    /// average JCT over the best non-clairvoyant baseline's. Seeds from 10000 up are held out.
    Suite(cli_compare::SuiteArgs),
    /// Replay a scenario's workload window by window as a deployment: the guard picks each
    /// window's policy from the previous window's twin (what the agents observed); every window
    /// is also run under every deployable baseline on the true speeds (docs/TWIN.md).
    DeployReplay(cli_deploy::DeployArgs),
    /// Judge one observed workload as the coordinator's guard does: its twin under the learned
    /// policy and every deployable baseline, and the policy the cluster would run next.
    Guard(cli_deploy::GuardArgs),
    /// Plot training runs side by side: per iteration, the run's training JCT over the reference
    /// baseline's on the same workloads (mean of the last 10), from each run's curve.csv.
    Curves(cli_curves::CurvesArgs),
    /// Train the learned TapFinger policy with PPO; checkpoints, curve CSV and plot go to --out.
    Train(Box<cli_train::TrainArgs>),
    /// Fine-tune the learned policy on an observed workload (the cluster's twin) and write it
    /// only if it beats every deployable baseline, and the model it started from by 5 %, on the latest
    /// tasks, which it never trained on (docs/TWIN.md).
    Tune(cli_train::TuneArgs),
    /// The least-cost layer-to-resource plan of a layer-chain job that meets its throughput
    /// target (HeterPS): stages, units, throughput and cost (docs/PLANNING.md).
    Plan(cli_plan::PlanArgs),
    /// Every planner on random layer chains, cost against the exact plan.
    PlanBench(cli_plan::PlanBenchArgs),
    /// The task-volume forecast (ARIMA + GRU) against ARIMA and the last value on seasonal and
    /// bursty arrival series: one-step mean absolute error on held-out intervals.
    ForecastBench(cli_forecast::ForecastBenchArgs),
    /// Locality-aware placement of parameter-server jobs (LP rounding) against the exact
    /// optimum, pack-first and spreading (docs/PLACEMENT.md).
    PlaceBench(cli_place::PlaceBenchArgs),
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Scenarios => {
            for (name, desc) in catalog::presets() {
                println!("{name:<15} {desc}");
            }
            println!(
                "{:<15} a generated scenario (tapfinger-sim generate --seed N)",
                "gen:N"
            );
        }
        Cmd::Generate { seed, family } => {
            print!("{}", tapfinger_sim::generate::draw_in(family, seed).toml);
        }
        Cmd::Import(args) => cli_import::import(args)?,
        Cmd::Run(args) => cli_compare::run(args)?,
        Cmd::Compare(args) => cli_compare::compare(args)?,
        Cmd::Suite(args) => cli_compare::suite(args)?,
        Cmd::DeployReplay(args) => cli_deploy::deploy_replay(args)?,
        Cmd::Guard(args) => cli_deploy::guard(args)?,
        Cmd::Tune(args) => cli_train::tune(args)?,
        Cmd::Curves(args) => cli_curves::curves(args)?,
        Cmd::Train(args) => cli_train::train(*args)?,
        Cmd::Plan(args) => cli_plan::plan(args)?,
        Cmd::PlanBench(args) => cli_plan::bench(args)?,
        Cmd::ForecastBench(args) => cli_forecast::bench(args)?,
        Cmd::PlaceBench(args) => cli_place::bench(args),
    }
    Ok(())
}
