//! The course-wide tests, one binary per file of this folder:
//!
//! * `equivalence.rs`: every version the registry lists, by operation, against the f64 oracle
//!   and against the first version of its operation, on random problems.
//! * `model.rs`: lesson 12's GPT-2 with every registered attention version.
//! * `manifest.rs`: the course manifest agrees with the workspace, the book and the grader.
//! * `layering.rs`: no crate depends on a crate above it, and nothing forms a circle.
//! * `book_links.rs`: every link between the book's pages leads somewhere.
//!
//! The learner's hidden checks stay in `grader/`.

use std::path::{Path, PathBuf};

/// The workspace's root folder.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is in the workspace").into()
}
