//! Unified diffs applied to a text, strictly: the lab keeps experiments on a lesson's kernel
//! as the changes they make to it (`diff -u` of the lesson's source and the experiment), not
//! as copies that drift from the lesson.

/// `base` with the unified diff `patch` applied. The patch must hold at least one hunk; every
/// hunk's context and removed lines must be where the hunk says, and its lines must number
/// what its header says; otherwise the error names the hunk and what differs (for a changed
/// lesson source: make the patch again).
pub fn apply(base: &str, patch: &str) -> Result<String, String> {
    let base: Vec<&str> = base.lines().collect();
    let mut out: Vec<&str> = Vec::new();
    let mut next = 0; // the first line of `base` not yet copied or consumed
    let mut lines = patch.lines().skip_while(|line| !line.starts_with("@@")).peekable();
    if lines.peek().is_none() {
        return Err("the patch holds no hunk (`@@ -START,LEN +START,LEN @@`)".to_string());
    }
    while let Some(header) = lines.next() {
        let hunk = Hunk::parse(header)?;
        if hunk.start < next || hunk.start > base.len() {
            return Err(format!("{header}: starts at line {}, outside the text", hunk.start + 1));
        }
        out.extend(&base[next..hunk.start]);
        next = hunk.start;
        let (mut old_lines, mut new_lines) = (0, 0);
        while let Some(line) = lines.next_if(|line| !line.starts_with("@@")) {
            let (mark, text) = line.split_at(line.len().min(1));
            match mark {
                "+" => {
                    out.push(text);
                    new_lines += 1;
                }
                " " | "-" | "" => {
                    let found = base.get(next).copied();
                    if found != Some(text) {
                        return Err(format!(
                            "{header}: line {} is {found:?}, the patch expects {text:?}",
                            next + 1
                        ));
                    }
                    if mark != "-" {
                        out.push(text);
                        new_lines += 1;
                    }
                    old_lines += 1;
                    next += 1;
                }
                "\\" => {} // "\ No newline at end of file"
                _ => return Err(format!("{header}: a line that is not part of a hunk: {line:?}")),
            }
        }
        if (old_lines, new_lines) != (hunk.old_len, hunk.new_len) {
            return Err(format!(
                "{header}: the hunk holds {old_lines} old and {new_lines} new lines; its header \
                 says {} and {}",
                hunk.old_len, hunk.new_len
            ));
        }
    }
    out.extend(&base[next..]);
    Ok(out.iter().map(|line| format!("{line}\n")).collect())
}

/// A hunk's header, `@@ -START,LEN +START,LEN @@` (a missing `,LEN` is 1).
struct Hunk {
    /// The index of the first line of the base that the hunk touches.
    start: usize,
    /// Lines of the base it covers (context and removed).
    old_len: usize,
    /// Lines of the result it makes (context and added).
    new_len: usize,
}

impl Hunk {
    fn parse(header: &str) -> Result<Self, String> {
        let bad = || format!("{header:?}: expected a hunk header `@@ -START,LEN +START,LEN @@`");
        let ranges = header.strip_prefix("@@ ").and_then(|rest| rest.split_once(" @@"));
        let (old, new) = ranges.and_then(|(ranges, _)| ranges.split_once(' ')).ok_or_else(bad)?;
        let range = |text: Option<&str>| -> Option<(usize, usize)> {
            let (start, len) = text?.split_once(',').unwrap_or((text?, "1"));
            Some((start.parse().ok()?, len.parse().ok()?))
        };
        let (start, old_len) = range(old.strip_prefix('-')).ok_or_else(bad)?;
        let (_, new_len) = range(new.strip_prefix('+')).ok_or_else(bad)?;
        // An empty range names the line after which it inserts.
        let start = match (start, old_len) {
            (start, 0) => start,
            (start, _) if start >= 1 => start - 1,
            _ => return Err(bad()),
        };
        Ok(Hunk { start, old_len, new_len })
    }
}

#[cfg(test)]
mod tests {
    use super::apply;

    const BASE: &str = "a\nb\nc\nd\ne\n";

    #[test]
    fn hunks_replace_insert_and_remove_lines() {
        let patch = "--- x\n+++ y\n@@ -0,0 +1 @@\n+top\n\
                     @@ -2,2 +3,2 @@\n b\n-c\n+C\n\
                     @@ -5 +6,2 @@\n e\n+end\n";
        assert_eq!(apply(BASE, patch).unwrap(), "top\na\nb\nC\nd\ne\nend\n");
    }

    #[test]
    fn a_patch_of_another_text_is_refused_naming_the_line() {
        let patch = "@@ -2,2 +2,2 @@\n b\n-x\n+X\n";
        let err = apply(BASE, patch).unwrap_err();
        assert!(err.contains("line 3 is Some(\"c\"), the patch expects \"x\""), "{err}");
        let beyond = "@@ -9,1 +9,1 @@\n-z\n+Z\n";
        assert!(apply(BASE, beyond).unwrap_err().contains("outside the text"));
        assert!(apply(BASE, "@@ nonsense @@\n").unwrap_err().contains("expected a hunk header"));
    }

    #[test]
    fn a_patch_without_hunks_or_with_miscounted_ones_is_refused() {
        assert!(apply(BASE, "").unwrap_err().contains("holds no hunk"));
        assert!(apply(BASE, "--- x\n+++ y\n").unwrap_err().contains("holds no hunk"));
        let short = "@@ -2,3 +2,3 @@\n b\n-c\n+C\n"; // a hunk cut off before its last line
        let err = apply(BASE, short).unwrap_err();
        assert!(err.contains("holds 2 old and 2 new lines; its header says 3 and 3"), "{err}");
        assert!(apply(BASE, "@@ -2,x +2,2 @@\n b\n").unwrap_err().contains("expected a hunk"));
    }
}
