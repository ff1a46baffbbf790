//! Planted bugs in the WGSL kernels of exercises 08 and 09 (listed in `src/ex08/mutants.rs`
//! and `src/ex09/mutants.rs`). Each mutant is the lesson's shader with one classic mistake put
//! in by a text replacement, so the bug is exactly the diff: what is replaced, and by what.

/// One planted bug: every occurrence of `find` in the lesson's shader becomes `replace`.
#[derive(Clone, Copy, Debug)]
pub struct WgslBug {
    /// What the bug is.
    pub name: &'static str,
    /// Text of the lesson's shader to change.
    pub find: &'static str,
    /// What it becomes.
    pub replace: &'static str,
    /// The check meant to catch it (whose hint must fit it).
    pub caught_by: &'static str,
}

impl WgslBug {
    /// The shader `source` with this bug planted.
    ///
    /// # Panics
    /// If `find` is not in `source`: the lesson's shader changed and the mutant must follow.
    pub fn plant(&self, source: &str) -> String {
        assert!(
            source.contains(self.find),
            "mutant {:?} no longer applies to the shader",
            self.name
        );
        source.replace(self.find, self.replace)
    }
}
