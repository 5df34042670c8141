//! The wire format's tensor, shared by the handler that reads and answers it and the load
//! generator that sends and checks it.

use serde::{Deserialize, Serialize};

/// A request or response tensor: requests carry f64 so that an element beyond f32's range is
/// seen and refused instead of silently becoming infinite.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Tensor<T> {
    pub(crate) dtype: String,
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Vec<T>,
}
