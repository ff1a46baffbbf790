//! The maintainers' check of the hidden tests themselves: each lesson (the reference solution)
//! passes every check of its exercise; the planted-bug implementation with no bug switched on
//! (the control) passes every check too; and each planted-bug mutant fails the check named as
//! the one meant to catch it, so the hint a learner then reads fits the mistake. (That every
//! untouched stub reports "not started" is checked by `cargo grade --self-check`, which builds
//! the exercise crates.)

use crate::check::{Check, Outcome};
use crate::ex01::mutants::NaiveBug;
use crate::ex02::mutants::OnlineBug;
use crate::ex03::mutants::TiledBug;
use crate::ex04::mutants::Flash1Bug;
use crate::ex05::mutants::BackwardBug;
use crate::ex06::mutants::PrecisionBug;
use crate::ex07::mutants::ParallelBug;
use crate::ex11::mutants::DecodingBug;
use crate::ex12::mutants::ModelBug;
use crate::mutants::Planted;
use crate::{ex01, ex02, ex03, ex04, ex05, ex06, ex07, ex11, ex12};

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
type Mutants = Vec<(String, &'static str, Vec<Check>)>;

/// Runs the lesson, the control and every mutant of every exercise through the exercise's
/// checks (the GPU exercises' only with the `gpu` feature).
pub fn run() -> Vec<Report> {
    let rust = |bug: String, meant: &'static str, checks: Vec<Check>| (bug, meant, checks);
    let mut reports = vec![
        report(
            "ex01",
            ex01::checks(ex01::lesson()),
            Some(ex01::checks(Planted::<NaiveBug>::control())),
            NaiveBug::ALL
                .iter()
                .map(|&b| rust(format!("{b:?}"), b.caught_by(), ex01::checks(Planted::with(b))))
                .collect(),
        ),
        report(
            "ex02",
            ex02::checks(ex02::lesson()),
            Some(ex02::checks(Planted::<OnlineBug>::control())),
            OnlineBug::ALL
                .iter()
                .map(|&b| rust(format!("{b:?}"), b.caught_by(), ex02::checks(Planted::with(b))))
                .collect(),
        ),
        report(
            "ex03",
            ex03::checks(ex03::lesson()),
            Some(ex03::checks(Planted::<TiledBug>::control())),
            TiledBug::ALL
                .iter()
                .map(|&b| rust(format!("{b:?}"), b.caught_by(), ex03::checks(Planted::with(b))))
                .collect(),
        ),
        report(
            "ex04",
            ex04::checks(ex04::lesson()),
            Some(ex04::checks(Planted::<Flash1Bug>::control())),
            Flash1Bug::ALL
                .iter()
                .map(|&b| rust(format!("{b:?}"), b.caught_by(), ex04::checks(Planted::with(b))))
                .collect(),
        ),
        report(
            "ex05",
            ex05::checks(ex05::lesson()),
            Some(ex05::checks(Planted::<BackwardBug>::control())),
            BackwardBug::ALL
                .iter()
                .map(|&b| rust(format!("{b:?}"), b.caught_by(), ex05::checks(Planted::with(b))))
                .collect(),
        ),
        report(
            "ex06",
            ex06::checks(ex06::lesson()),
            Some(ex06::checks(Planted::<PrecisionBug>::control())),
            PrecisionBug::ALL
                .iter()
                .map(|&b| rust(format!("{b:?}"), b.caught_by(), ex06::checks(Planted::with(b))))
                .collect(),
        ),
        report(
            "ex07",
            ex07::checks(ex07::lesson()),
            Some(ex07::checks(Planted::<ParallelBug>::control())),
            ParallelBug::ALL
                .iter()
                .map(|&b| rust(format!("{b:?}"), b.caught_by(), ex07::checks(Planted::with(b))))
                .collect(),
        ),
    ];
    #[cfg(feature = "gpu")]
    reports.extend(gpu_reports());
    reports.push(report(
        "ex11",
        ex11::checks(ex11::lesson()),
        Some(ex11::checks(Planted::<DecodingBug>::control())),
        DecodingBug::ALL
            .iter()
            .map(|&b| rust(format!("{b:?}"), b.caught_by(), ex11::checks(Planted::with(b))))
            .collect(),
    ));
    reports.push(report(
        "ex12",
        ex12::checks(ex12::lesson()),
        Some(ex12::checks(Planted::<ModelBug>::control())),
        ModelBug::ALL
            .iter()
            .map(|&b| rust(format!("{b:?}"), b.caught_by(), ex12::checks(Planted::with(b))))
            .collect(),
    ));
    reports
}

/// The reports of the GPU exercises: their lessons, and the lessons' shaders with each planted
/// bug.
#[cfg(feature = "gpu")]
fn gpu_reports() -> Vec<Report> {
    use crate::ex08::mutants::NAIVE_BUGS;
    use crate::ex09::mutants::FLASH_BUGS;
    use crate::ex10::mutants::MICRO_TILE_BUGS;
    use crate::{ex08, ex09, ex10};
    vec![
        report(
            "ex08",
            ex08::checks(ex08::lesson()),
            None,
            NAIVE_BUGS
                .iter()
                .map(|b| {
                    let naive = b.plant(lesson08::SHADER);
                    let shader = ex08::Shader { naive, dropout: ex08::dropout::solution() };
                    (b.name.to_string(), b.caught_by, ex08::checks(shader))
                })
                .chain(ex08::dropout::DROPOUT_BUGS.iter().map(|b| {
                    let dropout = b.plant(&ex08::dropout::solution());
                    let shader = ex08::Shader { naive: lesson08::SHADER.to_string(), dropout };
                    (b.name.to_string(), b.caught_by, ex08::checks(shader))
                }))
                .collect(),
        ),
        report(
            "ex09",
            ex09::checks(ex09::lesson()),
            None,
            FLASH_BUGS
                .iter()
                .map(|b| {
                    let flash = b.plant(lesson09::SHADER);
                    let shader = ex09::Shader { flash, window: ex09::window::solution() };
                    (b.name.to_string(), b.caught_by, ex09::checks(shader))
                })
                .chain(ex09::window::WINDOW_BUGS.iter().map(|b| {
                    let window = b.plant(&ex09::window::solution());
                    let shader = ex09::Shader { flash: lesson09::SHADER.to_string(), window };
                    (b.name.to_string(), b.caught_by, ex09::checks(shader))
                }))
                .collect(),
        ),
        report(
            "ex10",
            ex10::checks(ex10::lesson()),
            None,
            MICRO_TILE_BUGS
                .iter()
                .map(|b| {
                    let micro_tiles = b.plant(lesson10::v7_f32_registers::SOURCE);
                    let shader = ex10::Shader { micro_tiles, features: ex10::features::solution() };
                    (b.name.to_string(), b.caught_by, ex10::checks(shader))
                })
                .chain(ex10::features::FEATURE_BUGS.iter().map(|b| {
                    let features = b.plant(&ex10::features::solution());
                    let micro_tiles = lesson10::v7_f32_registers::SOURCE.to_string();
                    let shader = ex10::Shader { micro_tiles, features };
                    (b.name.to_string(), b.caught_by, ex10::checks(shader))
                }))
                .collect(),
        ),
    ]
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
