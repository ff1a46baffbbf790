//! `cargo run -q -p course -- list WHAT`: the manifest's lists, one item per line, for the
//! shell scripts (book/generate.sh, .ci/run).
//!
//! ```text
//! list lessons      the lesson packages, in course order
//! list exercises    the exercise packages, in course order
//! path              the learning path's table (Markdown): reading times from book/src,
//!                   exercise times from each exercise's README
//! stages            the introduction's table of stages (Markdown)
//! exercises         the exercises page's table (Markdown)
//! summary           the book's SUMMARY.md, from book/SUMMARY.template.md
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let lessons = course::lessons();
    let items: Vec<&str> = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["list", "lessons"] => lessons.iter().map(|l| l.package.as_str()).collect(),
        ["list", "exercises"] => {
            lessons.iter().filter_map(|l| l.exercise.as_ref()).map(|e| e.package.as_str()).collect()
        }
        ["path"] => {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            return match course::learning_path(&lessons, &root) {
                Ok(table) => {
                    print!("{table}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        ["stages"] => {
            print!("{}", course::stages_table(&lessons));
            return ExitCode::SUCCESS;
        }
        ["exercises"] => {
            print!("{}", course::exercises_table(&lessons));
            return ExitCode::SUCCESS;
        }
        ["summary"] => {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let template = root.join("book/SUMMARY.template.md");
            let made = std::fs::read_to_string(&template)
                .map_err(|e| format!("{}: {e}", template.display()))
                .and_then(|template| course::summary(&lessons, &template));
            return match made {
                Ok(summary) => {
                    print!("{summary}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        _ => {
            eprintln!(
                "usage: cargo run -q -p course -- list lessons|exercises, path, stages, exercises or summary"
            );
            return ExitCode::from(2);
        }
    };
    for item in items {
        println!("{item}");
    }
    ExitCode::SUCCESS
}
