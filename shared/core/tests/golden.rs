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

#[path = "support/text.rs"]
mod text;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use tapfinger_core::ledger::Priorities;
use tapfinger_core::protocol::{Claim, Proposal, posteriors, resolve};
use tapfinger_core::{NodeId, Round, TaskId};
use text::{fields, node, task_id, units};

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
    let ledger = text::ledger(&case.input, window, priorities);
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
