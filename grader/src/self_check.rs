//! The maintainers' check of the hidden tests themselves: each lesson (the reference solution)
//! passes every check of its exercise; the planted-bug implementation with no bug switched on
//! (the control) passes every check too; and each planted-bug mutant fails the check named as
//! the one meant to catch it, so the hint a learner then reads fits the mistake. Each exercise
//! says what its self-check runs (`exNN::self_check`, made with [`planted`] or [`shaders`]);
//! [`run`] runs them all. (That every untouched stub reports "not started" is checked by
//! `cargo grade --self-check`, which builds the exercise crates.)

use crate::check::{Check, Outcome};
use crate::mutants::{Bug, Planted};

/// What the self-check found for one planted bug.
pub struct MutantReport {
    /// The bug.
    pub name: String,
    /// The check meant to catch it.
    pub meant: &'static str,
    /// Whether that check failed (`None`: no check of that name exists).
    pub caught: Option<bool>,
    /// The first check in grading order that failed: the one whose hint a learner reads first.
    pub first: Option<&'static str>,
}

/// What the self-check found for one exercise.
pub struct Report {
    /// `ex01`, ...
    pub exercise: &'static str,
    /// Checks the lesson failed, with why (must be empty).
    pub lesson_failures: Vec<String>,
    /// Checks the bug-free control failed, with why (must be empty); `None` where the lesson
    /// itself is the control (the WGSL mutants are text changes of the lesson's shader).
    pub control_failures: Option<Vec<String>>,
    /// Every planted bug.
    pub mutants: Vec<MutantReport>,
}

impl Report {
    /// The lesson and the control pass everything, and every mutant is caught by its check.
    pub fn ok(&self) -> bool {
        self.lesson_failures.is_empty()
            && self.control_failures.as_ref().is_none_or(Vec::is_empty)
            && self.mutants.iter().all(|m| m.caught == Some(true))
    }
}

/// The planted bugs of one exercise: for each, its name, the check meant to catch it and the
/// exercise's checks run on it.
pub type Mutants = Vec<(String, &'static str, Vec<Check>)>;

/// What one exercise's self-check runs: its checks on the lesson, on the bug-free control
/// (none where the lesson itself is the control) and on every planted bug.
pub struct SelfCheck {
    lesson: Vec<Check>,
    control: Option<Vec<Check>>,
    mutants: Mutants,
}

/// The self-check of an exercise whose planted bugs are one Rust implementation with a switch
/// per bug, `Planted<B>`: its checks (`checks`) on the lesson (`lesson`, its checks already
/// made), on the control and on each bug of `B`.
pub fn planted<B: Bug>(lesson: Vec<Check>, checks: impl Fn(Planted<B>) -> Vec<Check>) -> SelfCheck {
    let mutants = B::ALL
        .iter()
        .map(|&bug| (format!("{bug:?}"), bug.caught_by(), checks(Planted::with(bug))))
        .collect();
    SelfCheck { lesson, control: Some(checks(Planted::control())), mutants }
}

/// The self-check of an exercise whose planted bugs are text changes of the lesson's own
/// shaders: the lesson is the control.
pub fn shaders(lesson: Vec<Check>, mutants: Mutants) -> SelfCheck {
    SelfCheck { lesson, control: None, mutants }
}

/// Runs the lesson, the control and every mutant of every exercise the grader lists
/// ([`crate::exercises`]: the GPU exercises' only with the `gpu` feature) through the
/// exercise's checks.
pub fn run() -> Vec<Report> {
    let check = |exercise: &crate::Exercise| {
        let SelfCheck { lesson, control, mutants } = (exercise.self_check)();
        report(exercise.name, lesson, control, mutants)
    };
    crate::exercises().iter().map(check).collect()
}

/// The checks of `checks` that do not pass, with why.
fn failures(checks: &[Check]) -> Vec<String> {
    checks
        .iter()
        .filter_map(|c| match c.run() {
            Outcome::Passed => None,
            other => Some(format!("{}: {other:?}", c.name)),
        })
        .collect()
}

fn report(
    exercise: &'static str,
    lesson: Vec<Check>,
    control: Option<Vec<Check>>,
    mutants: Mutants,
) -> Report {
    let lesson_failures = failures(&lesson);
    let control_failures = control.as_deref().map(failures);
    let mutants = mutants
        .into_iter()
        .map(|(name, meant, checks)| {
            // Grading order up to the first failure, then the meant check if not yet run.
            let (mut first, mut caught) = (None, None);
            let fails = |c: &Check| matches!(c.run(), Outcome::Failed(_));
            for check in &checks {
                let failed = fails(check);
                if check.name == meant {
                    caught = Some(failed);
                }
                if failed {
                    first = Some(check.name);
                    break;
                }
            }
            if caught.is_none() {
                caught = checks.iter().find(|c| c.name == meant).map(fails);
            }
            MutantReport { name, meant, caught, first }
        })
        .collect();
    Report { exercise, lesson_failures, control_failures, mutants }
}

/// The self-check table: for each exercise, whether the lesson and the control pass, and for
/// each mutant the check meant to catch it and whether it did.
pub fn table(reports: &[Report]) -> String {
    let mut out = format!(
        "random cases from seed {} (PROPTEST_RNG_SEED draws them again)\n{:<9} {:<14} {:<15} {}\n",
        crate::check::seed(),
        "exercise",
        "lesson passes",
        "control passes",
        "mutants caught by their check"
    );
    for r in reports {
        let caught = r.mutants.iter().filter(|m| m.caught == Some(true)).count();
        let yes_no = |failures: &[String]| if failures.is_empty() { "yes" } else { "NO" };
        let control = r.control_failures.as_deref().map_or("(the lesson)", yes_no);
        out += &format!(
            "{:<9} {:<14} {:<15} {caught} / {}\n",
            r.exercise,
            yes_no(&r.lesson_failures),
            control,
            r.mutants.len()
        );
        for failure in &r.lesson_failures {
            out += &format!("    lesson fails: {failure}\n");
        }
        for failure in r.control_failures.iter().flatten() {
            out += &format!("    control fails: {failure}\n");
        }
        let width = r.mutants.iter().map(|m| m.name.len()).max().unwrap_or(0);
        for m in &r.mutants {
            let verdict = match m.caught {
                Some(true) => format!("caught by: {}", m.meant),
                Some(false) => format!("NOT CAUGHT by: {}", m.meant),
                None => format!("NO CHECK NAMED: {}", m.meant),
            };
            let first = match m.first {
                Some(first) if first != m.meant => format!(" (first to fail: {first})"),
                _ => String::new(),
            };
            out += &format!("    {:<width$} {verdict}{first}\n", m.name);
        }
    }
    out
}
