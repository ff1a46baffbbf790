//! The book speaks of attention, never of how or where it was made: no word of the machines
//! its measurements were taken on beyond their names (a GPU, its driver, a date), of the
//! time they were lent for, of builds or runs "here and there", of commits, or of material the
//! reader does not have. The check reads every page (`book/src/**/*.md`, prose and code
//! blocks alike: a phrase in a shown comment reads the same) and every generated output
//! (`book/src/generated/`), and the README, which introduces the book.

use std::fs;
use std::path::{Path, PathBuf};

/// Phrases that tell how the course was made, each with why it does not belong, matched
/// without regard to case and only as whole words (`lent` is not `silent`).
const PROCESS_TALK: &[(&str, &str)] = &[
    ("lent", "the reader's GPU is not lent"),
    ("device time", "a budget of the machines the course was measured on"),
    ("this session", "the reader was not there"),
    ("trial build", "a build the reader cannot see"),
    ("source material", "the reader has no such material; say what is wrong and why"),
    ("built here", "where something was built is not the reader's concern"),
    ("build here", "where something was built is not the reader's concern"),
    ("run there", "where something ran is said by its device line"),
    ("ran there", "where something ran is said by its device line"),
    ("this course was written on", "the reader has the machine in front of them"),
    ("not kept", "a number the book quotes comes from an output it keeps"),
    ("today", "a date says when"),
    ("yesterday", "a date says when"),
    ("the day before", "a date says when"),
    ("UTC", "a date says when, not the hour of a run"),
    ("/root/", "an absolute path of the measuring machine"),
    ("/work/", "an absolute path of the machine the course was written on"),
    ("/tmp/", "an absolute path of one machine's temporary files"),
];

/// The files the check reads: the book's pages and outputs, and the README.
fn files() -> Vec<PathBuf> {
    let root = tests::root();
    let mut files = vec![root.join("README.md")];
    let mut folders = vec![root.join("book/src")];
    while let Some(folder) = folders.pop() {
        for entry in fs::read_dir(&folder).expect("a readable folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "md" || e == "txt") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Whether `phrase` occurs in `line` as whole words, without regard to case.
fn says(line: &str, phrase: &str) -> bool {
    let line = line.to_lowercase();
    let phrase = phrase.to_lowercase();
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    line.match_indices(&phrase).any(|(at, _)| {
        let edge = |c: Option<char>, inner: Option<char>| !(word(c) && word(inner));
        edge(line[..at].chars().next_back(), phrase.chars().next())
            && edge(line[at + phrase.len()..].chars().next(), phrase.chars().next_back())
    })
}

/// A word that looks like an abbreviated commit hash: 7 to 40 hexadecimal digits with at
/// least two letters and two digits, outside a `0x` literal.
fn commit_hash_in(line: &str) -> Option<&str> {
    line.split(|c: char| !c.is_ascii_alphanumeric()).find(|word| {
        (7..=40).contains(&word.len())
            && word.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
            && word.chars().filter(char::is_ascii_digit).count() >= 2
            && word.chars().filter(char::is_ascii_alphabetic).count() >= 2
    })
}

/// What `text`, the file at `path`, says about how the course was made, as `path:line: why`.
fn process_talk(path: &Path, text: &str) -> Vec<String> {
    let name = path.strip_prefix(tests::root()).unwrap_or(path).display().to_string();
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        for (phrase, why) in PROCESS_TALK {
            if says(line, phrase) {
                found.push(format!("{name}:{}: \"{phrase}\": {why}", number + 1));
            }
        }
        // Generated outputs may show disassembly, whose addresses are hexadecimal.
        let prose = path.extension().is_some_and(|e| e == "md");
        if let Some(hash) = commit_hash_in(line).filter(|_| prose) {
            found.push(format!("{name}:{}: `{hash}`: a commit is not the reader's", number + 1));
        }
    }
    found
}

#[test]
fn the_book_never_says_how_it_was_made() {
    let mut found = Vec::new();
    for path in files() {
        let text = fs::read_to_string(&path).expect("readable");
        found.extend(process_talk(&path, &text));
    }
    assert!(found.is_empty(), "the book speaks of how it was made:\n{}", found.join("\n"));
}

/// The check finds each kind of phrase, and leaves alone the words that only contain one.
#[test]
fn the_check_finds_process_talk_and_only_that() {
    let page = tests::root().join("book/src/page.md");
    let output = tests::root().join("book/src/generated/output.txt");
    for planted in [
        "Measured on the lent GPU.",
        "With the device time left, one more run.",
        "Measured today.",
        "At 09:12 UTC.",
        "Since commit 54f6a3f the kernel is faster.",
        "Built here, run there.",
        "wrote fig.svg to /root/out/fig",
        "As the Source Material says,",
        "(not kept)",
    ] {
        assert!(!process_talk(&page, planted).is_empty(), "missed: {planted}");
    }
    for innocent in [
        "A silent error; the excellent run; clients.",
        "The session's cache (lesson 12's `Session`).",
        "0x7f800000 is infinity; 1e-6 and 2^29.",
        "Here is the kernel; there the loop runs.",
        "Each query tile is kept in registers.",
    ] {
        assert!(process_talk(&page, innocent).is_empty(), "flagged: {innocent}");
    }
    // Addresses in disassembly are not commits.
    assert!(process_talk(&output, "/*0a30*/ 7f3a9c1 IMAD").is_empty());
}
