//! How a learned policy's node shares among its running tasks, as one named choice: what
//! `tapfinger-sim train --sharing` takes and reports name. A model's configuration stores it as
//! the flags it always had ([`NetConfig::elastic`], [`NetConfig::floors`],
//! [`NetConfig::gain_share`], [`NetConfig::finish_first`], [`NetConfig::hold_gpus`]), so that
//! every model file written before keeps loading; this enum is the one place their legal
//! combinations are named.

use super::net::NetConfig;

/// A sharing rule of the learned policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sharing {
    /// The allocation head chooses each task's units once, for its whole run.
    Fixed,
    /// Start at the minimum demand; re-share the spare units every slot, least attained service
    /// first (Tiresias's rule).
    Elastic,
    /// Elastic, each spare CPU and GPU unit to the task whose estimated job time it cuts by the
    /// largest fraction.
    ElasticGain,
    /// Elastic-gain, and first the fewest units that let a running task finish within the slot.
    ElasticGainFinish,
    /// Elastic above floors the allocation head chooses (the least each task holds).
    ElasticFloors,
    /// Elastic-gain above learned floors.
    ElasticGainFloors,
    /// Elastic-gain-finish above learned floors (the shipped general model's).
    ElasticGainFinishFloors,
    /// Elastic, but GPUs stay at the minimum demand (for tasks that cannot resume on new
    /// devices).
    ElasticHoldGpus,
}

impl Sharing {
    /// Every rule, in the order help and errors list them.
    pub const ALL: [Sharing; 8] = [
        Sharing::Elastic,
        Sharing::ElasticGain,
        Sharing::ElasticGainFinish,
        Sharing::ElasticFloors,
        Sharing::ElasticGainFloors,
        Sharing::ElasticGainFinishFloors,
        Sharing::ElasticHoldGpus,
        Sharing::Fixed,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Sharing::Fixed => "fixed",
            Sharing::Elastic => "elastic",
            Sharing::ElasticGain => "elastic-gain",
            Sharing::ElasticGainFinish => "elastic-gain-finish",
            Sharing::ElasticFloors => "elastic-floors",
            Sharing::ElasticGainFloors => "elastic-gain-floors",
            Sharing::ElasticGainFinishFloors => "elastic-gain-finish-floors",
            Sharing::ElasticHoldGpus => "elastic-hold-gpus",
        }
    }

    /// The flags it sets: (elastic, hold GPUs, floors, gain share, finish first).
    fn flags(self) -> (bool, bool, bool, bool, bool) {
        match self {
            Sharing::Fixed => (false, false, false, false, false),
            Sharing::Elastic => (true, false, false, false, false),
            Sharing::ElasticGain => (true, false, false, true, false),
            Sharing::ElasticGainFinish => (true, false, false, true, true),
            Sharing::ElasticFloors => (true, false, true, false, false),
            Sharing::ElasticGainFloors => (true, false, true, true, false),
            Sharing::ElasticGainFinishFloors => (true, false, true, true, true),
            Sharing::ElasticHoldGpus => (true, true, false, false, false),
        }
    }

    /// Set `net`'s sharing flags to this rule.
    pub fn apply(self, net: &mut NetConfig) {
        (
            net.elastic,
            net.hold_gpus,
            net.floors,
            net.gain_share,
            net.finish_first,
        ) = self.flags();
    }

    /// The rule `net`'s flags name (`None`: a combination no rule sets).
    pub fn of(net: &NetConfig) -> Option<Sharing> {
        let f = (
            net.elastic,
            net.hold_gpus,
            net.floors,
            net.gain_share,
            net.finish_first,
        );
        Sharing::ALL.into_iter().find(|s| s.flags() == f)
    }
}

impl std::fmt::Display for Sharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A sharing name that names no rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown sharing {0:?}; known: {known}", known = Sharing::ALL.map(Sharing::name).join(", "))]
pub struct UnknownSharing(pub String);

impl std::str::FromStr for Sharing {
    type Err = UnknownSharing;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Sharing::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| UnknownSharing(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Dims;

    /// Every rule parses from its name and round-trips through a configuration's flags; an
    /// unknown name lists them all.
    #[test]
    fn every_rule_round_trips_through_its_name_and_the_flags() {
        for s in Sharing::ALL {
            assert_eq!(s.name().parse::<Sharing>(), Ok(s));
            let mut net = NetConfig::new(Dims::general(10));
            s.apply(&mut net);
            assert_eq!(Sharing::of(&net), Some(s));
        }
        let e = "greedy".parse::<Sharing>().unwrap_err().to_string();
        assert!(Sharing::ALL.iter().all(|s| e.contains(s.name())), "{e}");
    }
}
