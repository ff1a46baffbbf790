// NOT STARTED: delete this line when you start.
//
// Exercise 10, main task: FlashAttention-2's softcap and ALiBi slopes in the fast f32 kernel,
// whose softmax works in base 2. See README.md ("The main task") and the book's chapters 1
// and 10.
//
// Start from your finished micro_tiles.wgsl: copy all of it below this comment (the host
// writes in its constants and unrolls its marked loops as before), then add:
//
// 1. The features, exactly these (the host binds them at @binding(6) and @binding(7)):
//
//        struct Features {
//            softcap: f32,  // c > 0, or 0 for no softcap
//            heads: u32,    // H: slice = b * H + h
//            pad0: u32,
//            pad1: u32,
//        }
//        @group(0) @binding(6) var<uniform> features: Features;
//        @group(0) @binding(7) var<storage, read> alibi_slopes: array<f32>;  // one per head
//
// 2. The score of query row i and key j as the oracle defines it, in natural units:
//        c tanh(scale q_i . k_j / c) - slope_h |i + Nkv - Nq - j|
//    (without a softcap: scale q_i . k_j - slope_h |...|), and only then in log2 units for
//    the kernel's exp2. The causal mask and the tail keys stay -inf, as before.
