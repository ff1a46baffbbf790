//! Every `.wgsl` file in the repository parses and validates with naga, the shader compiler
//! inside wgpu, with no GPU needed: a syntax or type error in any kernel (a lesson's or an
//! exercise's) shows up here with naga's own message, file and line. Every barrier in them is
//! in uniform control flow (`gpu::uniformity`, which naga does not check). The copies that
//! must agree do: every shader's `struct Params` has the names, offsets, types and size of the
//! host's `gpu::attention::Params` (read from naga's layout), and every `visible_keys` (the
//! causal mask) is the same text.

use std::path::{Path, PathBuf};

/// All `.wgsl` files under `dir`, skipping build output and hidden folders.
fn wgsl_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() && name != "target" && !name.starts_with('.') {
            wgsl_files(&path, found);
        } else if name.ends_with(".wgsl") {
            found.push(path);
        }
    }
}

/// naga's validation of one WGSL source, with its error rendered against the source text.
fn validate(path: &Path, source: &str) -> Result<(), String> {
    let name = path.display().to_string();
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| e.emit_to_string_with_path(source, &name))?;
    gpu::uniformity::check_barriers(source).map_err(|e| format!("{name}: {e}"))
}

/// Files that are compiled with another appended, its entry point renamed, as
/// `lesson09::window::with_warm_up` does: exercise 09's windowed kernel uses the warm-up's
/// declarations. `(file, appended, entry point, renamed to)`, relative to the workspace.
const COMPILED_WITH: [(&str, &str, &str, &str); 1] = [(
    "exercises/09_gpu_flash/src/window.wgsl",
    "exercises/09_gpu_flash/src/flash.wgsl",
    "fn flash_forward(",
    "fn flash_forward_without_window(",
)];

/// The source a file is compiled as: its text, with the file it is compiled with appended.
fn compiled_source(root: &Path, path: &Path) -> String {
    let source = std::fs::read_to_string(path).expect("readable");
    let listed = COMPILED_WITH.iter().find(|(file, ..)| root.join(file) == path);
    match listed {
        None => source,
        Some((_, appended, entry, renamed)) => {
            let appended = std::fs::read_to_string(root.join(appended)).expect("readable");
            format!("{source}\n{}", appended.replace(entry, renamed))
        }
    }
}

#[test]
fn every_wgsl_file_in_the_repository_is_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("gpu/ is in the workspace");
    let mut files = Vec::new();
    wgsl_files(root, &mut files);
    // Lessons 08 and 09 at least; an empty list would mean the search is broken.
    assert!(files.len() >= 2, "found only {files:?}");
    let failures: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let source = compiled_source(root, path);
            validate(path, &source).err().map(|e| format!("{}:\n{e}", path.display()))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_broken_shader_is_reported_with_its_line() {
    let source = "@compute @workgroup_size(1)\nfn main() {\n    let x: f32 = 1u;\n}\n";
    let err = validate(Path::new("broken.wgsl"), source).unwrap_err();
    assert!(err.contains("broken.wgsl") || err.contains(":3:"), "{err}");
}

#[test]
fn a_barrier_that_only_some_threads_reach_is_reported() {
    // Lesson 09's kernel with its second barrier moved inside `if keys > 0u`, which differs
    // between the threads of a workgroup. naga accepts it; the barrier check does not.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("gpu/ is in the workspace");
    let lesson = std::fs::read_to_string(root.join("lessons/09_gpu_flash/src/flash.wgsl")).unwrap();
    let barrier = "        workgroupBarrier();                   // everyone is done with the tile before reloading\n";
    assert!(lesson.contains(barrier));
    let moved = lesson.replacen(barrier, "", 1).replacen(
        "            m = tile_max;\n",
        "            m = tile_max;\n            workgroupBarrier();\n",
        1,
    );
    let module = naga::front::wgsl::parse_str(&moved).unwrap();
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .expect("naga 30 accepts it");
    let err = gpu::uniformity::check_barriers(&moved).unwrap_err();
    assert!(err.contains("workgroupBarrier() in non-uniform control flow"), "{err}");
}

/// Every `.wgsl` file of the repository with its text.
fn every_wgsl_source() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("gpu/ is in the workspace");
    let mut files = Vec::new();
    wgsl_files(root, &mut files);
    files
        .into_iter()
        .map(|path| {
            let source = compiled_source(root, &path);
            (path, source)
        })
        .collect()
}

/// One member of a uniform struct: name, byte offset, scalar type.
type Member = (String, u32, &'static str);

/// The members of the WGSL `struct Params` in `source` as naga lays them out, and the struct's
/// size in bytes; `None` when the shader has no `Params`.
fn wgsl_params(source: &str) -> Option<(Vec<Member>, u32)> {
    let module = naga::front::wgsl::parse_str(source).expect("validated by the test above");
    let (_, params) = module.types.iter().find(|(_, ty)| ty.name.as_deref() == Some("Params"))?;
    let naga::TypeInner::Struct { members, span } = &params.inner else {
        panic!("`Params` is not a struct");
    };
    let scalar = |ty: naga::Handle<naga::Type>| match module.types[ty].inner {
        naga::TypeInner::Scalar(naga::Scalar { kind: naga::ScalarKind::Uint, width: 4 }) => "u32",
        naga::TypeInner::Scalar(naga::Scalar { kind: naga::ScalarKind::Float, width: 4 }) => "f32",
        ref other => panic!("a `Params` member of type {other:?}: expected u32 or f32"),
    };
    let members = members
        .iter()
        .map(|m| (m.name.clone().unwrap_or_default(), m.offset, scalar(m.ty)))
        .collect();
    Some((members, *span))
}

/// The host's `gpu::attention::Params`, member by member, as the shaders must declare it.
fn rust_params() -> (Vec<Member>, u32) {
    use gpu::attention::Params;
    use std::mem::offset_of;
    // Naming every field: a field added to the Rust struct stops this from compiling until it
    // is listed below.
    let Params { slices: _, q_len: _, kv_len: _, head_dim: _, scale: _, causal: _, pad: _ } =
        bytemuck::Zeroable::zeroed();
    let at = |offset: usize| offset as u32;
    let members = vec![
        ("slices".to_string(), at(offset_of!(Params, slices)), "u32"),
        ("q_len".to_string(), at(offset_of!(Params, q_len)), "u32"),
        ("kv_len".to_string(), at(offset_of!(Params, kv_len)), "u32"),
        ("head_dim".to_string(), at(offset_of!(Params, head_dim)), "u32"),
        ("scale".to_string(), at(offset_of!(Params, scale)), "f32"),
        ("causal".to_string(), at(offset_of!(Params, causal)), "u32"),
        ("pad0".to_string(), at(offset_of!(Params, pad)), "u32"),
        ("pad1".to_string(), at(offset_of!(Params, pad) + 4), "u32"),
    ];
    (members, size_of::<Params>() as u32)
}

#[test]
fn every_shaders_params_matches_the_host_struct() {
    let expected = rust_params();
    let mut checked = 0;
    for (path, source) in every_wgsl_source() {
        if let Some(declared) = wgsl_params(&source) {
            assert_eq!(
                declared,
                expected,
                "{}: `struct Params` differs from the Rust one",
                path.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 4, "found `Params` in only {checked} shaders");
}

#[test]
fn a_shader_whose_params_drift_is_caught() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("gpu/ is in the workspace");
    let lesson = std::fs::read_to_string(root.join("lessons/09_gpu_flash/src/flash.wgsl")).unwrap();
    let with_extra_member =
        lesson.replacen("    scale: f32,", "    causal_: u32,\n    scale: f32,", 1);
    assert_ne!(wgsl_params(&with_extra_member), Some(rust_params()));
}

/// The text of `fn visible_keys` in `source`, up to its closing brace on a line of its own.
fn visible_keys(source: &str) -> Option<String> {
    let start = source.find("fn visible_keys(")?;
    let end = start + source[start..].find("\n}\n")? + 3;
    Some(source[start..end].to_string())
}

#[test]
fn every_copy_of_visible_keys_is_the_same() {
    let copies: Vec<(PathBuf, String)> = every_wgsl_source()
        .into_iter()
        .filter_map(|(path, source)| Some((path, visible_keys(&source)?)))
        // An exercise's stub (marked TODO) is the learner's to write.
        .filter(|(_, text)| !text.contains("TODO"))
        .collect();
    assert!(copies.len() >= 3, "found only {copies:?}");
    let (first_path, first) = &copies[0];
    for (path, text) in &copies[1..] {
        assert_eq!(text, first, "{} and {} differ", path.display(), first_path.display());
    }
}

/// Every shader also translates to SPIR-V, what the Vulkan driver receives (with its
/// `override` constants at their defaults): naga's SPIR-V writer has failed on shaders its
/// validator accepted (a `coopStoreT` with mixed argument forms), and a kernel that only runs
/// on a lent GPU would otherwise meet such a failure there first.
#[test]
fn every_wgsl_file_translates_to_spirv() {
    let failures: Vec<String> = every_wgsl_source()
        .iter()
        .filter_map(|(path, source)| {
            spirv(source).err().map(|e| format!("{}: {e}", path.display()))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn spirv(source: &str) -> Result<(), String> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.to_string())?;
    for entry in &module.entry_points {
        gpu::kernel::spirv(source, &entry.name, &[], gpu::kernel::Checks::On)
            .map_err(|e| format!("{}: {e}", entry.name))?;
    }
    Ok(())
}
