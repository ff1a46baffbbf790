//! Every link between the book's pages leads somewhere: the page exists, the heading an
//! `#anchor` names exists on it, and every image file is there. `mdbook build` checks none of
//! this; a renamed heading would otherwise leave a link that silently goes to the top of a
//! page.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

fn book_src() -> PathBuf {
    tests::root().join("book/src")
}

/// The book's pages: every `.md` file of `book/src` (not of its subfolders, which hold
/// generated output and figures).
fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = fs::read_dir(book_src())
        .expect("book/src exists")
        .map(|entry| entry.expect("readable").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    pages
}

/// The lines of a page outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    course::lines_and_code(text)
        .into_iter()
        .filter(|&(_, code)| !code)
        .map(|(line, _)| line)
        .collect()
}

/// The id mdBook gives a heading: its text without Markdown marks, lower-cased, whitespace as
/// `-`, every character but letters, digits, `-` and `_` left out.
fn heading_id(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_ascii_lowercase()),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// The ids of a page's headings.
fn anchors(text: &str) -> HashSet<String> {
    prose_lines(text)
        .into_iter()
        .filter_map(|line| line.strip_prefix('#'))
        .map(|rest| heading_id(rest.trim_start_matches('#').trim()))
        .collect()
}

/// The targets of the Markdown links and images of a page: `[text](target)`.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose_lines(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    targets
}

/// What is wrong with `target`, a link of `page`, if anything.
fn broken(page: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None; // outside the book
    }
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (target, None),
    };
    let linked = if file.is_empty() { page.to_path_buf() } else { book_src().join(file) };
    let Ok(text) = fs::read_to_string(&linked) else {
        return Some(format!("{target}: no file {}", linked.display()));
    };
    match anchor {
        Some(anchor) if file.is_empty() || file.ends_with(".md") => {
            (!anchors(&text).contains(anchor)).then(|| format!("{target}: no heading with that id"))
        }
        _ => None,
    }
}

#[test]
fn every_link_between_pages_leads_to_a_page_and_a_heading() {
    let mut problems = Vec::new();
    for page in pages() {
        let text = fs::read_to_string(&page).expect("readable");
        for target in link_targets(&text) {
            if let Some(problem) = broken(&page, &target) {
                let name = page.file_name().expect("a file").to_string_lossy();
                problems.push(format!("{name}: {problem}"));
            }
        }
    }
    assert!(problems.is_empty(), "broken links in the book:\n{}", problems.join("\n"));
}

/// The check itself finds what it should: a missing page, a missing heading, a link to a
/// heading that exists, and mdBook's ids for headings with code and punctuation.
#[test]
fn the_link_check_tells_broken_links_from_good_ones() {
    let contract = book_src().join("contract.md");
    assert_eq!(broken(&contract, "contract.md#the-oracle"), None);
    assert_eq!(broken(&contract, "#the-oracle"), None);
    assert!(broken(&contract, "no_such_page.md").is_some());
    assert!(broken(&contract, "contract.md#no-such-heading").is_some());
    assert_eq!(
        heading_id("Layout: `[B, H, N, D]`, not `[B, N, H, D]`"),
        "layout-b-h-n-d-not-b-n-h-d"
    );
    assert_eq!(
        heading_id("Masking with -1e9 without saying what a fully masked row gives"),
        "masking-with--1e9-without-saying-what-a-fully-masked-row-gives"
    );
    assert_eq!(
        link_targets("see [a](x.md#y) and ![b](figures/z.svg)."),
        ["x.md#y", "figures/z.svg"]
    );
}
