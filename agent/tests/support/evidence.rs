//! What the fault harness's tasks wrote about themselves, and the verdicts drawn from it only:
//! copies per task, copies alive at the same time, copies per node at once.

use std::collections::BTreeMap;
use std::path::Path;

/// One copy of a task, as its record tells.
#[derive(Debug, Clone)]
pub(crate) struct Copy {
    pub node: String,
    pub start: u64,
    /// Last sign of life (ms); a copy without an end line died within 100 ms of it.
    pub last: u64,
    pub ended: bool,
}

impl Copy {
    /// Its life, stretched by 150 ms where it was killed (its last 100 ms are not recorded).
    pub(crate) fn span(&self) -> (u64, u64) {
        (
            self.start,
            if self.ended {
                self.last
            } else {
                self.last + 150
            },
        )
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
                            start: t,
                            last: t,
                            ended: false,
                        })
                    }
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

    pub(crate) fn started_twice(&self) -> Vec<String> {
        self.copies
            .iter()
            .filter(|(_, c)| c.len() > 1)
            .map(|(k, _)| k.clone())
            .collect()
    }

    pub(crate) fn completed_twice(&self) -> Vec<String> {
        self.copies
            .iter()
            .filter(|(_, c)| c.iter().filter(|c| c.ended).count() > 1)
            .map(|(k, _)| k.clone())
            .collect()
    }
}
