//! # Lesson 10 — FlashAttention in WGSL as fast as the GPU allows
//!
//! Lesson 09's kernel is right but slow: one thread per query row, one multiply-add per number
//! read from workgroup memory. This lesson makes it fast in numbered versions, in the manner of
//! llm.c's `dev/cuda`: each version is a module, `vN_name.rs`, beside its shader,
//! `vN_name.wgsl`, whose header says what it changes from the one before, why, and what that
//! measured on an H100/H200. All of them compute lesson 03's algorithm (FlashAttention-2's
//! loop order, online softmax, `O` normalised once) and are checked against the same f64
//! oracle.
//!
//! The versions, in order, are the modules [`v1_register_tiles`] to [`v11_split_f32`]; the
//! first line of each module's documentation says what it adds, and each one's card
//! ([`Version::about`]) says it in the tables of the tour and the benchmarks.
//!
//! Each version implements [`Version`] once: its card, the tiles it takes (those it prefers on
//! a device, those the tests and the tuning try; a [`TileShape`] knows its rows and workgroup
//! memory), and the WGSL they make. [`Kernel`] compiles any version for a head dimension and
//! tiles and implements the course's [`AttentionKernel`], so the tests, the registry and the
//! lab treat them all alike; [`Variant`] is one version with one choice of tiles, whatever
//! the version. Adding a version is its module and one line in [`versions`].

pub mod features;
pub mod orders;
pub mod tuning;

use gpu::GpuError;
use gpu::attention::{AttentionBuffers, AttentionKernel, Built, KernelVersion, boxed};
use gpu::kernel::workgroup_count;
use gpu::kernel::{Checks, Dispatch, bind, check_loop_iterations, compile_with_checks};
use reference::{About, AttentionError, AttentionShape, Storage};

pub use orders::{KeyOrder, LoadAt, QueryOrder};
pub use tuning::{LeaveOut, Variant, selected_by, selected_by_any};

/// Largest head dimension (`MAX_OUT_CHUNKS` and `MAX_FRAGMENTS` in the shaders).
pub const MAX_HEAD_DIM: usize = 256;

/// The device features of the tensor-core versions: cooperative matrices, f16 and subgroups.
pub const TENSOR_CORES: wgpu::Features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::SUBGROUP);

/// What every version of this lesson implements, once. `Tiles` is its shape of work (rows and
/// keys per workgroup, and the choices it measured); the versions that share a shape of work
/// share a type (version 9 takes version 8's [`ArenaTiles`]).
pub trait Version: 'static {
    /// The shape of work this version takes.
    type Tiles: TileShape;

    /// Its number: the key everywhere (`V8`, `v8_arena.rs`, `v8_arena.wgsl`, "v8 arena").
    const NUMBER: u32;

    /// Rows of Q, K, V and O are padded to a multiple of this many elements: 4 for the f32
    /// versions, which read rows as `vec4`, 16 for the tensor cores' 16-wide slices.
    const ROW_ALIGNMENT: usize;

    /// The parts of its work it can leave out for measurements ([`LeaveOut`]).
    const LEAVES_OUT: LeaveOut = LeaveOut::NOTHING;

    /// Its card: name, storage format, tolerance, and one line on what it changes.
    fn about() -> About;

    /// The device features it cannot run without.
    fn requires() -> wgpu::Features {
        TENSOR_CORES
    }

    /// The tiles to try on a device at `head_dim` (already padded), best first as measured;
    /// only shapes of [`Version::tried`], since most versions run without bounds checks.
    fn preferred(head_dim: usize) -> Vec<Self::Tiles>;

    /// Every tile shape the tests check and the tuning times at `head_dim`.
    fn tried(head_dim: usize) -> Vec<Self::Tiles>;

    /// Whether it accepts `tiles` at `head_dim` on `device` (beyond the features it requires
    /// and the workgroup memory they take, which [`Kernel`] checks), with what it expected.
    fn check(
        _tiles: &Self::Tiles,
        _device: &wgpu::Device,
        _head_dim: usize,
    ) -> Result<(), AttentionError> {
        Ok(())
    }

    /// Its WGSL for `tiles` at `head_dim`, with `leave_out`'s parts of the work left out
    /// (measurements only; [`Kernel`] refuses any it cannot leave out).
    fn shader(
        tiles: &Self::Tiles,
        head_dim: usize,
        leave_out: LeaveOut,
    ) -> Result<Shader, AttentionError>;

    /// A short name, e.g. `v8 8x1x16 rows, 16 keys, Q in registers, loads at staging`.
    fn describe(tiles: &Self::Tiles) -> String;

    /// The head dimension its shader is built for: `head_dim` padded to the row alignment
    /// (the f32 versions pad rows in memory only).
    fn compiled_head_dim(head_dim: usize) -> usize {
        head_dim.next_multiple_of(Self::ROW_ALIGNMENT)
    }

    /// Loop iterations one thread runs at most, counted as lavapipe counts them (see
    /// [`gpu::kernel::LAVAPIPE_LOOP_LIMIT`]); 0 for a version that never runs there.
    fn loop_iterations(_tiles: &Self::Tiles, _shape: &AttentionShape) -> u64 {
        0
    }

    /// Whether every input must be a number that f16 can hold: f16 storage, or f32 split
    /// into two f16s on the GPU (version 11).
    fn inputs_fit_f16() -> bool {
        Self::about().storage == Storage::F16
    }
}

/// What a shape of work knows of itself, whichever version takes it.
pub trait TileShape: Copy + std::fmt::Debug + PartialEq + Send + Sync + 'static {
    /// Query rows per workgroup.
    fn block_q(&self) -> usize;

    /// Bytes of workgroup memory the shader declares for this shape at `head_dim`.
    fn workgroup_bytes(&self, head_dim: usize) -> usize;

    /// The shape as the tests tell shapes apart: a choice that changes no index the shader
    /// computes can be set aside (the size of a group of query tiles, which a test checks at
    /// a size of its own).
    fn as_tested(&self) -> Self {
        *self
    }
}

/// Declares each version's module and lists them, in order, for the course's registry: adding
/// a version is its module (`vN_name.rs` beside `vN_name.wgsl`) and one line here.
macro_rules! versions {
    ($($module:ident::$version:ident),* $(,)?) => {
        $(pub mod $module;)*
        $(pub use $module::$version;)*

        /// This lesson's kernel versions, in order, for the course's registry.
        pub fn versions() -> Vec<KernelVersion> {
            vec![$(registered::<$module::$version>()),*]
        }

        /// Every version with every tile shape it tries at `head_dim`.
        pub fn every_variant(head_dim: usize) -> Vec<Variant> {
            [$(Variant::tried::<$module::$version>(head_dim)),*].concat()
        }

        /// Every version with the tiles it prefers at `head_dim`, best first.
        pub fn every_preferred(head_dim: usize) -> Vec<Variant> {
            [$(Variant::preferred::<$module::$version>(head_dim)),*].concat()
        }

        /// Each version's module, type and number, with its shapes at D = 128: its test
        /// checks that the number is the key everywhere.
        #[cfg(test)]
        fn numbered() -> Vec<(&'static str, &'static str, u32, Vec<Variant>)> {
            vec![$((
                stringify!($module),
                stringify!($version),
                <$module::$version as Version>::NUMBER,
                Variant::tried::<$module::$version>(128),
            )),*]
        }
    };
}

versions! {
    v1_register_tiles::V1,
    v2_tensor_cores::V2,
    v3_no_bounds_checks::V3,
    v4_specialised::V4,
    v5_pipelined::V5,
    v6_registers::V6,
    v7_f32_registers::V7,
    v8_arena::V8,
    v9_overlap::V9,
    v10_pairs::V10,
    v11_split_f32::V11,
}

pub use v1_register_tiles::RegisterTiles;
pub use v2_tensor_cores::TensorCoreTiles;
pub use v4_specialised::SpecialisedTiles;
pub use v5_pipelined::PipelinedTiles;
pub use v7_f32_registers::{F32Tiles, attention_with_shader};
pub use v8_arena::ArenaTiles;
pub use v10_pairs::PairTiles;
pub use v11_split_f32::SplitTiles;

/// Version `V` as the registry holds it: its card, its build function, its features.
fn registered<V: Version>() -> KernelVersion {
    fn build<V: Version>(device: &wgpu::Device, head_dim: usize) -> Built {
        boxed(Kernel::<V>::new(device, head_dim))
    }
    KernelVersion::new(V::about(), build::<V>).requiring(V::requires())
}

/// The WGSL a kernel was compiled from: the source (constants already written in), the
/// values of its `override`s, and whether wgpu's run-time checks were added. The lab's
/// `shader_stats` hands it to the driver again to read what the compiler made of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Shader {
    /// WGSL source.
    pub source: String,
    /// `override` constants and their values.
    pub overrides: Vec<(&'static str, f64)>,
    /// wgpu's run-time checks.
    pub checks: Checks,
}

impl Shader {
    /// A source whose constants are written in, compiled without wgpu's run-time checks:
    /// only for versions whose tests cover every index on every shape they accept.
    pub fn unchecked(source: String) -> Self {
        Self { source, overrides: Vec::new(), checks: Checks::Off }
    }
}

/// One version compiled for a head dimension and tiles.
pub struct Kernel<V: Version> {
    pipeline: wgpu::ComputePipeline,
    head_dim: usize,
    tiles: V::Tiles,
    shader: Shader,
}

impl<V: Version> Kernel<V> {
    /// Version `V` for `head_dim` with the first of its preferred tiles that fits `device`.
    pub fn new(device: &wgpu::Device, head_dim: usize) -> Result<Self, AttentionError> {
        Self::with(device, head_dim, Self::choose(device, head_dim)?)
    }

    /// The first of version `V`'s preferred tiles at `head_dim` that `device` runs, or why
    /// none does (the reason the last, smallest, was refused).
    pub fn choose(device: &wgpu::Device, head_dim: usize) -> Result<V::Tiles, AttentionError> {
        let mut why = None;
        for tiles in V::preferred(V::compiled_head_dim(head_dim)) {
            match Self::check(device, head_dim, &tiles) {
                Ok(()) => return Ok(tiles),
                Err(e) => why = Some(e),
            }
        }
        let none = || GpuError::KernelMisuse(format!("{} prefers no tiles", V::about().name));
        Err(why.unwrap_or_else(|| none().into()))
    }

    /// Version `V` for `head_dim` with the given tiles (the tests and the tuning try many).
    pub fn with(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: V::Tiles,
    ) -> Result<Self, AttentionError> {
        Self::leaving_out(device, head_dim, tiles, LeaveOut::NOTHING)
    }

    /// [`Kernel::with`], with parts of the work left out, for measurements only: the output
    /// is wrong. Parts the version cannot leave out are refused.
    pub fn leaving_out(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: V::Tiles,
        leave_out: LeaveOut,
    ) -> Result<Self, AttentionError> {
        Self::check(device, head_dim, &tiles)?;
        let padded = V::compiled_head_dim(head_dim);
        let shader = shader_of::<V>(&tiles, padded, leave_out)?;
        let tested = |t: &V::Tiles| t.as_tested() == tiles.as_tested();
        if shader.checks == Checks::Off && !V::tried(padded).iter().any(tested) {
            // Its tests prove every index in range on the shapes they try, and only there.
            return Err(GpuError::KernelMisuse(format!(
                "{} runs without bounds checks, so only on the tile shapes its tests try at \
                 D = {padded}; {tiles:?} is not one of them: expected one of {:?}",
                V::about().name,
                V::tried(padded)
            ))
            .into());
        }
        Self::from_shader(device, head_dim, tiles, shader)
    }

    /// Whether `device` can run version `V` with `tiles` at `head_dim`: the head dim, the
    /// features it requires, the version's own rules, the workgroup memory.
    fn check(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: &V::Tiles,
    ) -> Result<(), AttentionError> {
        if head_dim > MAX_HEAD_DIM {
            return Err(AttentionError::UnsupportedHeadDim { head_dim, max: MAX_HEAD_DIM });
        }
        if let Some(missing) = registered::<V>().missing_on(device) {
            return Err(missing.into());
        }
        if V::requires().contains(TENSOR_CORES) {
            check_tensor_cores(device, V::about().name)?;
        }
        let padded = V::compiled_head_dim(head_dim);
        V::check(tiles, device, padded)?;
        let available = device.limits().max_compute_workgroup_storage_size as usize;
        let needed = tiles.workgroup_bytes(padded);
        if needed > available {
            return Err(AttentionError::TilesDoNotFit { needed, available });
        }
        Ok(())
    }

    /// Compiles `shader` (version `V`'s, or another with its bindings and constants, as
    /// exercise 10's) as this kernel; `tiles` must have passed [`Kernel::check`].
    fn from_shader(
        device: &wgpu::Device,
        head_dim: usize,
        tiles: V::Tiles,
        shader: Shader,
    ) -> Result<Self, AttentionError> {
        let label = V::about().name;
        let Shader { source, overrides, checks } = &shader;
        let pipeline =
            compile_with_checks(device, label, source, "flash_forward", overrides, *checks)?;
        Ok(Self { pipeline, head_dim, tiles, shader })
    }

    /// The tiles it was compiled for.
    pub fn tiles(&self) -> V::Tiles {
        self.tiles
    }

    /// The WGSL it was compiled from.
    pub fn shader(&self) -> &Shader {
        &self.shader
    }

    /// The grid for `shape`: `(query tiles, slices)`.
    pub fn grid(&self, shape: &AttentionShape) -> (usize, usize) {
        (shape.q_len.div_ceil(self.tiles.block_q()), shape.batch * shape.heads)
    }

    /// [`AttentionKernel::dispatches`] with more buffers bound, `(binding, buffer)` (a kernel
    /// with FlashAttention's softcap and ALiBi: see [`features`]).
    pub fn dispatches_with(
        &self,
        device: &wgpu::Device,
        io: &AttentionBuffers,
        more: &[(u32, &wgpu::Buffer)],
    ) -> Result<Vec<Dispatch>, AttentionError> {
        let (shape, name) = (&io.shape, V::about().name);
        if shape.head_dim != self.head_dim {
            return Err(GpuError::KernelMisuse(format!(
                "{name} was compiled for head_dim = {}, the problem has head_dim = {}; expected \
                 a kernel built for this head_dim",
                self.head_dim, shape.head_dim
            ))
            .into());
        }
        let buffers = [&io.params, &io.q, &io.k, &io.v, &io.o, &io.lse];
        let mut bindings: Vec<(u32, &wgpu::Buffer)> = (0..).zip(buffers).collect();
        bindings.extend_from_slice(more);
        let bind_group = bind(device, &self.pipeline, &bindings)?;
        check_loop_iterations(device, name, V::loop_iterations(&self.tiles, shape))?;
        let (query_tiles, slices) = self.grid(shape);
        Ok(vec![Dispatch {
            label: name,
            pipeline: self.pipeline.clone(),
            bind_group,
            workgroups: [workgroup_count(query_tiles), workgroup_count(slices), 1],
        }])
    }
}

impl<V: Version> AttentionKernel for Kernel<V> {
    fn row_alignment(&self) -> usize {
        V::ROW_ALIGNMENT
    }

    fn storage(&self) -> Storage {
        V::about().storage
    }

    fn inputs_fit_f16(&self) -> bool {
        V::inputs_fit_f16()
    }

    fn dispatches(
        &self,
        device: &wgpu::Device,
        io: &AttentionBuffers,
    ) -> Result<Vec<Dispatch>, AttentionError> {
        self.dispatches_with(device, io, &[])
    }
}

/// Version `V`'s WGSL for `tiles` at `head_dim` (padded as it pads it), with `leave_out`'s parts
/// of the work left out; parts it cannot leave out are refused.
pub fn shader_of<V: Version>(
    tiles: &V::Tiles,
    head_dim: usize,
    leave_out: LeaveOut,
) -> Result<Shader, AttentionError> {
    let unknown = leave_out.0 & !V::LEAVES_OUT.0;
    if unknown != 0 {
        return Err(GpuError::KernelMisuse(format!(
            "{}: LEAVE_OUT {} asks for parts it cannot leave out (bits {unknown:#b}); it can \
             leave out only {}",
            V::about().name,
            leave_out.0,
            match V::LEAVES_OUT {
                LeaveOut::NOTHING => "nothing".to_string(),
                parts => parts.describe(),
            }
        ))
        .into());
    }
    V::shader(tiles, head_dim, leave_out)
}

/// Whether `device` can run the tensor-core versions: cooperative matrices, subgroups of 32.
fn check_tensor_cores(device: &wgpu::Device, version: &'static str) -> Result<(), AttentionError> {
    if !gpu::has_tensor_cores(device) {
        let feature = "EXPERIMENTAL_COOPERATIVE_MATRIX (tensor cores)";
        return Err(GpuError::MissingFeature { feature, needed_for: version }.into());
    }
    let info = device.adapter_info();
    if (info.subgroup_min_size, info.subgroup_max_size) != (32, 32) {
        return Err(GpuError::KernelMisuse(format!(
            "{version} is written for subgroups of 32 threads; this adapter's are {} to {}",
            info.subgroup_min_size, info.subgroup_max_size
        ))
        .into());
    }
    Ok(())
}

/// A compiled kernel of any version: what the tests and the lab need of it beyond running.
pub trait Compiled: AttentionKernel {
    /// The WGSL it was compiled from.
    fn shader(&self) -> &Shader;
    /// Query rows per workgroup.
    fn block_q(&self) -> usize;
}

impl<V: Version> Compiled for Kernel<V> {
    fn shader(&self) -> &Shader {
        &self.shader
    }

    fn block_q(&self) -> usize {
        self.tiles.block_q()
    }
}

/// The first of `candidates` (best first, smallest last) whose workgroup memory, `bytes`, fits
/// `device`; if none does, the error says what the smallest needs.
pub fn first_that_fits<T: Copy>(
    device: &wgpu::Device,
    candidates: &[T],
    bytes: impl Fn(&T) -> usize,
) -> Result<T, AttentionError> {
    let available = device.limits().max_compute_workgroup_storage_size as usize;
    let fits = candidates.iter().find(|t| bytes(t) <= available);
    fits.copied().ok_or_else(|| {
        let needed = candidates.last().map_or(0, &bytes);
        AttentionError::TilesDoNotFit { needed, available }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_version_number_is_the_key_everywhere() {
        let numbered = super::numbered();
        for (place, (module, version, number, variants)) in (1..).zip(numbered) {
            assert_eq!(number, place, "{version} is listed in place {place}");
            assert!(module.starts_with(&format!("v{number}_")), "{module} for {version}");
            assert_eq!(version, format!("V{number}"));
            let prefix = format!("v{number} ");
            for variant in variants {
                assert_eq!(variant.number, number);
                assert!(variant.about.name.starts_with(&prefix), "{}", variant.about.name);
                assert!(variant.describe().starts_with(&prefix), "{}", variant.describe());
            }
        }
    }
}
