//! Property tests of the decision protocol: every member decides the same outcome whatever the
//! order in which proposals arrive, and the winner of a contested task is the posterior argmax.

// Test helpers may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use tapfinger::protocol::{Output, ProtocolConfig, posteriors};
use tapfinger::{
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

proptest! {
    #[test]
    fn same_outcome_in_any_arrival_order(
        props in proptest::collection::vec(proposal(), 1..7),
        orders in proptest::collection::vec(any::<u64>(), 7),
    ) {
        let n = props.len();
        let ids: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
        let msgs: Vec<Message> = props
            .iter()
            .enumerate()
            .map(|(i, p)| Message { version: tapfinger::protocol::PROTOCOL_VERSION, round: Round::default(), from: ids[i], proposal: p.clone(), members: Vec::new() })
            .collect();
        let mut outcomes = Vec::new();
        for (i, &me) in ids.iter().enumerate() {
            let mut m = Protocol::new(me, ids.iter().copied(), Round::default(), ProtocolConfig::default());
            // A member-specific arrival order: rotate and reverse by a random key.
            let mut order: Vec<usize> = (0..n).filter(|&j| j != i).collect();
            let len = order.len().max(1);
            order.rotate_left((orders[i] as usize) % len);
            if orders[i] % 2 == 1 { order.reverse(); }
            let mut got = None;
            // Half of the members propose first, the others last.
            if orders[i] % 3 == 0 {
                got = decided(m.propose(props[i].clone(), 0).unwrap());
            }
            for j in order {
                if let Some(d) = decided(m.receive(msgs[j].clone(), 0).unwrap()) { got = Some(d); }
            }
            if !m.has_proposed() && got.is_none() {
                got = decided(m.propose(props[i].clone(), 0).unwrap());
            }
            outcomes.push(got.expect("every member decides once all proposals are in"));
        }
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
