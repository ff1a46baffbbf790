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
    /// Its exercise; `None` while a new lesson has none yet (its chapter says so).
    pub exercise: Option<Exercise>,
    /// Whether its tests and its exercise need a GPU adapter.
    pub gpu: bool,
}

/// A lesson's exercise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exercise {
    /// The exercise's package: `"ex03"`.
    pub package: String,
    /// What it asks, as `cargo grade` shows it.
    pub topic: String,
}

impl Lesson {
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

const KEYS: [&str; 8] =
    ["number", "folder", "package", "title", "part", "exercise", "topic", "gpu"];

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
    let exercise = match (table.contains_key("exercise"), table.contains_key("topic")) {
        (true, true) => Some(Exercise { package: text("exercise")?, topic: text("topic")? }),
        (false, false) => None,
        _ => {
            return Err(ManifestError(format!(
                "{place}: `exercise` and `topic` go together (both, or neither for a lesson \
                 without an exercise yet)"
            )));
        }
    };
    let gpu = match table.get("gpu") {
        Some(toml::Value::Boolean(b)) => *b,
        _ => return Err(ManifestError(format!("{place}: `gpu` must be true or false"))),
    };
    Ok(Lesson {
        number: text("number")?,
        folder: text("folder")?,
        package: text("package")?,
        title: text("title")?,
        part: text("part")?,
        exercise,
        gpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = "[[lesson]]\nnumber = \"01\"\nfolder = \"01_x\"\npackage = \"lesson01\"\ntitle = \"X\"\npart = \"CPU\"\nexercise = \"ex01\"\ntopic = \"x\"\ngpu = false\n";

    #[test]
    fn the_manifest_of_the_repository_parses() {
        let lessons = lessons();
        assert!(lessons.len() >= 9);
        assert_eq!(lessons[2].package, "lesson03");
        assert_eq!(lessons[2].exercise_folder(), "exercises/03_tiled_forward");
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            (ONE.replace("gpu = false", "gpu = \"no\""), "`gpu` must be true or false"),
            (ONE.replace("title = \"X\"\n", ""), "`title` must be a non-empty string"),
            (ONE.replace("number = \"01\"", "number = \"02\""), "lesson 02 is listed in place 01"),
            (ONE.replace("folder = \"01_x\"", "folder = \"x\""), "should start with `01_`"),
            (ONE.replace("topic", "topik"), "unknown key `topik`"),
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
}
