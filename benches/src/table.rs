//! The result table every benchmark section adds rows to.

use std::fmt;

/// One measurement.
#[derive(Debug, Clone)]
pub struct Row {
    /// Section the row belongs to (e.g. "simulator").
    pub section: &'static str,
    /// What was measured.
    pub name: String,
    /// The value, formatted with its unit.
    pub value: String,
    /// The target or comparison, if any (e.g. "target ≥ 0.9").
    pub note: String,
}

/// The rows of one run.
#[derive(Debug, Default, Clone)]
pub struct Table {
    rows: Vec<Row>,
}

impl Table {
    /// Adds a row.
    pub fn push(
        &mut self,
        section: &'static str,
        name: impl Into<String>,
        value: impl Into<String>,
        note: impl Into<String>,
    ) {
        self.rows.push(Row {
            section,
            name: name.into(),
            value: value.into(),
            note: note.into(),
        });
    }

    /// The rows so far.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = |pick: fn(&Row) -> &str, title: &str| {
            self.rows
                .iter()
                .map(|r| pick(r).chars().count())
                .chain([title.len()])
                .max()
                .unwrap_or(0)
        };
        let ws = width(|r| r.section, "section");
        let wn = width(|r| &r.name, "measurement");
        let wv = width(|r| &r.value, "value");
        writeln!(
            f,
            "{:<ws$}  {:<wn$}  {:>wv$}  note",
            "section", "measurement", "value"
        )?;
        writeln!(f, "{}", "-".repeat(ws + wn + wv + 12))?;
        for r in &self.rows {
            writeln!(
                f,
                "{:<ws$}  {:<wn$}  {:>wv$}  {}",
                r.section, r.name, r.value, r.note
            )?;
        }
        Ok(())
    }
}
