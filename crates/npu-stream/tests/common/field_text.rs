//! A span's or event's fields as text, for the tests that record what tracing shows (shared
//! by path with npu's tests and the serve example's).

use std::collections::BTreeMap;

use tracing::field::{Field, Visit};

/// Field names to their values: `Debug` text, or the string itself.
pub(crate) type Fields = BTreeMap<String, String>;

/// Records the fields it visits into a [`Fields`].
pub(crate) struct FieldText<'a>(pub(crate) &'a mut Fields);

impl Visit for FieldText<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}
