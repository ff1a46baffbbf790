// NOT STARTED: delete this line when you start.
//
// Exercise 09, main task: FlashAttention-2 forward with a sliding window (FlashAttention-2's
// window_size), in WGSL. See README.md ("The main task") and the book's chapters 3 and 9.
//
// The host compiles this file with your finished flash.wgsl appended, its entry point renamed
// flash_forward_without_window: its bindings, constants, visible_keys and load_tile are yours
// to use here, and this file's flash_forward is the kernel that runs. Write it as your
// warm-up's, with the window:
//
// 1. Which keys each row sees: a band [first, end) around its diagonal key i + Nkv - Nq, cut
//    by the causal mask (if params.causal == 1u) and by 0..Nkv; possibly empty.
// 2. Which tiles of keys the workgroup loads: the same blocks [t BLOCK_KV, (t + 1) BLOCK_KV)
//    as in the warm-up, only those some row of the workgroup sees, on both sides of the
//    window. The loop's bounds must be the same for every thread.
// 3. In each tile, each row uses only the keys of its band.

// Given: the window, bound by the host at @binding(7).
struct Window {
    left: u32,   // row i sees keys i + Nkv - Nq - left ..= i + Nkv - Nq + right
    right: u32,  // (an unbounded side arrives as left = Nkv or right = Nq)
    pad0: u32,
    pad1: u32,
}
@group(0) @binding(7) var<uniform> window: Window;

@compute @workgroup_size(BLOCK_Q)
fn flash_forward(
    @builtin(workgroup_id) tile: vec3<u32>,
    @builtin(num_workgroups) grid: vec3<u32>,
    @builtin(local_invocation_index) thread: u32,
) {
    let slice = tile.y;
    let q_start = tile.x * BLOCK_Q;
    let row = q_start + thread;
    let row_valid = row < params.q_len;

    // TODO: your warm-up's kernel with the window (steps 1 to 3 above).
    workgroupBarrier();

    // Given: report how many tiles this workgroup loaded.
    if thread == 0u {
        tiles_loaded[slice * grid.x + tile.x] = my_tiles_loaded;
    }
}
