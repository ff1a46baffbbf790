// NOT STARTED: delete this line when you start.
//
// Exercise 08, main task: naive attention with dropout on the weights (FlashAttention-2's
// dropout_p), its mask drawn on the GPU from Philox-4x32-10. See README.md ("The main task")
// and the book's chapter 8.
//
// Start from your finished naive.wgsl: copy all of it below this comment, keep its bindings,
// entry points and workgroup sizes, then add dropout:
//
// 1. The dropout uniform, exactly this (the host binds it at @binding(7) to each of your
//    kernels that reads it):
//
//        struct Dropout {
//            threshold: u32,   // weight kept iff its random word >= threshold (floor(p 2^32))
//            seed_lo: u32,     // Philox's key: the seed's low and high 32 bits
//            seed_hi: u32,
//            heads: u32,       // H: slice = b * H + h
//            keep_scale: f32,  // 1 / (1 - p), what a kept weight is multiplied by
//            pad0: u32,
//            pad1: u32,
//            pad2: u32,
//        }
//        @group(0) @binding(7) var<uniform> dropout: Dropout;
//
// 2. The 64-bit product of two u32, as (high word, low word), with only 32-bit integers.
// 3. Philox-4x32-10 (the README gives its definition).
// 4. Each weight (b, h, i, j) kept or dropped by the first word of Philox with the counter
//    (j, i, h, b) and the key (seed_lo, seed_hi); kept ones times keep_scale, L unchanged.
