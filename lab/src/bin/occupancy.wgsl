// How many workgroups the driver keeps on the GPU at once (lab/src/bin/occupancy.rs):
// each workgroup of THREADS threads declares WORKGROUP_VEC4S vec4s of workgroup memory (and
// touches all of them, so that the compiler keeps them), counts itself in `live` when it
// starts, records the largest count seen in `peak`, spins for SPIN dependent multiply-adds
// (long enough that every workgroup of the first round has started before any ends), and
// counts itself out. `peak` over a grid many times larger than the GPU holds is then the
// number of workgroups resident at once: per multiprocessor, what the registers, the threads
// and the workgroup memory leave room for.

const THREADS: u32 = 128u;
const WORKGROUP_VEC4S: u32 = 1024u;
const SPIN: u32 = 100000u;

struct Counters {
    live: atomic<u32>,
    peak: atomic<u32>,
}

@group(0) @binding(0) var<storage, read_write> counters: Counters;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

var<workgroup> held: array<vec4<f32>, WORKGROUP_VEC4S>;

@compute @workgroup_size(THREADS)
fn main(
    @builtin(local_invocation_index) thread: u32,
    @builtin(workgroup_id) group: vec3<u32>,
) {
    for (var e = thread; e < WORKGROUP_VEC4S; e += THREADS) {
        held[e] = vec4<f32>(f32(e));
    }
    if thread == 0u {
        let now = atomicAdd(&counters.live, 1u) + 1u;
        atomicMax(&counters.peak, now);
    }
    workgroupBarrier();
    var x = held[(thread * 7u) % WORKGROUP_VEC4S].x;
    for (var i = 0u; i < SPIN; i++) {
        x = fma(x, 0.999, 0.001);
    }
    workgroupBarrier();
    if thread == 0u {
        atomicSub(&counters.live, 1u);
    }
    out[group.x * THREADS + thread] = x;
}
