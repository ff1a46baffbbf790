//! Unified diffs applied to a text, strictly: the lab keeps experiments on a lesson's kernel
//! as the changes they make to it (`diff -u` of the lesson's source and the experiment), not
//! as copies that drift from the lesson.

/// `base` with the unified diff `patch` applied. Every hunk's context and removed lines must be
/// where the hunk says; otherwise the error names the hunk and the first line that differs
/// (the lesson's source changed since the patch was made: make it again).
pub fn apply(base: &str, patch: &str) -> Result<String, String> {
    let base: Vec<&str> = base.lines().collect();
    let mut out: Vec<&str> = Vec::new();
    let mut next = 0; // the first line of `base` not yet copied or consumed
    let mut lines = patch.lines().skip_while(|line| !line.starts_with("@@")).peekable();
    while let Some(header) = lines.next() {
        let start = hunk_start(header)?;
        if start < next || start > base.len() {
            return Err(format!("{header}: starts at line {}, outside the text", start + 1));
        }
        out.extend(&base[next..start]);
        next = start;
        while let Some(line) = lines.next_if(|line| !line.starts_with("@@")) {
            let (mark, text) = line.split_at(line.len().min(1));
            match mark {
                "+" => out.push(text),
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
                    }
                    next += 1;
                }
                "\\" => {} // "\ No newline at end of file"
                _ => return Err(format!("{header}: a line that is not part of a hunk: {line:?}")),
            }
        }
    }
    out.extend(&base[next..]);
    Ok(out.iter().map(|line| format!("{line}\n")).collect())
}

/// The index of the first line of `base` that the hunk `@@ -START,LEN +... @@` touches.
fn hunk_start(header: &str) -> Result<usize, String> {
    let old = header.strip_prefix("@@ -").and_then(|rest| rest.split(' ').next());
    let mut numbers = old.into_iter().flat_map(|range| range.split(','));
    let start: Option<usize> = numbers.next().and_then(|n| n.parse().ok());
    let len: usize = numbers.next().map_or(Some(1), |n| n.parse().ok()).unwrap_or(1);
    match start {
        // An empty range names the line after which it inserts.
        Some(start) if len == 0 => Ok(start),
        Some(start) if start >= 1 => Ok(start - 1),
        _ => Err(format!("{header:?}: expected a hunk header `@@ -START,LEN +START,LEN @@`")),
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
    fn no_hunk_leaves_the_text_as_it_is() {
        assert_eq!(apply(BASE, "").unwrap(), BASE);
    }
}
