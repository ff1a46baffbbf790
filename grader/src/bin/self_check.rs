//! The maintainers' in-process self-check, GPU exercises included (`cargo grade --self-check`
//! and `cargo grade --stress` run this binary, built with the `gpu` feature, so that grading
//! an exercise never builds wgpu).
//!
//! ```text
//! self-check                   lessons and controls pass, every mutant is caught by its check
//! self-check --stress ROUNDS   that, ROUNDS times, each from a new seed with 20x the cases
//! self-check --stress --seed S one such round from seed S (to reproduce a failure)
//! ```

use std::process::ExitCode;

// The memory checks of exercises 03 and 05 measure with the counting allocator.
#[global_allocator]
static ALLOC: reference::memory::CountingAllocator = reference::memory::CountingAllocator;

const USAGE: &str = "usage: self-check [--stress ROUNDS | --stress --seed SEED]";

fn main() -> ExitCode {
    grader::memory::count_rayon_workers();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let number = |text: &str| text.parse::<u64>().ok();
    let rounds = |text: &str| number(text).filter(|&n| n >= 1);
    match args[..] {
        [] => once(),
        ["--stress", "--seed", seed] if number(seed).is_some() => stress(1, number(seed)),
        ["--stress", text] if rounds(text).is_some() => stress(rounds(text).unwrap_or(1), None),
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// Lessons and controls pass every check, every mutant is caught by its check, and the
/// exercises covered are the manifest's.
fn once() -> ExitCode {
    grader::check::quiet_panics();
    let reports = grader::self_check::run();
    println!("{}", grader::self_check::table(&reports));
    let mut ok = reports.iter().all(|r| r.ok());
    let checked: Vec<&str> = reports.iter().map(|r| r.exercise).collect();
    let listed: Vec<String> =
        course::lessons().into_iter().filter_map(|l| l.exercise).map(|e| e.package).collect();
    if checked != listed {
        println!("the self-check covers {checked:?}, but course.toml lists {listed:?}");
        ok = false;
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// The self-check `rounds` times, each from a fresh seed (printed) with 20 times the random
/// cases: no lesson or control may fail and every mutant must be caught by its check, every
/// time.
fn stress(rounds: u64, fixed_seed: Option<u64>) -> ExitCode {
    grader::check::quiet_panics();
    grader::check::set_cases_factor(20);
    let mut ok = true;
    for round in 1..=rounds {
        let seed = fixed_seed.unwrap_or_else(|| {
            use std::hash::{BuildHasher, RandomState};
            RandomState::new().hash_one(round)
        });
        grader::check::set_seed(seed);
        let start = std::time::Instant::now();
        let reports = grader::self_check::run();
        let passed = reports.iter().all(|r| r.ok());
        println!(
            "round {round} of {rounds}: seed {seed}, 20x cases, {:.0} s: {}",
            start.elapsed().as_secs_f64(),
            if passed { "passed" } else { "FAILED" }
        );
        if !passed {
            println!("{}", grader::self_check::table(&reports));
            println!("reproduce: cargo grade --stress --seed {seed}");
        }
        ok &= passed;
    }
    println!("\nstress {}", if ok { "passed" } else { "FAILED" });
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
