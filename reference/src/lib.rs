//! # reference — the course's ground truth
//!
//! * [`contract`]: the one contract every forward implementation follows (shapes, scale,
//!   bottom-right causal mask, `O` and the logsumexp `L`), the shape validation they share,
//!   and the [`Forward`], [`Backward`] and [`Decoder`] signatures.
//! * [`version`]: what the registry knows about each implementation (name, lesson, operation,
//!   device, storage format, tolerance).
//! * [`oracle`]: attention in f64, straight from the definition. Every stage is tested
//!   against it.
//! * [`features`]: the oracle extended with FlashAttention's features: sliding window, ALiBi,
//!   softcap, dropout with a Philox mask, and the merge of split-key partial results.
//! * [`grouped`]: the oracle for grouped-query and multi-query attention (fewer K/V heads
//!   than query heads), and the mapping of query heads onto K/V heads.
//! * [`problem`]: seeded random problems (proptest strategies over them and the test bodies
//!   every stage shares are in the test-only `testkit` crate).
//! * [`compare`](mod@compare): the error model, and element-wise comparison with the oracle.
//! * [`memory`]: a counting allocator that measures peak heap bytes.
//! * [`layout`]: `[B, N, H, D]` <-> `[B, H, N, D]`.

pub mod compare;
pub mod contract;
pub mod error;
pub mod features;
pub mod grouped;
pub mod layout;
pub mod memory;
pub mod oracle;
pub mod problem;
pub mod version;

pub use compare::{
    Comparison, Tolerance, assert_close, check_agreement, check_gradient_agreement,
    check_gradients, check_output, compare,
};
pub use contract::{
    AttentionOptions, AttentionOutput, AttentionShape, Backward, CheckedInputs, Decoder,
    FilledCache, Forward, Gradients, check_backward_inputs, check_dims, check_finite, check_inputs,
    check_logsumexp, check_lse_shape, check_same_shape,
};
pub use error::{AttentionError, DeviceError, NonFiniteValue};
pub use features::{Dropout, Feature, Features, Window};
pub use grouped::HeadGroups;
pub use oracle::{Expected, ExpectedGradients};
pub use problem::{Problem, ProblemSpec};
pub use version::{
    About, BackwardVersion, DecodeVersion, Device, ForwardVersion, Operation, Storage,
};
