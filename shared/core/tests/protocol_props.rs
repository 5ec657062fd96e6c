//! Property tests of the decision protocol: every member decides the same outcome whatever the
//! order in which proposals arrive, and the winner of a contested task is the posterior argmax;
//! with gang claims, no gang is ever placed in part and no box hosts more than it stated free.

// Test helpers may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use tapfinger_core::protocol::{GangClaim, Output, ProtocolConfig, posteriors};
use tapfinger_core::{
    Claim, Message, NodeId, Proposal, Protocol, Resources, Round, RoundOutcome, TaskId,
};

fn proposal() -> impl Strategy<Value = Proposal> {
    prop_oneof![
        1 => Just(Proposal::Pass),
        3 => (0u64..4, 0.0f64..=1.0, 0.0f64..8.0, 1u32..4).prop_map(|(t, p, h, a)| Proposal::Claim(Claim {
            task: TaskId(t),
            alloc: Resources(vec![a, 1]),
            prob: p,
            headroom: h,
        })),
    ]
}

fn decided(out: Vec<Output>) -> Option<RoundOutcome> {
    out.into_iter().find_map(|o| match o {
        Output::Decided(d) => Some(d),
        Output::Send(_) => None,
    })
}

/// Every member's outcome of one round: member i states `free[i]` with its proposal, hears the
/// others in an order drawn from `orders[i]`, and proposes first or last by `orders[i]` too.
fn decide_everywhere(props: &[Proposal], free: &[Resources], orders: &[u64]) -> Vec<RoundOutcome> {
    let n = props.len();
    let ids: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
    let msgs: Vec<Message> = props
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut m = Message::new(Round::default(), ids[i], p.clone());
            m.free = free[i].clone();
            m
        })
        .collect();
    let mut outcomes = Vec::new();
    for (i, &me) in ids.iter().enumerate() {
        let mut m = Protocol::new(
            me,
            ids.iter().copied(),
            Round::default(),
            ProtocolConfig::default(),
        );
        // A member-specific arrival order: rotate and reverse by a random key.
        let mut order: Vec<usize> = (0..n).filter(|&j| j != i).collect();
        let len = order.len().max(1);
        order.rotate_left((orders[i] as usize) % len);
        if orders[i] % 2 == 1 {
            order.reverse();
        }
        let mut got = None;
        // A third of the members propose first, the others last.
        if orders[i].is_multiple_of(3) {
            got = decided(
                m.propose_offering(props[i].clone(), free[i].clone(), 0)
                    .unwrap(),
            );
        }
        for j in order {
            if let Some(d) = decided(m.receive(msgs[j].clone(), 0).unwrap()) {
                got = Some(d);
            }
        }
        if !m.has_proposed() && got.is_none() {
            got = decided(
                m.propose_offering(props[i].clone(), free[i].clone(), 0)
                    .unwrap(),
            );
        }
        outcomes.push(got.expect("every member decides once all proposals are in"));
    }
    outcomes
}

proptest! {
    #[test]
    fn same_outcome_in_any_arrival_order(
        props in proptest::collection::vec(proposal(), 1..7),
        orders in proptest::collection::vec(any::<u64>(), 7),
    ) {
        let n = props.len();
        let ids: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
        let outcomes = decide_everywhere(&props, &vec![Resources::default(); n], &orders);
        for o in &outcomes[1..] {
            prop_assert_eq!(o, &outcomes[0]);
        }
        // Each contested task went to the posterior argmax, ties to the lowest id.
        let o = &outcomes[0];
        for c in &o.commits {
            let claims: Vec<(NodeId, &Claim)> = props.iter().enumerate().filter_map(|(i, p)| match p {
                Proposal::Claim(cl) if cl.task == c.task => Some((ids[i], cl)),
                _ => None,
            }).collect();
            let post = posteriors(&claims);
            let w = claims.iter().position(|(a, _)| *a == c.agent).unwrap();
            for (k, (a, _)) in claims.iter().enumerate() {
                prop_assert!(post[w] > post[k] || (post[w] == post[k] && c.agent <= *a));
            }
            prop_assert_eq!(c.claimants as usize, claims.len());
        }
        // Every claim either committed or lost; no agent wins twice.
        let claims = props.iter().filter(|p| matches!(p, Proposal::Claim(_))).count();
        prop_assert_eq!(o.commits.len() + o.lost.len(), claims);
        prop_assert_eq!(o.slot_ended, o.commits.is_empty());
    }
}

/// A single claim, a pass, or a gang claim of 1–4 members on boxes 0..6 (tasks 10–12).
fn proposal_or_gang() -> impl Strategy<Value = Proposal> {
    prop_oneof![
        2 => proposal(),
        1 => (
            10u64..13,
            0.0f64..=1.0,
            0.0f64..8.0,
            proptest::collection::vec((0u32..6, 1u32..4, 0u32..3), 1..5),
        )
            .prop_map(|(t, p, h, members)| Proposal::Gang(GangClaim {
                task: TaskId(t),
                members: members
                    .into_iter()
                    .map(|(n, a, b)| (NodeId(n), Resources(vec![a, b])))
                    .collect(),
                prob: p,
                headroom: h,
            })),
    ]
}

proptest! {
    #[test]
    fn gangs_are_placed_whole_within_what_boxes_stated(
        props in proptest::collection::vec(proposal_or_gang(), 1..7),
        frees in proptest::collection::vec(proptest::option::of((0u32..8, 0u32..6)), 7),
        orders in proptest::collection::vec(any::<u64>(), 7),
    ) {
        let n = props.len();
        let free: Vec<Resources> = (0..n)
            .map(|i| frees[i].map_or(Resources::default(), |(a, b)| Resources(vec![a, b])))
            .collect();
        let outcomes = decide_everywhere(&props, &free, &orders);
        for o in &outcomes[1..] {
            prop_assert_eq!(o, &outcomes[0]);
        }
        let o = &outcomes[0];
        // Every claim, single or gang, either won or lost.
        let claims = props.iter().filter(|p| !matches!(p, Proposal::Pass)).count();
        prop_assert_eq!(o.commits.len() + o.gangs.len() + o.lost.len(), claims);
        prop_assert_eq!(o.slot_ended, o.commits.is_empty() && o.gangs.is_empty());
        // A placed gang is the winning claim's placement, whole.
        for g in &o.gangs {
            let claim = match &props[g.claimant.0 as usize] {
                Proposal::Gang(c) => c,
                other => panic!("gang won by a non-gang proposal {other:?}"),
            };
            prop_assert_eq!(&g.members, &claim.members);
        }
        // No box hosts more than it stated: single wins on it plus gang members on it; a box
        // that stated nothing hosts no member.
        for (b, stated) in free.iter().enumerate() {
            let on_box = |node: NodeId| node.0 as usize == b;
            let mut used = vec![0u32; 2];
            let mut hosts = false;
            for g in &o.gangs {
                for (node, a) in &g.members {
                    if on_box(*node) {
                        hosts = true;
                        used[0] += a.get(0);
                        used[1] += a.get(1);
                    }
                }
            }
            if !hosts {
                continue;
            }
            prop_assert!(!stated.is_empty(), "box {} hosts a member without stating its free units", b);
            for c in o.commits.iter().filter(|c| on_box(c.agent)) {
                used[0] += c.alloc.get(0);
                used[1] += c.alloc.get(1);
            }
            prop_assert!(Resources(used.clone()).fits_in(stated), "box {}: {:?} used of {:?}", b, used, stated);
        }
        // Members on boxes beyond the cluster (ids ≥ n) never state anything: such gangs lose.
        for g in &o.gangs {
            prop_assert!(g.members.iter().all(|(node, _)| (node.0 as usize) < n));
        }
    }
}
