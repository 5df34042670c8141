//! Which parts of the bench to run: `cargo bench -p npu-benches -- stream-latency` runs only
//! the parts whose name contains one of the words given (all of them without a word).

/// The words given on the command line, less the flags cargo passes (`--bench`).
#[derive(Debug, Default, Clone)]
pub struct Filter {
    words: Vec<String>,
}

impl Filter {
    /// A filter of `args` (the program's arguments without its name); arguments starting
    /// with `-` are flags, not words.
    ///
    /// ```
    /// let filter = npu_benches::Filter::new(["--bench", "latency"].map(String::from));
    /// assert!(filter.wants("stream-latency"));
    /// assert!(!filter.wants("stream-throughput"));
    /// assert!(npu_benches::Filter::new(["--bench".to_string()]).wants("pool"));
    /// ```
    pub fn new(args: impl IntoIterator<Item = String>) -> Self {
        Filter {
            words: args.into_iter().filter(|a| !a.starts_with('-')).collect(),
        }
    }

    /// Whether the part called `part` runs.
    pub fn wants(&self, part: &str) -> bool {
        self.words.is_empty() || self.words.iter().any(|word| part.contains(word.as_str()))
    }
}
