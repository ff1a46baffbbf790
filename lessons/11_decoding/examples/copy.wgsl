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

// Reading alone, as a decode kernel does: every 16 bytes of `source` read once, four loads in
// flight per thread, folded with xor into one value per thread (written, so that the loads
// are not optimised away).
@compute @workgroup_size(THREADS)
fn read_only(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * THREADS;
    let n = arrayLength(&source);
    var folded = vec4<u32>(0u);
    var i = id.x;
    for (; i + 3u * stride < n; i += 4u * stride) {
        let a = source[i];
        let b = source[i + stride];
        let c = source[i + 2u * stride];
        let d = source[i + 3u * stride];
        folded ^= (a ^ b) ^ (c ^ d);
    }
    for (; i < n; i += stride) {
        folded ^= source[i];
    }
    destination[id.x] = folded;
}
