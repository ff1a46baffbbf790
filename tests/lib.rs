//! The course-wide tests, one binary per file of this folder:
//!
//! * `equivalence.rs`: every version the registry lists, by operation, against the f64 oracle
//!   and against the first version of its operation, on random problems.
//! * `model.rs`: lesson 12's GPT-2 with every registered attention version.
//! * `manifest.rs`: the course manifest agrees with the workspace, the book and the grader.
//! * `layering.rs`: no crate depends on a crate above it, and nothing forms a circle.
//! * `book_links.rs`: every link between the book's pages leads somewhere.
//! * `book_voice.rs`: the book never says how or where it was made.
//! * `book_numbers.rs`: the numbers the prose quotes from a measurement are its output's.
//!
//! The learner's hidden checks stay in `grader/`.

use std::path::{Path, PathBuf};

/// The workspace's root folder.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is in the workspace").into()
}

/// The workspace's members, as paths relative to the root, a `folder/*` expanded into the
/// folders under it that hold a Cargo.toml (as cargo expands it).
pub fn members() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let manifest: toml::Table = text.parse().expect("Cargo.toml parses");
    let listed = manifest["workspace"]["members"].as_array().expect("members");
    let mut members = Vec::new();
    for member in listed.iter().map(|m| m.as_str().expect("a path")) {
        let Some(parent) = member.strip_suffix("/*") else {
            members.push(member.to_string());
            continue;
        };
        let mut folders: Vec<String> = std::fs::read_dir(root().join(parent))
            .expect("a member's folder")
            .map(|entry| entry.expect("a folder entry").file_name().to_string_lossy().into())
            .filter(|name: &String| root().join(parent).join(name).join("Cargo.toml").is_file())
            .map(|name| format!("{parent}/{name}"))
            .collect();
        folders.sort();
        members.extend(folders);
    }
    members
}
