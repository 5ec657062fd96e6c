//! What the cluster knows of how big a task is before it runs: a distribution of size per key,
//! learned from the tasks that finished, with its own measured error.
//!
//! A task's size is whatever the caller measures consistently — its attained service at the end
//! (units of the ledger's service kind times slots, what least-attained-service and Gittins
//! compare), or its declared work. The book never sees a speed model or a true size: only what a
//! caller reports of a task that finished.
//!
//! A task is looked up from the most specific key that has enough history to the least
//! ([`Level`]): the recurring job (its submitter and job name), then the submitter's tasks of
//! its class and minimum demand, then its class, then every task. Published systems key the same
//! way (Helios: job name within a user, then the user; Alibaba PAI: group tag, user and GPU
//! count), and their figures say the specific keys are worth most where jobs recur.
//!
//! Each key keeps its latest [`SAMPLES`] sizes (the quantiles are exact over them, and the
//! oldest go first, so a job whose sizes drift is followed), and each level at most
//! [`MAX_KEYS`] keys (the key touched longest ago goes first): memory is bounded whatever the
//! workload. A hand-kept window rather than a quantile-sketch crate: with at most 64 samples a
//! sort is exact and cheap, and a sketch cannot forget its oldest samples.
//!
//! The ledger keeps one ([`crate::ledger::Ledger::sizes`]), fed with the attained service of
//! every task that ran and succeeded on its books, on the simulator and the agents alike.
//!
//! The error is measured as it would have been met: each finished task is first predicted from
//! the book as it stood, then learned ([`SizeBook::observe`]), so [`SizeBook::error`] is the
//! book's out-of-sample error on the cluster's own tasks.

use crate::{Resources, TaskTypeId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// Sizes kept per key (the latest).
pub const SAMPLES: usize = 64;

/// Keys kept per level (those touched longest ago are forgotten first).
pub const MAX_KEYS: usize = 4096;

/// Sizes a key needs before it predicts (fewer: the next level down does).
pub const MIN_SAMPLES: usize = 3;

/// Who submitted a task and which recurring job it is, as far as the submitter says.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Identity {
    /// The submitter (a user name, or the API identity that submitted it).
    pub submitter: Option<String>,
    /// The recurring job it is an instance of (a job name, or a group tag).
    pub job: Option<String>,
}

/// A task with no submitter and no job name (what a spec that names neither gets).
pub static ANONYMOUS: Identity = Identity {
    submitter: None,
    job: None,
};

/// What a task is looked up by.
#[derive(Debug, Clone, PartialEq)]
pub struct Query<'a> {
    /// Its identity.
    pub identity: &'a Identity,
    /// Its class.
    pub class: TaskTypeId,
    /// Its minimum demand.
    pub min_demand: &'a Resources,
}

/// How specific the key a prediction came from is, most specific first.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
pub enum Level {
    /// The recurring job: same submitter and job name.
    Job,
    /// The submitter's tasks of the same class and minimum demand.
    Submitter,
    /// Every task of the class.
    Class,
    /// Every task.
    #[default]
    All,
}

impl Level {
    /// Every level, most specific first.
    pub const ALL: [Level; 4] = [Level::Job, Level::Submitter, Level::Class, Level::All];
}

/// A key of one level (its level is where it is kept).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
enum Key {
    /// (submitter, job).
    Job(String, String),
    /// (submitter, class, minimum demand's units).
    Submitter(String, u16, Vec<u32>),
    /// A class.
    Class(u16),
    /// Everything.
    All,
}

impl Query<'_> {
    /// This task's key at `level`, if it has one there (no job key without a job name and a
    /// submitter; no submitter key without a submitter).
    fn key(&self, level: Level) -> Option<Key> {
        let who = self.identity.submitter.clone();
        match level {
            Level::Job => Some(Key::Job(who?, self.identity.job.clone()?)),
            Level::Submitter => Some(Key::Submitter(
                who?,
                self.class.0,
                self.min_demand.0.clone(),
            )),
            Level::Class => Some(Key::Class(self.class.0)),
            Level::All => Some(Key::All),
        }
    }
}

/// The sizes seen under one key.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct History {
    /// The latest sizes, oldest first.
    sizes: VecDeque<f64>,
    /// When it was last touched (the book's counter).
    touched: u64,
    /// Its prediction, made when it last learned (views read it at every decision step; a
    /// book read back from JSON makes it at each look-up until the key learns again).
    #[serde(skip)]
    cached: Option<Arc<Prediction>>,
}

/// Two histories are alike when their sizes and clocks are (the cached prediction follows
/// from the sizes, and a book read back from JSON has none).
impl PartialEq for History {
    fn eq(&self, other: &Self) -> bool {
        self.sizes == other.sizes && self.touched == other.touched
    }
}

/// A prediction: quantiles of the size distribution of the key it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The key's level.
    pub level: Level,
    /// Its samples (at most [`SAMPLES`]).
    pub samples: usize,
    /// The 10th, 50th and 90th percentiles.
    pub quantiles: [f64; 3],
    /// The mean.
    pub mean: f64,
    /// The sizes it rests on, ascending (for a policy that needs the whole distribution:
    /// Gittins' index).
    pub sorted: Vec<f64>,
}

impl Prediction {
    /// The median.
    pub fn median(&self) -> f64 {
        self.quantiles[1]
    }

    /// The expected size still to come of a task that has attained `attained`: the mean of the
    /// sizes above it, less it; where none is above, the largest seen, doubled, less it (a task
    /// that outlived its history is not about to end).
    pub fn remaining(&self, attained: f64) -> f64 {
        let above: Vec<f64> = self
            .sorted
            .iter()
            .copied()
            .filter(|s| *s > attained)
            .collect();
        if above.is_empty() {
            let top = self.sorted.last().copied().unwrap_or(attained);
            return (2.0 * top.max(attained) - attained).max(0.0);
        }
        above.iter().sum::<f64>() / above.len() as f64 - attained
    }
}

impl Prediction {
    /// Gittins' index of a task that has attained `attained` (higher: serve sooner): over every
    /// further quantum `Δ` up to each size above `attained`, the chance it ends within `Δ` over
    /// the work it is expected to take meanwhile, at its best `Δ`. It ranks short-looking and
    /// nearly done tasks first and, unlike the remaining mean, lifts a task whose history says
    /// many of its kind end soon even where a few run long. 0 where no size seen is above
    /// `attained` (the task outlived its history: [`Prediction::remaining`] speaks for it).
    pub fn gittins(&self, attained: f64) -> f64 {
        let above: Vec<f64> = self
            .sorted
            .iter()
            .map(|s| s - attained)
            .filter(|r| *r > 0.0)
            .collect();
        let n = above.len() as f64;
        let mut best = 0.0_f64;
        // `above` is ascending: a quantum up to the i-th ends tasks 0..=i.
        for (i, &q) in above.iter().enumerate() {
            let ended = (i + 1) as f64 / n;
            let work = above.iter().map(|r| r.min(q)).sum::<f64>() / n;
            if work > 0.0 {
                best = best.max(ended / work);
            }
        }
        best
    }
}

/// The book's own error, measured out of sample ([`SizeBook::observe`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SizeError {
    /// Tasks predicted before they were learned.
    pub predicted: u64,
    /// Of them, those whose median was within 2× of their size.
    pub within_2x: u64,
    /// Of them, those whose size fell between the 10th and 90th percentiles.
    pub inside_80: u64,
    /// Sum of |log2(median / size)| (for the mean).
    pub log2_sum: f64,
}

impl SizeError {
    /// The share of predictions within 2× (None: none made).
    pub fn share_within_2x(&self) -> Option<f64> {
        (self.predicted > 0).then(|| self.within_2x as f64 / self.predicted as f64)
    }

    /// The share of sizes inside the predicted 80 % band.
    pub fn share_inside_80(&self) -> Option<f64> {
        (self.predicted > 0).then(|| self.inside_80 as f64 / self.predicted as f64)
    }

    /// The mean |log2(median / size)|: 1 is "off by 2× on average".
    pub fn mean_log2(&self) -> Option<f64> {
        (self.predicted > 0).then(|| self.log2_sum / self.predicted as f64)
    }
}

/// The cluster's size knowledge (module doc).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SizeBook {
    /// Per level, its keys' histories (a list in JSON, whose map keys must be strings).
    #[serde(with = "as_list")]
    levels: BTreeMap<Level, BTreeMap<Key, History>>,
    /// A counter of observations (what "touched longest ago" is measured on).
    clock: u64,
    /// The error so far, overall.
    error: SizeError,
    /// The error so far per level the predictions came from.
    by_level: BTreeMap<Level, SizeError>,
}

/// Least size taken (a task that did nothing still took a moment; logs need it positive).
pub const MIN_SIZE: f64 = 1e-9;

impl SizeBook {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    /// The distribution of `q`'s size from the most specific key with at least
    /// [`MIN_SAMPLES`] sizes (None: nothing finished yet).
    pub fn predict(&self, q: &Query<'_>) -> Option<Arc<Prediction>> {
        Level::ALL.iter().find_map(|&level| {
            let h = self.levels.get(&level)?.get(&q.key(level)?)?;
            // The last level predicts from a single size: better than nothing at all.
            let enough = if level == Level::All { 1 } else { MIN_SAMPLES };
            (h.sizes.len() >= enough).then(|| {
                h.cached
                    .clone()
                    .unwrap_or_else(|| Arc::new(prediction(level, &h.sizes)))
            })
        })
    }

    /// A task of `q` finished at `size`: first its prediction from the book as it stood is
    /// scored (the error), then the size is learned under each of its keys.
    pub fn observe(&mut self, q: &Query<'_>, size: f64) {
        if !size.is_finite() {
            return;
        }
        let size = size.max(MIN_SIZE);
        if let Some(p) = self.predict(q) {
            let median = p.median().max(MIN_SIZE);
            let off = (median / size).log2().abs();
            let inside = p.quantiles[0] <= size && size <= p.quantiles[2];
            for e in [&mut self.error, self.by_level.entry(p.level).or_default()] {
                e.predicted += 1;
                e.within_2x += u64::from(off <= 1.0);
                e.inside_80 += u64::from(inside);
                e.log2_sum += off;
            }
        }
        self.clock += 1;
        let clock = self.clock;
        for level in Level::ALL {
            let Some(key) = q.key(level) else { continue };
            let keys = self.levels.entry(level).or_default();
            let h = keys.entry(key).or_default();
            h.sizes.push_back(size);
            if h.sizes.len() > SAMPLES {
                h.sizes.pop_front();
            }
            h.touched = clock;
            h.cached = Some(Arc::new(prediction(level, &h.sizes)));
            if keys.len() > MAX_KEYS {
                // The key touched longest ago goes (never the one just touched).
                if let Some(old) = keys
                    .iter()
                    .min_by_key(|(_, h)| h.touched)
                    .map(|(k, _)| k.clone())
                {
                    keys.remove(&old);
                }
            }
        }
    }

    /// The book's out-of-sample error, overall.
    pub fn error(&self) -> SizeError {
        self.error
    }

    /// The book's out-of-sample error per level the predictions came from.
    pub fn error_by_level(&self) -> &BTreeMap<Level, SizeError> {
        &self.by_level
    }

    /// Sizes learned so far (what a driver saving the book compares to know it changed).
    pub fn learned(&self) -> u64 {
        self.clock
    }

    /// Keys kept at `level`.
    pub fn keys(&self, level: Level) -> usize {
        self.levels.get(&level).map_or(0, BTreeMap::len)
    }

    /// The same book for a cluster that numbers its classes and spells its names otherwise:
    /// each class `c` as `map(c)` (what it learned of a class `map` drops, `None`, forgotten),
    /// each submitter and job name `n` as `name(n)` (two names spelt alike then share the later
    /// key's history). A twin numbers its classes by the order of its workload's, not by the
    /// cluster's ids, and writes names as its scenario's CSV takes them.
    pub fn renumbered(
        &self,
        map: impl Fn(u16) -> Option<u16>,
        name: impl Fn(&str) -> String,
    ) -> SizeBook {
        let levels = self
            .levels
            .iter()
            .map(|(level, keys)| {
                let keys = keys
                    .iter()
                    .filter_map(|(k, h)| {
                        let k = match k {
                            Key::Job(who, job) => Key::Job(name(who), name(job)),
                            Key::Submitter(who, c, min) => {
                                Key::Submitter(name(who), map(*c)?, min.clone())
                            }
                            Key::Class(c) => Key::Class(map(*c)?),
                            Key::All => Key::All,
                        };
                        Some((k, h.clone()))
                    })
                    .collect();
                (*level, keys)
            })
            .collect();
        SizeBook {
            levels,
            ..self.clone()
        }
    }
}

/// The prediction of `sizes` (not empty) at `level`.
fn prediction(level: Level, sizes: &VecDeque<f64>) -> Prediction {
    let mut sorted: Vec<f64> = sizes.iter().copied().collect();
    sorted.sort_by(f64::total_cmp);
    let q = |p: f64| {
        // Linear between the order statistics (type 7, as numpy's default).
        let x = p * (sorted.len() - 1) as f64;
        let (i, f) = (x.floor() as usize, x.fract());
        let hi = sorted[(i + 1).min(sorted.len() - 1)];
        sorted[i] + f * (hi - sorted[i])
    };
    Prediction {
        level,
        samples: sorted.len(),
        quantiles: [q(0.1), q(0.5), q(0.9)],
        mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
        sorted,
    }
}

/// The levels' maps as a list of (level, key, history), for formats whose map keys are strings.
mod as_list {
    use super::{History, Key, Level};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    type Levels = BTreeMap<Level, BTreeMap<Key, History>>;

    pub(super) fn serialize<S: Serializer>(levels: &Levels, s: S) -> Result<S::Ok, S::Error> {
        let list: Vec<(&Level, &Key, &History)> = levels
            .iter()
            .flat_map(|(l, keys)| keys.iter().map(move |(k, h)| (l, k, h)))
            .collect();
        list.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Levels, D::Error> {
        let list: Vec<(Level, Key, History)> = Vec::deserialize(d)?;
        let mut out = Levels::new();
        for (l, k, h) in list {
            out.entry(l).or_default().insert(k, h);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A distribution of many short sizes and one long one ranks ahead of a certain size
    /// longer than the short ones (its index is the chance it ends soon over the work that
    /// takes), though its mean is larger; once it outlived the short ones, behind.
    #[test]
    fn gittins_index_ranks_a_likely_short_task_first_until_it_outlives_its_history() {
        let of = |sorted: Vec<f64>| Prediction {
            level: Level::All,
            samples: sorted.len(),
            quantiles: [0.0; 3],
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            sorted,
        };
        let mostly_short = of(vec![1.0, 1.0, 1.0, 100.0]);
        let ten = of(vec![10.0, 10.0, 10.0]);
        assert!((mostly_short.gittins(0.0) - 0.75).abs() < 1e-12);
        assert!((ten.gittins(0.0) - 0.1).abs() < 1e-12);
        assert!(mostly_short.mean > ten.mean);
        assert!((mostly_short.gittins(2.0) - 1.0 / 98.0).abs() < 1e-12);
        assert!(mostly_short.gittins(2.0) < ten.gittins(2.0));
        assert_eq!(ten.gittins(10.0), 0.0, "outlived its history");
    }

    fn who(submitter: &str, job: &str) -> Identity {
        Identity {
            submitter: Some(submitter.into()),
            job: Some(job.into()),
        }
    }

    fn query<'a>(id: &'a Identity, class: u16, min: &'a Resources) -> Query<'a> {
        Query {
            identity: id,
            class: TaskTypeId(class),
            min_demand: min,
        }
    }

    /// A book renumbered for a twin predicts for the twin's class numbers and spellings what
    /// it predicted for the cluster's, and forgets a class the twin does not have.
    #[test]
    fn a_renumbered_book_predicts_under_the_new_numbers_and_names() {
        let mut b = SizeBook::new();
        let one = Resources(vec![1, 0, 0]);
        let alice = who("alice,b", "train");
        for s in [10.0, 20.0, 30.0] {
            b.observe(&query(&alice, 7, &one), s);
        }
        for s in [1.0, 2.0, 3.0] {
            b.observe(&query(&Identity::default(), 9, &one), s);
        }
        let r = b.renumbered(|c| (c == 7).then_some(0), |n| n.replace(',', "_"));
        let twin_alice = who("alice_b", "train");
        let p = r.predict(&query(&twin_alice, 0, &one)).unwrap();
        assert_eq!(
            (p.level, p.median()),
            (
                Level::Job,
                b.predict(&query(&alice, 7, &one)).unwrap().median()
            )
        );
        // Only the job's name changed: its submitter's and class's keys moved with it.
        let eve = who("eve", "other");
        let p = r.predict(&query(&eve, 0, &one)).unwrap();
        assert_eq!((p.level, p.median()), (Level::Class, 20.0));
        // Class 9 is gone: a task of the twin's class 1 falls back to everything.
        let p = r.predict(&query(&eve, 1, &one)).unwrap();
        assert_eq!(p.level, Level::All);
        assert_eq!(r.learned(), b.learned());
    }

    /// A recurring job is predicted from its own runs once it has three; before that, from
    /// the submitter's tasks of its class and demand, then its class, then everything.
    #[test]
    fn the_most_specific_key_with_history_predicts() {
        let mut b = SizeBook::new();
        let one = Resources(vec![1, 0, 0]);
        let (alice_train, alice_eval) = (who("alice", "train"), who("alice", "eval"));
        let nobody = Identity::default();
        assert!(
            b.predict(&query(&nobody, 0, &one)).is_none(),
            "nothing finished"
        );
        b.observe(&query(&nobody, 1, &one), 500.0);
        let p = b.predict(&query(&alice_train, 0, &one)).unwrap();
        assert_eq!((p.level, p.median()), (Level::All, 500.0));
        for size in [10.0, 12.0, 11.0] {
            b.observe(&query(&alice_eval, 0, &one), size);
        }
        // alice's `train` has no runs yet: her class-0 one-core tasks speak for it.
        let p = b.predict(&query(&alice_train, 0, &one)).unwrap();
        assert_eq!((p.level, p.median()), (Level::Submitter, 11.0));
        for size in [100.0, 120.0, 110.0] {
            b.observe(&query(&alice_train, 0, &one), size);
        }
        let p = b.predict(&query(&alice_train, 0, &one)).unwrap();
        assert_eq!((p.level, p.median()), (Level::Job, 110.0));
        assert_eq!(p.quantiles, [102.0, 110.0, 118.0]);
        // Bob's class-0 task: the class; a class never seen: everything.
        let bob = who("bob", "train");
        let p = b.predict(&query(&bob, 0, &one)).unwrap();
        assert_eq!(p.level, Level::Class);
        assert_eq!(p.samples, 6);
        assert_eq!(b.predict(&query(&bob, 9, &one)).unwrap().level, Level::All);
    }

    /// The error is scored before each size is learned: a job of steady sizes is soon
    /// predicted within 2x, a first task never counts, and the book follows a job whose size
    /// changed once its window holds the new sizes.
    #[test]
    fn the_error_is_out_of_sample_and_drift_is_followed() {
        let mut b = SizeBook::new();
        let one = Resources(vec![1, 0, 0]);
        let id = who("carol", "nightly");
        let q = query(&id, 0, &one);
        b.observe(&q, 100.0);
        assert_eq!(b.error().predicted, 0, "nothing predicted the first");
        for _ in 0..9 {
            b.observe(&q, 100.0);
        }
        let e = b.error();
        assert_eq!((e.predicted, e.within_2x), (9, 9));
        assert_eq!(e.mean_log2(), Some(0.0));
        // The job grows tenfold: the first few are missed, then it is followed.
        for _ in 0..SAMPLES {
            b.observe(&q, 1000.0);
        }
        assert_eq!(b.predict(&q).unwrap().median(), 1000.0);
        let e = b.error();
        assert!(
            e.predicted - e.within_2x <= (SAMPLES / 2) as u64 + 1,
            "{e:?}"
        );
        assert!(e.share_within_2x().unwrap() > 0.5);
        assert_eq!(b.error_by_level()[&Level::Job].predicted, e.predicted - 2);
    }

    #[test]
    fn the_expected_remaining_size_grows_with_what_a_task_outlived() {
        let mut b = SizeBook::new();
        let one = Resources(vec![1, 0, 0]);
        let id = Identity::default();
        let q = query(&id, 0, &one);
        for size in [1.0, 1.0, 1.0, 1.0, 100.0] {
            b.observe(&q, size);
        }
        let p = b.predict(&q).unwrap();
        assert!((p.remaining(0.0) - 20.8).abs() < 1e-9);
        // Past the short ones, only the long one is left: 98 to go.
        assert!((p.remaining(2.0) - 98.0).abs() < 1e-9);
        // Past everything seen: as much again as the largest.
        assert!((p.remaining(150.0) - 150.0).abs() < 1e-9);
    }

    #[test]
    fn it_survives_a_restart_as_json() {
        let mut b = SizeBook::new();
        let one = Resources(vec![1, 0, 2]);
        let id = who("dan", "etl");
        for i in 0..20 {
            b.observe(&query(&id, 3, &one), f64::from(i));
        }
        let text = serde_json::to_string(&b).unwrap();
        let back: SizeBook = serde_json::from_str(&text).unwrap();
        assert_eq!(
            back.predict(&query(&id, 3, &one)),
            b.predict(&query(&id, 3, &one))
        );
        assert_eq!(back.error(), b.error());
        assert_eq!(back.keys(Level::Job), 1);
    }

    #[test]
    fn memory_is_bounded_by_keys_and_samples() {
        let mut b = SizeBook::new();
        let one = Resources(vec![1, 0, 0]);
        for i in 0..(MAX_KEYS + 50) {
            let id = who(&format!("u{i}"), "job");
            b.observe(&query(&id, 0, &one), 1.0);
        }
        assert_eq!(b.keys(Level::Job), MAX_KEYS);
        assert_eq!(b.keys(Level::Submitter), MAX_KEYS);
        // The oldest users went; the latest are kept.
        let first = who("u0", "job");
        let last = who(&format!("u{}", MAX_KEYS + 49), "job");
        assert!(
            b.levels[&Level::Job].contains_key(&query(&last, 0, &one).key(Level::Job).unwrap())
        );
        assert!(
            !b.levels[&Level::Job].contains_key(&query(&first, 0, &one).key(Level::Job).unwrap())
        );
        let all = &b.levels[&Level::All][&Key::All];
        assert_eq!(all.sizes.len(), SAMPLES);
    }

    proptest! {
        /// Whatever finishes, a prediction's quantiles are ordered and inside what was seen
        /// under its key, its samples at most [`SAMPLES`], and its expected remaining size is
        /// never negative.
        #[test]
        fn predictions_are_well_formed(
            obs in proptest::collection::vec((0u8..4, 0u8..3, 0u16..3, 0.0f64..1e6), 1..200),
            attained in 0.0f64..2e6,
        ) {
            let mut b = SizeBook::new();
            let min = Resources(vec![1, 0, 0]);
            let ids: Vec<Identity> = (0..4).map(|u| who(&format!("u{u}"), "j")).collect();
            for (u, _, class, size) in &obs {
                b.observe(&query(&ids[*u as usize], *class, &min), *size);
            }
            for (u, _, class, _) in &obs {
                let p = b.predict(&query(&ids[*u as usize], *class, &min)).unwrap();
                prop_assert!(p.samples <= SAMPLES && p.samples == p.sorted.len());
                prop_assert!(p.quantiles[0] <= p.quantiles[1] && p.quantiles[1] <= p.quantiles[2]);
                prop_assert!(p.sorted[0] <= p.quantiles[0]);
                prop_assert!(p.quantiles[2] <= p.sorted[p.samples - 1]);
                prop_assert!(p.remaining(attained) >= 0.0);
            }
            let e = b.error();
            prop_assert!(e.within_2x <= e.predicted && e.inside_80 <= e.predicted);
            prop_assert_eq!(e.predicted, obs.len() as u64 - 1);
        }
    }
}
