//! Which of a GPU lesson's own tests each planted WGSL bug turns red.
//!
//! The bugs are the grader's (`grader::ex08::mutants`, `grader::ex09::mutants`: their one
//! definition). Each is planted in the lesson's shader file, one at a time; the lesson's
//! contract tests run against it; the file is restored (on a normal end and on a panic; a
//! process killed by a signal leaves the planted bug in place, and `git checkout` of the
//! shader undoes it). Prints a Markdown table:
//! `bash book/generate.sh` writes it to book/src/generated/gpu_mutants.md.
//!
//! `cargo run -p grader --features gpu --example gpu_planted_bugs` (from the workspace root)

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use grader::ex08::mutants::NAIVE_BUGS;
use grader::ex09::mutants::FLASH_BUGS;
use grader::wgsl_mutants::WgslBug;

/// Puts a file's original text back when dropped.
struct Restore {
    path: PathBuf,
    original: String,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(&self.path, &self.original) {
            eprintln!("could not restore {}: {e}", self.path.display());
        }
    }
}

/// The tests of `package`'s contract test file that fail, or its log when they did not run.
fn failing_tests(package: &str) -> Result<Vec<String>, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        // --format pretty: one line per test, even when CARGO_TERM_QUIET asks for dots.
        .args(["test", "-p", package, "--test", "contract", "--", "--format", "pretty"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    let log = String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
    if !log.lines().any(|line| line.starts_with("test result")) {
        return Err(log.into_owned());
    }
    let mut failed: Vec<String> = log
        .lines()
        .filter_map(|line| line.strip_prefix("test ")?.strip_suffix(" ... FAILED"))
        .map(|name| format!("`{name}`"))
        .collect();
    failed.sort();
    Ok(failed)
}

/// One table row per bug planted in `shader` (a path from the workspace root).
fn plant_each(shader: &str, package: &str, bugs: &[WgslBug]) -> Result<(), String> {
    let path = PathBuf::from(shader);
    let original = std::fs::read_to_string(&path)
        .map_err(|e| format!("{shader}: {e} (run this from the workspace root)"))?;
    let restore = Restore { path, original };
    let file = shader.rsplit('/').next().unwrap_or(shader);
    for bug in bugs {
        std::fs::write(&restore.path, bug.plant(&restore.original))
            .map_err(|e| format!("{shader}: {e}"))?;
        let failed = failing_tests(package).map_err(|log| {
            format!(
                "the tests of {package} did not run with the bug {:?} planted:\n{log}",
                bug.name
            )
        })?;
        let failed = if failed.is_empty() {
            "**none: the bug went unseen**".to_string()
        } else {
            failed.join(", ")
        };
        println!("| {} | `{file}` | {failed} |", bug.name);
    }
    Ok(())
}

fn main() -> ExitCode {
    println!("| planted bug | file | tests that failed |");
    println!("|---|---|---|");
    let runs = [
        ("lessons/09_gpu_flash/src/flash.wgsl", "lesson09", &FLASH_BUGS[..]),
        ("lessons/08_gpu_naive/src/naive.wgsl", "lesson08", &NAIVE_BUGS[..]),
    ];
    for (shader, package, bugs) in runs {
        if let Err(e) = plant_each(shader, package, bugs) {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
