//! `cargo grade`: grade the exercises with their hidden checks and keep a progress list.
//!
//! ```text
//! cargo grade              grade every exercise, then print the progress list
//! cargo grade ex03         grade one exercise (several may be named), then the list
//! cargo grade --list       print the progress list without grading
//! cargo grade --self-check maintainers: lessons and controls pass, every mutant is caught by
//!                          its check, stubs are not started
//! cargo grade --stress [ROUNDS]  maintainers: the self-check's checks ROUNDS times (5 by
//!                          default), each from a new seed with 20 times the random cases
//! cargo grade --stress --seed S  one such round from seed S (to reproduce a failure)
//! ```
//!
//! Each exercise is built and run on its own (`cargo test -p exNN --test hidden`), so one that
//! does not compile never stops the others from being graded, and grading a CPU exercise
//! builds no wgpu. The self-check's checks run in the grader's `self-check` binary, built with
//! the GPU exercises. The workspace is found from the current directory, as cargo finds it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use grader::hidden::Status;

/// The exercise packages, in course order, from the course manifest.
fn exercise_names() -> Vec<String> {
    course::lessons().into_iter().filter_map(|l| l.exercise).map(|e| e.package).collect()
}

const USAGE: &str =
    "usage: cargo grade [exNN ...] | --list | --self-check | --stress [ROUNDS | --seed SEED]";

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

/// `--help`, which needs no workspace; `None` for the other commands.
fn without_a_workspace(args: &[&str]) -> Option<ExitCode> {
    match args {
        ["--help" | "-h"] => {
            println!("{USAGE}");
            Some(ExitCode::SUCCESS)
        }
        _ => None,
    }
}

/// `--stress [ROUNDS | --seed S]`: the self-check binary's stress rounds.
fn stress(root: &Path, args: &[&str]) -> ExitCode {
    let problem = match args {
        [] => None,
        ["--seed", seed] => {
            seed.parse::<u64>().err().map(|_| format!("--seed takes a whole number, got `{seed}`"))
        }
        [rounds] => match rounds.parse::<u64>() {
            Ok(1..) => None,
            _ => Some(format!("--stress takes a number of rounds (1 or more), got `{rounds}`")),
        },
        _ => Some(format!("--stress takes a number of rounds or --seed SEED, got {args:?}")),
    };
    if let Some(problem) = problem {
        eprintln!("error: {problem}\n{USAGE}");
        return ExitCode::from(2);
    }
    let args: Vec<&str> = if args.is_empty() { vec!["5"] } else { args.to_vec() };
    let args: Vec<&str> = ["--stress"].into_iter().chain(args).collect();
    if run_self_check_binary(root, &args) { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// Grading, the progress list and the self-check, in the workspace at `root`.
fn in_the_workspace(root: &Path, args: &[&str]) -> ExitCode {
    match args {
        ["--list"] => {
            print_progress(&load_progress(root));
            ExitCode::SUCCESS
        }
        ["--self-check"] => self_check(root),
        ["--stress", rest @ ..] => stress(root, rest),
        names => {
            let known = exercise_names();
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
    // stderr (the compiler's messages) is read on its own thread: a pipe holds about 64 KiB, and
    // a child blocked writing to a full stderr would never finish writing stdout.
    let mut stderr = child.stderr.take().expect("piped stderr");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).map(|_| text).unwrap_or_default()
    });
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
    let _ = child.wait();
    let stderr = errors.join().unwrap_or_default();
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
    let lessons = course::lessons();
    // The topics' column is as wide as the longest, so that the folders line up.
    let width = lessons.iter().filter_map(|l| l.exercise.as_ref()).map(|e| e.topic.len()).max();
    for lesson in lessons {
        let Some(exercise) = &lesson.exercise else { continue };
        let (name, topic) = (&exercise.package, &exercise.topic);
        let (status, score) =
            progress.get(name).cloned().unwrap_or((Status::NotStarted, "-".into()));
        let mark = match status {
            Status::Done => "[x]",
            Status::Failing => "[!]",
            Status::NotStarted => "[ ]",
        };
        let passed = score.split('/').next().and_then(|p| p.parse().ok()).unwrap_or(0);
        println!(
            "  {mark} {name}  {:<12} {score:>5} checks  {topic:<width$} {}",
            status.describe(passed),
            lesson.exercise_folder(),
            width = width.unwrap_or(0)
        );
    }
}

/// Lessons and controls pass every check, every mutant is caught by its check (the
/// `self-check` binary), every untouched stub is "not started".
fn self_check(root: &Path) -> ExitCode {
    let mut ok = run_self_check_binary(root, &[]);
    println!("untouched stubs (run this on a clean checkout):");
    for name in exercise_names() {
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

/// Runs the grader's `self-check` binary (built with the GPU exercises) with `args`, its
/// output shown as it comes; whether it passed.
fn run_self_check_binary(root: &Path, args: &[&str]) -> bool {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut command = Command::new(cargo);
    command.args(["run", "--quiet", "--package", "grader", "--features", "gpu"]);
    command.args(["--bin", "self-check", "--"]).args(args).current_dir(root);
    match command.status() {
        Ok(status) => status.success(),
        Err(e) => {
            eprintln!("error: could not run cargo: {e}");
            false
        }
    }
}
