//! `cargo grade`: grade the exercises with their hidden checks and keep a progress list.
//!
//! ```text
//! cargo grade              grade every exercise, then print the progress list
//! cargo grade ex03         grade one exercise (several may be named), then the list
//! cargo grade --list       print the progress list without grading
//! cargo grade --self-check maintainers: lessons and controls pass, every mutant is caught by
//!                          its check, stubs are not started
//! cargo grade --stress [ROUNDS]  maintainers: the in-process self-check ROUNDS times (5 by
//!                          default), each from a new seed with 20 times the random cases
//! cargo grade --stress --seed S  one such round from seed S (to reproduce a failure)
//! ```
//!
//! Each exercise is built and run on its own (`cargo test -p exNN --test hidden`), so one that
//! does not compile never stops the others from being graded. The workspace is found from the
//! current directory, as cargo finds it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use grader::hidden::Status;

/// Every exercise, in course order, from the course manifest: package, folder, topic.
fn exercises() -> Vec<(String, String, String)> {
    let lessons = course::lessons();
    lessons
        .into_iter()
        .map(|l| (l.exercise.package.clone(), l.exercise_folder(), l.exercise.topic))
        .collect()
}

const USAGE: &str =
    "usage: cargo grade [exNN ...] | --list | --self-check | --stress [ROUNDS | --seed SEED]";

// The memory checks of exercises 03 and 05 measure with the counting allocator; the
// self-check runs them in this process.
#[global_allocator]
static ALLOC: reference::memory::CountingAllocator = reference::memory::CountingAllocator;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    if let Some(code) = without_a_workspace(&args) {
        return code;
    }
    // Everything else reads or grades the exercises of the workspace we are in.
    match workspace_root() {
        Ok(root) => in_the_workspace(&root, &args),
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

/// The commands that need no workspace: `--help` and the maintainers' `--stress` (which runs
/// the self-check in this process); `None` for the others.
fn without_a_workspace(args: &[&str]) -> Option<ExitCode> {
    let number = |text: &str, what: &str| {
        text.parse::<u64>().map_err(|_| {
            eprintln!("error: {what}, got `{text}`\n{USAGE}");
            ExitCode::from(2)
        })
    };
    let code = match args {
        ["--help" | "-h"] => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        ["--stress"] => stress(5, None),
        ["--stress", "--seed", seed] => match number(seed, "--seed takes a whole number") {
            Ok(seed) => stress(1, Some(seed)),
            Err(code) => code,
        },
        ["--stress", rounds] => match number(rounds, "--stress takes a number of rounds") {
            Ok(rounds) => stress(rounds, None),
            Err(code) => code,
        },
        _ => return None,
    };
    Some(code)
}

/// Grading, the progress list and the self-check, in the workspace at `root`.
fn in_the_workspace(root: &Path, args: &[&str]) -> ExitCode {
    match args {
        ["--list"] => {
            print_progress(&load_progress(root));
            ExitCode::SUCCESS
        }
        ["--self-check"] => self_check(root),
        names => {
            let known: Vec<String> = exercises().into_iter().map(|e| e.0).collect();
            let unknown: Vec<_> = names.iter().filter(|n| !known.iter().any(|k| k == *n)).collect();
            if !unknown.is_empty() {
                eprintln!(
                    "error: no exercise named {unknown:?}; the exercises are {known:?}\n{USAGE}"
                );
                return ExitCode::from(2);
            }
            let chosen: Vec<&str> = if names.is_empty() {
                known.iter().map(String::as_str).collect()
            } else {
                names.to_vec()
            };
            let mut progress = load_progress(root);
            for exercise in &chosen {
                let (status, score) = grade(root, exercise);
                progress.insert(exercise.to_string(), (status, score));
                println!();
            }
            save_progress(root, &progress);
            print_progress(&progress);
            let all_done =
                chosen.iter().all(|e| progress.get(*e).is_some_and(|(s, _)| *s == Status::Done));
            if all_done { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
    }
}

/// The root of the workspace the current directory is in, found by cargo itself (`cargo
/// locate-project --workspace`), so a checkout that was copied or moved grades itself.
fn workspace_root() -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .args(["locate-project", "--workspace", "--message-format", "plain"])
        .output()
        .map_err(|e| format!("could not run cargo to find the workspace: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "no Cargo workspace here: run cargo grade inside the course's folder ({})",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let manifest = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    let root = manifest.parent().ok_or("cargo named no workspace folder")?.to_path_buf();
    if !root.join("exercises").is_dir() {
        return Err(format!(
            "the workspace at {} has no exercises/ folder: run cargo grade inside the course's \
             folder",
            root.display()
        ));
    }
    Ok(root)
}

/// Builds and runs the hidden checks of `exercise`, showing their report. A compile error is
/// shown as the compiler prints it, and counts as failing.
fn grade(root: &Path, exercise: &str) -> (Status, String) {
    println!("=== cargo grade {exercise}");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let child = Command::new(cargo)
        .args(["test", "--quiet", "--package", exercise, "--test", "hidden"])
        .current_dir(root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            eprintln!("error: could not run cargo: {e}");
            return (Status::Failing, "-".to_string());
        }
    };
    let mut result = None;
    for line in
        BufReader::new(child.stdout.take().expect("piped stdout")).lines().map_while(Result::ok)
    {
        match line.strip_prefix("GRADE ").map(|rest| rest.split_whitespace().collect::<Vec<_>>()) {
            Some(fields) if fields.len() == 3 => {
                result = Status::from_word(fields[1]).map(|s| (s, fields[2].to_string()));
            }
            _ => println!("{line}"),
        }
    }
    let output = child.wait_with_output().expect("cargo ran");
    let stderr = String::from_utf8_lossy(&output.stderr);
    match result {
        // The checks ran: cargo's own note that the test binary "failed" adds nothing.
        Some(result) => result,
        None => {
            eprint!("{stderr}");
            println!(
                "{exercise}: no result: it does not compile (see the errors above) or it crashed"
            );
            (Status::Failing, "-".to_string())
        }
    }
}

fn progress_file(root: &Path) -> PathBuf {
    root.join(".grade").join("progress")
}

/// `exercise -> (status, "passed/total")`, from the progress file (missing: not started).
fn load_progress(root: &Path) -> BTreeMap<String, (Status, String)> {
    let text = std::fs::read_to_string(progress_file(root)).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let fields: Vec<_> = line.split_whitespace().collect();
            match fields.as_slice() {
                [name, status, score] => {
                    Some((name.to_string(), (Status::from_word(status)?, score.to_string())))
                }
                _ => None,
            }
        })
        .collect()
}

fn save_progress(root: &Path, progress: &BTreeMap<String, (Status, String)>) {
    let text: String = progress
        .iter()
        .map(|(name, (s, score))| format!("{name} {} {score}\n", s.word()))
        .collect();
    let file = progress_file(root);
    let saved = std::fs::create_dir_all(file.parent().expect("a folder"))
        .and_then(|()| std::fs::write(&file, text));
    if let Err(e) = saved {
        eprintln!("warning: could not save progress to {}: {e}", file.display());
    }
}

fn print_progress(progress: &BTreeMap<String, (Status, String)>) {
    println!("progress:");
    for (name, folder, topic) in exercises() {
        let (status, score) =
            progress.get(&name).cloned().unwrap_or((Status::NotStarted, "-".into()));
        let mark = match status {
            Status::Done => "[x]",
            Status::Failing => "[!]",
            Status::NotStarted => "[ ]",
        };
        println!(
            "  {mark} {name}  {:<12} {score:>5} checks  {topic:<38} {folder}",
            status.to_string()
        );
    }
}

/// The in-process self-check, `rounds` times, each from a fresh seed (printed) with 20 times
/// the random cases: no lesson or control may fail and every mutant must be caught by its
/// check, every time.
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

/// Lessons and controls pass every check, every mutant is caught by its check, every untouched
/// stub is "not started".
fn self_check(root: &Path) -> ExitCode {
    grader::check::quiet_panics();
    let reports = grader::self_check::run();
    println!("{}", grader::self_check::table(&reports));
    let mut ok = reports.iter().all(|r| r.ok());
    let checked: Vec<&str> = reports.iter().map(|r| r.exercise).collect();
    let listed: Vec<String> = exercises().into_iter().map(|e| e.0).collect();
    if checked != listed {
        println!("the self-check covers {checked:?}, but course.toml lists {listed:?}");
        ok = false;
    }
    println!("untouched stubs (run this on a clean checkout):");
    for (name, _, _) in exercises() {
        let (status, _) = grade(root, &name);
        let expected = status == Status::NotStarted;
        println!(
            "{name} stub: {status} {}",
            if expected { "(as expected)" } else { "(EXPECTED not started)" }
        );
        ok &= expected;
    }
    println!("\nself-check {}", if ok { "passed" } else { "FAILED" });
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
