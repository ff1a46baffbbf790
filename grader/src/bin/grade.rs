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
use std::io::{BufRead, BufReader, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use grader::hidden::{Grade, Progress, Status};

/// How long the first build of an exercise's checks takes on a 2-core machine from a fresh
/// clone (measured 2026-11-29: 76 s for exercise 03, then 124 s more for exercise 08): the
/// course's crates, and for the first GPU exercise wgpu and the GPU crates as well. Later
/// builds take seconds. The README and the exercises page say the same.
const FIRST_BUILD_CPU: &str = "about a minute and a half";
const FIRST_BUILD_GPU: &str = "about two minutes more";

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
                let grade = grade(root, exercise);
                progress.insert(exercise.to_string(), grade);
                println!();
            }
            save_progress(root, &progress);
            print_progress(&progress);
            let done = |e: &&str| progress.get(*e).is_some_and(|g| g.whole.status == Status::Done);
            if chosen.iter().all(done) { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
    }
}

/// A command running the cargo that runs this program (`$CARGO`), or the one on the PATH.
fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()))
}

/// The root of the workspace the current directory is in, found by cargo itself (`cargo
/// locate-project --workspace`), so a checkout that was copied or moved grades itself.
fn workspace_root() -> Result<PathBuf, String> {
    let output = cargo()
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

/// A grade for an exercise whose checks did not run (it does not compile, or crashed).
fn no_result() -> Grade {
    let failing = Progress { status: Status::Failing, passed: 0, total: 0 };
    Grade { whole: failing, parts: [failing; 2] }
}

/// Builds the hidden checks of `exercise`; whether it built. On a terminal, once cargo starts
/// compiling, it says what a first build compiles and how long it takes, then keeps one line
/// up to date with the crates compiled so far, so that a long first build does not look
/// frozen. The compiler's messages (errors, warnings) and cargo's wait for a lock are shown as
/// they come, once.
fn build(root: &Path, exercise: &str) -> bool {
    let terminal = std::io::stdout().is_terminal();
    let child = cargo()
        .args(["test", "--no-run", "--package", exercise, "--test", "hidden"])
        .env_remove("CARGO_TERM_QUIET")
        .current_dir(root)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            eprintln!("error: could not run cargo: {e}");
            return false;
        }
    };
    let mut compiled = 0;
    // Whether the progress line is on screen, unfinished: the next message starts below it.
    let mut progress_open = false;
    let mut stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
    let mut bytes = Vec::new();
    // Lines read as bytes, so that one that is not UTF-8 neither stops the reading (and
    // leaves cargo blocked on a full pipe) nor is lost.
    while stderr.read_until(b'\n', &mut bytes).is_ok_and(|n| n > 0) {
        let line = String::from_utf8_lossy(&bytes).trim_end().to_string();
        bytes.clear();
        match cargo_progress(&line) {
            Some(Some(krate)) if terminal => {
                if compiled == 0 {
                    println!(
                        "building {exercise}'s checks: a first build compiles the course's \
                         crates, {FIRST_BUILD_CPU} on 2 cores, and the first exercise in WGSL \
                         (08 to 10) wgpu too, {FIRST_BUILD_GPU}; later builds take seconds"
                    );
                }
                compiled += 1;
                print!("\r\x1b[2K  compiled {}, now {krate}", crates(compiled));
                let _ = std::io::Write::flush(&mut std::io::stdout());
                progress_open = true;
            }
            Some(_) => {}
            None => {
                if progress_open {
                    println!();
                    progress_open = false;
                }
                eprintln!("{line}");
            }
        }
    }
    if terminal && compiled > 0 {
        println!("\r\x1b[2K  compiled {}", crates(compiled));
    }
    child.wait().is_ok_and(|status| status.success())
}

/// `1 crate`, `12 crates`.
fn crates(count: usize) -> String {
    if count == 1 { "1 crate".to_string() } else { format!("{count} crates") }
}

/// What a line cargo prints while it builds says of its progress: `Some(Some(crate))` for a
/// crate it starts compiling, `Some(None)` for another line of its own (finished, the test
/// binary's path), `None` for the compiler's messages and cargo's wait for a lock, which the
/// learner should see.
fn cargo_progress(line: &str) -> Option<Option<String>> {
    let plain = without_colours(line);
    let line = plain.trim_start();
    if let Some(rest) = line.strip_prefix("Compiling ") {
        return Some(Some(rest.split_whitespace().next().unwrap_or(rest).to_string()));
    }
    let own = [
        "Finished ",
        "Executable ",
        "Running ",
        "Fresh ",
        "Downloaded ",
        "Downloading ",
        "Updating ",
        "Locking ",
    ];
    own.iter().any(|word| line.starts_with(word)).then_some(None)
}

/// `line` without terminal colour codes (`ESC [ ... m`), which cargo writes when
/// CARGO_TERM_COLOR=always.
fn without_colours(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // Skip to the code's final letter.
            for code in chars.by_ref() {
                if code.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

/// Builds and runs the hidden checks of `exercise`, showing their report. A compile error is
/// shown once, as the compiler prints it, and counts as failing.
fn grade(root: &Path, exercise: &str) -> Grade {
    println!("=== cargo grade {exercise}");
    if !build(root, exercise) {
        println!(
            "{exercise}: it does not build (see the messages of cargo and the compiler above)"
        );
        return no_result();
    }
    let child = cargo()
        .args(["test", "--quiet", "--package", exercise, "--test", "hidden"])
        .current_dir(root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            eprintln!("error: could not run cargo: {e}");
            return no_result();
        }
    };
    // stderr is read on its own thread: a pipe holds about 64 KiB, and a child blocked writing
    // to a full stderr would never finish writing stdout.
    let mut stderr = child.stderr.take().expect("piped stderr");
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).map(|_| text).unwrap_or_default()
    });
    let mut result = None;
    for line in
        BufReader::new(child.stdout.take().expect("piped stdout")).lines().map_while(Result::ok)
    {
        match Grade::from_line(&line) {
            Some((_, grade)) => result = Some(grade),
            None => println!("{line}"),
        }
    }
    let _ = child.wait();
    let stderr = errors.join().unwrap_or_default();
    match result {
        // The checks ran: cargo's own note that the test binary "failed" adds nothing.
        Some(grade) => grade,
        None => {
            eprint!("{stderr}");
            println!("{exercise}: no result: its checks crashed (see the messages above)");
            no_result()
        }
    }
}

fn progress_file(root: &Path) -> PathBuf {
    root.join(".grade").join("progress")
}

/// `exercise -> grade`, from the progress file (an exercise missing from it is not graded
/// yet; a line in an older format is read as not graded).
fn load_progress(root: &Path) -> BTreeMap<String, Grade> {
    let text = std::fs::read_to_string(progress_file(root)).unwrap_or_default();
    text.lines().filter_map(|line| Grade::from_line(&format!("GRADE {line}"))).collect()
}

fn save_progress(root: &Path, progress: &BTreeMap<String, Grade>) {
    let text: String = progress
        .iter()
        .map(|(name, grade)| format!("{}\n", grade.line(name).trim_start_matches("GRADE ")))
        .collect();
    let file = progress_file(root);
    let saved = std::fs::create_dir_all(file.parent().expect("a folder"))
        .and_then(|()| std::fs::write(&file, text));
    if let Err(e) = saved {
        eprintln!("warning: could not save progress to {}: {e}", file.display());
    }
}

/// The progress list: per exercise its warm-up and its main task (not started, n of m, or
/// done; "not graded" before the first `cargo grade`), its topic and folder.
fn print_progress(progress: &BTreeMap<String, Grade>) {
    let lessons = course::lessons();
    // The topics' column is as wide as the longest, so that the folders line up.
    let width = lessons.iter().filter_map(|l| l.exercise.as_ref()).map(|e| e.topic.len()).max();
    let width = width.unwrap_or(0);
    let cell = 18;
    println!(
        "{:<12}{:<cell$} {:<cell$} {:<width$} folder",
        "progress:", "warm-up", "main task", "topic"
    );
    for lesson in lessons {
        let Some(exercise) = &lesson.exercise else { continue };
        let (name, topic) = (&exercise.package, &exercise.topic);
        let (mark, warm_up, main_task) = match progress.get(name) {
            Some(grade) => {
                let mark = match grade.whole.status {
                    Status::Done => "[x]",
                    Status::Failing => "[!]",
                    Status::NotStarted => "[ ]",
                };
                let [warm_up, main_task] = grade.parts.map(|p| p.describe());
                (mark, warm_up, main_task)
            }
            None => ("[ ]", "not graded".to_string(), "not graded".to_string()),
        };
        println!(
            "  {mark} {name}  {warm_up:<cell$} {main_task:<cell$} {topic:<width$} {}",
            lesson.exercise_folder(),
        );
    }
}

/// Lessons and controls pass every check, every mutant is caught by its check (the
/// `self-check` binary), every untouched stub is "not started".
fn self_check(root: &Path) -> ExitCode {
    let mut ok = run_self_check_binary(root, &[]);
    println!("untouched stubs (run this on a clean checkout):");
    for name in exercise_names() {
        let grade = grade(root, &name);
        // An untouched stub passes no check: a check that passes on it grades nothing of the
        // learner's, and would show "1 of 13" where the page promises "not started".
        let expected = grade.whole.status == Status::NotStarted && grade.whole.passed == 0;
        println!(
            "{name} stub: {} {}",
            grade.whole.describe(),
            if expected { "(as expected)" } else { "(EXPECTED not started, no check passing)" }
        );
        ok &= expected;
    }
    println!("\nself-check {}", if ok { "passed" } else { "FAILED" });
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// Runs the grader's `self-check` binary (built with the GPU exercises) with `args`, its
/// output shown as it comes; whether it passed.
fn run_self_check_binary(root: &Path, args: &[&str]) -> bool {
    let mut command = cargo();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_s_lines_are_told_from_the_compiler_s() {
        let compiling = |name: &str| Some(Some(name.to_string()));
        assert_eq!(cargo_progress("   Compiling wgpu-core v27.0.1"), compiling("wgpu-core"));
        assert_eq!(cargo_progress("    Finished `test` profile [optimized]"), Some(None));
        assert_eq!(
            cargo_progress("  Executable tests/hidden.rs (target/debug/deps/x)"),
            Some(None)
        );
        assert_eq!(cargo_progress("error[E0308]: mismatched types"), None);
        assert_eq!(cargo_progress("    Blocking waiting for file lock on build directory"), None);
        let coloured = "\x1b[1m\x1b[92m   Compiling\x1b[0m ndarray v0.16.1";
        assert_eq!(cargo_progress(coloured), compiling("ndarray"));
        assert_eq!(cargo_progress("   --> src/lib.rs:3:5"), None);
        assert_eq!((crates(1), crates(12)), ("1 crate".to_string(), "12 crates".to_string()));
    }
}
