//! A graded check: a name, a hint for when it fails, and a body that returns `Err` with a
//! description of the first (shrunk) failing input.

use std::cell::RefCell;
use std::fmt::Debug;
use std::panic::{self, AssertUnwindSafe};

use proptest::strategy::Strategy;
use proptest::test_runner::{RngSeed, TestCaseError, TestError, TestRunner};
use testkit::strategies::config;

/// One graded check of an exercise.
pub struct Check {
    /// What is checked, e.g. "causal mask with Nq != Nkv".
    pub name: &'static str,
    /// What usually causes this check to fail.
    pub hint: &'static str,
    /// Which part of the exercise it grades.
    pub part: Part,
    body: Box<dyn Fn() -> Result<(), String>>,
}

/// The two parts of every exercise: the warm-up rebuilds the lesson's stage, the main task
/// adds what no chapter shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The lesson's stage, written again.
    WarmUp,
    /// The task beyond the chapter.
    MainTask,
}

impl Part {
    /// Both parts, in the order an exercise takes them.
    pub const ALL: [Part; 2] = [Part::WarmUp, Part::MainTask];

    /// `warm-up` or `main task`.
    pub fn name(self) -> &'static str {
        match self {
            Part::WarmUp => "warm-up",
            Part::MainTask => "main task",
        }
    }
}

/// `checks`, marked as the main task's.
pub fn main_task(checks: Vec<Check>) -> Vec<Check> {
    checks.into_iter().map(|check| Check { part: Part::MainTask, ..check }).collect()
}

impl Check {
    /// A check named `name`, with `hint` shown when `body` fails.
    pub fn new(
        name: &'static str,
        hint: &'static str,
        body: impl Fn() -> Result<(), String> + 'static,
    ) -> Self {
        Self { name, hint, part: Part::WarmUp, body: Box::new(body) }
    }

    /// Runs the check, turning panics in the code under test into outcomes.
    pub fn run(&self) -> Outcome {
        LAST_PANIC.with(|p| p.borrow_mut().take());
        match panic::catch_unwind(AssertUnwindSafe(|| (self.body)())) {
            Ok(Ok(())) => Outcome::Passed,
            Ok(Err(failure)) if is_todo(&failure) => Outcome::NotStarted,
            Ok(Err(failure)) => Outcome::Failed(failure),
            Err(_) => {
                let message = LAST_PANIC.with(|p| p.borrow_mut().take()).unwrap_or_default();
                if is_todo(&message) {
                    Outcome::NotStarted
                } else {
                    Outcome::Failed(format!("panicked: {message}"))
                }
            }
        }
    }
}

/// How a check ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The code passed.
    Passed,
    /// The code gave a wrong answer, a wrong error, NaN, or panicked: why, with the input.
    Failed(String),
    /// The code still reaches a `todo!()`.
    NotStarted,
}

fn is_todo(message: &str) -> bool {
    message.contains("not yet implemented")
}

/// Runs `call` for its `todo!()` alone: a `todo!()` in it goes on to the check that runs it,
/// which then counts as not started; any other outcome, a panic included, is left to the
/// checks that judge it. For a check whose own inputs the code may refuse before reaching the
/// learner's part (a stub that validates first).
pub fn unless_not_started<T>(call: impl FnOnce() -> T) {
    if let Err(panic) = panic::catch_unwind(AssertUnwindSafe(call)) {
        // The panic hook ([`quiet_panics`]) kept its message, as `Check::run` reads it.
        let message = LAST_PANIC.with(|p| p.borrow().clone()).unwrap_or_default();
        if is_todo(&message) {
            panic::resume_unwind(panic);
        }
    }
}

/// The seed every property check of this run draws its cases from: `PROPTEST_RNG_SEED` if it
/// is set (CI sets it, so its runs are repeatable), otherwise a fresh one per run (so learners
/// see new cases every time). A failure prints it, so the same cases can be drawn again.
pub fn seed() -> u64 {
    if let Some(seed) = *SEED.lock().expect("not poisoned") {
        return seed;
    }
    let from_env = std::env::var("PROPTEST_RNG_SEED").ok().and_then(|s| s.parse().ok());
    let seed = from_env.unwrap_or_else(|| {
        // A random 64-bit number from the standard library's hasher seed.
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(std::time::SystemTime::now())
    });
    *SEED.lock().expect("not poisoned") = Some(seed);
    seed
}

/// Draws this run's cases from `seed` instead (the maintainers' stress run, `cargo grade
/// --stress`, runs many seeds in one process).
pub fn set_seed(seed: u64) {
    *SEED.lock().expect("not poisoned") = Some(seed);
}

/// Multiplies the number of cases of every property check (the stress run uses 20).
pub fn set_cases_factor(factor: u32) {
    CASES_FACTOR.store(factor.max(1), std::sync::atomic::Ordering::Relaxed);
}

static SEED: std::sync::Mutex<Option<u64>> = std::sync::Mutex::new(None);
static CASES_FACTOR: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// Runs `test` on `cases` inputs drawn from `strategy` (times the cases factor; a
/// `PROPTEST_CASES` variable replaces the count), from this run's [`seed`]. On failure proptest
/// shrinks the input to a minimal one, and the error names it.
pub fn for_all<S>(
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), String>,
) -> Result<(), String>
where
    S: Strategy,
    S::Value: Debug,
{
    let factor = CASES_FACTOR.load(std::sync::atomic::Ordering::Relaxed);
    let mut config = config(cases);
    config.cases *= factor;
    config.rng_seed = RngSeed::Fixed(seed());
    let mut runner = TestRunner::new(config);
    runner.run(&strategy, |value| test(value).map_err(TestCaseError::fail)).map_err(|e| match e {
        TestError::Fail(reason, value) => {
            let reason = reason.to_string();
            // A panic inside a case reaches us as proptest's failure text; keep its message.
            let reason = match LAST_PANIC.with(|p| p.borrow().clone()) {
                Some(panic) if panic.starts_with(reason.trim()) => {
                    format!("panicked: {panic}")
                }
                _ => reason,
            };
            format!("smallest failing input: {value:?}\n{reason}")
        }
        TestError::Abort(reason) => format!("gave up: {reason}"),
    })
}

thread_local! {
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Replaces the default panic hook (which prints a message and backtrace for every panicking
/// proptest case) with one that only remembers the last message and where it came from.
pub fn quiet_panics() {
    panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string());
        let location =
            info.location().map(|l| format!(" (at {}:{})", l.file(), l.line())).unwrap_or_default();
        LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{message}{location}")));
    }));
}
