//! Loops unrolled by the host before the driver sees the shader.
//!
//! A loop marked `// unroll` on the line before it, of the form
//!
//! ```wgsl
//! // unroll
//! for (var f = 0u; f < FRAGMENTS; f++) {
//!     BODY
//! }
//! ```
//!
//! where `FRAGMENTS` is a `u32` constant of the shader (after [`super::specialise`] has set
//! the host's values), becomes `FRAGMENTS` blocks `{ let f = 0u; BODY }`, `{ let f = 1u; BODY }`,
//! ... . Nested marked loops are unrolled too. The body must run straight through (no
//! `break`, `continue` or block comments). Every index into an array of cooperative matrices
//! is then a constant expression, which is what keeps such an array in registers: measured
//! on an H100 (2026-11-25, lesson 10's shader statistics), the driver kept the fragment arrays of
//! versions 4 and 5 in local memory (128 to 1024 bytes per thread, their size) although it
//! kept those of a small microbenchmark in registers; version 6, unrolled, has none.

use std::collections::HashMap;

use crate::GpuError;
use reference::AttentionError;

const MARKER: &str = "// unroll";

// ANCHOR: unroll
/// `source` with every loop marked `// unroll` unrolled (see the module documentation).
pub fn unroll(source: &str) -> Result<String, AttentionError> {
    let constants = u32_constants(source)?;
    let mut text = source.to_string();
    // Each pass unrolls the first marked loop; the copies of its body carry the marks of the
    // loops nested in it, which later passes unroll.
    while let Some(marker) = find_marker(&text) {
        let (loop_start, loop_end, variable, bound, body) = marked_loop(&text, marker)?;
        let count = *constants.get(bound.as_str()).ok_or_else(|| {
            misuse(format!(
                "`// unroll` before a loop bounded by `{bound}`, which is not a u32 constant"
            ))
        })?;
        let indent = &text[loop_start..marker];
        let copies: Vec<String> =
            (0..count).map(|i| format!("{{ let {variable} = {i}u;{body}}}")).collect();
        let replacement = copies.join(&format!("\n{indent}"));
        let line_start = text[..marker].rfind('\n').map_or(0, |i| i + 1);
        text.replace_range(line_start..loop_end, &format!("{indent}{replacement}"));
    }
    Ok(text)
}
// ANCHOR_END: unroll

fn misuse(message: String) -> AttentionError {
    GpuError::KernelMisuse(message).into()
}

/// The byte offset of the first `// unroll` that is alone on its line.
fn find_marker(text: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim() == MARKER {
            return Some(offset + line.find(MARKER).expect("the line holds it"));
        }
        offset += line.len();
    }
    None
}

/// For the loop after the marker at `marker`: the start of the marker's line's indentation,
/// the end of the loop's closing brace, the loop variable, the bound's name, and the body
/// (between the braces).
fn marked_loop(
    text: &str,
    marker: usize,
) -> Result<(usize, usize, String, String, String), AttentionError> {
    let line_start = text[..marker].rfind('\n').map_or(0, |i| i + 1);
    let after = marker + MARKER.len();
    let header_start = after + text[after..].find(|c: char| !c.is_whitespace()).unwrap_or(0);
    if !text[header_start..].starts_with("for (") {
        return Err(misuse("`// unroll` must be the line right before a `for` loop".to_string()));
    }
    let body_at = text[header_start..].find('{').ok_or_else(|| {
        misuse("the `// unroll` loop has no body; expected `for (...) { ... }`".to_string())
    })?;
    let open = header_start + body_at;
    let header = &text[header_start..open];
    let (variable, bound) = parse_header(header)?;
    let close = matching_brace(text, open)?;
    let body = text[open + 1..close].to_string();
    // In a copy of the body, `break` or `continue` would act on the loop around it.
    let words = |w: &str| body.split(|c: char| !c.is_alphanumeric() && c != '_').any(|x| x == w);
    if words("break") || words("continue") || body.contains("/*") {
        return Err(misuse(format!(
            "the `// unroll` loop over `{variable}` holds `break`, `continue` or a block comment; \
             expected a body that runs straight through"
        )));
    }
    Ok((line_start, close + 1, variable, bound, body))
}

/// `for (var NAME = 0u; NAME < BOUND; NAME++)` -> (NAME, BOUND).
fn parse_header(header: &str) -> Result<(String, String), AttentionError> {
    let bad = || {
        misuse(format!(
            "`// unroll` needs `for (var i = 0u; i < CONSTANT; i++)`, not `{}`",
            header.trim()
        ))
    };
    let inner =
        header.trim().strip_prefix("for (").and_then(|h| h.strip_suffix(')')).ok_or_else(bad)?;
    let parts: Vec<&str> = inner.split(';').map(str::trim).collect();
    let [init, condition, step] = parts.as_slice() else { return Err(bad()) };
    let variable =
        init.strip_prefix("var ").and_then(|i| i.strip_suffix("= 0u")).ok_or_else(bad)?.trim();
    let bound = condition
        .strip_prefix(variable)
        .and_then(|c| c.trim().strip_prefix('<'))
        .ok_or_else(bad)?
        .trim();
    if *step != format!("{variable}++")
        || bound.is_empty()
        || !bound.chars().all(|c| c.is_alphanumeric() || c == '_')
    {
        return Err(bad());
    }
    Ok((variable.to_string(), bound.to_string()))
}

/// The `}` that closes the `{` at `open`, skipping `//` comments.
fn matching_brace(text: &str, open: usize) -> Result<usize, AttentionError> {
    let mut depth = 0usize;
    let mut in_comment = false;
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        match b {
            b'\n' => in_comment = false,
            b'/' if !in_comment && bytes.get(i + 1) == Some(&b'/') => in_comment = true,
            b'{' if !in_comment => depth += 1,
            b'}' if !in_comment => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
    }
    Err(misuse("an `// unroll` loop has no closing brace".to_string()))
}

/// Every `const NAME: u32` of the shader with its value, as naga evaluates them.
fn u32_constants(source: &str) -> Result<HashMap<String, u32>, AttentionError> {
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| misuse(format!("the shader does not parse: {}", e.emit_to_string(source))))?;
    let mut values = HashMap::new();
    for (_, constant) in module.constants.iter() {
        let (Some(name), naga::Expression::Literal(naga::Literal::U32(value))) =
            (&constant.name, &module.global_expressions[constant.init])
        else {
            continue;
        };
        values.insert(name.clone(), *value);
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHADER: &str = "const N: u32 = 2u;
const M: u32 = N + 1u;
fn f() -> u32 {
    var total = 0u;
    // unroll
    for (var i = 0u; i < N; i++) {
        // unroll
        for (var j = 0u; j < M; j++) {
            total += i * 10u + j; // a comment with a } brace
        }
    }
    return total;
}
";

    #[test]
    fn nested_marked_loops_become_blocks_with_constant_indices() {
        let text = unroll(SHADER).unwrap();
        assert!(!text.contains("for ("), "{text}");
        assert!(!text.contains(MARKER), "{text}");
        assert_eq!(text.matches("let i = ").count(), 2, "{text}");
        assert_eq!(text.matches("let j = ").count(), 6, "{text}");
        assert!(text.contains("let i = 1u;") && text.contains("let j = 2u;"), "{text}");
        // Still a valid shader.
        let module = naga::front::wgsl::parse_str(&text).unwrap();
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .unwrap();
    }

    #[test]
    fn unmarked_loops_are_left_alone() {
        let source = SHADER.replace("    // unroll\n    for (var i", "    for (var i");
        let text = unroll(&source).unwrap();
        assert_eq!(text.matches("for (").count(), 1, "{text}");
        assert_eq!(text.matches("let j = ").count(), 3, "{text}");
    }

    #[test]
    fn a_marker_away_from_its_loop_or_a_body_that_jumps_is_an_error() {
        let marked = "    // unroll\n    for (var i";
        let source = SHADER.replacen(marked, "    // unroll\n    total = 1u;\n    for (var i", 1);
        let err = unroll(&source).unwrap_err().to_string();
        assert!(err.contains("right before a `for` loop"), "{err}");
        let source = SHADER.replace("total += i * 10u + j;", "if j == 1u { break; }");
        let err = unroll(&source).unwrap_err().to_string();
        assert!(err.contains("`break`, `continue`"), "{err}");
        // A loop without a body is an error too, never a panic.
        assert!(unroll("fn f() {\n    // unroll\n    for (var i = 0u; i < N; i++)").is_err());
    }

    #[test]
    fn a_loop_the_host_cannot_count_is_an_error() {
        let source = SHADER.replace("i < N;", "i < total;");
        let err = unroll(&source).unwrap_err().to_string();
        assert!(err.contains("`total`"), "{err}");
        let source = SHADER.replace("i++", "i += 2u");
        let err = unroll(&source).unwrap_err().to_string();
        assert!(err.contains("needs `for (var i = 0u"), "{err}");
    }
}
