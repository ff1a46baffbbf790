//! The working-memory checks of exercises 03 and 05, run on the lessons (the reference
//! solutions) alone: a correct program must pass them every time, which a loop of runs shows.
//!
//! ```text
//! cargo run -p grader --example memory_checks
//! for i in $(seq 1000); do target/debug/examples/memory_checks || break; done
//! ```

use std::process::ExitCode;

use grader::check::{Check, Outcome};

#[global_allocator]
static ALLOC: reference::memory::CountingAllocator = reference::memory::CountingAllocator;

fn main() -> ExitCode {
    // As the hidden tests do: rayon's threads count too.
    grader::memory::count_rayon_workers();
    let checks: Vec<(&str, Check)> = [
        ("ex03", grader::ex03::checks(grader::ex03::lesson()), grader::ex03::MEMORY),
        ("ex05", grader::ex05::checks(grader::ex05::lesson()), grader::ex05::MEMORY),
    ]
    .into_iter()
    .flat_map(|(exercise, checks, name)| {
        checks.into_iter().filter(move |c| c.name == name).map(move |c| (exercise, c))
    })
    .collect();
    let mut failed = checks.is_empty();
    for (exercise, check) in &checks {
        let outcome = check.run();
        println!("{exercise} {}: {outcome:?}", check.name);
        failed |= !matches!(outcome, Outcome::Passed);
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
