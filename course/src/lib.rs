//! # course — the course manifest, listed once
//!
//! `course.toml` at the workspace root lists every lesson in course order: its folder, package,
//! chapter title and part, its exercise and whether it needs a GPU. The grader, the book's
//! generator and CI read it from here (the scripts through `cargo run -p course -- list ...`),
//! and this crate's tests check it against everything else that names the lessons.

use std::fmt;

/// The manifest's text, as compiled into the programs that read it.
pub const MANIFEST: &str = include_str!("../../course.toml");

/// One lesson of the course.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lesson {
    /// Two digits: `"03"`.
    pub number: String,
    /// `lessons/<folder>`, `exercises/<folder>`, `book/src/<folder>.md`: `"03_tiled_forward"`.
    pub folder: String,
    /// The lesson's package: `"lesson03"`.
    pub package: String,
    /// The chapter's title, as in SUMMARY.md.
    pub title: String,
    /// The SUMMARY.md part it is listed under (`"CPU"`, `"GPU"`).
    pub part: String,
    /// What the stage adds, for the introduction's table of stages (Markdown).
    pub adds: String,
    /// Its exercise; `None` while a new lesson has none yet (its chapter says so).
    pub exercise: Option<Exercise>,
    /// Whether its tests and its exercise need a GPU adapter.
    pub gpu: bool,
    /// What of it needs tensor cores (cooperative matrices) or a vendor's GPU, if anything
    /// (Markdown); the rest runs on any adapter, lavapipe included.
    pub tensor_cores: Option<String>,
    /// The numbers of the earlier lessons whose ideas it builds on.
    pub needs: Vec<String>,
}

/// A lesson's exercise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exercise {
    /// The exercise's package: `"ex03"`.
    pub package: String,
    /// What it asks, as `cargo grade` shows it.
    pub topic: String,
    /// What the learner writes, for the exercises page's table (Markdown).
    pub writes: String,
}

impl Exercise {
    /// Its page in the book, under book/src: `exercises/ex03.md`, which shows its README.
    pub fn book_page(&self) -> String {
        format!("exercises/{}.md", self.package)
    }
}

impl Lesson {
    /// What the lesson runs on, for the learning path: `CPU`, `any GPU or lavapipe`, and
    /// what needs tensor cores where something does.
    pub fn hardware(&self) -> String {
        match (&self.gpu, &self.tensor_cores) {
            (false, _) => "CPU".to_string(),
            (true, None) => "any GPU or lavapipe".to_string(),
            (true, Some(what)) => format!("any GPU or lavapipe; tensor cores: {what}"),
        }
    }

    /// `exercises/<folder>`.
    pub fn exercise_folder(&self) -> String {
        format!("exercises/{}", self.folder)
    }

    /// `lessons/<folder>`.
    pub fn lesson_folder(&self) -> String {
        format!("lessons/{}", self.folder)
    }

    /// `<folder>.md`, under book/src.
    pub fn chapter(&self) -> String {
        format!("{}.md", self.folder)
    }
}

/// What is wrong with a manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestError(pub String);

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "course.toml: {}", self.0)
    }
}

impl std::error::Error for ManifestError {}

/// Every lesson of [`MANIFEST`], in course order.
///
/// # Panics
/// If the manifest compiled into this program is invalid: `cargo test -p course` checks it, so
/// this is a bug in the repository, not in anyone's input.
pub fn lessons() -> Vec<Lesson> {
    parse(MANIFEST).unwrap_or_else(|e| panic!("{e}"))
}

/// Parses a manifest: `[[lesson]]` tables with every key of [`Lesson`], numbers in order.
pub fn parse(text: &str) -> Result<Vec<Lesson>, ManifestError> {
    let table: toml::Table = text.parse().map_err(|e| ManifestError(format!("{e}")))?;
    if let Some(key) = table.keys().find(|k| *k != "lesson") {
        return Err(ManifestError(format!("unknown key `{key}`: expected only [[lesson]] tables")));
    }
    let entries = match table.get("lesson") {
        Some(toml::Value::Array(entries)) => entries,
        _ => return Err(ManifestError("no [[lesson]] tables".into())),
    };
    let lessons = entries
        .iter()
        .enumerate()
        .map(|(i, entry)| lesson(i, entry))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, lesson) in lessons.iter().enumerate() {
        let expected = format!("{:02}", i + 1);
        if lesson.number != expected {
            return Err(ManifestError(format!(
                "lesson {} is listed in place {expected}",
                lesson.number
            )));
        }
        if !lesson.folder.starts_with(&format!("{expected}_")) {
            return Err(ManifestError(format!(
                "lesson {expected}'s folder `{}` should start with `{expected}_`",
                lesson.folder
            )));
        }
    }
    Ok(lessons)
}

const KEYS: [&str; 12] = [
    "number",
    "folder",
    "package",
    "title",
    "part",
    "adds",
    "exercise",
    "topic",
    "writes",
    "gpu",
    "tensor_cores",
    "needs",
];

fn lesson(index: usize, entry: &toml::Value) -> Result<Lesson, ManifestError> {
    let place = format!("[[lesson]] number {}", index + 1);
    let table = entry.as_table().ok_or_else(|| ManifestError(format!("{place} is not a table")))?;
    if let Some(key) = table.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(ManifestError(format!("{place}: unknown key `{key}` (expected {KEYS:?})")));
    }
    let text = |key: &str| match table.get(key) {
        Some(toml::Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(ManifestError(format!("{place}: `{key}` must be a non-empty string"))),
    };
    let exercise_keys = ["exercise", "topic", "writes"].map(|key| table.contains_key(key));
    let exercise = match exercise_keys {
        [true, true, true] => Some(Exercise {
            package: text("exercise")?,
            topic: text("topic")?,
            writes: text("writes")?,
        }),
        [false, false, false] => None,
        _ => {
            return Err(ManifestError(format!(
                "{place}: `exercise`, `topic` and `writes` go together (all, or none for a \
                 lesson without an exercise yet)"
            )));
        }
    };
    let gpu = match table.get("gpu") {
        Some(toml::Value::Boolean(b)) => *b,
        _ => return Err(ManifestError(format!("{place}: `gpu` must be true or false"))),
    };
    let tensor_cores = match table.get("tensor_cores") {
        None => None,
        Some(_) if !gpu => {
            return Err(ManifestError(format!(
                "{place}: `tensor_cores` says what needs tensor cores, so the lesson needs a GPU: \
                 expected `gpu = true`"
            )));
        }
        Some(_) => Some(text("tensor_cores")?),
    };
    let earlier = |n: &str| {
        n.len() == 2
            && n.bytes().all(|b| b.is_ascii_digit())
            && n.parse::<usize>().is_ok_and(|n| n >= 1 && n <= index)
    };
    let needs = match table.get("needs") {
        Some(toml::Value::Array(items)) => items
            .iter()
            .map(|item| match item.as_str() {
                Some(n) if earlier(n) => Ok(n.to_string()),
                _ => Err(ManifestError(format!(
                    "{place}: `needs` holds {}; expected the two-digit numbers of earlier lessons",
                    item.as_str()
                        .map_or("something that is not a string".into(), |s| format!("\"{s}\""))
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => {
            return Err(ManifestError(format!(
                "{place}: `needs` must be a list of lesson numbers"
            )));
        }
    };
    if let Some(twice) = needs.iter().enumerate().find(|(i, n)| needs[..*i].contains(n)) {
        return Err(ManifestError(format!("{place}: `needs` lists lesson {} twice", twice.1)));
    }
    Ok(Lesson {
        number: text("number")?,
        folder: text("folder")?,
        package: text("package")?,
        title: text("title")?,
        part: text("part")?,
        adds: text("adds")?,
        exercise,
        gpu,
        tensor_cores,
        needs,
    })
}

/// The introduction's table of stages: chapter, package and what each adds (Markdown).
pub fn stages_table(lessons: &[Lesson]) -> String {
    let mut table = String::from("| chapter | package | what it adds |\n|---|---|---|\n");
    for lesson in lessons {
        let number = lesson.number.trim_start_matches('0');
        table += &format!("| {number} | `{}` | {} |\n", lesson.package, lesson.adds);
    }
    table
}

/// The exercises page's table: each exercise, its folder and what the learner writes
/// (Markdown).
pub fn exercises_table(lessons: &[Lesson]) -> String {
    let mut table = String::from("| exercise | folder | you write |\n|---|---|---|\n");
    for lesson in lessons {
        let Some(exercise) = &lesson.exercise else { continue };
        let (name, page) = (&exercise.package, exercise.book_page());
        let folder = lesson.exercise_folder();
        table += &format!("| [`{name}`]({page}) | `{folder}` | {} |\n", exercise.writes);
    }
    table
}

/// The book's table of contents, `book/src/SUMMARY.md`, from its template
/// `book/SUMMARY.template.md`: the template's line `{{chapters PART}}` becomes the chapters of
/// the lessons of that part, in course order, and `{{exercises}}` the exercise pages. Every
/// part a lesson names must have its line; any other `{{...}}` line is an error.
pub fn summary(lessons: &[Lesson], template: &str) -> Result<String, String> {
    let mut summary = String::new();
    let mut parts_placed = Vec::new();
    for line in template.lines() {
        let marker = line.trim().strip_prefix("{{").and_then(|m| m.strip_suffix("}}"));
        match marker.map(|m| m.split_once(' ').unwrap_or((m, ""))) {
            None => summary += &format!("{line}\n"),
            Some(("chapters", part)) => {
                for lesson in lessons.iter().filter(|l| l.part == part) {
                    summary += &format!("- [{}]({})\n", lesson.title, lesson.chapter());
                }
                parts_placed.push(part);
            }
            Some(("exercises", "")) => {
                for lesson in lessons {
                    let Some(exercise) = &lesson.exercise else { continue };
                    let topic = exercise.topic.replace("; ", ", then ");
                    let (number, page) = (&lesson.number, exercise.book_page());
                    summary += &format!("- [Exercise {number}: {topic}]({page})\n");
                }
            }
            Some(_) => {
                return Err(format!(
                    "the template's line `{}` is neither `{{{{chapters PART}}}}` nor \
                     `{{{{exercises}}}}`",
                    line.trim()
                ));
            }
        }
    }
    for lesson in lessons {
        if !parts_placed.contains(&lesson.part.as_str()) {
            return Err(format!(
                "lesson {} is in part `{}`, which the template has no `{{{{chapters {}}}}}` for",
                lesson.number, lesson.part, lesson.part
            ));
        }
    }
    Ok(summary)
}

/// Words a minute at which the learning path counts a chapter's prose read (careful reading of
/// technical text, formulas included).
pub const READING_WORDS_PER_MINUTE: usize = 120;

/// Lines of code a minute at which it counts the code a chapter shows read.
pub const CODE_LINES_PER_MINUTE: usize = 10;

/// Each line of a Markdown page but its code fences (the lines of three backticks), with
/// whether it lies inside a fenced code block.
pub fn lines_and_code(markdown: &str) -> Vec<(&str, bool)> {
    let mut in_code = false;
    let mut lines = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else {
            lines.push((line, in_code));
        }
    }
    lines
}

/// What a chapter asks its reader to read: the words of its prose and the lines of source code
/// it shows (its own code blocks and the source files it includes; not the command outputs
/// under `generated/`, which are skimmed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// Words outside code blocks.
    pub words: usize,
    /// Lines of code shown.
    pub code_lines: usize,
}

impl Reading {
    /// The chapter `markdown`, whose `{{#include}}` paths are relative to `book_src`.
    pub fn of(markdown: &str, book_src: &std::path::Path) -> Result<Self, String> {
        let mut reading = Reading { words: 0, code_lines: 0 };
        for (line, in_code) in lines_and_code(markdown) {
            if let Some(include) = line.trim().strip_prefix("{{#include ") {
                let target = include.trim_end_matches("}}").trim();
                if !target.starts_with("generated/") {
                    reading.code_lines += included_lines(book_src, target)?;
                }
            } else if in_code {
                reading.code_lines += 1;
            } else {
                reading.words += line.split_whitespace().count();
            }
        }
        Ok(reading)
    }

    /// Minutes to read it, to the nearest 5 (at least 5).
    pub fn minutes(&self) -> usize {
        let minutes = self.words as f64 / READING_WORDS_PER_MINUTE as f64
            + self.code_lines as f64 / CODE_LINES_PER_MINUTE as f64;
        ((minutes / 5.0).round() as usize).max(1) * 5
    }
}

/// The word that starts mdBook's anchor marks, `<word>: name` and `<word>_END: name`. Spelled
/// once, here, and never followed by a name in this file: book/generate.sh --check requires
/// every such mark in the repository to be shown by a chapter.
pub const ANCHOR: &str = "ANCHOR";

/// The number of lines that `{{#include target}}` shows: a whole file, or with `path:anchor`
/// the lines between the anchor's start and end marks (mdBook's anchors; see [`ANCHOR`]).
fn included_lines(book_src: &std::path::Path, target: &str) -> Result<usize, String> {
    let (file, anchor) = match target.rsplit_once(':') {
        Some((file, anchor)) if !anchor.contains('/') => (file, Some(anchor)),
        _ => (target, None),
    };
    let path = book_src.join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let Some(anchor) = anchor else { return Ok(text.lines().count()) };
    // mdBook's rule: a mark anywhere on a line, its name not followed by more of a name.
    let marks = |line: &str, mark: &str| {
        line.match_indices(mark).any(|(at, _)| {
            let next = line[at + mark.len()..].chars().next();
            !next.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-')
        })
    };
    let start = format!("{ANCHOR}: {anchor}");
    let end = format!("{ANCHOR}_END: {anchor}");
    let lines: Vec<&str> = text.lines().collect();
    let first = lines.iter().position(|l| marks(l, &start));
    let last = lines.iter().position(|l| marks(l, &end));
    match (first, last) {
        (Some(first), Some(last)) if first < last => {
            Ok(lines[first + 1..last].iter().filter(|l| !l.contains(ANCHOR)).count())
        }
        _ => Err(format!("{}: no anchor `{anchor}`", path.display())),
    }
}

/// An exercise's expected time, from its README: the sentence that starts `Time:`, and
/// whether a maintainer has checked it by doing the task from the README (the README says so
/// in the same paragraph, starting `(A maintainer`).
pub fn exercise_time(readme: &str) -> Option<(String, bool)> {
    let readme = format!("\n{}", readme.replace("\r\n", "\n"));
    let start = readme.find("\nTime: ")? + "\nTime: ".len();
    let paragraph = readme[start..].split("\n\n").next().unwrap_or("");
    let paragraph = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
    let sentence = paragraph.split(". ").next().unwrap_or(&paragraph).trim_end_matches('.');
    let checked = paragraph.contains("(A maintainer who knew the material wrote the main task")
        && paragraph.contains("passed every check");
    Some((format!("{sentence}."), checked))
}

/// The learning path's table, in Markdown: each lesson's chapter, the lessons it builds on,
/// the time to read its chapter (from `root`'s book/src), its exercise and the time that is
/// expected to take (from the exercise's README).
pub fn learning_path(lessons: &[Lesson], root: &std::path::Path) -> Result<String, String> {
    let book_src = root.join("book/src");
    let mut table = String::from(
        "| | chapter | builds on | hardware | reading | exercise | its time (README) |\n\
         |---|---|---|---|---|---|---|\n",
    );
    let mut total_minutes = 0;
    let read = |path: std::path::PathBuf| {
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
    };
    for lesson in lessons {
        let minutes = Reading::of(&read(book_src.join(lesson.chapter()))?, &book_src)?.minutes();
        total_minutes += minutes;
        let needs = if lesson.needs.is_empty() {
            "(nothing)".to_string()
        } else {
            lesson.needs.iter().map(|n| n.trim_start_matches('0')).collect::<Vec<_>>().join(", ")
        };
        let (exercise, time) = match &lesson.exercise {
            None => ("none yet".to_string(), String::new()),
            Some(e) => {
                let readme = root.join(lesson.exercise_folder()).join("README.md");
                let (time, checked) = exercise_time(&read(readme.clone())?).ok_or_else(|| {
                    format!("{}: no paragraph starting `Time: `", readme.display())
                })?;
                let check = if checked { " Checked by a maintainer." } else { " Not yet checked." };
                let page = format!("[{}]({})", e.package, e.book_page());
                (
                    format!("{page}: {}; `cargo grade {}`", e.topic, e.package),
                    format!("{time}{check}"),
                )
            }
        };
        let cell = |text: &str| text.replace('|', "\\|");
        table.push_str(&format!(
            "| {} | [{}]({}) | {needs} | {} | {minutes} min | {} | {} |\n",
            lesson.number.trim_start_matches('0'),
            cell(&lesson.title),
            lesson.chapter(),
            cell(&lesson.hardware()),
            cell(&exercise),
            cell(&time),
        ));
    }
    table.push_str(&format!(
        "\nReading all the chapters: about {} hours.\n",
        total_minutes.div_ceil(60)
    ));
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = "[[lesson]]\nnumber = \"01\"\nfolder = \"01_x\"\npackage = \"lesson01\"\n\
                       title = \"X\"\npart = \"CPU\"\nadds = \"x\"\nexercise = \"ex01\"\n\
                       topic = \"x\"\nwrites = \"x\"\ngpu = false\nneeds = []\n";

    #[test]
    fn the_manifest_of_the_repository_parses() {
        let lessons = lessons();
        assert!(lessons.len() >= 9);
        assert_eq!(lessons[2].package, "lesson03");
        assert_eq!(lessons[2].exercise_folder(), "exercises/03_tiled_forward");
    }

    #[test]
    fn reading_counts_prose_code_and_included_source_but_not_outputs() {
        let dir = std::env::temp_dir().join(format!("course-reading-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("generated")).unwrap();
        std::fs::write(
            dir.join("a.rs"),
            format!("// {ANCHOR}: f\nfn f() {{\n}}\n// {ANCHOR}_END: f\nfn g() {{}}\n"),
        )
        .unwrap();
        std::fs::write(dir.join("generated/out.txt"), "1\n2\n3\n").unwrap();
        let chapter = "one two three\n```rust\nlet shown = 1;\n{{#include a.rs:f}}\n```\n\
                       ```text\n{{#include generated/out.txt}}\n```\n{{#include a.rs}}\nfour five\n";
        let reading = Reading::of(chapter, &dir).unwrap();
        assert_eq!(reading, Reading { words: 5, code_lines: 1 + 2 + 5 });
        let err = Reading::of("{{#include a.rs:nope}}", &dir).unwrap_err();
        assert!(err.contains("no anchor `nope`"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(Reading { words: 0, code_lines: 0 }.minutes(), 5);
        assert_eq!(Reading { words: 120 * 12, code_lines: 0 }.minutes(), 10);
        assert_eq!(Reading { words: 120 * 10, code_lines: 30 }.minutes(), 15);
    }

    #[test]
    fn an_exercise_time_is_its_readme_s_first_sentence_after_time() {
        let readme = "# Ex\n\nTime: about an hour for the warm-up\nand 45 minutes for `f`. (A maintainer\nwho knew the material wrote the main task from it, and it passed every check.)\n\nMore.\n";
        assert_eq!(
            exercise_time(readme),
            Some(("about an hour for the warm-up and 45 minutes for `f`.".to_string(), true))
        );
        assert_eq!(exercise_time("Time: about an hour.\n"), Some(("about an hour.".into(), false)));
        let unchecked = "x\nTime: an hour. (A maintainer has not yet done it.)\n";
        assert_eq!(exercise_time(unchecked), Some(("an hour.".into(), false)));
        assert_eq!(
            exercise_time("x\nTime: about an hour.\n"),
            Some(("about an hour.".into(), false))
        );
        assert_eq!(exercise_time("no time here"), None);
    }

    #[test]
    fn the_hardware_column_says_what_runs_where() {
        let cpu = &parse(ONE).unwrap()[0];
        assert_eq!(cpu.hardware(), "CPU");
        let gpu = &parse(&ONE.replace("gpu = false", "gpu = true")).unwrap()[0];
        assert_eq!(gpu.hardware(), "any GPU or lavapipe");
        let cores = ONE.replace("gpu = false", "gpu = true\ntensor_cores = \"v2\"");
        assert_eq!(parse(&cores).unwrap()[0].hardware(), "any GPU or lavapipe; tensor cores: v2");
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            (ONE.replace("gpu = false", "gpu = \"no\""), "`gpu` must be true or false"),
            (ONE.replace("title = \"X\"\n", ""), "`title` must be a non-empty string"),
            (ONE.replace("number = \"01\"", "number = \"02\""), "lesson 02 is listed in place 01"),
            (ONE.replace("folder = \"01_x\"", "folder = \"x\""), "should start with `01_`"),
            (ONE.replace("topic", "topik"), "unknown key `topik`"),
            (ONE.replace("writes = \"x\"\n", ""), "`exercise`, `topic` and `writes` go together"),
            (ONE.replace("adds = \"x\"\n", ""), "`adds` must be a non-empty string"),
            (
                ONE.replace("needs = []", "needs = [\"01\"]"),
                "expected the two-digit numbers of earlier lessons",
            ),
            (ONE.replace("needs = []", "needs = \"00\""), "`needs` must be a list"),
            (ONE.replace("needs = []", "needs = [\"+1\"]"), "`needs` holds \"+1\""),
            (
                ONE.replace("gpu = false", "gpu = false\ntensor_cores = \"v2\""),
                "expected `gpu = true`",
            ),
            (
                ONE.replace("gpu = false", "gpu = true\ntensor_cores = \"\""),
                "`tensor_cores` must be a non-empty string",
            ),
            ("[lesson]\nnumber = 1\n".to_string(), "no [[lesson]] tables"),
            ("x = 1\n".to_string(), "unknown key `x`"),
            ("[[lesson]\n".to_string(), "course.toml:"),
        ];
        for (text, message) in cases {
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(message), "{text:?}: {err}");
        }
        assert_eq!(parse(ONE).unwrap()[0].exercise.as_ref().unwrap().package, "ex01");
    }

    #[test]
    fn the_summary_places_chapters_by_part_and_names_a_missing_part_or_an_unknown_marker() {
        let lessons = parse(ONE).unwrap();
        let template = "# Summary\n\n# CPU\n\n- [Primer](primer.md)\n{{chapters CPU}}\n\n\
                        # Exercises\n\n{{exercises}}\n";
        assert_eq!(
            summary(&lessons, template).unwrap(),
            "# Summary\n\n# CPU\n\n- [Primer](primer.md)\n- [X](01_x.md)\n\n# Exercises\n\n\
             - [Exercise 01: x](exercises/ex01.md)\n"
        );
        let with_then = parse(&ONE.replace("topic = \"x\"", "topic = \"a; b\"")).unwrap();
        let exercises = summary(&with_then, "{{exercises}}\n{{chapters CPU}}\n").unwrap();
        assert!(exercises.starts_with("- [Exercise 01: a, then b]("), "{exercises}");
        let err = summary(&lessons, "{{chapters GPU}}\n").unwrap_err();
        assert!(err.contains("part `CPU`, which the template has no `{{chapters CPU}}`"), "{err}");
        let err = summary(&lessons, "{{chapters CPU}}\n{{lessons}}\n").unwrap_err();
        assert!(err.contains("`{{lessons}}` is neither"), "{err}");
    }
}
