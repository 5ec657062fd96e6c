//! A deployment's agents keep what they learned of their tasks' sizes: an episode started from
//! an earlier one's size book shows its first tasks' predictions from the start, one started
//! from nothing does not; and the learned history is keyed by the recurring job a task runs.
#![allow(clippy::unwrap_used)]

use tapfinger::view::ClusterView;
use tapfinger_sim::scenario::{Recurring, TaskSize};
use tapfinger_sim::{Scenario, Simulator, policies, twin};

/// The levels of the predictions the first view with a waiting task shows.
#[derive(Default)]
struct FirstView(Option<Vec<Option<tapfinger::sizes::Level>>>);

impl tapfinger_sim::env::Observer for FirstView {
    fn wants_views(&self) -> bool {
        self.0.is_none()
    }
    fn view(&mut self, v: &ClusterView) {
        if self.0.is_none() && !v.pending.is_empty() {
            self.0 = Some(
                v.pending
                    .iter()
                    .map(|p| p.size.as_ref().map(|s| s.level))
                    .collect(),
            );
        }
    }
}

#[test]
fn a_later_window_starts_from_the_sizes_learned_before() {
    let mut sc = Scenario::load("hetero6").unwrap();
    sc.task_size = Some(TaskSize {
        pareto_shape: 1.8,
        max: 20.0,
        recurring: Some(Recurring {
            jobs: 3,
            users: 2,
            spread: [0.4, 0.4],
            informative: true,
        }),
    });
    let sim = Simulator::new(sc.clone());
    let (_, _, _, book) =
        twin::observe_learned(&sim, policies::build(&sim, "tiresias").unwrap(), 1, None).unwrap();
    assert!(book.learned() > 50, "{}", book.learned());
    let first = |sim: &Simulator| {
        let mut o = FirstView::default();
        sim.run_observed(policies::build(sim, "tiresias").unwrap(), 2, &mut o)
            .unwrap();
        o.0.unwrap()
    };
    let cold = first(&sim);
    assert!(cold.iter().all(Option::is_none), "{cold:?}");
    let warm = first(&Simulator::new(sc).with_sizes(book));
    assert!(
        warm.iter()
            .all(|l| *l == Some(tapfinger::sizes::Level::Job)),
        "{warm:?}"
    );
}
