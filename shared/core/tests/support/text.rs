//! Golden cases' text, shared by the core's and the model's golden tests (`tests/golden.rs`,
//! `shared/model/src/tests/golden.rs`): units, `key=value` fields, and a ledger from `node` and
//! `task` lines.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use tapfinger_core::ledger::{Ledger, Priorities, TaskState};
use tapfinger_core::{NodeId, Resources, Task, TaskId};

/// `A,B,...` as units.
pub(crate) fn units(s: &str) -> Resources {
    Resources(s.split(',').map(|x| x.trim().parse().unwrap()).collect())
}

/// `key=value` fields of a line, after its leading words.
pub(crate) fn fields(words: &[&str]) -> BTreeMap<String, String> {
    words
        .iter()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| {
            (
                k.to_string(),
                v.trim_matches(|c| c == '(' || c == ')').to_string(),
            )
        })
        .collect()
}

/// `nN` (or `N`) as a node id.
pub(crate) fn node(word: &str) -> NodeId {
    NodeId(word.trim_start_matches('n').parse().unwrap())
}

/// `tT` (or `T`) as a task id.
pub(crate) fn task_id(word: &str) -> TaskId {
    TaskId(word.trim_start_matches('t').parse().unwrap())
}

/// A ledger of `window` with `priorities` from `input`'s lines: `node N cap=A,B` and `task T
/// min=A,B on=(N,...) class=C arrival=S` (`running=N`: running there at its minimum).
pub(crate) fn ledger(input: &str, window: usize, priorities: Priorities) -> Ledger<()> {
    let mut ledger: Ledger<()> = Ledger::new(window, 1).with_priorities(priorities);
    for line in input.lines().filter(|l| !l.trim().is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let f = fields(&words[2..]);
        match words[0] {
            "node" => ledger.set_node(node(words[1]), units(&f["cap"])),
            "task" => {
                let on: Vec<u32> = f["on"].split(',').map(|x| x.parse().unwrap()).collect();
                let t = Task::new(task_id(words[1]).0, units(&f["min"]).0)
                    .class(f.get("class").map_or(0, |c| c.parse().unwrap()))
                    .arriving(f.get("arrival").map_or(0, |a| a.parse().unwrap()))
                    .on(&on);
                let (id, min) = (t.id, t.min_demand.clone());
                ledger.insert(Arc::new(t), TaskState::Pending, ());
                if let Some(n) = f.get("running") {
                    ledger.set_state(
                        id,
                        TaskState::Running {
                            node: node(n),
                            alloc: min,
                            progress: 0.0,
                            started: 0,
                        },
                    );
                }
            }
            other => panic!("unknown line {other}"),
        }
    }
    ledger
}
