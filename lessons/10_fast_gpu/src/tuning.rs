//! What the tests and the lab's tuning iterate over: [`Variant`], one version with one choice
//! of tiles, whatever the version; the parts of a kernel's work that can be left out to
//! measure what each costs ([`LeaveOut`]); the other choices of version 8 that were measured
//! and not kept ([`load_choices`]); and the lab's `--only` ([`selected_by_any`]).

use std::sync::Arc;

use reference::{About, AttentionError};

use crate::{ArenaTiles, Compiled, Kernel, LoadAt, Shader, TileShape, V8, V9, Version, shader_of};

/// Parts of version 5's, 6's or 10's work left out, to measure what each costs (the lab's
/// `tune`); any but [`LeaveOut::NOTHING`] gives a wrong answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaveOut(pub u32);

impl LeaveOut {
    /// The kernel as registered.
    pub const NOTHING: Self = Self(0);
    /// No reads of S, no exponentials, no writes of P.
    pub const SOFTMAX: Self = Self(1);
    /// No `S = Q K^T` on the tensor cores (zeros are stored as S).
    pub const SCORES: Self = Self(2);
    /// No `O += P V`.
    pub const VALUES: Self = Self(4);
    /// S is not stored to workgroup memory (the store stays behind a condition that never
    /// holds, so that the compiler keeps `S = Q K^T`, which nothing else reads).
    pub const STORE_S: Self = Self(8);
    /// No K or V read from global memory or staged in workgroup memory.
    pub const STAGING: Self = Self(16);

    /// O is never rescaled (version 6 only).
    pub const RESCALE: Self = Self(32);
    /// O and L are never written (version 6 only).
    pub const OUTPUT: Self = Self(64);
    /// K and V staged as zeros, never read from memory (versions 6 and 10).
    pub const LOADS: Self = Self(128);
    /// K and V read from memory, never stored to workgroup memory (version 6 only).
    pub const STASH: Self = Self(256);

    /// The parts version 5 can leave out: the softmax, either product, the store of S and the
    /// staging of K and V.
    pub const IN_VERSION_5: Self = Self(1 | 2 | 4 | 8 | 16);
    /// The parts version 6 can leave out: every one.
    pub const IN_VERSION_6: Self = Self(511);
    /// The parts version 10 can leave out: the softmax, either product, the store of S and
    /// the loads of K and V.
    pub const IN_VERSION_10: Self = Self(1 | 2 | 4 | 8 | 128);

    /// Each part by its name, in bit order.
    const NAMES: [(Self, &'static str); 9] = [
        (Self::SOFTMAX, "the softmax (1)"),
        (Self::SCORES, "QK^T (2)"),
        (Self::VALUES, "PV (4)"),
        (Self::STORE_S, "the store of S (8)"),
        (Self::STAGING, "the K/V staging (16)"),
        (Self::RESCALE, "the rescale (32)"),
        (Self::OUTPUT, "the output (64)"),
        (Self::LOADS, "the K/V loads (128)"),
        (Self::STASH, "the K/V stores (256)"),
    ];

    /// Both parts left out.
    pub fn and(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// The parts, named with their bits: `the softmax (1), PV (4)`.
    pub fn describe(self) -> String {
        let names = Self::NAMES.iter().filter(|(part, _)| self.0 & part.0 != 0);
        names.map(|(_, name)| *name).collect::<Vec<_>>().join(", ")
    }
}

/// Version 8 with each of the other times to read K and V ([`LoadAt`]), in every shape it
/// tries, and version 9 reading them at the start of their phase: what the tuning measured to
/// choose [`LoadAt::Staging`] for both.
pub fn load_choices(head_dim: usize) -> Vec<Variant> {
    let tried = V8::tried(V8::compiled_head_dim(head_dim));
    let with = |load_at| tried.iter().map(move |&t| ArenaTiles { load_at, ..t });
    let v8 = [LoadAt::TileAhead, LoadAt::Products].into_iter().flat_map(with);
    let v9 = with(LoadAt::Products);
    v8.map(Variant::of::<V8>).chain(v9.map(Variant::of::<V9>)).collect()
}

/// One version with one choice of tiles (and, for measurements, parts of its work left out),
/// whatever the version: what the tests and the lab iterate over.
#[derive(Clone)]
pub struct Variant {
    /// The card of the version it belongs to.
    pub about: About,
    /// The version's number.
    pub number: u32,
    /// The features the version requires.
    pub requires: wgpu::Features,
    /// The version's row alignment ([`Version::ROW_ALIGNMENT`]).
    pub row_alignment: usize,
    choice: Arc<dyn Choice>,
    leave_out: LeaveOut,
}

/// A version's tiles, with what the version knows of them.
trait Choice: Send + Sync {
    fn describe(&self) -> String;
    fn block_q(&self) -> usize;
    fn workgroup_bytes(&self, head_dim: usize) -> usize;
    fn shader(&self, head_dim: usize, leave_out: LeaveOut) -> Result<Shader, AttentionError>;
    fn check(&self, device: &wgpu::Device, head_dim: usize) -> Result<(), AttentionError>;
    fn build(
        &self,
        device: &wgpu::Device,
        head_dim: usize,
        leave_out: LeaveOut,
    ) -> Result<Box<dyn Compiled>, AttentionError>;
}

/// `tiles` of version `V`.
struct Chosen<V: Version>(V::Tiles);

impl<V: Version> Choice for Chosen<V> {
    fn describe(&self) -> String {
        V::describe(&self.0)
    }
    fn block_q(&self) -> usize {
        self.0.block_q()
    }
    fn workgroup_bytes(&self, head_dim: usize) -> usize {
        self.0.workgroup_bytes(V::compiled_head_dim(head_dim))
    }
    fn shader(&self, head_dim: usize, leave_out: LeaveOut) -> Result<Shader, AttentionError> {
        shader_of::<V>(&self.0, V::compiled_head_dim(head_dim), leave_out)
    }
    fn check(&self, device: &wgpu::Device, head_dim: usize) -> Result<(), AttentionError> {
        Kernel::<V>::check(device, head_dim, &self.0)
    }
    fn build(
        &self,
        device: &wgpu::Device,
        head_dim: usize,
        leave_out: LeaveOut,
    ) -> Result<Box<dyn Compiled>, AttentionError> {
        Ok(Box::new(Kernel::<V>::leaving_out(device, head_dim, self.0, leave_out)?))
    }
}

impl Variant {
    /// `tiles` of version `V`.
    pub fn of<V: Version>(tiles: V::Tiles) -> Self {
        Self {
            about: V::about(),
            number: V::NUMBER,
            requires: V::requires(),
            row_alignment: V::ROW_ALIGNMENT,
            choice: Arc::new(Chosen::<V>(tiles)),
            leave_out: LeaveOut::NOTHING,
        }
    }

    /// Every tile shape version `V` tries at `head_dim`.
    pub fn tried<V: Version>(head_dim: usize) -> Vec<Self> {
        V::tried(V::compiled_head_dim(head_dim)).into_iter().map(Self::of::<V>).collect()
    }

    /// The tiles version `V` prefers at `head_dim`, best first.
    pub fn preferred<V: Version>(head_dim: usize) -> Vec<Self> {
        V::preferred(V::compiled_head_dim(head_dim)).into_iter().map(Self::of::<V>).collect()
    }

    /// The same variant with `leave_out`'s parts of its work left out (its output is wrong).
    pub fn leaving_out(self, leave_out: LeaveOut) -> Self {
        Self { leave_out, ..self }
    }

    /// Whether parts of its work are left out (its output is then wrong).
    pub fn leaves_out_work(&self) -> bool {
        self.leave_out != LeaveOut::NOTHING
    }

    /// A short name: its tiles, and the parts left out.
    pub fn describe(&self) -> String {
        match self.leave_out {
            LeaveOut::NOTHING => self.choice.describe(),
            parts => format!("{} without {}", self.choice.describe(), parts.describe()),
        }
    }

    /// Query rows per workgroup.
    pub fn block_q(&self) -> usize {
        self.choice.block_q()
    }

    /// Bytes of workgroup memory at `head_dim` (padded as the version pads it).
    pub fn workgroup_bytes(&self, head_dim: usize) -> usize {
        self.choice.workgroup_bytes(head_dim)
    }

    /// Whether it fits `device`'s workgroup memory at `head_dim`.
    pub fn fits(&self, device: &wgpu::Device, head_dim: usize) -> bool {
        let available = device.limits().max_compute_workgroup_storage_size as usize;
        self.workgroup_bytes(head_dim) <= available
    }

    /// Whether `device` can run it at `head_dim`: the features the version requires, its own
    /// rules (subgroups that fit, threads within the device's limit), its workgroup memory.
    pub fn runs_on(&self, device: &wgpu::Device, head_dim: usize) -> bool {
        self.choice.check(device, head_dim).is_ok()
    }

    /// Its WGSL at `head_dim` (padded as the version pads it), without building it.
    pub fn shader(&self, head_dim: usize) -> Result<Shader, AttentionError> {
        self.choice.shader(head_dim, self.leave_out)
    }

    /// Compiled for `device` and `head_dim`.
    pub fn build(
        &self,
        device: &wgpu::Device,
        head_dim: usize,
    ) -> Result<Box<dyn Compiled>, AttentionError> {
        self.choice.build(device, head_dim, self.leave_out)
    }
}

/// Whether the kernel called `name` is one that `prefix` selects (the lab's `--only`): it
/// starts with `prefix`, and a prefix that is only a version number (`v1`) selects that
/// version, not one whose number starts the same way (`v1 register tiles`, not `v10 pairs`).
pub fn selected_by(name: &str, prefix: &str) -> bool {
    let only_a_number = !prefix.contains(' ') && prefix.ends_with(|c: char| c.is_ascii_digit());
    let rest = name.strip_prefix(prefix);
    rest.is_some_and(|rest| !(only_a_number && rest.starts_with(|c: char| c.is_ascii_digit())))
}

/// Whether a `--only` list, `prefixes`, selects the kernel called `name`: every kernel when the
/// list is empty (no `--only`), else those that one of them selects ([`selected_by`]).
pub fn selected_by_any(name: &str, prefixes: &[String]) -> bool {
    prefixes.is_empty() || prefixes.iter().any(|prefix| selected_by(name, prefix))
}

#[cfg(test)]
mod tests {
    use super::{selected_by, selected_by_any};

    #[test]
    fn a_prefix_selects_names_without_cutting_a_number_short() {
        assert!(selected_by("v1 register tiles", "v1"));
        assert!(!selected_by("v10 pairs", "v1"));
        assert!(selected_by("v10 pairs", "v10"));
        assert!(selected_by("v10 4 pairs, 32 keys", "v10 4 pairs"));
        assert!(selected_by("v8 8x1x16 rows, 16 keys", "v8 8x1x16 rows, 1"));
        assert!(!selected_by("v8 arena", "v9"));
        assert!(selected_by("v10 pairs", "v"));
    }

    #[test]
    fn no_list_selects_every_name_and_a_list_those_one_prefix_selects() {
        let list = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert!(selected_by_any("v10 pairs", &[]));
        assert!(selected_by_any("v10 pairs", &list(&["v8", "v10"])));
        assert!(!selected_by_any("v10 pairs", &list(&["v8", "v1"])));
    }
}
