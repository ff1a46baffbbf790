//! `cargo grade`'s command line: it finds the workspace from the current directory (as cargo
//! does), so a copied or moved checkout grades itself, and bad arguments are clear errors.

use std::process::Command;

fn grade(dir: &std::path::Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_grade"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the grade binary runs");
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn outside_a_workspace_it_says_where_to_run() {
    let (code, text) = grade(&std::env::temp_dir(), &["--help"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.starts_with("usage: cargo grade"), "{text}");
    let (code, text) = grade(&std::env::temp_dir(), &["--list"]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("no Cargo workspace here: run cargo grade inside the course's folder"),
        "{text}"
    );
}

#[test]
fn inside_the_workspace_it_lists_this_checkouts_exercises() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let (code, text) = grade(&root.join("exercises"), &["--list"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("exercises/03_tiled_forward"), "{text}");
}

#[test]
fn unknown_exercises_and_bad_numbers_are_errors() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let (code, text) = grade(root, &["ex99"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("no exercise named [\"ex99\"]"), "{text}");
    let (code, text) = grade(root, &["--stress", "many"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("--stress takes a number of rounds (1 or more), got `many`"), "{text}");
    let (code, text) = grade(root, &["--stress", "0"]);
    assert_eq!(code, 2, "{text}");
}
