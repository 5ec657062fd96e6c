//! The simulated executor: progress per tick from a speed function of the allocation, no
//! process. For tests and benchmarks with many agents on one machine.

use super::{Allocation, Enforcement, ExecError, ExecEvent, Executor};
use std::collections::BTreeMap;
use tapfinger::TaskId;
use tapfinger::spec::TaskSpec;
use tokio::sync::mpsc;

/// Progress per tick of a simulated task, from its spec and allocation.
pub type SpeedFn = std::sync::Arc<dyn Fn(&TaskSpec, &Allocation) -> f64 + Send + Sync>;

/// Simulated tasks: progress per tick from a speed function of the allocation, no process. For
/// tests and benchmarks with many agents on one machine.
pub struct SimulatedExecutor {
    /// Where progress and exits go (bounded).
    events: mpsc::Sender<ExecEvent>,
    /// Progress per second of a spec under an allocation.
    speed: SpeedFn,
    /// How often progress is reported.
    tick: std::time::Duration,
    /// Tasks running, by id.
    running: BTreeMap<TaskId, Simulated>,
}

/// A simulated task: how to stop it, its spec, and its rate (changed by a resize).
struct Simulated {
    /// Ends the task's timer early (a stop).
    stop: tokio::sync::oneshot::Sender<()>,
    /// Its spec (the speed function reads it).
    spec: TaskSpec,
    /// Its current rate, changed by a resize.
    rate: tokio::sync::watch::Sender<f64>,
}

impl SimulatedExecutor {
    /// `speed(spec, alloc)` is the progress made per `tick` (a task finishes at progress 1).
    pub fn new(events: mpsc::Sender<ExecEvent>, tick: std::time::Duration, speed: SpeedFn) -> Self {
        Self {
            events,
            speed,
            tick,
            running: BTreeMap::new(),
        }
    }
}

impl Executor for SimulatedExecutor {
    fn start(
        &mut self,
        task: TaskId,
        spec: &TaskSpec,
        alloc: &Allocation,
    ) -> Result<Enforcement, ExecError> {
        // Tasks that completed on their own dropped their receiver: forget them.
        self.running.retain(|_, s| !s.stop.is_closed());
        if self.running.contains_key(&task) {
            return Err(ExecError::AlreadyRunning(task));
        }
        let rate = (self.speed)(spec, alloc);
        if !(rate.is_finite() && rate > 0.0) {
            return Err(ExecError::Spawn {
                task,
                reason: format!("simulated speed {rate} makes no progress"),
            });
        }
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let (rate_tx, rate_rx) = tokio::sync::watch::channel(rate);
        self.running.insert(
            task,
            Simulated {
                stop: tx,
                spec: spec.clone(),
                rate: rate_tx,
            },
        );
        let events = self.events.clone();
        let tick = self.tick;
        tokio::spawn(async move {
            let mut p = 0.0f64;
            let mut interval = tokio::time::interval(tick);
            interval.tick().await;
            loop {
                tokio::select! {
                    _ = interval.tick() => {
                        p = (p + *rate_rx.borrow()).min(1.0);
                        let _ = events.send(ExecEvent::Progress { task, progress: p, metrics: BTreeMap::new() }).await;
                        if p >= 1.0 {
                            let _ = events.send(ExecEvent::Exited { task, code: Some(0), stopped: false }).await;
                            return;
                        }
                    }
                    _ = &mut rx => {
                        let _ = events.send(ExecEvent::Exited { task, code: None, stopped: true }).await;
                        return;
                    }
                }
            }
        });
        Ok(Enforcement::Simulated)
    }

    fn stop(&mut self, task: TaskId) {
        if let Some(s) = self.running.remove(&task) {
            let _ = s.stop.send(());
        }
    }

    fn resize(&mut self, task: TaskId, alloc: &Allocation) -> Result<Enforcement, ExecError> {
        let s = self
            .running
            .get(&task)
            .filter(|s| !s.stop.is_closed())
            .ok_or(ExecError::NotRunning(task))?;
        let rate = (self.speed)(&s.spec, alloc);
        if rate.is_finite() && rate > 0.0 {
            s.rate.send_replace(rate);
        }
        Ok(Enforcement::Simulated)
    }
}
