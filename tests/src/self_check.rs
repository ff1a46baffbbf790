//! The maintainers' check of the hidden tests themselves: each lesson (the reference solution)
//! passes every check of its exercise, and each planted-bug mutant fails at least one.
//! (That every untouched stub reports "not started" is checked by `cargo grade --self-check`,
//! which builds the exercise crates.)

use crate::check::{Check, Outcome};
use crate::mutants::{
    BackwardBug, Flash1Bug, NaiveBug, OnlineBug, ParallelBug, PrecisionBug, TiledBug,
};
use crate::wgsl_mutants::{FLASH_BUGS, NAIVE_BUGS};
use crate::{ex01, ex02, ex03, ex04, ex05, ex06, ex07, ex08, ex09};

/// What the self-check found for one exercise.
pub struct Report {
    /// `ex01`, ...
    pub exercise: &'static str,
    /// Checks the lesson failed, with why (must be empty).
    pub lesson_failures: Vec<String>,
    /// Each mutant, and the first check that caught it (`None`: not caught).
    pub mutants: Vec<(String, Option<&'static str>)>,
}

impl Report {
    /// The lesson passes everything and every mutant is caught.
    pub fn ok(&self) -> bool {
        self.lesson_failures.is_empty() && self.mutants.iter().all(|(_, caught)| caught.is_some())
    }
}

/// Runs the lesson and every mutant of every exercise through the exercise's checks.
pub fn run() -> Vec<Report> {
    vec![
        report(
            "ex01",
            ex01::checks(ex01::Lesson),
            NaiveBug::ALL.map(|b| (format!("{b:?}"), ex01::checks(b))),
        ),
        report(
            "ex02",
            ex02::checks(ex02::Lesson),
            OnlineBug::ALL.map(|b| (format!("{b:?}"), ex02::checks(b))),
        ),
        report(
            "ex03",
            ex03::checks(ex03::Lesson),
            TiledBug::ALL.map(|b| (format!("{b:?}"), ex03::checks(b))),
        ),
        report(
            "ex04",
            ex04::checks(ex04::Lesson),
            Flash1Bug::ALL.map(|b| (format!("{b:?}"), ex04::checks(b))),
        ),
        report(
            "ex05",
            ex05::checks(ex05::Lesson),
            BackwardBug::ALL.map(|b| (format!("{b:?}"), ex05::checks(b))),
        ),
        report(
            "ex06",
            ex06::checks(ex06::Lesson),
            PrecisionBug::ALL.map(|b| (format!("{b:?}"), ex06::checks(b))),
        ),
        report(
            "ex07",
            ex07::checks(ex07::Lesson),
            ParallelBug::ALL.map(|b| (format!("{b:?}"), ex07::checks(b))),
        ),
        report(
            "ex08",
            ex08::checks(ex08::lesson()),
            NAIVE_BUGS.map(|b| {
                (b.name.to_string(), ex08::checks(ex08::Shader(b.plant(lesson08::SHADER))))
            }),
        ),
        report(
            "ex09",
            ex09::checks(ex09::lesson()),
            FLASH_BUGS.map(|b| {
                (b.name.to_string(), ex09::checks(ex09::Shader(b.plant(lesson09::SHADER))))
            }),
        ),
    ]
}

fn report<const N: usize>(
    exercise: &'static str,
    lesson: Vec<Check>,
    mutants: [(String, Vec<Check>); N],
) -> Report {
    let lesson_failures = lesson
        .iter()
        .filter_map(|c| match c.run() {
            Outcome::Passed => None,
            other => Some(format!("{}: {other:?}", c.name)),
        })
        .collect();
    let mutants = mutants
        .into_iter()
        .map(|(name, checks)| {
            let caught = checks.iter().find(|c| c.run() != Outcome::Passed).map(|c| c.name);
            (name, caught)
        })
        .collect();
    Report { exercise, lesson_failures, mutants }
}

/// The self-check table: exercise, whether the lesson passes, mutants caught / planted, and
/// which check caught each mutant.
pub fn table(reports: &[Report]) -> String {
    let mut out = format!("{:<9} {:<14} {:<16}\n", "exercise", "lesson passes", "mutants caught");
    for r in reports {
        let caught = r.mutants.iter().filter(|(_, c)| c.is_some()).count();
        let lesson = if r.lesson_failures.is_empty() { "yes" } else { "NO" };
        out += &format!("{:<9} {:<14} {caught} / {}\n", r.exercise, lesson, r.mutants.len());
        for failure in &r.lesson_failures {
            out += &format!("    lesson fails: {failure}\n");
        }
        let width = r.mutants.iter().map(|(m, _)| m.len()).max().unwrap_or(0);
        for (mutant, by) in &r.mutants {
            out += &format!(
                "    {mutant:<width$} {}\n",
                by.map_or("NOT CAUGHT".to_string(), |c| format!("caught by: {c}"))
            );
        }
    }
    out
}
