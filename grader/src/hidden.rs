//! The `main` of every hidden test binary (`src/exNN/hidden.rs`): run the exercise's checks,
//! print one line per check (with the smallest failing input and a hint for failures), and end
//! with a machine-readable line `GRADE exNN <status> <passed>/<total>` for `cargo grade`.

use std::fmt;
use std::process::ExitCode;

use crate::check::{Check, Outcome, quiet_panics};

/// Where an exercise stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Every check passes.
    Done,
    /// At least one check fails.
    Failing,
    /// No check fails, but the code still reaches a `todo!()`.
    NotStarted,
}

impl Status {
    /// The status of an exercise whose checks ended with `outcomes`.
    pub fn of(outcomes: &[Outcome]) -> Self {
        if outcomes.iter().any(|o| matches!(o, Outcome::Failed(_))) {
            Self::Failing
        } else if outcomes.contains(&Outcome::NotStarted) {
            Self::NotStarted
        } else {
            Self::Done
        }
    }

    /// The word used in the progress file and the `GRADE` line.
    pub fn word(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Failing => "failing",
            Self::NotStarted => "not-started",
        }
    }

    /// The status as a learner reads it, given how many checks pass: an exercise with no
    /// failure that still reaches a `todo!()` is "not started" while nothing passes, and
    /// "unfinished" once something does (its warm-up done, say, and its main task not begun).
    pub fn describe(self, passed: usize) -> String {
        match self {
            Self::NotStarted if passed > 0 => "unfinished".to_string(),
            other => other.to_string(),
        }
    }

    /// Parses [`Status::word`].
    pub fn from_word(word: &str) -> Option<Self> {
        [Self::Done, Self::Failing, Self::NotStarted].into_iter().find(|s| s.word() == word)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.word().replace('-', " "))
    }
}

/// Runs `checks` for `exercise` (titled with its topic in the course manifest), prints the
/// report, and returns success only if all pass: the `main` of every hidden test binary.
pub fn main(exercise: &str, checks: Vec<Check>) -> ExitCode {
    let lessons = course::lessons();
    let listed = lessons.iter().filter_map(|l| l.exercise.as_ref()).find(|e| e.package == exercise);
    let listed = listed.unwrap_or_else(|| panic!("course.toml lists no exercise {exercise}"));
    run(exercise, &listed.topic, checks)
}

/// Runs `checks` for `exercise` under `title`, prints the report, and returns success only if
/// all pass.
pub fn run(exercise: &str, title: &str, checks: Vec<Check>) -> ExitCode {
    quiet_panics();
    crate::memory::count_rayon_workers();
    println!("{exercise}: {title}");
    let mut outcomes: Vec<Outcome> = Vec::new();
    for check in &checks {
        let outcome = check.run();
        print!("{}", report_line_after(check, &outcome, &checks, &outcomes));
        outcomes.push(outcome);
    }
    let status = Status::of(&outcomes);
    let passed = outcomes.iter().filter(|o| **o == Outcome::Passed).count();
    let described = status.describe(passed);
    println!("\n{exercise}: {described} ({passed} of {} checks pass)", checks.len());
    if status == Status::Failing {
        println!(
            "the random cases came from seed {}: `PROPTEST_RNG_SEED={} cargo grade {exercise}` \
             draws the same ones again",
            crate::check::seed(),
            crate::check::seed()
        );
    }
    println!("GRADE {exercise} {} {passed}/{}", status.word(), checks.len());
    if status == Status::Done { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// [`report_line`], except that a failure already shown by an earlier check (a shader that
/// does not compile fails every check the same way) names that check instead of repeating it.
/// `earlier` are the outcomes of the first checks of `checks`.
pub fn report_line_after(
    check: &Check,
    outcome: &Outcome,
    checks: &[Check],
    earlier: &[Outcome],
) -> String {
    let same = checks.iter().zip(earlier).find(
        |(_, seen)| matches!((seen, outcome), (Outcome::Failed(a), Outcome::Failed(b)) if a == b),
    );
    match same {
        Some((first, _)) => {
            format!("  FAIL  {} (the same failure as `{}`)\n", check.name, first.name)
        }
        None => report_line(check, outcome),
    }
}

/// `  PASS name`, `  TODO name`, or `  FAIL name` followed by the failure and the hint.
pub fn report_line(check: &Check, outcome: &Outcome) -> String {
    match outcome {
        Outcome::Passed => format!("  PASS  {}\n", check.name),
        Outcome::NotStarted => format!("  TODO  {} (reaches todo!())\n", check.name),
        Outcome::Failed(why) => {
            let why: String = why.lines().map(|l| format!("        {l}\n")).collect();
            format!("  FAIL  {}\n{why}        hint: {}\n", check.name, check.hint)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_follows_the_worst_outcome() {
        let (pass, todo, fail) =
            (Outcome::Passed, Outcome::NotStarted, Outcome::Failed("x".into()));
        assert_eq!(Status::of(&[pass.clone(), pass.clone()]), Status::Done);
        assert_eq!(Status::of(&[pass.clone(), todo.clone()]), Status::NotStarted);
        assert_eq!(Status::of(&[todo, fail, pass]), Status::Failing);
        for s in [Status::Done, Status::Failing, Status::NotStarted] {
            assert_eq!(Status::from_word(s.word()), Some(s));
        }
        assert_eq!(Status::NotStarted.describe(0), "not started");
        assert_eq!(Status::NotStarted.describe(8), "unfinished");
        assert_eq!(Status::Failing.describe(8), "failing");
    }

    #[test]
    fn a_failure_seen_before_is_named_not_repeated() {
        let checks =
            [Check::new("first", "hint 1", || Ok(())), Check::new("second", "hint 2", || Ok(()))];
        let compile_error = Outcome::Failed("compiling flash.wgsl: error at line 3".into());
        let first = report_line_after(&checks[0], &compile_error, &checks, &[]);
        assert!(first.contains("error at line 3") && first.contains("hint 1"), "{first}");
        let seen = [compile_error.clone()];
        let second = report_line_after(&checks[1], &compile_error, &checks, &seen);
        assert_eq!(second, "  FAIL  second (the same failure as `first`)\n");
        let other = Outcome::Failed("another failure".into());
        let third = report_line_after(&checks[1], &other, &checks, &seen);
        assert!(third.contains("another failure"), "{third}");
    }

    #[test]
    fn a_failure_shows_its_input_and_hint() {
        let check = Check::new("a check", "look here", || Ok(()));
        let line =
            report_line(&check, &Outcome::Failed("smallest failing input: B=1\nerror".into()));
        assert_eq!(
            line,
            "  FAIL  a check\n        smallest failing input: B=1\n        error\n        hint: look here\n"
        );
    }
}
