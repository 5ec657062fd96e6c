//! `tapfinger-coordinator`: optional centralized critic training and policy rollout. Not built
//! yet (issue #5); this binary exists so the workspace's pinned dependency set (burn) is compiled
//! and checked together with the rest. It refuses to pretend: every invocation says so and exits
//! non-zero.

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "tapfinger-coordinator",
    version,
    about = "tapfinger coordinator (not implemented yet; see issue #5)"
)]
struct Cli {}

fn main() {
    let _ = Cli::parse();
    // Touch burn so the pinned version is compiled and type-checked with the workspace.
    let _device_kind = std::any::type_name::<burn::tensor::Tensor<1>>();
    eprintln!(
        "tapfinger-coordinator is not implemented yet (issue #5); use tapfinger-sim for training and evaluation"
    );
    std::process::exit(2);
}
