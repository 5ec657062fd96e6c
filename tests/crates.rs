//! The direction between the library crates, checked on `Cargo.lock`: the sans-IO core, the
//! in-memory cluster (`tapfinger-harness`), the network crate (`tapfinger-net`) and the
//! baselines carry none of the heavy dependencies (the network library burn, the LP solver
//! good_lp, nalgebra, petgraph), directly or through another crate. Those belong to the crates
//! above the core: the learned model, job placement and the forecast. And the packaged agent
//! is built without its lab (the feature `dev`).
//!
//! The lock file lists every package's dependencies, a workspace crate's dev-dependencies
//! included, so the closure read from it holds everything that could be built for the crate:
//! a heavy package missing from it is missing from every build of the crate.

// A test: an unreadable lock file is a broken checkout, said at once.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

/// Packages that a crate at or below the core must not pull in.
const HEAVY: &[&str] = &["burn", "good_lp", "nalgebra", "petgraph"];

/// Each package of the lock file (by name; several versions merged) and the names it depends on.
fn lock() -> BTreeMap<String, BTreeSet<String>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock");
    let lock: toml::Table = std::fs::read_to_string(path).unwrap().parse().unwrap();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in lock["package"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap().to_string();
        let deps = out.entry(name).or_default();
        for d in p
            .get("dependencies")
            .and_then(|d| d.as_array())
            .into_iter()
            .flatten()
        {
            // "name" or "name version" where several versions are locked.
            let d = d.as_str().unwrap();
            deps.insert(d.split(' ').next().unwrap().to_string());
        }
    }
    out
}

/// Every package `root` depends on, directly or not.
fn closure(lock: &BTreeMap<String, BTreeSet<String>>, root: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.to_string()];
    while let Some(p) = todo.pop() {
        for d in lock.get(&p).into_iter().flatten() {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

#[test]
fn the_core_and_the_crates_beside_it_carry_no_heavy_dependency() {
    let lock = lock();
    for krate in [
        "tapfinger-core",
        "tapfinger-policies",
        "tapfinger-harness",
        "tapfinger-net",
    ] {
        assert!(lock.contains_key(krate), "{krate} is not in Cargo.lock");
        let deps = closure(&lock, krate);
        let heavy: Vec<&str> = HEAVY
            .iter()
            .copied()
            .filter(|h| deps.contains(*h))
            .collect();
        assert!(heavy.is_empty(), "{krate} pulls in {heavy:?}");
        for upper in [
            "tapfinger",
            "tapfinger-model",
            "tapfinger-jobs",
            "tapfinger-forecast",
        ] {
            assert!(!deps.contains(upper), "{krate} depends on {upper}");
        }
    }
}

#[test]
fn the_check_sees_the_heavy_dependencies_where_they_are() {
    // The same reading finds each heavy package in the crate that needs it, so the test above
    // cannot pass by reading nothing.
    let lock = lock();
    for (krate, heavy) in [
        ("tapfinger-model", "burn"),
        ("tapfinger-model", "petgraph"),
        ("tapfinger-jobs", "good_lp"),
        ("tapfinger-forecast", "nalgebra"),
        ("tapfinger", "burn"),
    ] {
        assert!(
            closure(&lock, krate).contains(heavy),
            "{krate} without {heavy}"
        );
    }
}

/// A manifest of the workspace, parsed.
fn manifest(dir: &str) -> toml::Table {
    let path = format!("{}/../{dir}/Cargo.toml", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path).unwrap().parse().unwrap()
}

#[test]
fn the_packaged_agent_is_built_without_the_lab() {
    // The lab (demos, simulated executor, NVML stand-in) is the agent's feature `dev`, off by
    // default, enabled by no crate a packaged binary is built from, and by no packaging command.
    let agent = manifest("agent");
    let features = agent["features"].as_table().unwrap();
    assert!(features.contains_key("dev"));
    let default = features.get("default").and_then(|d| d.as_array());
    assert!(default.is_none_or(|d| d.iter().all(|f| f.as_str() != Some("dev"))));
    for krate in ["coordinator", "sim", "net", "harness"] {
        let deps = manifest(krate);
        let dep = deps
            .get("dependencies")
            .and_then(|d| d.get("tapfinger-agent"));
        assert!(
            dep.and_then(|d| d.get("features")).is_none(),
            "{krate} enables features of the agent"
        );
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    for file in ["deploy/Containerfile", "deploy/README.md"] {
        let text = std::fs::read_to_string(format!("{root}/{file}")).unwrap();
        let builds: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("cargo build") && l.contains("tapfinger-agent"))
            .collect();
        assert!(!builds.is_empty(), "{file} builds no agent");
        for b in builds {
            assert!(
                !b.contains("--features") && !b.contains("--all-features"),
                "{file}: {b}"
            );
        }
    }
}

/// `cargo tree` of `package`'s normal dependencies with `features`, one package name a line.
fn tree(package: &str, features: &[&str]) -> String {
    let mut cmd = std::process::Command::new(env!("CARGO"));
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["-p", package]);
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn has_burn(tree: &str) -> bool {
    tree.lines().any(|l| l.starts_with("burn "))
}

#[test]
fn the_simulator_and_the_agent_decide_without_burn() {
    // Burn is for training: the simulator's comparisons and the agent build without it (the
    // decision pass reads the weights from safetensors); training is the feature `train`.
    for package in ["tapfinger-sim", "tapfinger-agent"] {
        assert!(!has_burn(&tree(package, &[])), "{package} builds burn");
    }
    // The same reading finds burn where training is on, so the check cannot pass by reading
    // nothing.
    assert!(has_burn(&tree("tapfinger-sim", &["train"])));
    assert!(has_burn(&tree("tapfinger-coordinator", &[])));
}
