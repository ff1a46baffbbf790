//! Planted bugs in the WGSL kernels of exercises 08 to 10 (listed in each one's
//! `mutants.rs`, and the main tasks' beside their solutions). Each mutant is the lesson's shader with one classic mistake put
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

/// The self-check of a GPU exercise with two shaders, the warm-up's and the main task's, whose
/// planted bugs are text changes of one of them (`bugs.0` of the first, `bugs.1` of the second)
/// with the other as the lesson has it: `lesson` (the two shaders as the lesson writes them),
/// and each shader pair through `checks`. The lesson is the control.
pub fn self_check(
    lesson: [String; 2],
    bugs: (&[WgslBug], &[WgslBug]),
    checks: impl Fn([String; 2]) -> Vec<crate::check::Check>,
) -> crate::self_check::SelfCheck {
    let [first, second] = &lesson;
    let in_first = bugs.0.iter().map(|b| (b, [b.plant(first), second.clone()]));
    let in_second = bugs.1.iter().map(|b| (b, [first.clone(), b.plant(second)]));
    let mutants = in_first
        .chain(in_second)
        .map(|(bug, shaders)| (bug.name.to_string(), bug.caught_by, checks(shaders)))
        .collect();
    crate::self_check::shaders(checks(lesson), mutants)
}
