//! Every `.wgsl` file in the repository parses and validates with naga, the shader compiler
//! inside wgpu, with no GPU needed: a syntax or type error in any kernel (a lesson's or an
//! exercise's) shows up here with naga's own message, file and line. Every barrier in them is
//! in uniform control flow (`gpu::uniformity`, which naga does not check).

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
            let source = std::fs::read_to_string(path).expect("readable");
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
