//! The manifest agrees with everything else that names the lessons: the workspace members,
//! each lesson's and exercise's Cargo.toml, the book's pages drawn from it (SUMMARY.md, the
//! tables of stages and exercises, the learning path) and its chapters, and the grader's
//! files. A lesson added in one place and forgotten in another fails here, naming both.

use course::{Lesson, lessons};
use tests::root;

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

fn toml_of(relative: &str) -> toml::Table {
    read(relative).parse().unwrap_or_else(|e| panic!("{relative}: {e}"))
}

fn package_name(manifest: &toml::Table) -> &str {
    manifest["package"]["name"].as_str().expect("a package name")
}

/// The folders of `parent` (relative to the root), sorted.
fn folders_of(parent: &str) -> Vec<String> {
    let entries =
        std::fs::read_dir(root().join(parent)).unwrap_or_else(|e| panic!("{parent}: {e}"));
    let mut folders: Vec<String> = entries
        .map(|entry| entry.expect("a folder entry").path())
        .filter(|path| path.is_dir())
        .map(|path| format!("{parent}/{}", path.file_name().unwrap().to_string_lossy()))
        .collect();
    folders.sort();
    folders
}

#[test]
fn every_lesson_and_exercise_folder_is_a_workspace_member_and_in_the_manifest() {
    let workspace = toml_of("Cargo.toml");
    let members: Vec<&str> = workspace["workspace"]["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m.as_str().expect("a path"))
        .collect();
    for glob in ["lessons/*", "exercises/*"] {
        assert!(members.contains(&glob), "the workspace's members should include {glob}");
    }
    let lesson_folders: Vec<String> = lessons().iter().map(Lesson::lesson_folder).collect();
    assert_eq!(folders_of("lessons"), lesson_folders, "lessons/ vs course.toml");
    let with_exercise = lessons().into_iter().filter(|l| l.exercise.is_some());
    let exercise_folders: Vec<String> = with_exercise.map(|l| l.exercise_folder()).collect();
    assert_eq!(folders_of("exercises"), exercise_folders, "exercises/ vs course.toml");
}

#[test]
fn packages_are_named_as_listed_and_exercises_attach_their_hidden_checks() {
    for lesson in lessons() {
        let manifest = toml_of(&format!("{}/Cargo.toml", lesson.lesson_folder()));
        assert_eq!(package_name(&manifest), lesson.package, "{}", lesson.folder);
        let Some(listed) = &lesson.exercise else { continue };
        let exercise = toml_of(&format!("{}/Cargo.toml", lesson.exercise_folder()));
        assert_eq!(package_name(&exercise), listed.package, "{}", lesson.folder);
        let tests = exercise["test"].as_array().expect("[[test]] targets");
        let path_of = |name: &str| {
            tests.iter().find(|t| t["name"].as_str() == Some(name)).and_then(|t| t["path"].as_str())
        };
        let hidden = format!("../../grader/src/{}/hidden.rs", listed.package);
        assert_eq!(
            path_of("hidden"),
            Some(hidden.as_str()),
            "{}: the hidden checks",
            lesson.folder
        );
        assert!(
            root().join(lesson.exercise_folder()).join(&hidden).is_file(),
            "{hidden} is missing"
        );
        assert!(path_of("visible").is_some(), "{}: no visible tests", lesson.folder);
    }
}

#[test]
fn the_book_s_table_of_contents_is_drawn_from_the_manifest_and_every_chapter_has_a_title() {
    let template = read("book/SUMMARY.template.md");
    let drawn = course::summary(&lessons(), &template).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        read("book/src/SUMMARY.md") == drawn,
        "book/src/SUMMARY.md is stale (course.toml or book/SUMMARY.template.md changed): run \
         `cargo run -q -p course -- summary > book/src/SUMMARY.md` or bash book/generate.sh"
    );
    for lesson in lessons() {
        let chapter = read(&format!("book/src/{}", lesson.chapter()));
        let heading = chapter.lines().next().unwrap_or_default();
        assert!(heading.starts_with("# "), "{} starts without a title", lesson.chapter());
    }
}

#[test]
fn the_grader_has_the_checks_of_every_exercise() {
    let grader = read("grader/src/lib.rs");
    for lesson in lessons() {
        let Some(listed) = &lesson.exercise else { continue };
        let exercise = &listed.package;
        assert!(
            grader.contains(&format!("pub mod {exercise};")),
            "the grader has no module {exercise}"
        );
        assert!(
            root().join(format!("grader/src/{exercise}/mutants.rs")).is_file(),
            "grader/src/{exercise}/mutants.rs: its planted bugs"
        );
    }
}

#[test]
fn no_script_keeps_its_own_list_of_lessons() {
    for script in ["book/generate.sh", ".ci/run"] {
        let text = read(script);
        for listed in lessons().iter().filter_map(|l| l.exercise.as_ref()) {
            let exercise = format!("-p {}", listed.package);
            assert!(!text.contains(&exercise), "{script} names {exercise}: read the manifest");
        }
        assert!(!text.contains(" 01 02 03"), "{script} lists lesson numbers: read the manifest");
    }
}

#[test]
fn gpu_lessons_and_exercises_and_only_they_build_the_gpu_code() {
    for lesson in lessons() {
        let manifest = toml_of(&format!("{}/Cargo.toml", lesson.lesson_folder()));
        let dependencies = manifest["dependencies"].as_table().expect("[dependencies]");
        let uses_gpu = dependencies.contains_key("gpu") || dependencies.contains_key("wgpu");
        assert_eq!(uses_gpu, lesson.gpu, "{}: gpu = {} in course.toml", lesson.package, lesson.gpu);
        let Some(listed) = &lesson.exercise else { continue };
        // An exercise is graded with the GPU feature when it writes GPU code itself (a lesson
        // with GPU code may have a CPU exercise, as lesson 11's cache does).
        let exercise = toml_of(&format!("{}/Cargo.toml", lesson.exercise_folder()));
        let its_dependencies = exercise["dependencies"].as_table().expect("[dependencies]");
        let writes_gpu =
            its_dependencies.contains_key("gpu") || its_dependencies.contains_key("wgpu");
        let grader = &exercise["dev-dependencies"]["grader"];
        let features =
            grader.get("features").and_then(|f| f.as_array()).cloned().unwrap_or_default();
        let grades_gpu = features.iter().any(|f| f.as_str() == Some("gpu"));
        assert_eq!(grades_gpu, writes_gpu, "{}: the grader's gpu feature", listed.package);
        assert!(!writes_gpu || lesson.gpu, "{}: GPU code for a CPU lesson", listed.package);
    }
}

#[test]
fn the_learning_path_in_the_book_is_current() {
    let drawn = course::learning_path(&course::lessons(), &root()).unwrap();
    let committed = read("book/src/generated/learning_path.md");
    assert!(
        committed == drawn,
        "book/src/generated/learning_path.md is stale (a chapter's length or course.toml \
         changed): run `cargo run -q -p course -- path > book/src/generated/learning_path.md` \
         or bash book/generate.sh"
    );
}

#[test]
fn the_tables_of_stages_and_exercises_in_the_book_are_current() {
    for (file, drawn, command) in [
        ("stages.md", course::stages_table(&lessons()), "stages"),
        ("exercise_table.md", course::exercises_table(&lessons()), "exercises"),
    ] {
        let committed = read(&format!("book/src/generated/{file}"));
        assert!(
            committed == drawn,
            "book/src/generated/{file} is stale (course.toml changed): run `cargo run -q -p \
             course -- {command} > book/src/generated/{file}` or bash book/generate.sh"
        );
    }
}

#[test]
fn every_exercise_has_a_book_page_that_shows_its_readme_and_its_chapter_links_to_it() {
    let summary = read("book/src/SUMMARY.md");
    for lesson in lessons() {
        let Some(exercise) = &lesson.exercise else { continue };
        let page = exercise.book_page();
        let text = read(&format!("book/src/{page}"));
        let include = format!("{{{{#include ../../../{}/README.md}}}}", lesson.exercise_folder());
        assert!(text.contains(&include), "book/src/{page} does not show its README: {include}");
        assert!(summary.contains(&format!("]({page})")), "SUMMARY.md does not list {page}");
        let chapter = read(&format!("book/src/{}", lesson.chapter()));
        assert!(
            chapter.contains(&format!("]({page})")),
            "{} does not link to {page}",
            lesson.chapter()
        );
    }
}
