//! GPU isolation: which device nodes a task may open. A task gets the devices every process
//! needs (`/dev/null`, `/dev/zero`, `/dev/random`, `/dev/urandom`, the terminals), the NVIDIA
//! control devices, and its own GPUs; every other device, another task's GPU included, is refused
//! by the kernel (`EPERM`) whatever the task does with `CUDA_VISIBLE_DEVICES`.
//!
//! **How.** On cgroup v1 the `devices` controller: a group per task that denies everything and
//! allows the list ([`DevicePolicy::v1_lines`]). On cgroup v2 a device filter, as runc and
//! systemd's `DeviceAllow=` do: a small eBPF program of type `BPF_PROG_TYPE_CGROUP_DEVICE`
//! ([`DevicePolicy::program`], hand-assembled, a few instructions per rule) attached to the
//! task's group before the task joins it, with no override allowed below it, so a task can
//! neither detach it nor add a laxer one in a sub-group. The program travels to the kernel through
//! `aya` (loading and attaching needs system calls this workspace writes no unsafe code for); it
//! is wrapped in a minimal ELF object ([`DevicePolicy::elf`], written with `object`), the form
//! `aya` loads. The attachment is a bpf link that lasts while its holder ([`Filter`]) lives:
//! the task's supervisor, which outlives the agent and ends with the task
//! ([`crate::supervise`]), or the process executor ([`crate::exec`]) for a task it runs as its own child.
//!
//! Where neither mechanism is available (no writable `devices` hierarchy; no `CAP_BPF` and
//! `CAP_NET_ADMIN` for the agent, or a kernel before 5.7), [`Devices::Unavailable`] says why
//! and the node's status says "GPU devices not isolated". Nothing here decides which GPUs a task
//! gets.

use std::path::{Path, PathBuf};

/// `BPF_DEVCG_ACC_*` access bits (the v1 letters `m`, `r`, `w`).
const MKNOD: u8 = 1;
const READ: u8 = 2;
const WRITE: u8 = 4;
/// Any access.
pub const RWM: u8 = MKNOD | READ | WRITE;

/// The major number of NVIDIA's GPU device nodes (`/dev/nvidia<minor>`, `/dev/nvidiactl`).
pub const NVIDIA_MAJOR: u32 = 195;

/// Character or block device (`BPF_DEVCG_DEV_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevKind {
    /// Block device.
    Block = 1,
    /// Character device.
    Char = 2,
}

/// One allowed set of devices: a kind, a major and a minor number (`None`: any), and the access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRule {
    /// Character or block.
    pub kind: DevKind,
    /// Major number (`None`: any).
    pub major: Option<u32>,
    /// Minor number (`None`: any).
    pub minor: Option<u32>,
    /// Allowed access: bits of read, write, mknod.
    pub access: u8,
}

impl DeviceRule {
    /// A character device with any access.
    pub const fn char(major: u32, minor: u32) -> Self {
        Self {
            kind: DevKind::Char,
            major: Some(major),
            minor: Some(minor),
            access: RWM,
        }
    }

    /// A rule in the v1 `devices.allow` syntax ([`DeviceRule::v1_line`]); how the executor
    /// hands a policy to the supervisor.
    pub fn parse(line: &str) -> Option<Self> {
        let mut f = line.split_whitespace();
        let kind = match f.next()? {
            "c" => DevKind::Char,
            "b" => DevKind::Block,
            _ => return None,
        };
        let (major, minor) = f.next()?.split_once(':')?;
        let num = |n: &str| match n {
            "*" => Some(None),
            n => n.parse::<u32>().ok().map(Some),
        };
        let mut access = 0;
        for c in f.next()?.chars() {
            access |= match c {
                'r' => READ,
                'w' => WRITE,
                'm' => MKNOD,
                _ => return None,
            };
        }
        if f.next().is_some() || access == 0 {
            return None;
        }
        Some(Self {
            kind,
            major: num(major)?,
            minor: num(minor)?,
            access,
        })
    }

    /// The rule in the v1 `devices.allow` syntax (`c 195:0 rwm`).
    pub fn v1_line(&self) -> String {
        let num = |n: Option<u32>| n.map_or("*".to_string(), |n| n.to_string());
        let mut access = String::new();
        for (bit, c) in [(READ, 'r'), (WRITE, 'w'), (MKNOD, 'm')] {
            if self.access & bit != 0 {
                access.push(c);
            }
        }
        let kind = match self.kind {
            DevKind::Char => 'c',
            DevKind::Block => 'b',
        };
        format!("{kind} {}:{} {access}", num(self.major), num(self.minor))
    }
}

/// What a task may open: every device a process needs, plus `extra` (the NVIDIA control
/// devices and the task's GPUs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicePolicy {
    /// The allowed devices; everything else is refused.
    pub rules: Vec<DeviceRule>,
}

impl DevicePolicy {
    /// The devices every process needs, as container runtimes allow them: creating nodes (not
    /// opening them), `/dev/null` 1:3, `/dev/zero` 1:5, `/dev/random` 1:8, `/dev/urandom` 1:9,
    /// `/dev/tty` 5:0, `/dev/console` 5:1, `/dev/ptmx` 5:2 and the pseudo-terminals 136:*. Not
    /// `/dev/full` (1:7): the tests use it as a stand-in for a GPU a task was not given.
    pub fn base() -> Vec<DeviceRule> {
        let mknod = |kind| DeviceRule {
            kind,
            major: None,
            minor: None,
            access: MKNOD,
        };
        let mut v = vec![mknod(DevKind::Char), mknod(DevKind::Block)];
        for (major, minor) in [(1, 3), (1, 5), (1, 8), (1, 9), (5, 0), (5, 1), (5, 2)] {
            v.push(DeviceRule::char(major, minor));
        }
        v.push(DeviceRule {
            kind: DevKind::Char,
            major: Some(136),
            minor: None,
            access: RWM,
        });
        v
    }

    /// The policy of a task given the devices `gpus` (major, minor), with the shared `control`
    /// devices every GPU task needs.
    pub fn for_task(gpus: &[(u32, u32)], control: &[DeviceRule]) -> Self {
        let mut rules = Self::base();
        if !gpus.is_empty() {
            rules.extend_from_slice(control);
        }
        rules.extend(
            gpus.iter()
                .map(|&(major, minor)| DeviceRule::char(major, minor)),
        );
        Self { rules }
    }

    /// The v1 lines: first `a` into `devices.deny`, then each of these into `devices.allow`.
    pub fn v1_lines(&self) -> Vec<String> {
        self.rules.iter().map(DeviceRule::v1_line).collect()
    }

    /// The filter as eBPF instructions (8 bytes each, little-endian): 1 (allow) if a rule
    /// matches the access in the context (`struct bpf_cgroup_dev_ctx`: access type and device
    /// kind in one u32, major, minor), else 0 (the kernel answers `EPERM`).
    pub fn program(&self) -> Vec<u8> {
        // r2 = access bits, r3 = device kind, r4 = major, r5 = minor; r6 is scratch.
        let mut code: Vec<Insn> = vec![
            Insn::ldxw(2, 1, 0),
            Insn::mov_reg(3, 2),
            Insn::and_imm(3, 0xffff),
            Insn::rsh_imm(2, 16),
            Insn::ldxw(4, 1, 4),
            Insn::ldxw(5, 1, 8),
        ];
        for rule in &self.rules {
            // Each test jumps past the rest of the rule's block when it fails.
            let mut block = vec![
                Insn::jne_imm(3, rule.kind as i32),
                Insn::mov_reg(6, 2),
                Insn::and_imm(6, i32::from(!rule.access & RWM)),
                Insn::jne_imm(6, 0),
            ];
            if let Some(m) = rule.major {
                block.push(Insn::jne_imm(4, m as i32));
            }
            if let Some(m) = rule.minor {
                block.push(Insn::jne_imm(5, m as i32));
            }
            block.push(Insn::mov_imm(0, 1));
            block.push(Insn::exit());
            let len = block.len();
            for (i, insn) in block.iter_mut().enumerate() {
                if insn.code == JNE_K {
                    insn.off = (len - i - 1) as i16;
                }
            }
            code.extend(block);
        }
        code.push(Insn::mov_imm(0, 0));
        code.push(Insn::exit());
        code.iter().flat_map(Insn::bytes).collect()
    }

    /// [`DevicePolicy::program`] in a relocatable ELF object with one program,
    /// `tapfinger_devices`, in the section `cgroup/dev`: the form `aya` loads.
    pub fn elf(&self) -> Result<Vec<u8>, DeviceError> {
        use object::write::{Object, Symbol, SymbolSection};
        use object::{
            Architecture, BinaryFormat, Endianness, SectionKind, SymbolFlags, SymbolKind,
            SymbolScope,
        };
        let code = self.program();
        let mut obj = Object::new(BinaryFormat::Elf, Architecture::Bpf, Endianness::Little);
        let text = obj.add_section(Vec::new(), b"cgroup/dev".to_vec(), SectionKind::Text);
        let at = obj.append_section_data(text, &code, 8);
        obj.add_symbol(Symbol {
            name: PROGRAM.as_bytes().to_vec(),
            value: at,
            size: code.len() as u64,
            kind: SymbolKind::Text,
            scope: SymbolScope::Linkage,
            weak: false,
            section: SymbolSection::Section(text),
            flags: SymbolFlags::None,
        });
        let license = obj.add_section(Vec::new(), b"license".to_vec(), SectionKind::Data);
        obj.append_section_data(license, b"Apache-2.0\0", 1);
        obj.write()
            .map_err(|e| DeviceError::Program(format!("cannot write the filter's object: {e}")))
    }
}

/// The program's name in the ELF object.
const PROGRAM: &str = "tapfinger_devices";

/// `BPF_JMP | BPF_JNE | BPF_K`.
const JNE_K: u8 = 0x55;

/// One eBPF instruction.
#[derive(Debug, Clone, Copy)]
struct Insn {
    code: u8,
    dst: u8,
    src: u8,
    off: i16,
    imm: i32,
}

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Self {
        Self {
            code,
            dst,
            src,
            off,
            imm,
        }
    }
    /// `dst = *(u32 *)(src + off)` (`BPF_LDX | BPF_MEM | BPF_W`).
    const fn ldxw(dst: u8, src: u8, off: i16) -> Self {
        Self::new(0x61, dst, src, off, 0)
    }
    /// `dst = src` (`BPF_ALU64 | BPF_MOV | BPF_X`).
    const fn mov_reg(dst: u8, src: u8) -> Self {
        Self::new(0xbf, dst, src, 0, 0)
    }
    /// `dst = imm` (`BPF_ALU64 | BPF_MOV | BPF_K`).
    const fn mov_imm(dst: u8, imm: i32) -> Self {
        Self::new(0xb7, dst, 0, 0, imm)
    }
    /// `dst &= imm` (`BPF_ALU64 | BPF_AND | BPF_K`).
    const fn and_imm(dst: u8, imm: i32) -> Self {
        Self::new(0x57, dst, 0, 0, imm)
    }
    /// `dst >>= imm` (`BPF_ALU64 | BPF_RSH | BPF_K`).
    const fn rsh_imm(dst: u8, imm: i32) -> Self {
        Self::new(0x77, dst, 0, 0, imm)
    }
    /// `if dst != imm goto +off` (the offset is set once the block's length is known).
    const fn jne_imm(dst: u8, imm: i32) -> Self {
        Self::new(JNE_K, dst, 0, 0, imm)
    }
    /// `exit` (returns r0).
    const fn exit() -> Self {
        Self::new(0x95, 0, 0, 0, 0)
    }
    fn bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = (self.src << 4) | (self.dst & 0x0f);
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }
}

/// A device policy that could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The filter could not be built or loaded.
    #[error("device filter: {0}")]
    Program(String),
    /// A file of the hierarchy could not be written.
    #[error("device policy: {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> DeviceError + '_ {
    move |source| DeviceError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How this box keeps tasks to their devices.
#[derive(Debug, Clone, PartialEq)]
pub enum Devices {
    /// cgroup v1's `devices` controller: tasks' groups go under this directory.
    V1(PathBuf),
    /// cgroup v2 device filters (eBPF), attached to each task's group by [`Filter::attach`].
    V2,
    /// Not isolated; why.
    Unavailable(String),
}

/// What a task's launcher must do before the task joins its groups ([`Devices::apply`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Applied {
    /// More groups to join (v1's devices group).
    pub join: Vec<PathBuf>,
    /// A v2 filter to attach to this group, and hold while the task runs.
    pub filter: Option<PathBuf>,
}

impl Devices {
    /// Which mechanism this box has: v1's `devices` hierarchy under `root` (with the agent's
    /// group `prefix`) when the CPU groups are v1 (`v2` false), else a v2 device filter, checked
    /// by loading one (the capabilities it takes).
    pub fn detect(root: &Path, prefix: &str, v2: bool) -> Self {
        if !v2 {
            let dir = root.join("devices").join(prefix);
            if !root.join("devices/devices.allow").exists() {
                return Devices::Unavailable(format!(
                    "no cgroup v1 devices controller at {}",
                    root.join("devices").display()
                ));
            }
            return match std::fs::create_dir_all(&dir) {
                Ok(()) => Devices::V1(dir),
                Err(e) => Devices::Unavailable(format!("{}: {e}", dir.display())),
            };
        }
        match probe_v2() {
            Ok(()) => Devices::V2,
            Err(why) => Devices::Unavailable(why),
        }
    }

    /// What the node's status says.
    pub fn describe(&self) -> String {
        match self {
            Devices::V1(_) => "GPU devices isolated (cgroup v1 devices controller)".into(),
            Devices::V2 => "GPU devices isolated (cgroup v2 device filter, eBPF)".into(),
            Devices::Unavailable(why) => format!("GPU devices not isolated: {why}"),
        }
    }

    /// Keep the process that joins `groups` (the task's CPU and memory groups; `groups[0]` is
    /// its v2 group) to `policy` from before it starts: v1 writes the task's devices group, to
    /// be joined too; v2 names the group its launcher attaches the filter to. `Unavailable`:
    /// nothing is done.
    pub fn apply(
        &self,
        name: &str,
        groups: &[PathBuf],
        policy: &DevicePolicy,
    ) -> Result<Applied, DeviceError> {
        match self {
            Devices::V1(dir) => {
                let g = dir.join(name);
                std::fs::create_dir_all(&g).map_err(io_at(&g))?;
                let deny = g.join("devices.deny");
                std::fs::write(&deny, "a").map_err(io_at(&deny))?;
                let allow = g.join("devices.allow");
                for line in policy.v1_lines() {
                    std::fs::write(&allow, &line).map_err(io_at(&allow))?;
                }
                Ok(Applied {
                    join: vec![g],
                    filter: None,
                })
            }
            Devices::V2 => match groups.first() {
                Some(group) => Ok(Applied {
                    join: Vec::new(),
                    filter: Some(group.clone()),
                }),
                None => Err(DeviceError::Program("no cgroup to attach to".into())),
            },
            Devices::Unavailable(_) => Ok(Applied::default()),
        }
    }

    /// Remove the empty task groups (`task-<id>`, v1) of the tasks not in `keep`: what an agent
    /// killed or stopped while its tasks ran left (a group that still holds a process stays).
    /// Returns how many were removed.
    pub fn sweep(&self, keep: &std::collections::BTreeSet<u64>) -> usize {
        let Devices::V1(dir) = self else { return 0 };
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                let name = e.file_name();
                name.to_str()
                    .and_then(|n| n.strip_prefix("task-"))
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|t| !keep.contains(&t))
            })
            .filter(|e| std::fs::remove_dir(e.path()).is_ok())
            .count()
    }

    /// Release what [`Devices::apply`] made for a task whose process is gone (failures are left
    /// for the next start, as the CPU groups are). A v2 filter goes with its holder.
    pub fn remove(&self, name: &str) {
        if let Devices::V1(dir) = self {
            let _ = std::fs::remove_dir(dir.join(name));
        }
    }
}

/// Check that filters can be loaded here (capabilities, kernel).
fn probe_v2() -> Result<(), String> {
    let probe = DevicePolicy::for_task(&[], &[]);
    let bytes = probe.elf().map_err(|e| e.to_string())?;
    let mut ebpf = aya::EbpfLoader::new()
        .load(&bytes)
        .map_err(|e| format!("cannot load a device filter: {e}"))?;
    program(&mut ebpf)
        .and_then(|p| {
            p.load()
                .map_err(|e| DeviceError::Program(format!("the kernel refused it: {e}")))
        })
        .map_err(|e| {
            format!(
                "{e} (the agent needs CAP_BPF and CAP_NET_ADMIN, or root, and kernel 5.7 or later)"
            )
        })
}

fn program(ebpf: &mut aya::Ebpf) -> Result<&mut aya::programs::CgroupDevice, DeviceError> {
    ebpf.program_mut(PROGRAM)
        .ok_or_else(|| DeviceError::Program("no program in the object".into()))?
        .try_into()
        .map_err(|e| DeviceError::Program(format!("{e}")))
}

/// A v2 device filter attached to a task's group: it stays attached while this value lives (the
/// kernel detaches a bpf link when its last holder closes it), so its holder must live as long
/// as the task.
pub struct Filter {
    /// The loaded program, which owns the link.
    _ebpf: aya::Ebpf,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Filter")
    }
}

impl Filter {
    /// Load `policy`'s filter and attach it to `group`, allowing no override below it.
    pub fn attach(policy: &DevicePolicy, group: &Path) -> Result<Self, DeviceError> {
        let bytes = policy.elf()?;
        let mut ebpf = aya::EbpfLoader::new()
            .load(&bytes)
            .map_err(|e| DeviceError::Program(format!("cannot load: {e}")))?;
        let prog = program(&mut ebpf)?;
        prog.load()
            .map_err(|e| DeviceError::Program(format!("the kernel refused it: {e}")))?;
        let dir = std::fs::File::open(group).map_err(io_at(group))?;
        prog.attach(&dir, aya::programs::CgroupAttachMode::Single)
            .map_err(|e| {
                DeviceError::Program(format!("cannot attach to {}: {e}", group.display()))
            })?;
        Ok(Self { _ebpf: ebpf })
    }
}

/// The NVIDIA control devices of this box (`/dev/nvidiactl`, `/dev/nvidia-modeset`,
/// `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools`, `/dev/nvidia-caps/*`), with the dynamic majors
/// read from `proc_devices` (the text of `/proc/devices`). A box without the driver has none.
pub fn nvidia_control(proc_devices: &str) -> Vec<DeviceRule> {
    let mut chars = false;
    let mut majors = std::collections::BTreeMap::new();
    for line in proc_devices.lines() {
        if line.starts_with("Character devices") {
            chars = true;
        } else if line.starts_with("Block devices") {
            chars = false;
        } else if chars
            && let Some((major, name)) = line.trim().split_once(' ')
            && let Ok(major) = major.parse::<u32>()
        {
            majors.insert(name.trim().to_string(), major);
        }
    }
    let mut v = Vec::new();
    if majors.contains_key("nvidia-frontend") || majors.contains_key("nvidiactl") {
        v.push(DeviceRule::char(NVIDIA_MAJOR, 255));
        v.push(DeviceRule::char(NVIDIA_MAJOR, 254));
    }
    if let Some(&m) = majors.get("nvidia-uvm") {
        v.push(DeviceRule::char(m, 0));
        v.push(DeviceRule::char(m, 1));
    }
    if let Some(&m) = majors.get("nvidia-caps") {
        v.push(DeviceRule {
            kind: DevKind::Char,
            major: Some(m),
            minor: None,
            access: READ,
        });
    }
    v
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The empty device groups of tasks that ended while the agent was away are removed at
    /// start; a running task's, and anything not a task's group, stay.
    #[test]
    fn the_sweep_removes_empty_groups_of_tasks_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        for g in ["task-1", "task-2", "task-3", "other"] {
            std::fs::create_dir(dir.path().join(g)).unwrap();
        }
        // A group that is not empty (a real cgroup would hold a process) is not removed.
        std::fs::write(dir.path().join("task-3").join("cgroup.procs"), "42").unwrap();
        let d = Devices::V1(dir.path().to_path_buf());
        assert_eq!(d.sweep(&[2].into()), 1);
        for (g, there) in [
            ("task-1", false),
            ("task-2", true),
            ("task-3", true),
            ("other", true),
        ] {
            assert_eq!(dir.path().join(g).exists(), there, "{g}");
        }
    }

    #[test]
    fn v1_lines_spell_the_rules() {
        let p = DevicePolicy::for_task(&[(NVIDIA_MAJOR, 1)], &[DeviceRule::char(195, 255)]);
        let lines = p.v1_lines();
        assert_eq!(lines[0], "c *:* m");
        assert_eq!(lines[1], "b *:* m");
        assert!(lines.contains(&"c 1:3 rwm".to_string()));
        assert!(lines.contains(&"c 136:* rwm".to_string()));
        assert_eq!(lines[lines.len() - 2..], ["c 195:255 rwm", "c 195:1 rwm"]);
        assert!(
            !lines.iter().any(|l| l.starts_with("c 1:7")),
            "/dev/full is never a base device"
        );
        let none = DevicePolicy::for_task(&[], &[DeviceRule::char(195, 255)]);
        assert!(
            !none.v1_lines().iter().any(|l| l.contains("195")),
            "no GPU: no control devices"
        );
    }

    #[test]
    fn the_program_ends_each_rule_on_allow_and_falls_through_to_deny() {
        let p = DevicePolicy::for_task(&[(1, 7)], &[]);
        let code = p.program();
        assert_eq!(code.len() % 8, 0);
        let n = code.len() / 8;
        // The last two instructions: r0 = 0; exit.
        assert_eq!(&code[(n - 2) * 8..(n - 2) * 8 + 1], &[0xb7]);
        assert_eq!(
            i32::from_le_bytes(code[(n - 2) * 8 + 4..(n - 1) * 8].try_into().unwrap()),
            0
        );
        assert_eq!(code[(n - 1) * 8], 0x95);
        // Every jump lands inside the program, on the next rule or the final deny.
        for i in 0..n {
            if code[i * 8] == JNE_K {
                let off = i16::from_le_bytes([code[i * 8 + 2], code[i * 8 + 3]]);
                let to = i as i64 + 1 + i64::from(off);
                assert!(off > 0 && to < n as i64, "instruction {i} jumps to {to}");
            }
        }
        p.elf().unwrap();
    }

    #[test]
    fn rules_survive_the_trip_through_their_v1_lines() {
        let p = DevicePolicy::for_task(
            &[(NVIDIA_MAJOR, 3)],
            &nvidia_control(
                "Character devices:\n195 nvidia-frontend\n234 nvidia-uvm\n237 nvidia-caps\n",
            ),
        );
        for r in &p.rules {
            assert_eq!(
                DeviceRule::parse(&r.v1_line()).as_ref(),
                Some(r),
                "{}",
                r.v1_line()
            );
        }
        for bad in [
            "",
            "a *:* m",
            "c 1:3",
            "c 1:3 x",
            "c x:3 r",
            "c 1-3 r",
            "c 1:3 r extra",
            "c 1:3 ",
        ] {
            assert_eq!(DeviceRule::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn control_devices_come_from_proc_devices() {
        let text = "Character devices:\n  1 mem\n195 nvidia-frontend\n234 nvidia-uvm\n237 nvidia-caps\n\nBlock devices:\n  8 sd\n";
        let v = nvidia_control(text);
        assert_eq!(
            v.iter().map(DeviceRule::v1_line).collect::<Vec<_>>(),
            [
                "c 195:255 rwm",
                "c 195:254 rwm",
                "c 234:0 rwm",
                "c 234:1 rwm",
                "c 237:* r"
            ]
        );
        assert!(nvidia_control("Character devices:\n  1 mem\n").is_empty());
    }
}
