// The copy the decode benchmark measures memory bandwidth with: every 16 bytes of one buffer
// read once and written once to another, by a grid of threads striding over the buffer.

@group(0) @binding(0) var<storage, read> source: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> destination: array<vec4<u32>>;

override THREADS: u32 = 256u;

@compute @workgroup_size(THREADS)
fn copy(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * THREADS;
    for (var i = id.x; i < arrayLength(&source); i += stride) {
        destination[i] = source[i];
    }
}
