//! # registry — every version of the course, once, by operation
//!
//! Each lesson exports its implementations as versions (`lessonNN::versions()`: a card saying
//! name, lesson, operation, device, storage format and tolerance, and the code). This crate
//! lists them by operation, each list in course order: [`forwards`], [`backwards`] and
//! [`decodes`] (a training step will be the next). An entry's device, CPU or GPU, is a field
//! of its card, and its code is either the operation's function or a GPU version that becomes
//! that function on a GPU, as candle registers one op with an implementation per device. The
//! programs that run "every version" read these lists: the tour, the course-wide tests, the
//! benchmarks. A new version of a lesson appears in them by being added to that lesson's
//! `versions()`; a new lesson takes one line here.

use gpu::attention::KernelVersion;
use gpu::backward::BackwardKernelVersion;
use gpu::version::{DecodeKernelVersion, GpuVersion};
use reference::{
    About, AttentionError, Backward, BackwardVersion, DecodeVersion, Decoder, Forward,
    ForwardVersion,
};

/// A registered version: its card, and its code on its device.
pub struct Entry<Cpu, Gpu> {
    /// Name, lesson, operation, device, storage format, tolerance.
    pub about: About,
    /// The code: CPU code runs as it is, a GPU version is built for a device first.
    pub code: Code<Cpu, Gpu>,
}

/// An entry's code, by device.
pub enum Code<Cpu, Gpu> {
    /// The operation's function, on the CPU.
    Cpu(Cpu),
    /// A GPU version ([`gpu::version::GpuVersion`]), which becomes the operation's function
    /// on a GPU that has the features it needs.
    Gpu(Gpu),
}

/// A forward version: a [`Forward`] on the CPU or a kernel version on the GPU.
pub type ForwardEntry = Entry<Box<dyn Forward>, KernelVersion>;
/// A backward version: a [`Backward`] on the CPU or a backward kernel version on the GPU.
pub type BackwardEntry = Entry<Box<dyn Backward>, BackwardKernelVersion>;
/// A decoding version: a [`Decoder`] on the CPU or a decoding kernel version on the GPU.
pub type DecodeEntry = Entry<Box<dyn Decoder>, DecodeKernelVersion>;

// ANCHOR: registry
/// Every forward version, in course order.
pub fn forwards() -> Vec<ForwardEntry> {
    [
        entries(lesson01::versions()),
        entries(lesson02::versions()),
        entries(lesson03::versions()),
        entries(lesson04::versions()),
        entries(lesson06::versions()),
        entries(lesson07::versions()),
        entries(lesson08::versions()),
        entries(lesson09::versions()),
        entries(lesson10::versions()),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Every backward version, in course order.
pub fn backwards() -> Vec<BackwardEntry> {
    [entries(lesson05::versions())].into_iter().flatten().collect()
}

/// Every decoding version, in course order: on the CPU, then in WGSL.
pub fn decodes() -> Vec<DecodeEntry> {
    [entries(lesson11::versions()), entries(lesson11::gpu_decode::versions())]
        .into_iter()
        .flatten()
        .collect()
}

/// A lesson's versions as entries, whatever their device.
fn entries<V, E: From<V>>(versions: Vec<V>) -> Vec<E> {
    versions.into_iter().map(E::from).collect()
}
// ANCHOR_END: registry

/// The versions of one operation that run on this machine, and those that cannot with the
/// reason (no GPU adapter, or a feature the adapter lacks such as tensor cores).
pub struct Runnable<V> {
    /// The versions that run, in course order: CPU code as it is, GPU versions on the
    /// process's shared GPU.
    pub runs: Vec<V>,
    /// The versions that cannot run here, each with why.
    pub cannot: Vec<(About, AttentionError)>,
}

/// Every forward version that runs here ([`Runnable`]).
pub fn runnable_forwards() -> Runnable<ForwardVersion> {
    runnable(forwards(), |about, forward| ForwardVersion { about, forward })
}

/// Every backward version that runs here ([`Runnable`]).
pub fn runnable_backwards() -> Runnable<BackwardVersion> {
    runnable(backwards(), |about, backward| BackwardVersion { about, backward })
}

/// Every decoding version that runs here ([`Runnable`]).
pub fn runnable_decodes() -> Runnable<DecodeVersion> {
    runnable(decodes(), |about, decoder| DecodeVersion { about, decoder })
}

/// The entries of `entries` that run here as `version(card, code)`, and those that cannot with
/// why: what [`runnable_forwards`] and its twins do with each operation's list.
pub fn runnable<C, G: GpuCode<C>, V>(
    entries: Vec<Entry<C, G>>,
    version: impl Fn(About, C) -> V,
) -> Runnable<V> {
    let mut here = Runnable { runs: Vec::new(), cannot: Vec::new() };
    for Entry { about, code } in entries {
        match code.here() {
            Ok(code) => here.runs.push(version(about, code)),
            Err(why) => here.cannot.push((about, why)),
        }
    }
    here
}

impl<C, G: GpuCode<C>> Code<C, G> {
    /// The operation's function on this machine, or why there is none.
    fn here(self) -> Result<C, AttentionError> {
        match self {
            Code::Cpu(code) => Ok(code),
            Code::Gpu(version) => version.on_shared_gpu(),
        }
    }
}

/// What a GPU version becomes on this machine's GPU: `C`, the operation's function
/// ([`Forward`], [`Backward`], [`Decoder`]).
pub trait GpuCode<C> {
    /// The version on the process's shared GPU, or why it cannot run there.
    fn on_shared_gpu(self) -> Result<C, AttentionError>;
}

/// The shared GPU, if it has every feature `version` requires.
fn gpu_for<B>(version: &GpuVersion<B>) -> Result<&'static gpu::Gpu, AttentionError> {
    let gpu = gpu::Gpu::shared()?;
    match version.missing_on(&gpu.device) {
        Some(missing) => Err(missing.into()),
        None => Ok(gpu),
    }
}

impl GpuCode<Box<dyn Forward>> for KernelVersion {
    fn on_shared_gpu(self) -> Result<Box<dyn Forward>, AttentionError> {
        Ok(self.forward_on(gpu_for(&self)?))
    }
}

impl GpuCode<Box<dyn Backward>> for BackwardKernelVersion {
    fn on_shared_gpu(self) -> Result<Box<dyn Backward>, AttentionError> {
        Ok(self.backward_on(gpu_for(&self)?))
    }
}

impl GpuCode<Box<dyn Decoder>> for DecodeKernelVersion {
    fn on_shared_gpu(self) -> Result<Box<dyn Decoder>, AttentionError> {
        Ok((self.build)(gpu_for(&self)?))
    }
}

impl<C, B> From<GpuVersion<B>> for Entry<C, GpuVersion<B>> {
    fn from(version: GpuVersion<B>) -> Self {
        Entry { about: version.about, code: Code::Gpu(version) }
    }
}

impl<G> From<ForwardVersion> for Entry<Box<dyn Forward>, G> {
    fn from(version: ForwardVersion) -> Self {
        Entry { about: version.about, code: Code::Cpu(version.forward) }
    }
}

impl<G> From<BackwardVersion> for Entry<Box<dyn Backward>, G> {
    fn from(version: BackwardVersion) -> Self {
        Entry { about: version.about, code: Code::Cpu(version.backward) }
    }
}

impl<G> From<DecodeVersion> for Entry<Box<dyn Decoder>, G> {
    fn from(version: DecodeVersion) -> Self {
        Entry { about: version.about, code: Code::Cpu(version.decoder) }
    }
}

/// The GPU forward kernel versions, in course order, as the benchmarks and the course-wide
/// model tests take them (to upload once and run many times).
pub fn gpu_kernels() -> Vec<gpu::attention::KernelVersion> {
    let kernel = |entry: ForwardEntry| match entry.code {
        Code::Gpu(kernel) => Some(kernel),
        Code::Cpu(_) => None,
    };
    forwards().into_iter().filter_map(kernel).collect()
}

/// The CPU forward versions, in course order.
pub fn cpu_forwards() -> Vec<ForwardVersion> {
    let version = |entry: ForwardEntry| match entry.code {
        Code::Cpu(forward) => Some(ForwardVersion { about: entry.about, forward }),
        Code::Gpu(_) => None,
    };
    forwards().into_iter().filter_map(version).collect()
}

/// The first CPU forward version `lesson` registers (its main one: lesson 01's naive attention,
/// lesson 07's parallel FlashAttention), or an error naming the lesson.
pub fn first_cpu_forward(lesson: &str) -> Result<ForwardVersion, String> {
    let found = cpu_forwards().into_iter().find(|version| version.about.lesson == lesson);
    found.ok_or_else(|| format!("no CPU forward version of {lesson} is registered"))
}

/// The cards of every registered version, by operation (forward, backward, decoding), each in
/// course order.
pub fn every_version() -> Vec<About> {
    let mut cards: Vec<About> = forwards().iter().map(|e| e.about).collect();
    cards.extend(backwards().iter().map(|e| e.about));
    cards.extend(decodes().iter().map(|e| e.about));
    cards
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use reference::compare::Format;
    use reference::{Device, Operation, Storage};

    use super::*;

    #[test]
    fn names_are_unique() {
        let mut seen = BTreeSet::new();
        for card in every_version() {
            assert!(seen.insert(card.name), "two versions are called {:?}", card.name);
        }
    }

    /// The device a card names is the device its code runs on.
    fn device_of<C, G>(entry: &Entry<C, G>) -> Device {
        match entry.code {
            Code::Cpu(_) => Device::Cpu,
            Code::Gpu(_) => Device::Gpu,
        }
    }

    #[test]
    fn each_list_holds_its_operation_in_course_order_with_the_device_of_its_code() {
        fn check<C, G>(entries: Vec<Entry<C, G>>, operation: Operation) {
            for entry in &entries {
                let card = entry.about;
                assert_eq!(card.operation, operation, "{}", card.name);
                assert_eq!(card.device, device_of(entry), "{}", card.name);
            }
            // Course order is the order of the course manifest's lessons.
            let course: Vec<String> = course::lessons().into_iter().map(|l| l.package).collect();
            let place = |package: &str| course.iter().position(|p| p == package);
            let places: Vec<_> = entries.iter().map(|e| place(e.about.lesson)).collect();
            assert!(places.iter().all(Option::is_some), "a version of no lesson in course.toml");
            assert!(places.is_sorted(), "not in course order: {places:?}");
        }
        check(forwards(), Operation::Forward);
        check(backwards(), Operation::Backward);
        check(decodes(), Operation::Decode);
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
            let text = std::fs::read_to_string(&lib).expect("a lesson's lib.rs");
            text.contains("pub fn versions()") || text.contains("pub use versions::versions;")
        };
        course::lessons().into_iter().filter(exports).map(|lesson| lesson.package).collect()
    }

    #[test]
    fn every_lesson_with_versions_is_registered() {
        let registered: BTreeSet<String> =
            every_version().iter().map(|c| c.lesson.to_string()).collect();
        assert_eq!(registered, lessons_exporting_versions());
    }
}
