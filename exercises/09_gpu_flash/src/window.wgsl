// NOT STARTED: delete this line when you start.
//
// Exercise 09, main task: FlashAttention-2 forward with a sliding window (FlashAttention-2's
// window_size), in WGSL. See README.md ("The main task") and the book's chapters 3 and 9.
//
// Start from your finished flash.wgsl: copy all of it below this comment, keep its bindings,
// constants, entry point (flash_forward) and the given code, then add the window:
//
// 1. The window uniform, exactly this (the host binds it at @binding(7)):
//
//        struct Window {
//            left: u32,   // row i sees keys i + Nkv - Nq - left ..= i + Nkv - Nq + right
//            right: u32,  // (an unbounded side arrives as left = Nkv or right = Nq)
//            pad0: u32,
//            pad1: u32,
//        }
//        @group(0) @binding(7) var<uniform> window: Window;
//
// 2. Which keys each row sees: a band [first, end) around its diagonal key i + Nkv - Nq, cut
//    by the causal mask (if params.causal == 1u) and by 0..Nkv; possibly empty.
// 3. Which tiles of keys the workgroup loads: the same blocks [t BLOCK_KV, (t + 1) BLOCK_KV)
//    as in the warm-up, only those some row of the workgroup sees, on both sides of the
//    window. The loop's bounds must be the same for every thread.
// 4. In each tile, each row uses only the keys of its band.
