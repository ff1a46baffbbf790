//! Planted-bug implementations ("mutants") of every exercise: each carries exactly one classic
//! mistake. The self-check proves that the hidden checks catch every one of them, each with
//! the check meant to catch it (so that the hint a learner sees fits the mistake), and that the
//! same implementation with no bug switched on, the control, passes every check.
//!
//! Each exercise has one small implementation with a switch per bug, written plainly (loops
//! over rows and keys) so that the mistake is easy to see, in its own folder
//! (`src/exNN/mutants.rs`); this file holds what they share.

use std::sync::atomic::AtomicUsize;

use ndarray::{Array1, ArrayView1};
use reference::AttentionShape;

// ANCHOR: planted_bugs
/// Declares a set of planted bugs: the enum, and its [`Bug`] implementation: `ALL` (every
/// variant, listed by the macro itself, so none can be left out of the self-check) and
/// `caught_by`, the check meant to catch each one (an exhaustive match).
macro_rules! planted_bugs {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$doc:meta])* $bug:ident => $check:expr, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $( $(#[$doc])* $bug, )+
        }

        impl $crate::mutants::Bug for $name {
            const ALL: &'static [Self] = &[$(Self::$bug,)+];

            fn caught_by(self) -> &'static str {
                match self {
                    $( Self::$bug => $check, )+
                }
            }
        }
    };
}
// ANCHOR_END: planted_bugs

pub(crate) use planted_bugs;

/// A set of planted bugs, as [`planted_bugs!`] declares it.
pub trait Bug: Copy + PartialEq + std::fmt::Debug + 'static {
    /// Every planted bug of this set.
    const ALL: &'static [Self];

    /// The name of the check meant to catch this bug.
    fn caught_by(self) -> &'static str;
}

/// An exercise's planted-bug implementation with one bug switched on, or none (the control,
/// which must pass every check: a mutant is only caught if the control is not).
#[derive(Debug)]
pub struct Planted<B> {
    /// The bug, or `None` for the control.
    pub bug: Option<B>,
    /// Tiles of scores computed so far (exercise 03 reports them; atomic because exercise 07's
    /// checks share the implementation with rayon's threads).
    pub(crate) tiles: AtomicUsize,
}

impl<B: Copy + PartialEq> Planted<B> {
    /// The implementation with `bug`.
    pub fn with(bug: B) -> Self {
        Self { bug: Some(bug), tiles: AtomicUsize::new(0) }
    }

    /// The implementation with no bug.
    pub fn control() -> Self {
        Self { bug: None, tiles: AtomicUsize::new(0) }
    }

    pub(crate) fn has(&self, bug: B) -> bool {
        self.bug == Some(bug)
    }
}

/// Every `(batch, head, query row)` of `shape`.
pub(crate) fn rows(shape: &AttentionShape) -> impl Iterator<Item = (usize, usize, usize)> + use<> {
    let (batch, heads, q_len) = (shape.batch, shape.heads, shape.q_len);
    (0..batch).flat_map(move |b| (0..heads).flat_map(move |h| (0..q_len).map(move |i| (b, h, i))))
}

/// The largest score (`-inf` for none).
pub(crate) fn row_max(scores: &[f32]) -> f32 {
    scores.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x))
}

/// `sum_j weights[j] * value(j)`.
pub(crate) fn weighted_sum<'a>(
    weights: &[f32],
    value: impl Fn(usize) -> ArrayView1<'a, f32>,
) -> Array1<f32> {
    let mut sum = Array1::zeros(value(0).len());
    for (j, &w) in weights.iter().enumerate() {
        sum.scaled_add(w, &value(j));
    }
    sum
}
