//! Golden text cases (the datadriven style of raft-rs and CockroachDB): each file of
//! `tests/testdata` holds cases written as input, `----`, and the output the core must give,
//! so a change in a rule shows as a readable diff of its outcomes. `REWRITE=1 cargo nextest run
//! -p tapfinger-core --test golden` rewrites the outputs; review the diff before keeping it.
//!
//! - `resolve`: one round's conflict resolution ([`tapfinger_core::protocol::resolve`]). Input,
//!   one line per member: `nN pass` or `nN claim tT alloc=A,B prob=P headroom=H`; argument
//!   `committed=(T,...)` for tasks already started. Output: the commits with each winner's
//!   posterior among the claims on its task, the lost claims, the contested count.
//! - `window`: the queues and windows a ledger shows
//!   ([`tapfinger_core::ledger::Ledger::view`]). Arguments `window=W`, `slot=S`, `aging=A` (0:
//!   never), `blind` (classes not honoured). Input lines: `node N cap=A,B` and `task T
//!   min=A,B on=(N,...) class=C arrival=S` (`running=N` for one running there at its minimum).
//!   Output: each node's window in order, and its free units.

// Test code may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::sync::Arc;
use tapfinger_core::ledger::{Ledger, Priorities, TaskState};
use tapfinger_core::protocol::{Claim, Proposal, posteriors, resolve};
use tapfinger_core::{NodeId, Resources, Round, Task, TaskId};

/// `A,B,...` as units.
fn units(s: &str) -> Resources {
    Resources(s.split(',').map(|x| x.trim().parse().unwrap()).collect())
}

/// `key=value` fields of a line, after its leading words.
fn fields(words: &[&str]) -> BTreeMap<String, String> {
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

fn node(word: &str) -> NodeId {
    NodeId(word.trim_start_matches('n').parse().unwrap())
}

fn task_id(word: &str) -> TaskId {
    TaskId(word.trim_start_matches('t').parse().unwrap())
}

fn run_resolve(case: &datadriven::TestCase) -> String {
    let committed: BTreeSet<TaskId> = case
        .args
        .get("committed")
        .map(|v| v.iter().map(|t| task_id(t)).collect())
        .unwrap_or_default();
    let mut proposals = BTreeMap::new();
    for line in case.input.lines().filter(|l| !l.trim().is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let p = match words[1] {
            "pass" => Proposal::Pass,
            "claim" => {
                let f = fields(&words[3..]);
                Proposal::Claim(Claim {
                    task: task_id(words[2]),
                    alloc: units(&f["alloc"]),
                    prob: f["prob"].parse().unwrap(),
                    headroom: f["headroom"].parse().unwrap(),
                })
            }
            other => panic!("unknown proposal {other}"),
        };
        proposals.insert(node(words[0]), p);
    }
    let out = resolve(Round { slot: 0, step: 0 }, &proposals, &committed);
    let mut s = String::new();
    for c in &out.commits {
        let claims: Vec<(NodeId, &Claim)> = proposals
            .iter()
            .filter_map(|(n, p)| match p {
                Proposal::Claim(k) if k.task == c.task => Some((*n, k)),
                _ => None,
            })
            .collect();
        let post = posteriors(&claims);
        let mine = claims.iter().position(|(n, _)| *n == c.agent).unwrap();
        writeln!(
            s,
            "commit t{} to n{} alloc={} posterior={:.3}",
            c.task.0, c.agent.0, c.alloc, post[mine]
        )
        .unwrap();
    }
    for (n, t) in &out.lost {
        writeln!(s, "lost t{} by n{}", t.0, n.0).unwrap();
    }
    writeln!(
        s,
        "contested {} slot_ended {}",
        out.contested, out.slot_ended
    )
    .unwrap();
    s
}

fn run_window(case: &datadriven::TestCase) -> String {
    let arg = |k: &str| case.args.get(k).and_then(|v| v.first()).map(String::as_str);
    let window: usize = arg("window").unwrap_or("2").parse().unwrap();
    let slot: u64 = arg("slot").unwrap_or("0").parse().unwrap();
    let aging: u64 = arg("aging").unwrap_or("0").parse().unwrap();
    let priorities = Priorities {
        honour: !case.args.contains_key("blind"),
        aging_slots: (aging > 0).then_some(aging),
    };
    let mut ledger: Ledger<()> = Ledger::new(window, 1).with_priorities(priorities);
    for line in case.input.lines().filter(|l| !l.trim().is_empty()) {
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
    let v = ledger.view(slot, 0, 1, None);
    let mut s = String::new();
    for n in &v.nodes {
        let ids: Vec<String> = n
            .window
            .iter()
            .map(|&i| format!("t{}", v.pending[i].task.id.0))
            .collect();
        writeln!(s, "n{}: window [{}] free {}", n.id.0, ids.join(" "), n.free).unwrap();
    }
    s
}

#[test]
fn golden_cases() {
    datadriven::walk("tests/testdata", |f| {
        f.run(|case| -> String {
            match case.directive.as_str() {
                "resolve" => run_resolve(case),
                "window" => run_window(case),
                other => panic!("unknown directive {other}"),
            }
        })
    });
}
