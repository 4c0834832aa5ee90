//! What the checks found, and how it is shown: levels, findings, text lines and JSON.

use serde_json::json;

/// What one check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    Ok,
    Info,
    /// Worth a look, but no trap: leases do not depend on it.
    Warn,
    /// The check could not run (no permission, command disabled).
    Unknown,
    Trap,
}

pub(crate) struct Finding {
    pub(super) level: Level,
    pub(super) check: &'static str,
    pub(super) text: String,
}

#[derive(Default)]
pub(crate) struct Findings(pub(super) Vec<Finding>);

impl Findings {
    /// How many findings are at one of `levels`.
    pub(crate) fn count(&self, levels: &[Level]) -> usize {
        self.0.iter().filter(|x| levels.contains(&x.level)).count()
    }

    /// The findings as JSON objects (`level`, `check`, `text`).
    pub(crate) fn json(&self) -> Vec<serde_json::Value> {
        self.0
            .iter()
            .map(|x| json!({"level": format!("{:?}", x.level).to_lowercase(), "check": x.check, "text": x.text}))
            .collect()
    }

    /// The findings as text lines, one per finding.
    pub(crate) fn print(&self) {
        for x in &self.0 {
            let tag = match x.level {
                Level::Ok => "ok     ",
                Level::Info => "info   ",
                Level::Warn => "warn   ",
                Level::Unknown => "unknown",
                Level::Trap => "TRAP   ",
            };
            println!("{tag} {:<22} {}", x.check, x.text);
        }
    }

    pub(crate) fn add(&mut self, level: Level, check: &'static str, text: impl Into<String>) {
        self.0.push(Finding {
            level,
            check,
            text: text.into(),
        });
    }
}
