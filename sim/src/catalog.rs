//! Scenarios by name: a built-in preset, a generated scenario (`gen:N`, [`crate::generate`]),
//! or a TOML file by path. Above both the scenario format ([`crate::scenario`]) and the
//! generator, which builds on that format.

use crate::presets::PRESETS;
use crate::scenario::{Scenario, ScenarioError, ScenarioFile};
use std::path::Path;

impl Scenario {
    /// A preset by name, a generated scenario (`gen:N`, [`crate::generate`]), or else a TOML
    /// file by path.
    pub fn load(name_or_path: &str) -> Result<Self, ScenarioError> {
        if let Some(p) = PRESETS.iter().find(|p| p.name == name_or_path) {
            return Self::from_toml(p.toml, &format!("preset {}", p.name), None);
        }
        if let Some(generated) = crate::generate::load(name_or_path) {
            return generated;
        }
        let path = Path::new(name_or_path);
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Unknown {
            name: name_or_path.into(),
            known: PRESETS
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", "),
            source,
        })?;
        Self::from_toml(
            &text,
            &path.display().to_string(),
            Some(path.parent().map(Path::to_path_buf).unwrap_or_default()),
        )
    }
}

/// Names and descriptions of the presets.
pub fn presets() -> Vec<(String, String)> {
    PRESETS
        .iter()
        .map(|p| {
            let desc = toml::from_str::<ScenarioFile>(p.toml)
                .map(|f| f.description)
                .unwrap_or_default();
            (p.name.to_string(), desc)
        })
        .collect()
}
