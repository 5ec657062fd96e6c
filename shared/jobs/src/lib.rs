//! `tapfinger-jobs`: placement of multi-node jobs that needs a solver.
//!
//! The core (`tapfinger-core`'s `placement`) holds the placement model of Yu et al.'s online
//! placement of workers and parameter servers, its plain placers (pack-first, spread, the exact
//! optimum of small instances) and the gang interface ([`PlaceNow`]). This crate adds what
//! needs an LP solver: [`lp`], the relaxation solved with `good_lp` and rounded randomly, and
//! [`placer`], the implementation a [`GangPlacer`] name stands for, which drivers pass to the
//! core (the simulator from its scenario, the agent from `agent.toml`).

pub mod lp;

use tapfinger_core::placement::gang::{GangPlacer, PlaceNow};
use tapfinger_core::placement::simple::{PackFirst, Spread};

/// The locality-aware rounding every driver uses for [`GangPlacer::Locality`].
static LOCALITY: lp::Rounding = lp::Rounding::DEFAULT;

/// The placer that `name` stands for.
pub fn placer(name: GangPlacer) -> &'static dyn PlaceNow {
    match name {
        GangPlacer::Locality => &LOCALITY,
        GangPlacer::PackFirst => &PackFirst,
        GangPlacer::Spread => &Spread,
    }
}

#[cfg(test)]
mod gang_tests;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod placer_tests {
    use super::*;

    #[test]
    fn every_name_stands_for_its_own_placer() {
        for p in GangPlacer::ALL {
            assert_eq!(placer(p).kind(), p);
        }
    }
}
