//! Lesson 11's experiments still apply to its kernel and give the oracle's answer, each at
//! the layout it was measured at, on chunks of several tiles; every patch of the folder is
//! one of them.

use lab::decode_experiments::experiments;

#[test]
fn every_experiment_applies_and_gives_the_oracles_answer() {
    let sources: Vec<(&str, String, _)> =
        experiments().iter().map(|e| (e.name, e.source().unwrap(), e.layout)).collect();
    let Some(gpu) = gpu::for_tests() else { return };
    let kernels: Vec<_> = sources.iter().map(|(n, s, l)| (*n, s.as_str(), *l)).collect();
    lesson11::gpu_decode::check_kernels(gpu, 8, 9, &kernels).unwrap();
}

#[test]
fn every_patch_of_the_folder_is_an_experiment() {
    let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/decode_experiments");
    let mut files: Vec<String> = std::fs::read_dir(folder)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut named: Vec<String> =
        experiments().iter().map(|e| format!("{}.patch", e.name)).collect();
    named.sort();
    assert_eq!(files, named);
}
