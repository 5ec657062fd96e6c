//! The built-in scenario presets (`tapfinger-sim scenarios`) and the data files they embed: the
//! TOML and CSV files of `sim/presets/`, compiled in so that a preset runs on any machine.

/// A built-in preset: name, TOML source.
pub(crate) struct Preset {
    /// Its name (`--scenario NAME`).
    pub(crate) name: &'static str,
    /// Its TOML text.
    pub(crate) toml: &'static str,
}

pub(crate) const PRESETS: &[Preset] = &[
    Preset {
        name: "synthetic3",
        toml: include_str!("../presets/synthetic3.toml"),
    },
    Preset {
        name: "synthetic6-l2",
        toml: include_str!("../presets/synthetic6-l2.toml"),
    },
    Preset {
        name: "synthetic6-l3",
        toml: include_str!("../presets/synthetic6-l3.toml"),
    },
    Preset {
        name: "synthetic6-l4",
        toml: include_str!("../presets/synthetic6-l4.toml"),
    },
    Preset {
        name: "hetero6",
        toml: include_str!("../presets/hetero6.toml"),
    },
    Preset {
        name: "hetero3",
        toml: include_str!("../presets/hetero3.toml"),
    },
    Preset {
        name: "hetero12",
        toml: include_str!("../presets/hetero12.toml"),
    },
    Preset {
        name: "multitask3",
        toml: include_str!("../presets/multitask3.toml"),
    },
    Preset {
        name: "edge-agent",
        toml: include_str!("../presets/edge-agent.toml"),
    },
    Preset {
        name: "edge-synergy",
        toml: include_str!("../presets/edge-synergy.toml"),
    },
    Preset {
        name: "gang-edge",
        toml: include_str!("../presets/gang-edge.toml"),
    },
    Preset {
        name: "gang-rack",
        toml: include_str!("../presets/gang-rack.toml"),
    },
    Preset {
        name: "priority-edge",
        toml: include_str!("../presets/priority-edge.toml"),
    },
    Preset {
        name: "converging-edge",
        toml: include_str!("../presets/converging-edge.toml"),
    },
    Preset {
        name: "rlpto-edge",
        toml: include_str!("../presets/rlpto-edge.toml"),
    },
    Preset {
        name: "small-gpu-edge",
        toml: include_str!("../presets/small-gpu-edge.toml"),
    },
    Preset {
        name: "small-gpu-edge-whole",
        toml: include_str!("../presets/small-gpu-edge-whole.toml"),
    },
];

/// Embedded data files that presets refer to by relative path.
pub(crate) const PRESET_FILES: &[(&str, &str)] = &[(
    "edge_synergy.csv",
    include_str!("../presets/edge_synergy.csv"),
)];
