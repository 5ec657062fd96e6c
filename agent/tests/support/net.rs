//! The fault harness's network: network namespaces of its own, one per agent, joined by a bridge
//! in a hub namespace (a second bridge holds the cut-off side of a partition), plus ports from the
//! test's namespace to both bridges so that it reaches every agent's API. Nothing outside these
//! namespaces is touched; dropping a [`Net`] deletes them and whatever runs in them.

use std::process::Command;

use super::AGENTS;

pub(crate) fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The namespaces: one per agent and a hub with two bridges (`br0`, and `br1` for the cut-off
/// side of a partition), plus a veth from the test's own namespace to `br0` for the API.
pub(crate) struct Net {
    pub tag: String,
    pub subnet: String,
}

impl Net {
    pub(crate) fn ns(&self, i: usize) -> String {
        format!("{}a{i}", self.tag)
    }
    fn hub(&self) -> String {
        format!("{}hub", self.tag)
    }
    fn port(&self, i: usize) -> String {
        format!("{}h{i}", self.tag)
    }
    pub(crate) fn addr(&self, i: usize) -> String {
        format!("{}.{}", self.subnet, i + 1)
    }

    pub(crate) fn build() -> Result<Self, String> {
        let pid = std::process::id();
        let net = Net {
            tag: format!("tf{}", pid % 100_000),
            subnet: format!("10.213.{}", pid % 250 + 1),
        };
        let hub = net.hub();
        ip(&["netns", "add", &hub])?;
        for br in ["br0", "br1"] {
            ip(&["-n", &hub, "link", "add", br, "type", "bridge"])?;
            ip(&["-n", &hub, "link", "set", br, "up"])?;
        }
        for i in 0..AGENTS {
            let ns = net.ns(i);
            let inner = format!("{}x{i}", net.tag);
            ip(&["netns", "add", &ns])?;
            ip(&[
                "link",
                "add",
                &inner,
                "type",
                "veth",
                "peer",
                "name",
                &net.port(i),
            ])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["-n", &ns, "link", "set", &inner, "name", "eth0"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", net.addr(i)),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&["link", "set", &net.port(i), "netns", &hub])?;
            ip(&["-n", &hub, "link", "set", &net.port(i), "master", "br0"])?;
            ip(&["-n", &hub, "link", "set", &net.port(i), "up"])?;
        }
        // The test reaches every agent's API on both sides of a cut: one port on each bridge.
        for (br, addr) in [("br0", ".254/24"), ("br1", ".253/32")] {
            let root = format!("{}r{br}", net.tag);
            let root_peer = format!("{}q{br}", net.tag);
            ip(&[
                "link", "add", &root, "type", "veth", "peer", "name", &root_peer,
            ])?;
            ip(&["link", "set", &root_peer, "netns", &hub])?;
            ip(&["-n", &hub, "link", "set", &root_peer, "master", br])?;
            ip(&["-n", &hub, "link", "set", &root_peer, "up"])?;
            ip(&[
                "addr",
                "add",
                &format!("{}{addr}", net.subnet),
                "dev",
                &root,
            ])?;
            ip(&["link", "set", &root, "up"])?;
        }
        Ok(net)
    }

    /// Put agents `side` on the other bridge (a partition), or everyone back on `br0`.
    pub(crate) fn cut(&self, side: &[usize]) {
        for i in 0..AGENTS {
            let br = if side.contains(&i) { "br1" } else { "br0" };
            ip(&[
                "-n",
                &self.hub(),
                "link",
                "set",
                &self.port(i),
                "master",
                br,
            ])
            .expect("moving a bridge port");
            let host = format!("{}/32", self.addr(i));
            if side.contains(&i) {
                let dev = format!("{}rbr1", self.tag);
                let src = format!("{}.253", self.subnet);
                ip(&["route", "replace", &host, "dev", &dev, "src", &src])
                    .expect("a route to the cut-off side");
            } else {
                let _ = ip(&["route", "del", &host]);
            }
        }
    }
}

impl Net {
    /// Cut the links one way: packets from agents `from` to agents `to` are dropped (a blackhole
    /// route in each sender's namespace), while the other direction still carries. TCP needs
    /// both directions, so connections between the two sets fail, but each side still hears
    /// what the other sends until then, and datagrams keep arriving one way.
    pub(crate) fn cut_one_way(&self, from: &[usize], to: &[usize]) {
        for &i in from {
            for &j in to {
                let host = format!("{}/32", self.addr(j));
                ip(&["-n", &self.ns(i), "route", "replace", "blackhole", &host])
                    .expect("a blackhole route");
            }
        }
    }

    /// Undo [`Net::cut_one_way`].
    pub(crate) fn mend_one_way(&self, from: &[usize], to: &[usize]) {
        for &i in from {
            for &j in to {
                let host = format!("{}/32", self.addr(j));
                let _ = ip(&["-n", &self.ns(i), "route", "del", "blackhole", &host]);
            }
        }
    }

    /// The processes in agent `i`'s namespace whose command line has the word `word` (the
    /// agent's task supervisors: `supervise`).
    pub(crate) fn pids_running(&self, i: usize, word: &str) -> Vec<i32> {
        let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.ns(i)])
            .output()
        else {
            return Vec::new();
        };
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.split(|b| *b == 0).any(|w| w == word.as_bytes()))
            })
            .collect()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in (0..AGENTS).map(|i| self.ns(i)).chain([self.hub()]) {
            // Whatever still runs in the namespace (agents, supervisors, tasks) goes with it.
            if let Ok(out) = Command::new("ip").args(["netns", "pids", &ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            let _ = ip(&["netns", "del", &ns]);
        }
        for br in ["br0", "br1"] {
            let _ = ip(&["link", "del", &format!("{}r{br}", self.tag)]);
        }
    }
}
