//! The `main` of every hidden test binary (`src/exNN/hidden.rs`): run the exercise's checks,
//! print them part by part (with the smallest failing input and a hint for failures), and end
//! with a machine-readable line for `cargo grade`, `GRADE exNN <whole> <warm-up> <main task>`,
//! each `<status>:<passed>/<total>` ([`Grade::line`]).

use std::process::ExitCode;

use crate::check::{Check, Outcome, Part, quiet_panics};

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
    /// The status of an exercise (or one part of it) whose checks ended with `outcomes`.
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

    /// Parses [`Status::word`].
    pub fn from_word(word: &str) -> Option<Self> {
        [Self::Done, Self::Failing, Self::NotStarted].into_iter().find(|s| s.word() == word)
    }
}

/// Where one part of an exercise (or the whole of it) stands: its status and how many of its
/// checks pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Done, failing or not started.
    pub status: Status,
    /// Checks that pass.
    pub passed: usize,
    /// Checks in all.
    pub total: usize,
}

impl Progress {
    /// The progress of checks that ended with `outcomes`.
    pub fn of(outcomes: &[Outcome]) -> Self {
        Self {
            status: Status::of(outcomes),
            passed: outcomes.iter().filter(|o| **o == Outcome::Passed).count(),
            total: outcomes.len(),
        }
    }

    /// As a learner reads it: `done`, `not started` (nothing fails and nothing passes: an
    /// untouched stub passes no check), `3 of 13` (and `failing` when a check fails), or `no
    /// result` when no check ran (the code does not compile).
    pub fn describe(&self) -> String {
        match self.status {
            Status::Done if self.total == 0 => "no checks".to_string(),
            Status::Done => "done".to_string(),
            // No check ran: the exercise does not compile (or its checks crashed).
            Status::Failing if self.total == 0 => "no result".to_string(),
            Status::NotStarted if self.passed == 0 => "not started".to_string(),
            Status::NotStarted => format!("{} of {}", self.passed, self.total),
            Status::Failing => format!("{} of {}, failing", self.passed, self.total),
        }
    }

    /// `status:passed/total`, as the `GRADE` line and the progress file write it.
    pub fn word(&self) -> String {
        format!("{}:{}/{}", self.status.word(), self.passed, self.total)
    }

    /// Parses [`Progress::word`].
    pub fn from_word(word: &str) -> Option<Self> {
        let (status, counts) = word.split_once(':')?;
        let (passed, total) = counts.split_once('/')?;
        Some(Self {
            status: Status::from_word(status)?,
            passed: passed.parse().ok()?,
            total: total.parse().ok()?,
        })
    }
}

/// What `cargo grade` reads from a hidden test's last line: the whole exercise and each part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grade {
    /// Every check.
    pub whole: Progress,
    /// The warm-up's checks, then the main task's.
    pub parts: [Progress; 2],
}

impl Grade {
    /// The machine-readable last line of a hidden test:
    /// `GRADE exNN <status>:<passed>/<total> <warm-up> <main task>`.
    pub fn line(&self, exercise: &str) -> String {
        let [warm_up, main_task] = self.parts.map(|p| p.word());
        format!("GRADE {exercise} {} {warm_up} {main_task}", self.whole.word())
    }

    /// Parses [`Grade::line`]: the exercise and its grade.
    pub fn from_line(line: &str) -> Option<(String, Self)> {
        let fields: Vec<&str> = line.strip_prefix("GRADE ")?.split_whitespace().collect();
        let [exercise, whole, warm_up, main_task] = fields[..] else { return None };
        let parts = [Progress::from_word(warm_up)?, Progress::from_word(main_task)?];
        Some((exercise.to_string(), Self { whole: Progress::from_word(whole)?, parts }))
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

/// Runs `checks` for `exercise` under `title`, prints the report part by part, and returns
/// success only if all pass.
pub fn run(exercise: &str, title: &str, checks: Vec<Check>) -> ExitCode {
    quiet_panics();
    crate::memory::count_rayon_workers();
    println!("{exercise}: {title}");
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut report = Report::default();
    for check in &checks {
        let outcome = check.run();
        print!("{}", report.line(check, &outcome));
        outcomes.push(outcome);
    }
    print!("{}", report.finish());
    let grade = grade(&checks, &outcomes);
    let [warm_up, main_task] = grade.parts.map(|p| p.describe());
    println!(
        "\n{exercise}: warm-up {warm_up}, main task {main_task} ({} of {} checks pass)",
        grade.whole.passed, grade.whole.total
    );
    if grade.whole.status == Status::Failing {
        println!(
            "the random cases came from seed {}: `PROPTEST_RNG_SEED={} cargo grade {exercise}` \
             draws the same ones again",
            crate::check::seed(),
            crate::check::seed()
        );
    }
    println!("{}", grade.line(exercise));
    if grade.whole.status == Status::Done { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// The grade of `checks`, which ended with `outcomes`.
pub fn grade(checks: &[Check], outcomes: &[Outcome]) -> Grade {
    let of_part = |part: Part| {
        let outcomes: Vec<Outcome> = checks
            .iter()
            .zip(outcomes)
            .filter(|(check, _)| check.part == part)
            .map(|(_, outcome)| outcome.clone())
            .collect();
        Progress::of(&outcomes)
    };
    Grade { whole: Progress::of(outcomes), parts: Part::ALL.map(of_part) }
}

/// Whether a failure is a shader the compiler refused (it fails every check that compiles it
/// alike, whatever the check).
fn does_not_compile(failure: &str) -> bool {
    failure.contains("the shader does not parse") || failure.contains("the shader is not valid")
}

/// The report of a hidden test as its checks run: a heading per part, one line per check,
/// the checks that reach `todo!()` one after another folded into one line, and a shader that
/// does not compile shown once.
#[derive(Default)]
pub struct Report {
    /// The part of the last check.
    part: Option<Part>,
    /// The checks that reached `todo!()` since the last line, not yet printed.
    todo: Vec<&'static str>,
    /// Failures shown so far, with the check that showed them.
    shown: Vec<(String, &'static str)>,
    /// The part whose shader's compile error was shown.
    compile_error_shown: Option<Part>,
}

impl Report {
    /// What to print after `check` ended with `outcome`: nothing while checks reach `todo!()`
    /// one after another.
    pub fn line(&mut self, check: &Check, outcome: &Outcome) -> String {
        let mut out = String::new();
        if self.part != Some(check.part) {
            out += &self.flush_todo();
            out += &format!("{}\n", check.part.name());
            self.part = Some(check.part);
        }
        match outcome {
            Outcome::NotStarted => {
                self.todo.push(check.name);
                return out;
            }
            Outcome::Passed => {
                out += &self.flush_todo();
                out += &format!("  PASS  {}\n", check.name);
            }
            Outcome::Failed(why) => {
                out += &self.flush_todo();
                out += &self.failure(check, why);
            }
        }
        out
    }

    /// What is left to print once every check has run.
    pub fn finish(&mut self) -> String {
        self.flush_todo()
    }

    fn flush_todo(&mut self) -> String {
        let todo = std::mem::take(&mut self.todo);
        match todo[..] {
            [] => String::new(),
            [one] => format!("  TODO  {one} (reaches todo!())\n"),
            [first, ..] => {
                format!("  TODO  {} checks reach todo!(), from `{first}` on\n", todo.len())
            }
        }
    }

    fn failure(&mut self, check: &Check, why: &str) -> String {
        if does_not_compile(why) {
            if self.compile_error_shown == Some(check.part) {
                return format!(
                    "  FAIL  {} (the shader does not compile: see above)\n",
                    check.name
                );
            }
            self.compile_error_shown = Some(check.part);
            return format!(
                "  FAIL  {}: the shader does not compile\n{}        hint: fix the error the \
                 compiler names above (its line is in the shader as the host specialised it); \
                 every check of this part needs the shader to compile\n",
                check.name,
                indented(why)
            );
        }
        let seen = self.shown.iter().find(|(shown, _)| shown == why).map(|(_, first)| *first);
        self.shown.push((why.to_string(), check.name));
        match seen {
            // The same failure again: its own hint still, which may be the one that fits.
            Some(first) => format!(
                "  FAIL  {} (the same failure as `{first}`)\n        hint: {}\n",
                check.name, check.hint
            ),
            None => {
                format!("  FAIL  {}\n{}        hint: {}\n", check.name, indented(why), check.hint)
            }
        }
    }
}

fn indented(text: &str) -> String {
    text.lines().map(|l| format!("        {l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::main_task;

    fn passed() -> Outcome {
        Outcome::Passed
    }

    fn failed(why: &str) -> Outcome {
        Outcome::Failed(why.to_string())
    }

    #[test]
    fn status_follows_the_worst_outcome() {
        let (pass, todo, fail) = (passed(), Outcome::NotStarted, failed("x"));
        assert_eq!(Status::of(&[pass.clone(), pass.clone()]), Status::Done);
        assert_eq!(Status::of(&[pass.clone(), todo.clone()]), Status::NotStarted);
        assert_eq!(Status::of(&[todo.clone(), fail, pass.clone()]), Status::Failing);
        for s in [Status::Done, Status::Failing, Status::NotStarted] {
            assert_eq!(Status::from_word(s.word()), Some(s));
        }
        assert_eq!(Progress::of(&[todo.clone(), todo.clone()]).describe(), "not started");
        assert_eq!(Progress::of(&[pass.clone(), todo]).describe(), "1 of 2");
        assert_eq!(Progress::of(&[pass.clone(), failed("x")]).describe(), "1 of 2, failing");
        assert_eq!(Progress::of(&[pass]).describe(), "done");
        let none = Progress { status: Status::Failing, passed: 0, total: 0 };
        assert_eq!(none.describe(), "no result");
    }

    #[test]
    fn the_grade_line_has_both_parts_and_reads_back() {
        let checks = [
            Check::new("a", "", || Ok(())),
            Check::new("b", "", || Ok(())),
            main_task(vec![Check::new("c", "", || Ok(()))]).remove(0),
        ];
        let outcomes = [passed(), Outcome::NotStarted, Outcome::NotStarted];
        let grade = grade(&checks, &outcomes);
        assert_eq!(grade.parts[0].describe(), "1 of 2");
        assert_eq!(grade.parts[1].describe(), "not started");
        let line = grade.line("ex03");
        assert_eq!(line, "GRADE ex03 not-started:1/3 not-started:1/2 not-started:0/1");
        assert_eq!(Grade::from_line(&line), Some(("ex03".to_string(), grade)));
        assert_eq!(Grade::from_line("GRADE ex03 done 3/3"), None);
    }

    /// The report of `outcomes` for checks named after them, the last `main` in the main task.
    fn report(outcomes: &[Outcome], main: usize) -> String {
        let names = ["one", "two", "three", "four", "five", "six"];
        let hints = ["hint 1", "hint 2", "hint 3", "hint 4", "hint 5", "hint 6"];
        let mut checks: Vec<Check> =
            (0..outcomes.len() - main).map(|i| Check::new(names[i], hints[i], || Ok(()))).collect();
        let first_main = outcomes.len() - main;
        checks.extend(main_task(
            (first_main..outcomes.len())
                .map(|i| Check::new(names[i], hints[i], || Ok(())))
                .collect(),
        ));
        let mut report = Report::default();
        let mut text: String =
            checks.iter().zip(outcomes).map(|(c, o)| report.line(c, o)).collect();
        text += &report.finish();
        text
    }

    #[test]
    fn checks_that_reach_todo_one_after_another_share_a_line() {
        let todo = Outcome::NotStarted;
        let text = report(&[todo.clone(), todo.clone(), todo.clone(), passed(), todo.clone()], 1);
        assert_eq!(
            text,
            "warm-up\n  TODO  3 checks reach todo!(), from `one` on\n  PASS  four\n\
             main task\n  TODO  five (reaches todo!())\n"
        );
    }

    #[test]
    fn a_repeated_failure_keeps_its_own_hint() {
        let text = report(&[failed("wrong O at row 3"), failed("wrong O at row 3")], 0);
        assert!(text.contains("  FAIL  one\n        wrong O at row 3\n        hint: hint 1\n"));
        assert!(
            text.contains("  FAIL  two (the same failure as `one`)\n        hint: hint 2\n"),
            "{text}"
        );
    }

    #[test]
    fn a_shader_that_does_not_compile_is_shown_once_per_part_without_unrelated_hints() {
        let error =
            |line: u32| failed(&format!("compiling: the shader does not parse: line {line}"));
        let text = report(&[error(3), error(5), error(4), error(9)], 2);
        assert_eq!(text.matches("the shader does not parse").count(), 2, "{text}");
        assert!(text.contains("line 3") && text.contains("line 4"), "{text}");
        assert!(!text.contains("line 5") && !text.contains("line 9"), "{text}");
        assert!(!text.contains("hint 1") && !text.contains("hint 2"), "{text}");
        assert!(text.contains("  FAIL  two (the shader does not compile: see above)"), "{text}");
    }
}
