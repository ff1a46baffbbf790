//! # registry — every stage and kernel version of the course, once
//!
//! Each lesson exports its implementations as versions (`lessonNN::versions()`: a card saying
//! name, lesson, kind, storage format and tolerance, and the code). This crate lists the
//! lessons in course order, and the programs that run "every stage" read it: the tour, the
//! cross-stage equivalence test, the scaling study (the first version of lessons 01, 03, 07)
//! and the GPU benchmark. A new version of a lesson appears in them by being added to that
//! lesson's `versions()`; a new lesson takes one line here.
//!
//! The GPU kernels sit behind the `gpu` feature (on by default; the workspace's dependency
//! line turns it off), so that a CPU-only reader builds no wgpu.

use reference::{About, BackwardVersion, ForwardVersion};

// ANCHOR: registry
/// Every CPU forward version, in course order.
pub fn cpu_forwards() -> Vec<ForwardVersion> {
    [
        lesson01::versions(),
        lesson02::versions(),
        lesson03::versions(),
        lesson04::versions(),
        lesson06::versions(),
        lesson07::versions(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The first CPU forward version `lesson` registers (its main one: lesson 01's naive attention,
/// lesson 07's parallel FlashAttention), or an error naming the lesson.
pub fn first_cpu_forward(lesson: &str) -> Result<ForwardVersion, String> {
    let found = cpu_forwards().into_iter().find(|version| version.about.lesson == lesson);
    found.ok_or_else(|| format!("no CPU forward version of {lesson} is registered"))
}

/// Every CPU backward version, in course order.
pub fn backwards() -> Vec<BackwardVersion> {
    lesson05::versions()
}

/// Every GPU kernel version, in course order.
#[cfg(feature = "gpu")]
pub fn gpu_kernels() -> Vec<gpu::attention::KernelVersion> {
    [lesson08::versions(), lesson09::versions(), lesson10::versions()]
        .into_iter()
        .flatten()
        .collect()
}
// ANCHOR_END: registry

/// Every GPU kernel version the process's shared GPU can run, as a forward function on it
/// (the tensor-core versions need tensor cores: see [`gpu_kernels_not_runnable`]), or the
/// error that says why there is no adapter (and how to install lavapipe).
#[cfg(feature = "gpu")]
pub fn gpu_forwards() -> Result<Vec<ForwardVersion>, reference::AttentionError> {
    let gpu = gpu::Gpu::shared()?;
    Ok(gpu_kernels()
        .iter()
        .filter(|kernel| kernel.missing_on(&gpu.device).is_none())
        .map(|kernel| ForwardVersion { about: kernel.about, forward: kernel.forward_on(gpu) })
        .collect())
}

/// The registered GPU kernel versions `gpu` cannot run, each with the reason (a feature the
/// adapter lacks), for the programs that run every version to say what they left out.
#[cfg(feature = "gpu")]
pub fn gpu_kernels_not_runnable(gpu: &gpu::Gpu) -> Vec<(About, gpu::GpuError)> {
    let versions = gpu_kernels();
    versions.iter().filter_map(|v| Some((v.about, v.missing_on(&gpu.device)?))).collect()
}

/// The cards of every registered version (GPU kernels included with the `gpu` feature), in
/// course order: CPU forwards, backwards, then GPU kernels.
pub fn every_version() -> Vec<About> {
    let mut cards: Vec<About> = cpu_forwards().iter().map(|v| v.about).collect();
    cards.extend(backwards().iter().map(|v| v.about));
    #[cfg(feature = "gpu")]
    cards.extend(gpu_kernels().iter().map(|v| v.about));
    cards
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use reference::compare::Format;
    use reference::{Kind, Storage};

    use super::*;

    #[test]
    fn names_are_unique() {
        let mut seen = BTreeSet::new();
        for card in every_version() {
            assert!(seen.insert(card.name), "two versions are called {:?}", card.name);
        }
    }

    #[test]
    fn each_list_holds_its_kind_in_course_order() {
        let check = |cards: Vec<About>, kind: Kind| {
            assert!(cards.iter().all(|c| c.kind == kind), "{kind:?} list: {cards:#?}");
            let lessons: Vec<_> = cards.iter().map(|c| c.lesson).collect();
            assert!(lessons.is_sorted(), "not in course order: {lessons:?}");
        };
        check(cpu_forwards().iter().map(|v| v.about).collect(), Kind::CpuForward);
        check(backwards().iter().map(|v| v.about).collect(), Kind::CpuBackward);
        #[cfg(feature = "gpu")]
        check(gpu_kernels().iter().map(|v| v.about).collect(), Kind::GpuKernel);
    }

    #[test]
    fn storage_agrees_with_the_tolerance() {
        for card in every_version() {
            let rounded: &[Format] = match card.storage {
                // f32 inputs are read exactly, or split by the kernel into two f16s each for
                // the tensor cores (lesson 10's version 11).
                Storage::F32 => &[Format::EXACT, Format::F16_PAIR],
                Storage::F16 => &[Format::F16],
                Storage::BF16 => &[Format::BF16],
            };
            assert!(rounded.contains(&card.tolerance.storage), "{}", card.name);
        }
    }

    /// The lessons of the course manifest whose `src/lib.rs` exports `versions()`: a lesson
    /// that exports versions but is missing here fails this test.
    fn lessons_exporting_versions() -> BTreeSet<String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let exports = |lesson: &course::Lesson| {
            let lib = root.join(lesson.lesson_folder()).join("src/lib.rs");
            std::fs::read_to_string(&lib).expect("a lesson's lib.rs").contains("pub fn versions()")
        };
        course::lessons().into_iter().filter(exports).map(|lesson| lesson.package).collect()
    }

    #[test]
    #[cfg(feature = "gpu")]
    fn every_lesson_with_versions_is_registered() {
        let registered: BTreeSet<String> =
            every_version().iter().map(|c| c.lesson.to_string()).collect();
        assert_eq!(registered, lessons_exporting_versions());
    }
}
