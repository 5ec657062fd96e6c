//! Reading `agent.toml` and `--set` overrides, and the checks every configuration passes before
//! the agent looks at the machine: each error names its dotted field.

use super::AgentConfig;

/// A configuration error naming its field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// Dotted field path.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

pub(super) fn err(field: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        message: message.into(),
    }
}

/// The dotted key of the `key = value` line at byte `at` of a TOML text (with its `[table]`), so
/// that a value of the wrong type or form (an address that is not a multiaddr) names its key.
fn key_at(text: &str, at: usize) -> Option<String> {
    let before = text.get(..at)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let key = text[line_start..].split('=').next()?.trim();
    let bare = |k: &str| {
        !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
    };
    if !bare(key) {
        return None;
    }
    let table = before[..line_start].lines().rev().find_map(|l| {
        let l = l.trim();
        l.strip_prefix('[')?.strip_suffix(']').map(str::trim)
    });
    Some(match table {
        Some(t) if bare(t) => format!("{t}.{key}"),
        _ => key.to_string(),
    })
}

impl AgentConfig {
    /// Parse `agent.toml`.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let cfg: Self = toml::from_str(text).map_err(|e| {
            let m = e.message().to_string();
            let field = m
                .split('`')
                .nth(1)
                .filter(|_| m.starts_with("unknown field") || m.starts_with("missing field"))
                .map(str::to_string)
                .or_else(|| key_at(text, e.span()?.start))
                .unwrap_or_else(|| "config".to_string());
            err(&field, e.to_string().trim().to_string())
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parse `text` (agent.toml, may be empty) with `overrides` applied on top: each is
    /// `key=value` with a dotted key (`slot_ms=2000`, `reserve.cpu=1`, `labels.site="plant-3"`,
    /// `bootstrap=["/ip4/..."]`) and a TOML value; a value that is not valid TOML is taken as a
    /// string (`name=box-7`). This makes every setting of the file also a command-line flag
    /// (`--set`), checked by the same rules (unknown keys refused, errors name the field).
    pub fn from_toml_with(text: &str, overrides: &[String]) -> Result<Self, ConfigError> {
        if overrides.is_empty() {
            return Self::from_toml(text);
        }
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| err("config", e.to_string().trim().to_string()))?;
        for o in overrides {
            let Some((key, raw)) = o.split_once('=') else {
                return Err(err("--set", format!("`{o}` is not key=value")));
            };
            let (key, raw) = (key.trim(), raw.trim());
            let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| toml::Value::String(raw.to_string()));
            let mut parts: Vec<&str> = key.split('.').collect();
            let last = parts.pop().filter(|l| !l.is_empty());
            let Some(last) = last else {
                return Err(err("--set", format!("`{o}` has an empty key")));
            };
            let mut at = &mut table;
            for p in parts {
                let entry = at
                    .entry(p.to_string())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                at = entry
                    .as_table_mut()
                    .ok_or_else(|| err(key, format!("`{p}` is not a table")))?;
            }
            at.insert(last.to_string(), value);
        }
        let text = toml::to_string(&table).map_err(|e| err("--set", e.to_string()))?;
        Self::from_toml(&text)
    }

    /// Checks that do not need the machine.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.trim().is_empty() {
            return Err(err("name", "must not be empty"));
        }
        if self.cluster.trim().is_empty() {
            return Err(err("cluster", "must not be empty"));
        }
        let api: std::net::SocketAddr = self.api.parse().map_err(|e| {
            err(
                "api",
                format!("{:?} is not an address:port ({e})", self.api),
            )
        })?;
        if !api.ip().is_loopback() && self.api_token_file.is_none() {
            return Err(err(
                "api_token_file",
                format!(
                    "required when the API listens on {} (not loopback)",
                    api.ip()
                ),
            ));
        }
        if self.reserve_for_urgent && self.forecast_interval_ms == 0 {
            return Err(err(
                "reserve_for_urgent",
                "needs the forecast: set forecast_interval_ms above 0",
            ));
        }
        for (field, v) in [
            ("round_ms", self.round_ms),
            ("slot_ms", self.slot_ms),
            ("heartbeat_ms", self.heartbeat_ms),
        ] {
            if v == 0 {
                return Err(err(field, "must be positive"));
            }
        }
        if !(1..=1000).contains(&self.plateau_window) {
            return Err(err("plateau_window", "must be 1 to 1000 reports"));
        }
        if !(0.0..1.0).contains(&self.plateau_epsilon) {
            return Err(err("plateau_epsilon", "must be in [0, 1)"));
        }
        if self.slot_ms < self.round_ms {
            return Err(err("slot_ms", "must be at least round_ms"));
        }
        if self.peer_timeout() < 2 * self.heartbeat_ms {
            return Err(err(
                "peer_timeout_ms",
                "must be at least two heartbeats (heartbeat_ms)",
            ));
        }
        if self.autonomy_ms < self.peer_timeout() {
            return Err(err(
                "autonomy_ms",
                "must be at least the peer timeout (peer_timeout_ms)",
            ));
        }
        if self.forget_ms <= self.autonomy_ms + self.peer_timeout() {
            return Err(err(
                "forget_ms",
                "must be longer than the peer timeout plus the autonomy time",
            ));
        }
        if self.gpu_units().is_none() {
            return Err(err(
                "gpu_step",
                format!(
                    "must be one device divided by a whole number up to 100 (1, 0.5, 0.25, 0.1, ...), got {}",
                    self.gpu_step
                ),
            ));
        }
        for (k, v) in [
            ("internal_bytes_per_s", self.gangs.internal_bytes_per_s),
            ("external_bytes_per_s", self.gangs.external_bytes_per_s),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(err(
                    &format!("gangs.{k}"),
                    format!("must be a positive number of bytes per second, got {v}"),
                ));
            }
        }
        for (section, a) in [("offer", &self.offer), ("reserve", &self.reserve)] {
            for (k, v) in [("cpu", a.cpu), ("gpu", a.gpu), ("mem_gb", a.mem_gb)] {
                if let Some(v) = v
                    && !(v.is_finite() && v >= 0.0)
                {
                    return Err(err(
                        &format!("{section}.{k}"),
                        format!("must be a non-negative number, got {v}"),
                    ));
                }
            }
        }
        Ok(())
    }
}
