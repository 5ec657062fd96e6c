//! Shrinking converging tasks (RLPTO) in whole episodes of the `converging-edge` preset: the
//! plateau detector finds the fine-tuning jobs converging, their CPUs go to others, nobody's final
//! accuracy changes (a shrunk task still does all its work), and the run differs from the same
//! workloads without shrinking (`--no-shrink`) where that lets queued work start (a policy that
//! gives each task its maximum). Behaviour, not timing; the figures are in docs/DECISIONS.md.

// Test code may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use tapfinger_sim::env::Simulator;
use tapfinger_sim::metrics::Summary;
use tapfinger_sim::report;
use tapfinger_sim::scenario::Scenario;

fn mean(sim: &Simulator, policy: &str) -> Summary {
    let names = vec![policy.to_string()];
    let c = report::compare(sim, &names, &[100, 101, 102, 103], &mut || {}).unwrap();
    c.results[0].mean.clone()
}

#[test]
fn converging_tasks_shrink_and_no_final_accuracy_changes() {
    let sc = Scenario::load("converging-edge").unwrap();
    assert!(sc.shrink.is_some_and(|s| s.enabled));
    let sim = Simulator::new(sc.clone());
    let kept = Simulator::new(sc).no_shrink();
    let shrunk = mean(&sim, "first-fit-max");
    let whole = mean(&kept, "first-fit-max");
    eprintln!(
        "first-fit-max: JCT {:.2} shrinking, {:.2} not; reward {:.2} vs {:.2}; {:.1} converged; gained {:?} after",
        shrunk.avg_jct,
        whole.avg_jct,
        shrunk.cluster_reward,
        whole.cluster_reward,
        shrunk.converged,
        shrunk.gained_after_plateau
    );
    // The detector finds converging tasks either way (it judges; shrinking acts on it).
    assert!(shrunk.converged > 20.0 && whole.converged > 20.0);
    // Final accuracy is the curve's end for every task: the same with and without shrinking.
    assert_eq!(shrunk.accuracy, whole.accuracy);
    // Past the plateau the fine-tuning jobs gain little (the detector's 1 % over 5 reports).
    assert!(shrunk.gained_after_plateau.unwrap() < 0.03);
    // With a policy that gives a task its maximum, the freed CPUs let queued work start.
    assert!(
        shrunk.avg_jct < whole.avg_jct && shrunk.cluster_reward > whole.cluster_reward,
        "{} vs {}",
        shrunk.avg_jct,
        whole.avg_jct
    );
}

#[test]
fn a_scenario_without_a_shrink_section_judges_nothing() {
    let text = include_str!("../presets/converging-edge.toml");
    let cut = text.find("\n[shrink]").unwrap();
    let end = text.find("\n[reward]").unwrap();
    let text = format!("{}{}", &text[..cut], &text[end..]);
    let sim = Simulator::new(Scenario::from_toml(&text, "test", None).unwrap());
    let m = mean(&sim, "tiresias");
    assert_eq!(m.converged, 0.0);
    assert!(m.gained_after_plateau.is_none());
    assert!(m.accuracy.is_some());
}

#[test]
fn bad_curves_shrink_and_reward_sections_are_refused_with_their_field() {
    let preset = include_str!("../presets/converging-edge.toml");
    for (from, to, expect) in [
        ("top = 0.92", "top = 1.5", "finetune).curve.top"),
        ("rate = 1.5", "rate = 0", "train).curve.rate"),
        ("noise = 0.002 }", "noise = -1.0 }", "curve.noise"),
        ("window = 5", "window = 0", "shrink.window"),
        ("epsilon = 0.01", "epsilon = 2", "shrink.epsilon"),
        ("time = 1.0", "time = -1.0", "reward.time"),
        ("enabled = true", "enable = true", "enable"),
    ] {
        assert!(preset.contains(from), "{from}");
        let text = preset.replacen(from, to, 1);
        let e = Scenario::from_toml(&text, "test", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(expect), "{from} -> {to}: {e}");
    }
}

#[test]
fn the_cluster_reward_paid_by_slot_holds_the_tasks_accuracy_and_resource_terms() {
    let sc = Scenario::load("converging-edge").unwrap();
    let run = |cluster: bool| {
        let mut sc = sc.clone();
        sc.cluster_reward = cluster;
        let sim = Simulator::new(sc);
        let policies = tapfinger_sim::policies::build(&sim, "first-fit-max").unwrap();
        sim.run(policies, 100).unwrap()
    };
    let (default, cluster) = (run(false), run(true));
    // The reward paid does not change what a baseline decides.
    assert_eq!(default.tasks.len(), cluster.tasks.len());
    assert_eq!(
        default.tasks.iter().map(|t| t.jct).sum::<u64>(),
        cluster.tasks.iter().map(|t| t.jct).sum::<u64>()
    );
    let w = sc.reward;
    let terms: f64 = cluster
        .tasks
        .iter()
        .map(|t| w.accuracy * t.accuracy.unwrap_or(0.0) - w.resources * t.resource_time)
        .sum();
    let paid: f64 = cluster.returns.iter().sum::<f64>() - default.returns.iter().sum::<f64>();
    // All of it but what the episode's last slot gained: a slot's gains are paid with the next
    // slot's reward, and the episode ends with the slot its last task finishes in (that task's
    // gain in its last slot is at most the curve's rise over one slot and the report's noise).
    assert!(
        paid <= terms + 1e-9 && terms - paid < w.accuracy * 0.02,
        "paid {paid}, the records' terms {terms}"
    );
    assert!(terms.abs() > 1.0, "{terms}");
}
