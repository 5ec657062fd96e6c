//! The families of generated scenarios: what sets `gen:N`, `gen-wide:N` and `gen-long:N` apart
//! (box sizes, how far a class scales, how long its tasks take in slots). The drawing itself is
//! the parent module's, the same for every family.

use rand::RngExt as _;

/// A family of generated scenarios: how large its boxes are, how far its classes scale and how
/// many slots its tasks take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// `gen:N`: boxes of up to 32 cores and 8 GPUs; a class uses up to 4× its minimum demand.
    #[default]
    Base,
    /// `gen-wide:N`: boxes of up to 32 cores and 32 GPUs; a class uses up to 16× its minimum.
    Wide,
    /// `gen-long:N`: the base family's boxes; classes that need little (1–2 cores, 1 GPU, one
    /// memory unit) and scale to 16× that, every one a speed table; tasks 3–10 times as many
    /// slots long ([`Family::time_scale`]) and twice as many per node, so that a box runs many
    /// long tasks at once.
    Long,
    /// `gen-gavel:N`: GPU boxes of mixed types (K80, P100, V100) and Gavel's job types at
    /// fixed scale factors, their speeds per type from Gavel's measured throughputs
    /// (`generate/gavel.rs`; drawn apart from the other families).
    Gavel,
    /// `gen-recur:N`: `gen:N`'s boxes, classes and arrivals, every task a run of a user's
    /// recurring job whose history predicts its size ([`crate::workload::recurring`]: heavy-tailed job
    /// sizes, each run within the job's own spread, 3Sigma's and Helios' error bands).
    Recur,
    /// `gen-blind:N`: the same jobs and users, but each run's size drawn on its own: a job's
    /// history says nothing its class's does not.
    Blind,
    /// `gen-declared:N`: `gen-recur:N`'s jobs, every task declaring its work (its size), as a
    /// spec's `work` does: the speed estimator knows each task's own size from its submission.
    Declared,
}

/// The families, in the order their prefixes are tried.
pub(super) const ALL: [Family; 7] = [
    Family::Base,
    Family::Wide,
    Family::Long,
    Family::Gavel,
    Family::Recur,
    Family::Blind,
    Family::Declared,
];

impl Family {
    /// The prefix of its scenarios' names.
    pub fn prefix(self) -> &'static str {
        match self {
            Self::Base => super::PREFIX,
            Self::Wide => "gen-wide:",
            Self::Long => "gen-long:",
            Self::Gavel => "gen-gavel:",
            Self::Recur => "gen-recur:",
            Self::Blind => "gen-blind:",
            Self::Declared => "gen-declared:",
        }
    }

    /// Its scenario of generator seed `seed`, by name (`gen:42`, `gen-wide:42`).
    pub fn scenario(self, seed: u64) -> String {
        format!("{}{seed}", self.prefix())
    }

    /// The `generate` flag that names it (empty for the base family).
    pub(super) fn flag(self) -> &'static str {
        match self {
            Self::Base => "",
            Self::Wide => " --family wide",
            Self::Long => " --family long",
            Self::Gavel => " --family gavel",
            Self::Recur => " --family recur",
            Self::Blind => " --family blind",
            Self::Declared => " --family declared",
        }
    }

    /// How many times its minimum demand a class can use, per kind.
    pub(super) fn cap_factor(self) -> u32 {
        match self {
            Self::Base | Self::Gavel | Self::Recur | Self::Blind | Self::Declared => 4,
            Self::Wide | Self::Long => 16,
        }
    }

    /// The largest minimum demand (cores, GPUs, memory units) a generic class is drawn with.
    pub(super) fn most_minimum(self) -> [u32; 3] {
        match self {
            Self::Base | Self::Wide | Self::Gavel | Self::Recur | Self::Blind | Self::Declared => {
                [4, 2, 4]
            }
            Self::Long => [2, 1, 1],
        }
    }

    /// How many tasks per node an episode has.
    pub(super) fn tasks_per_node(self) -> std::ops::RangeInclusive<u32> {
        match self {
            Self::Base | Self::Wide | Self::Gavel | Self::Recur | Self::Blind | Self::Declared => {
                8..=24
            }
            Self::Long => 16..=48,
        }
    }

    /// Whether its tasks are runs of recurring jobs ([`crate::workload::recurring`]), and whether their
    /// history predicts their sizes.
    pub(super) fn recurring(self) -> Option<bool> {
        match self {
            Self::Recur | Self::Declared => Some(true),
            Self::Blind => Some(false),
            _ => None,
        }
    }

    /// Whether every task declares its work ([`crate::scenario::ScenarioFile::declare_work`]).
    pub(super) fn declares_work(self) -> bool {
        self == Self::Declared
    }

    /// Whether every class that is not a measured profile is a speed table. The synthetic
    /// formula's progress per slot has no time unit, so only a table's seconds can be read with
    /// slots of another length ([`Family::time_scale`]).
    pub(super) fn tables_only(self) -> bool {
        self == Self::Long
    }

    /// How many times as many slots its scenario `seed`'s tasks take as the base family's
    /// (the scenario's `slot_seconds` is its inverse): 1, or for the long family log-uniform
    /// in 3–10, from a stream of its own. Why: every time feature of the general schema is in
    /// slots, and a user's slot is a setting (the presets' 60-second slots make hour-long jobs
    /// 50–800 slots long), while the base family's tasks take 4–30 slots alone. Some features
    /// add up over the tasks a box runs (the delay a start adds to them), so many long tasks on
    /// one box reach values the base family never shows: a policy trained on it alone held
    /// tasks back from the large boxes of `converging-edge` and `rlpto-edge`, and not where
    /// their tasks were five times shorter or ten per node (2026-11-28).
    pub fn time_scale(self, seed: u64) -> f64 {
        match self {
            Self::Base | Self::Wide | Self::Gavel | Self::Recur | Self::Blind | Self::Declared => {
                1.0
            }
            Self::Long => {
                let mut rng = tapfinger::seeded_rng(seed ^ 0x6C6F_6E67_2D73_6C6F);
                rng.random_range(3f64.ln()..10f64.ln()).exp()
            }
        }
    }

    /// The sizes a GPU box's (cores, GPUs, memory units) and a CPU-only box's (cores, memory
    /// units) capacities are drawn from.
    pub(super) fn box_sizes(self) -> [&'static [u32]; 5] {
        match self {
            Self::Base | Self::Long | Self::Gavel | Self::Recur | Self::Blind | Self::Declared => [
                &[8, 16, 32],
                &[1, 2, 4, 8],
                &[8, 16, 32],
                &[2, 4, 8, 16],
                &[2, 4, 8, 16],
            ],
            Self::Wide => [
                &[16, 24, 32],
                &[4, 8, 16, 32],
                &[16, 24, 32],
                &[4, 8, 16, 32],
                &[4, 8, 16, 32],
            ],
        }
    }
}
