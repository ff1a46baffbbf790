//! # lab — the measurements behind the GPU lessons
//!
//! Research, not lessons: the programs that time, tune, profile and take apart the course's
//! kernels, each a binary of `src/bin/` run as `cargo run --release -p lab --bin NAME -- ...`.
//! What they measured is kept in the book's lab notes, each output with its command, device
//! and date (`book/generate.sh` lists the commands).
//!
//! | binary | what it measures |
//! |---|---|
//! | `gpu_benchmark` | every registered GPU kernel against N, beside PyTorch's SDPA |
//! | `side_by_side` | lesson 10's versions beside PyTorch's backends in one run |
//! | `tune` | lesson 10's tile shapes and orders, parts of a kernel left out |
//! | `shader_stats` | the driver's statistics of each compiled kernel (registers, spills) |
//! | `sass` | the driver's machine code, from its pipeline cache |
//! | `occupancy` | workgroups resident at once against workgroup memory |
//! | `primitives` | the tensor-core primitives alone |
//! | `roofline` | lesson 10's versions against the GPU's roofs |
//! | `forward_time` | lesson 12's GPT-2 forward against PyTorch's |
//! | `consistency` | lesson 12's GPT-2 with every attention backend, against each other |
//! | `error_model` | every version's worst error as a fraction of the error model |
//! | `decode_experiment` | writes one of lesson 11's kept experiments as a shader to time |
//!
//! Its library holds what they share: [`patch`], unified diffs applied strictly, and
//! [`decode_experiments`], lesson 11's experiments as patches of its kernel.

pub mod decode_experiments;
pub mod patch;
