//! `tapfinger-sim` command line: list presets, run one episode, compare policies. Thin: it parses
//! arguments and calls the library; every error becomes a message and a non-zero exit.

use anyhow::Result;
use clap::{Parser, Subcommand};
use tapfinger_sim::catalog;

mod cli_compare;
#[cfg(feature = "train")]
mod cli_curves;
mod cli_deploy;
mod cli_estimates;
mod cli_forecast;
mod cli_import;
mod cli_pack;
mod cli_place;
mod cli_plan;
mod cli_progress;
#[cfg(feature = "train")]
mod cli_train;

#[derive(Parser)]
#[command(
    name = "tapfinger-sim",
    version,
    about = "Simulate and compare tapfinger scheduling policies"
)]
#[cfg_attr(
    not(feature = "train"),
    command(
        after_help = "Training (train, tune, deploy-replay, curves, convert-model) needs a build with it: cargo build --release -p tapfinger-sim --features train"
    )
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
    /// `gen-wide:N` with --family wide, `gen-long:N`, `gen-gavel:N`, `gen-recur:N`, `gen-blind:N`
    /// likewise). Seeds from 10000 up are held out for evaluation: never train on them.
    Generate {
        /// Generator seed.
        #[arg(long)]
        seed: u64,
        /// The family: base (`gen:N`), wide (`gen-wide:N`: larger boxes, classes that use up to
        /// 16 times their minimum demand), long (`gen-long:N`: the base family's boxes, tasks
        /// 3-10 times as many slots long), gavel (`gen-gavel:N`), recur (`gen-recur:N`: `gen:N`
        /// with every task a run of a recurring job whose history predicts its size) or blind
        /// (`gen-blind:N`: the same jobs, sizes their history does not predict).
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
    /// is also run under every deployable baseline on the true speeds (docs/TWIN.md). Needs the
    /// feature `train`.
    #[cfg(feature = "train")]
    DeployReplay(cli_deploy::DeployArgs),
    #[cfg(not(feature = "train"))]
    #[command(hide = true)]
    DeployReplay(NeedsTrain),
    /// How far the start estimates an agent shows (`GET /v1/tasks`) are from when tasks
    /// started: each task's estimate at its arrival against its start, per scenario.
    StartEstimates(cli_estimates::StartEstimatesArgs),
    /// Judge one observed workload as the coordinator's guard does: its twin under the learned
    /// policy and every deployable baseline, and the policy the cluster would run next.
    Guard(cli_deploy::GuardArgs),
    /// Plot training runs side by side: per iteration, the run's training JCT over the reference
    /// baseline's on the same workloads (mean of the last 10), from each run's curve.csv. Needs
    /// the feature `train`.
    #[cfg(feature = "train")]
    Curves(cli_curves::CurvesArgs),
    #[cfg(not(feature = "train"))]
    #[command(hide = true)]
    Curves(NeedsTrain),
    /// Train the learned TapFinger policy with PPO; checkpoints, curve CSV and plot go to --out.
    /// Needs the feature `train`.
    #[cfg(feature = "train")]
    Train(Box<cli_train::TrainArgs>),
    #[cfg(not(feature = "train"))]
    #[command(hide = true)]
    Train(NeedsTrain),
    /// Fine-tune the learned policy on an observed workload (the cluster's twin) and write it
    /// only if it beats every deployable baseline, and the model it started from by 5 %, on the latest
    /// tasks, which it never trained on (docs/TWIN.md). Needs the feature `train`.
    #[cfg(feature = "train")]
    Tune(cli_train::TuneArgs),
    #[cfg(not(feature = "train"))]
    #[command(hide = true)]
    Tune(NeedsTrain),
    /// Rewrite a checkpoint folder of an older version, whose weights are a burn record
    /// (`model.bpk`), with its weights as `model.safetensors`, what this version reads. Needs the
    /// feature `train`.
    #[cfg(feature = "train")]
    ConvertModel(cli_train::ConvertArgs),
    #[cfg(not(feature = "train"))]
    #[command(hide = true)]
    ConvertModel(NeedsTrain),
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
    /// The FGD study's fragmentation benchmark on Alibaba's GPU trace 2023: the study's six
    /// placement policies and the product's, unallocated GPUs as the workload grows
    /// (docs/PACKING.md).
    PackBench(cli_pack::PackBenchArgs),
}

/// The arguments of a command this build lacks (it was built without the feature `train`): taken
/// whole, so that the command says what to build instead of clap's "unrecognized subcommand".
#[cfg(not(feature = "train"))]
#[derive(clap::Args)]
struct NeedsTrain {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _args: Vec<String>,
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
        #[cfg(feature = "train")]
        Cmd::DeployReplay(args) => cli_deploy::deploy_replay(args)?,
        Cmd::Guard(args) => cli_deploy::guard(args)?,
        Cmd::StartEstimates(args) => cli_estimates::start_estimates(args)?,
        #[cfg(feature = "train")]
        Cmd::Tune(args) => cli_train::tune(args)?,
        #[cfg(feature = "train")]
        Cmd::Curves(args) => cli_curves::curves(args)?,
        #[cfg(feature = "train")]
        Cmd::Train(args) => cli_train::train(*args)?,
        #[cfg(feature = "train")]
        Cmd::ConvertModel(args) => cli_train::convert(args)?,
        #[cfg(not(feature = "train"))]
        Cmd::DeployReplay(_)
        | Cmd::Tune(_)
        | Cmd::Curves(_)
        | Cmd::Train(_)
        | Cmd::ConvertModel(_) => anyhow::bail!(
            "this command trains or reads training runs, and this build has no training: build the simulator with it, `cargo run --release -p tapfinger-sim --features train -- ...` (docs/LEARNING.md)"
        ),
        Cmd::Plan(args) => cli_plan::plan(args)?,
        Cmd::PlanBench(args) => cli_plan::bench(args)?,
        Cmd::ForecastBench(args) => cli_forecast::bench(args)?,
        Cmd::PlaceBench(args) => cli_place::bench(args),
        Cmd::PackBench(args) => cli_pack::bench(args)?,
    }
    Ok(())
}
