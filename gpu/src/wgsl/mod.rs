//! Text tools for WGSL sources, shared by every lesson whose kernels are specialised on the
//! host: [`specialise`] writes the sizes of one call into a shader's constants, and [`unroll`]
//! unrolls the loops over them, so that the driver sees fixed trip counts and constant indices
//! (what keeps a thread's arrays in registers).

mod unroll;

pub use unroll::unroll;

use reference::AttentionError;

use crate::GpuError;

/// `source` with each `const NAME: u32 = ...;` of `constants` given its value. A constant,
/// unlike a pipeline-overridable one, can size an array of cooperative matrices, and loops over
/// it have trip counts known when the shader is compiled (which [`unroll`] relies on).
pub fn specialise(source: &str, constants: &[(&str, usize)]) -> Result<String, AttentionError> {
    let mut text = source.to_string();
    for &(name, value) in constants {
        let declaration = format!("const {name}: u32 = ");
        let start = text.find(&declaration).ok_or_else(|| {
            GpuError::KernelMisuse(format!("the shader declares no `{declaration}...;`"))
        })?;
        let value_start = start + declaration.len();
        let end = value_start
            + text[value_start..].find(';').ok_or_else(|| {
                GpuError::KernelMisuse(format!("`{declaration}...` ends without a `;`"))
            })?;
        text.replace_range(value_start..end, &format!("{value}u"));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::specialise;

    #[test]
    fn constants_get_the_host_s_values_and_an_unknown_one_is_an_error() {
        let source = "const A: u32 = 1u;\nconst B: u32 = A + 1u;\n";
        let text = specialise(source, &[("A", 4), ("B", 16)]).unwrap();
        assert_eq!(text, "const A: u32 = 4u;\nconst B: u32 = 16u;\n");
        let err = specialise(source, &[("C", 1)]).unwrap_err().to_string();
        assert!(err.contains("declares no `const C: u32 = ...;`"), "{err}");
        let err = specialise("const A: u32 = 1u", &[("A", 2)]).unwrap_err().to_string();
        assert!(err.contains("ends without a `;`"), "{err}");
    }
}
