//! The coordinator's learning core, without network: experience in, PPO updates with the
//! simulator's trainer ([`tapfinger_sim::train::Trainer::learn`] — one trainer, two data sources),
//! an evaluation gate, signed publication, and checkpoints that survive a crash.
//!
//! State on disk under `data_dir`:
//! - `trainer/` — the trainer's checkpoint (`model.safetensors`, `optim.bpk`, `train.json`, curve), written
//!   after every update; a restarted coordinator resumes from it;
//! - `published/v<N>/` — every published version (`model.safetensors`, `train.json`, `announcement.json`);
//! - `state.json` — counters and the last evaluation.
//!
//! The gate: a candidate (the trainer's weights after an update) is evaluated greedily and
//! published only if its average JCT is not worse than the published version's by more than
//! `tolerance` slots: on the twin of the workload the guard judged last, where there is one and
//! the model is a general one (any cluster's inputs), so that a version is judged on the
//! cluster it serves; otherwise on the configured scenario's validation workloads.

use crate::config::CoordinatorConfig;
use libp2p::identity::Keypair;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tapfinger::NodeId;
use tapfinger::model::Experience;
use tapfinger::model::net::Net;
use tapfinger_net::learn::{Announcement, Checkpoint, hex};
use tapfinger_sim::train::{CONFIG_FILE, MODEL_FILE, TrainConfig, Trainer};
use tapfinger_sim::{Scenario, Simulator};

/// One agent's batch as the coordinator keeps it until an update uses it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Batch {
    /// The reporting node.
    pub node: NodeId,
    /// Its experience.
    pub exp: Experience,
}

/// The last evaluation of a candidate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// Candidate's greedy average JCT (slots).
    pub candidate_jct: f64,
    /// The published version's.
    pub published_jct: f64,
    /// Whether it was published.
    pub published: bool,
    /// The version it became (if published).
    pub version: Option<u64>,
    /// What it was judged on: `twin` (the workload the guard judged last, both figures on its
    /// twin) or `scenario` (the configured scenario's validation workloads).
    #[serde(default)]
    pub on: String,
}

/// Counters and results, persisted in `state.json` and shown by `status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Published version (0: the start model, not published).
    pub version: u64,
    /// SHA-256 of the published checkpoint (hex).
    pub hash: String,
    /// Greedy average JCT of the published (or start) model on the validation workloads.
    pub published_jct: f64,
    /// Updates run.
    pub updates: u64,
    /// Decisions received per agent (node id).
    pub received: BTreeMap<u32, u64>,
    /// Value (critic) loss of the last update.
    pub critic_loss: f64,
    /// Policy loss of the last update.
    pub policy_loss: f64,
    /// Candidates the gate refused.
    pub refused: u64,
    /// The last evaluation.
    pub last_evaluation: Option<Evaluation>,
    /// Rounds whose global state the critic was given, over all updates.
    #[serde(default)]
    pub rounds_assembled: u64,
    /// Of those, rounds in which some agent's own view differed from the merged global state.
    #[serde(default)]
    pub rounds_merged: u64,
    /// Mean number of agents' reports per round in the last update.
    #[serde(default)]
    pub reports_per_round: f64,
    /// Fine-tunes on the twin run, and the last one's gate.
    #[serde(default)]
    pub tunes: u64,
    /// The last fine-tune's gate on the twin (its latest tasks).
    #[serde(default)]
    pub last_tune: Option<tapfinger_sim::tune::Gate>,
}

/// The learning core.
pub struct Learner {
    /// Its configuration.
    cfg: CoordinatorConfig,
    /// Signs published versions (agents check the signature).
    key: Keypair,
    /// The simulator's PPO trainer, fed with the agents' experience.
    trainer: Trainer,
    /// What is published (None before the first publication).
    published: Option<(Announcement, Checkpoint)>,
    /// The latest candidate, signed as a trial (None before the first update).
    trial: Option<(Announcement, Checkpoint)>,
    /// Counters and results.
    pub state: State,
}

impl std::fmt::Debug for Learner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Learner")
            .field("state", &self.state)
            .finish()
    }
}

fn io(path: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{}: {e}", path.display())
}

impl Learner {
    /// Open: resume the trainer and the published versions from `data_dir` if they exist,
    /// else start from the configured model (`start`: `shipped`, or a checkpoint directory).
    pub fn open(cfg: CoordinatorConfig, key: Keypair) -> anyhow::Result<Self> {
        std::fs::create_dir_all(cfg.data_dir.join("published"))
            .map_err(|e| io(&cfg.data_dir, e))?;
        let sim = Simulator::new(Scenario::load(&cfg.scenario)?);
        let dims = sim.dims();
        let tdir = cfg.data_dir.join("trainer");
        let resumed = tdir.join(CONFIG_FILE).exists();
        let mut trainer = if resumed {
            Trainer::resume(sim, &tdir)?
        } else {
            let (bytes, json, label) = start_checkpoint(&cfg.start)?;
            let (net, net_cfg, _) =
                tapfinger::model::checkpoint::load_net_bytes(bytes, &json, &label, &dims)
                    .map_err(|e| anyhow::anyhow!("start model: {e}"))?;
            let mut tc = TrainConfig::new(dims, cfg.seed);
            tc.net = net_cfg;
            tc.lr = cfg.lr;
            tc.epochs = cfg.epochs;
            tc.minibatch = cfg.minibatch;
            tc.eval_episodes = cfg.eval_episodes;
            tc.gamma = cfg.gamma;
            Trainer::with_net(sim, tc, net)?
        };
        trainer.threads = trainer.threads.max(1);
        // No state file: a fresh coordinator. An unreadable one is an error, never a silent
        // restart from version 0 (agents would then refuse every later announcement as old).
        let state_file = cfg.data_dir.join("state.json");
        let state: State = match std::fs::read(&state_file) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| anyhow::anyhow!("{}: {e}", state_file.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(e) => return Err(io(&state_file, e)),
        };
        let mut me = Self {
            published: None,
            trial: None,
            cfg,
            key,
            trainer,
            state,
        };
        if me.state.version > 0 {
            me.published = Some(me.read_published(me.state.version)?);
        }
        if me.state.updates > 0 {
            // The trainer resumed at its last update: that is the latest candidate.
            me.make_trial()?;
        }
        if !resumed {
            // The bar a first candidate must meet: the start model.
            me.state.published_jct = me.evaluate(&me.trainer.inference_net())?;
            me.checkpoint()?;
        }
        tracing::info!(
            resumed,
            version = me.state.version,
            published_jct = me.state.published_jct,
            "learner ready"
        );
        Ok(me)
    }

    /// The same learner opened again from what it last wrote (its trainer checkpoint, state
    /// and published versions): what an update that panicked half-way leaves is discarded.
    pub fn reopen(&self) -> anyhow::Result<Self> {
        Self::open(self.cfg.clone(), self.key.clone())
    }

    fn read_published(&self, v: u64) -> anyhow::Result<(Announcement, Checkpoint)> {
        let dir = self.cfg.data_dir.join("published").join(format!("v{v}"));
        let a: Announcement = serde_json::from_slice(
            &std::fs::read(dir.join("announcement.json")).map_err(|e| io(&dir, e))?,
        )?;
        let c = Checkpoint {
            version: v,
            model: std::fs::read(dir.join(MODEL_FILE)).map_err(|e| io(&dir, e))?,
            train_json: std::fs::read_to_string(dir.join(CONFIG_FILE)).map_err(|e| io(&dir, e))?,
        };
        a.check(&c)?;
        Ok((a, c))
    }

    /// Greedy average JCT of `net` on the validation workloads.
    pub fn evaluate(&self, net: &Net) -> anyhow::Result<f64> {
        Ok(self
            .trainer
            .evaluate_net(net, self.cfg.eval_episodes.max(1))?)
    }

    /// The announcement of the published version.
    pub fn announcement(&self) -> Option<Announcement> {
        self.published.as_ref().map(|(a, _)| a.clone())
    }

    /// A published checkpoint (only the current version is served).
    pub fn checkpoint_of(&self, version: u64) -> Option<Checkpoint> {
        self.published
            .as_ref()
            .filter(|(a, _)| a.version == version)
            .map(|(_, c)| c.clone())
    }

    /// Learn from agents' batches (each agent's batches are joined in order into one stream),
    /// then run the gate ([`Learner::consider_on`], on the twin of `judged` where given: the
    /// workload the guard judged last). Returns the evaluation.
    pub fn update(
        &mut self,
        batches: Vec<Batch>,
        judged: Option<&tapfinger::twin::Workload>,
    ) -> anyhow::Result<Evaluation> {
        let mut by_node: BTreeMap<NodeId, Experience> = BTreeMap::new();
        for b in batches {
            *self.state.received.entry(b.node.0).or_default() += b.exp.records.len() as u64;
            by_node.entry(b.node).or_default().extend(b.exp);
        }
        let agents = by_node.len().max(1) as f64;
        let ret: f64 = by_node
            .values()
            .map(|e| e.rewards.values().sum::<f64>())
            .sum::<f64>()
            / agents;
        let point = self
            .trainer
            .learn(by_node.into_values().collect(), false, f64::NAN, ret)?;
        self.state.updates += 1;
        let (rounds, reports, merged) = self.trainer.last_assembly;
        self.state.rounds_assembled += rounds as u64;
        self.state.rounds_merged += merged as u64;
        self.state.reports_per_round = if rounds > 0 {
            reports as f64 / rounds as f64
        } else {
            0.0
        };
        self.state.critic_loss = point.value_loss;
        self.state.policy_loss = point.policy_loss;
        let candidate = self.trainer.inference_net();
        let eval = self.consider_on(&candidate, judged)?;
        self.checkpoint()?;
        self.make_trial()?;
        Ok(eval)
    }

    /// The gate on the configured scenario ([`Learner::consider_on`] without a workload).
    pub fn consider(&mut self, candidate: &Net) -> anyhow::Result<Evaluation> {
        self.consider_on(candidate, None)
    }

    /// The gate: evaluate `candidate` and publish it as the next version unless it is worse
    /// than the published one by more than the tolerance. With `judged` (the workload the
    /// guard judged last) and a general model, both are replayed on its twin, whose agents
    /// start from the speed figures the cluster learned; a twin that cannot be built or run
    /// falls back to the configured scenario, and says so.
    pub fn consider_on(
        &mut self,
        candidate: &Net,
        judged: Option<&tapfinger::twin::Workload>,
    ) -> anyhow::Result<Evaluation> {
        let on_twin = match judged.filter(|_| self.trainer.cfg.net.dims.is_general()) {
            Some(w) => match self.twin_figures(candidate, w) {
                Ok(f) => Some(f),
                Err(e) => {
                    tracing::warn!(error = %e, "the gate cannot judge on the twin: on the scenario");
                    None
                }
            },
            None => None,
        };
        let (jct, bar, on) = match on_twin {
            Some((cand, published)) => (cand, published, "twin"),
            None => (
                self.evaluate(candidate)?,
                self.state.published_jct,
                "scenario",
            ),
        };
        let ok = jct <= bar + self.cfg.tolerance;
        let mut eval = Evaluation {
            candidate_jct: jct,
            published_jct: bar,
            published: ok,
            version: None,
            on: on.into(),
        };
        if ok {
            let v = self.publish(candidate)?;
            // The bar on the scenario stays what the published version does there.
            self.state.published_jct = if on == "scenario" {
                jct
            } else {
                self.evaluate(candidate)?
            };
            eval.version = Some(v);
        } else {
            self.state.refused += 1;
            tracing::info!(
                candidate = jct,
                published = bar,
                on,
                "candidate refused by the gate"
            );
        }
        self.state.last_evaluation = Some(eval.clone());
        self.save_state()?;
        Ok(eval)
    }

    /// Write `net` as a checkpoint agents load (`model.safetensors`, `train.json`) into `dir`.
    fn write_checkpoint(&self, net: &Net, dir: &Path, version: u64) -> anyhow::Result<Checkpoint> {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let weights = net
            .to_safetensors()
            .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
        std::fs::write(dir.join(MODEL_FILE), weights).map_err(|e| io(dir, e))?;
        // train.json as agents read it: the trainer's configuration and scenario.
        let meta = serde_json::json!({
            "config": self.trainer.cfg,
            "scenario": self.cfg.scenario,
            "iteration": self.trainer.iteration,
        });
        std::fs::write(dir.join(CONFIG_FILE), serde_json::to_string_pretty(&meta)?)
            .map_err(|e| io(dir, e))?;
        Ok(Checkpoint {
            version,
            model: std::fs::read(dir.join(MODEL_FILE)).map_err(|e| io(dir, e))?,
            train_json: std::fs::read_to_string(dir.join(CONFIG_FILE)).map_err(|e| io(dir, e))?,
        })
    }

    /// The trainer's current weights as a signed trial (its update number as version), for
    /// learning agents that explore with candidates.
    fn make_trial(&mut self) -> anyhow::Result<()> {
        let net = self.trainer.inference_net();
        let dir = self.cfg.data_dir.join("trial");
        let c = self.write_checkpoint(&net, &dir, self.state.updates)?;
        let a =
            Announcement::sign_trial(&self.key, &c).map_err(|e| anyhow::anyhow!("signing: {e}"))?;
        self.trial = Some((a, c));
        Ok(())
    }

    /// The latest candidate as a signed trial (none before the first update).
    pub fn trial(&self) -> Option<(Announcement, Checkpoint)> {
        self.trial.clone()
    }

    fn publish(&mut self, net: &Net) -> anyhow::Result<u64> {
        let v = self.state.version + 1;
        let dir = self.cfg.data_dir.join("published").join(format!("v{v}"));
        let c = self.write_checkpoint(net, &dir, v)?;
        let a = Announcement::sign(&self.key, &c).map_err(|e| anyhow::anyhow!("signing: {e}"))?;
        std::fs::write(
            dir.join("announcement.json"),
            serde_json::to_vec_pretty(&a)?,
        )
        .map_err(|e| io(&dir, e))?;
        self.state.version = v;
        self.state.hash = hex(&a.hash);
        self.published = Some((a, c));
        tracing::info!(version = v, hash = %self.state.hash, "published a new policy version");
        Ok(v)
    }

    /// The version in use (the published one, else the start model) for `dims`.
    fn in_use(
        &self,
        dims: &tapfinger::model::batch::Dims,
    ) -> anyhow::Result<(Net, tapfinger::model::net::NetConfig)> {
        let (bytes, json) = match &self.published {
            Some((_, c)) => (c.model.clone(), c.train_json.clone()),
            None => {
                let (b, j, _) = start_checkpoint(&self.cfg.start)?;
                (b, j)
            }
        };
        let (net, cfg, _) =
            tapfinger::model::checkpoint::load_net_bytes(bytes, &json, "version in use", dims)
                .map_err(|e| anyhow::anyhow!("the version in use on the twin: {e}"))?;
        Ok((net, cfg))
    }

    /// `candidate`'s and the version in use's average JCT on the twin of `w`.
    fn twin_figures(
        &self,
        candidate: &Net,
        w: &tapfinger::twin::Workload,
    ) -> anyhow::Result<(f64, f64)> {
        use tapfinger_sim::tune::{learned_jct, twin};
        let sim = twin(w, "twin-gate")?;
        let (published, cfg) = self.in_use(&sim.dims())?;
        Ok((
            learned_jct(&sim, candidate, &self.trainer.cfg.net)?,
            learned_jct(&sim, &published, &cfg)?,
        ))
    }

    /// Fine-tune the version in use on the twin of `w`'s earlier tasks (`tune_iterations`
    /// simulated iterations) and publish the candidate only if, on the twin of its latest
    /// `tune_holdout` share, it beats every deployable baseline, and the version in use by
    /// [`tapfinger_sim::tune::MIN_GAIN`]. The
    /// trainer that learns from the agents' experience is left as it was.
    pub fn tune_on(
        &mut self,
        w: &tapfinger::twin::Workload,
    ) -> anyhow::Result<tapfinger_sim::tune::Gate> {
        use tapfinger_sim::tune::{Tuning, fine_tune, split, twin};
        // The twin's input sizes, to load the version in use for it.
        let (train_w, _) = split(w, self.cfg.tune_holdout)?;
        let dims = twin(&train_w, "twin-train")?.dims();
        let (net, net_cfg) = self.in_use(&dims)?;
        let tuning = Tuning {
            holdout: self.cfg.tune_holdout,
            iterations: self.cfg.tune_iterations,
            budget: None,
            lr: self.cfg.lr,
            epochs: Some(self.cfg.epochs),
            minibatch: Some(self.cfg.minibatch),
            seed: self.cfg.seed ^ self.state.tunes,
            min_gain: tapfinger_sim::tune::MIN_GAIN,
        };
        let tuned = fine_tune(w, (&net, &net_cfg), &tuning, &mut |_, _| {})?;
        let (candidate, g) = (tuned.candidate, tuned.gate);
        self.state.tunes += 1;
        if g.passed {
            let v = self.publish(&candidate)?;
            // The bar the next candidate from experience must meet.
            self.state.published_jct = self.evaluate(&candidate)?;
            tracing::info!(version = v, gate = ?g, "published a version fine-tuned on the twin");
        } else {
            tracing::info!(gate = ?g, "the version fine-tuned on the twin was refused by its gate");
        }
        self.state.last_tune = Some(g.clone());
        self.save_state()?;
        Ok(g)
    }

    fn save_state(&self) -> anyhow::Result<()> {
        let p = self.cfg.data_dir.join("state.json");
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&self.state)?).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &p).map_err(|e| io(&p, e))
    }

    /// Write the trainer's checkpoint and the state.
    pub fn checkpoint(&self) -> anyhow::Result<()> {
        self.trainer.save(&self.cfg.data_dir.join("trainer"))?;
        self.save_state()
    }

    /// Training iterations so far.
    pub fn iteration(&self) -> u64 {
        self.trainer.iteration
    }

    /// Simulated agents as the data source (offline mode and tests): one episode of the
    /// configured scenario sampled from the current weights, as one batch per simulated agent.
    pub fn simulated_batches(&self, seed: u64) -> anyhow::Result<Vec<Batch>> {
        let exp = self.trainer.sample_experience(seed)?;
        let mut by_node: BTreeMap<NodeId, Experience> = BTreeMap::new();
        for r in exp.records {
            by_node.entry(r.me).or_default().records.push(r);
        }
        for l in exp.lost {
            by_node.entry(l.2).or_default().lost.insert(l);
        }
        for ((slot, node), r) in exp.rewards {
            by_node
                .entry(node)
                .or_default()
                .rewards
                .insert((slot, node), r);
        }
        Ok(by_node
            .into_iter()
            .map(|(node, exp)| Batch { node, exp })
            .collect())
    }
}

/// The start model: `shipped` (the agent's compiled-in model), `untrained` (the same network
/// with random weights, seeded), or a checkpoint directory.
pub fn start_checkpoint(start: &str) -> anyhow::Result<(Vec<u8>, String, String)> {
    use tapfinger::model::checkpoint::{GENERAL, net_config, read_files};
    let shipped = || {
        (
            GENERAL.model.to_vec(),
            GENERAL.config.to_string(),
            "shipped agent model".to_string(),
        )
    };
    match start {
        "shipped" => Ok(shipped()),
        "untrained" => {
            let (_, json, _) = shipped();
            let (cfg, _) = net_config(&json).map_err(|e| anyhow::anyhow!("{e}"))?;
            let device = burn::tensor::Device::flex();
            device.seed(UNTRAINED_SEED);
            let net = Net::new(&cfg, &device);
            let bytes = net
                .to_safetensors()
                .map_err(|e| anyhow::anyhow!("untrained model: {e}"))?;
            Ok((bytes, json, "untrained".into()))
        }
        dir => {
            let (bytes, json) =
                read_files(&PathBuf::from(dir)).map_err(|e| anyhow::anyhow!("model: {e}"))?;
            Ok((bytes, json, dir.to_string()))
        }
    }
}

/// Seed of the `untrained` start model's weights.
pub const UNTRAINED_SEED: u64 = 12345;

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dir: &Path) -> CoordinatorConfig {
        CoordinatorConfig {
            data_dir: dir.to_path_buf(),
            eval_episodes: 2,
            ..CoordinatorConfig::default()
        }
    }

    fn fresh(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tapfinger-coord-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_candidate_that_evaluates_worse_is_not_published() {
        let dir = fresh("gate");
        let mut l = Learner::open(cfg(&dir), Keypair::generate_ed25519()).unwrap();
        let bar = l.state.published_jct;
        // A deliberately worse actor: the same network with random weights.
        let untrained = Net::new(&l.trainer.cfg.net, &burn::tensor::Device::flex());
        let eval = l.consider(&untrained).unwrap();
        assert!(
            eval.candidate_jct > bar && !eval.published,
            "random weights {:.2} vs the shipped model {bar:.2}",
            eval.candidate_jct
        );
        assert_eq!((l.state.version, l.state.refused), (0, 1));
        assert!(l.announcement().is_none());
        // The start model itself is "not worse": published as version 1, signed.
        let same = l.trainer.inference_net();
        let eval = l.consider(&same).unwrap();
        assert_eq!(eval.version, Some(1));
        let a = l.announcement().unwrap();
        assert_eq!(a.verify(&l.key.public().to_peer_id()), Ok(()));
        assert_eq!(a.check(&l.checkpoint_of(1).unwrap()), Ok(()));
        std::fs::remove_dir_all(&dir).ok();
    }

    /// With a judged workload the gate replays the candidate and the version in use on its
    /// twin, not on the configured scenario: random weights are refused there, the start model
    /// itself passes, and the evaluation says where it was judged.
    #[test]
    fn the_gate_judges_on_the_twin_of_the_judged_workload() {
        let dir = fresh("twin-gate");
        // The default start: the shipped general model.
        let mut l = Learner::open(cfg(&dir), Keypair::generate_ed25519()).unwrap();
        let sim = Simulator::new(Scenario::load("hetero6").unwrap());
        let ps = tapfinger_sim::report::instances_for_seed(&sim, "tiresias", None, 100).unwrap();
        let (_, w) = tapfinger_sim::twin::observe(&sim, ps, 100).unwrap();
        let untrained = Net::new(&l.trainer.cfg.net, &burn::tensor::Device::flex());
        let eval = l.consider_on(&untrained, Some(&w)).unwrap();
        assert_eq!(eval.on, "twin");
        assert!(!eval.published, "{eval:?}");
        // The bar is the start model on the twin, not its figure on the scenario.
        let twin = tapfinger_sim::tune::twin(&w, "t").unwrap();
        let (start, scfg) = l.in_use(&twin.dims()).unwrap();
        let on_twin = tapfinger_sim::tune::learned_jct(&twin, &start, &scfg).unwrap();
        assert_eq!(eval.published_jct, on_twin);
        assert_ne!(
            on_twin, l.state.published_jct,
            "the test tells the two apart"
        );
        let same = l.trainer.inference_net();
        let eval = l.consider_on(&same, Some(&w)).unwrap();
        assert_eq!((eval.on.as_str(), eval.version), ("twin", Some(1)));
        // Without a workload: the scenario, as before.
        assert_eq!(l.consider(&same).unwrap().on, "scenario");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_restarted_learner_resumes_from_its_checkpoint() {
        let dir = fresh("resume");
        let key = Keypair::generate_ed25519();
        let mut c = cfg(&dir);
        c.tolerance = 1e9; // publish every candidate: this test is about resuming
        let (version, hash, iteration, decisions) = {
            let mut l = Learner::open(c.clone(), key.clone()).unwrap();
            let batches = l.simulated_batches(7).unwrap();
            let decisions: u64 = batches.iter().map(|b| b.exp.records.len() as u64).sum();
            assert!(decisions > 0);
            l.update(batches, None).unwrap();
            (
                l.state.version,
                l.state.hash.clone(),
                l.iteration(),
                decisions,
            )
            // Dropped without any shutdown step, as a killed process would be.
        };
        assert_eq!((version, iteration), (1, 1));
        let l = Learner::open(c, key).unwrap();
        assert_eq!(l.state.version, 1);
        assert_eq!(l.state.hash, hash);
        assert_eq!(l.iteration(), 1, "the trainer resumed, not restarted");
        assert_eq!(l.state.received.values().sum::<u64>(), decisions);
        assert_eq!(l.announcement().map(|a| a.version), Some(1));
        drop(l);
        // A damaged state file stops the coordinator with the file's name.
        std::fs::write(dir.join("state.json"), b"{ not json").unwrap();
        let err = Learner::open(cfg(&dir), Keypair::generate_ed25519())
            .err()
            .unwrap();
        assert!(err.to_string().contains("state.json"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// The state file keeps every float exactly (serde_json's default parser may be off by one
    /// unit in the last place; the restarted coordinator must report the same numbers).
    #[test]
    fn the_state_file_round_trips_floats_exactly() {
        let state = State {
            policy_loss: 0.009801897220313547,
            critic_loss: 2.396975517272949,
            published_jct: 2.504166666666667,
            ..State::default()
        };
        let back: State =
            serde_json::from_slice(&serde_json::to_vec_pretty(&state).unwrap()).unwrap();
        assert_eq!(back, state);
    }
}
