//! What the fault harness's tasks wrote about themselves, and the verdicts drawn from it only:
//! copies per task, copies alive at the same time, copies per node at once.

// Each test file uses some of them.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

/// The task the fault tests run: it records its own life in `<rec>/<key>.<pid>.<ns>.log`. A killed
/// copy cannot write its own end, so a watcher it starts in a session of its own (out of reach of
/// the kill of the task's process group) writes `gone` once the task's shell no longer exists
/// (polled every 10 ms; a zombie still counts as alive, so `gone` is never early).
pub(crate) const TASK: &str = r#"#!/bin/sh
f="$1/$2.$$.$(date +%s%N).log"
echo "start $(date +%s%3N) $TAPFINGER_NODE $TAPFINGER_EPOCH" >> "$f"
setsid sh -c 'tail --pid="$0" -s 0.01 -f /dev/null; echo "gone $(date +%s%3N)" >> "$1"' "$$" "$f" </dev/null >/dev/null 2>&1 &
i=0
while [ "$i" -lt "$3" ]; do
  sleep 0.1
  echo "alive $(date +%s%3N)" >> "$f"
  i=$((i+1))
done
echo "end $(date +%s%3N)" >> "$f"
"#;

/// One copy of a task, as its record tells.
#[derive(Debug, Clone)]
pub(crate) struct Copy {
    pub node: String,
    /// The epoch the agent gave this copy (`TAPFINGER_EPOCH`).
    pub epoch: String,
    pub start: u64,
    /// Last sign of life (ms); a copy without an end line died within 100 ms of it.
    pub last: u64,
    pub ended: bool,
    /// When its watcher saw the task's shell gone (ms): the end of a killed copy.
    pub gone: Option<u64>,
}

impl Copy {
    /// Its life: to its end line; for a killed copy, to when its watcher saw it gone, or (no
    /// watcher line: the watcher itself was lost) its last sign of life stretched by 150 ms.
    pub(crate) fn span(&self) -> (u64, u64) {
        let end = match (self.ended, self.gone) {
            (true, _) => self.last,
            (false, Some(g)) => g.max(self.last),
            (false, None) => self.last + 150,
        };
        (self.start, end)
    }
}

#[derive(Debug, Default)]
pub(crate) struct Evidence {
    pub copies: BTreeMap<String, Vec<Copy>>,
}

impl Evidence {
    pub(crate) fn read(dir: &Path) -> Self {
        let mut e = Evidence::default();
        for f in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            let Some(key) = name.split('.').next() else {
                continue;
            };
            let text = std::fs::read_to_string(f.path()).unwrap_or_default();
            let mut copy: Option<Copy> = None;
            for line in text.lines() {
                let w: Vec<&str> = line.split_whitespace().collect();
                let t = w.get(1).and_then(|t| t.parse::<u64>().ok());
                match (w.first(), t, &mut copy) {
                    (Some(&"start"), Some(t), c) => {
                        *c = Some(Copy {
                            node: w.get(2).unwrap_or(&"?").to_string(),
                            epoch: w.get(3).unwrap_or(&"?").to_string(),
                            start: t,
                            last: t,
                            ended: false,
                            gone: None,
                        })
                    }
                    (Some(&"gone"), Some(t), Some(c)) => c.gone = Some(t),
                    (Some(&"alive"), Some(t), Some(c)) => c.last = t,
                    (Some(&"end"), Some(t), Some(c)) => {
                        c.last = t;
                        c.ended = true;
                    }
                    _ => {}
                }
            }
            if let Some(c) = copy {
                e.copies.entry(key.to_string()).or_default().push(c);
            }
        }
        e
    }

    /// Pairs of copies of one task alive at the same time: (key, ms of overlap).
    pub(crate) fn overlaps(&self) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for (k, cs) in &self.copies {
            for (i, a) in cs.iter().enumerate() {
                for b in &cs[i + 1..] {
                    let (a0, a1) = a.span();
                    let (b0, b1) = b.span();
                    let o = a1.min(b1).saturating_sub(a0.max(b0));
                    if o > 0 {
                        out.push((k.clone(), o));
                    }
                }
            }
        }
        out
    }

    /// The most copies alive at once on any node, by node.
    pub(crate) fn peak_per_node(&self) -> BTreeMap<String, u64> {
        let mut events: BTreeMap<String, Vec<(u64, i64)>> = BTreeMap::new();
        for c in self.copies.values().flatten() {
            let (s, e) = c.span();
            let ev = events.entry(c.node.clone()).or_default();
            ev.push((s, 1));
            ev.push((e, -1));
        }
        events
            .into_iter()
            .map(|(n, mut ev)| {
                ev.sort();
                let (mut now, mut peak) = (0i64, 0i64);
                for (_, d) in ev {
                    now += d;
                    peak = peak.max(now);
                }
                (n, peak as u64)
            })
            .collect()
    }

    /// Copies that did not end by themselves, and how many of them their watcher timed.
    pub(crate) fn killed(&self) -> (usize, usize) {
        let killed: Vec<&Copy> = self
            .copies
            .values()
            .flatten()
            .filter(|c| !c.ended)
            .collect();
        let timed = killed.iter().filter(|c| c.gone.is_some()).count();
        (killed.len(), timed)
    }

    pub(crate) fn started_twice(&self) -> Vec<String> {
        self.copies
            .iter()
            .filter(|(_, c)| c.len() > 1)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Tasks two of whose copies carried the same epoch (a fencing token that does not fence).
    pub(crate) fn shared_epochs(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (k, cs) in &self.copies {
            let mut seen = std::collections::BTreeSet::new();
            for c in cs {
                if !seen.insert(&c.epoch) {
                    out.push((k.clone(), c.epoch.clone()));
                }
            }
        }
        out
    }

    pub(crate) fn completed_twice(&self) -> Vec<String> {
        self.copies
            .iter()
            .filter(|(_, c)| c.iter().filter(|c| c.ended).count() > 1)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(records: &[(&str, &str)]) -> Evidence {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in records {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        Evidence::read(dir.path())
    }

    #[test]
    fn a_killed_copy_ends_when_its_watcher_saw_it_gone_or_150_ms_after_its_last_line() {
        let e = read(&[
            ("k1.1.1.log", "start 1000 a4 2\nalive 1100\ngone 1130\n"),
            (
                "k2.2.2.log",
                "start 1150 a4 1\nalive 1250\nend 1260\ngone 1270\n",
            ),
            ("k3.3.3.log", "start 1000 a3 1\nalive 1100\n"),
        ]);
        assert_eq!(e.copies["k1"][0].span(), (1000, 1130));
        assert_eq!(e.copies["k2"][0].span(), (1150, 1260));
        assert_eq!(e.copies["k3"][0].span(), (1000, 1250));
        // k1 is gone before k2 starts: one copy at a time on a4.
        assert_eq!(e.peak_per_node()["a4"], 1);
        // Without its watcher's line, k1 would count as alive until 1250, past k2's start.
        let blind = read(&[
            ("k1.1.1.log", "start 1000 a4 2\nalive 1100\n"),
            ("k2.2.2.log", "start 1150 a4 1\nalive 1250\nend 1260\n"),
        ]);
        assert_eq!(blind.peak_per_node()["a4"], 2);
    }
}
