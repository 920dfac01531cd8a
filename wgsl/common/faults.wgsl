// Bounds checks of data-driven indices (Gather, Scatter, ...): an index outside [-len, len) is never
// used; it is recorded in the program's fault buffer, which rides back with the run's outputs and
// turns into an IndexOutOfRangeError naming the layer (gpu_compute.IndexCheck).
// A checking shader declares, as its last binding,
//     var<storage, read_write> FAULTS: array<atomic<u32>>;
// and gets the first word of its slots as a parameter. Slot s is two words, zero when nothing is wrong:
//   word 2s:     max over indices v >= len of v - len + 1      (the largest index past the end)
//   word 2s + 1: max over indices v < -len of -len - v         (the smallest index below -len)
// The program clears them at the start of every run.

// ``v`` wrapped into [0, len) when it lies in [-len, len); otherwise -1, recorded in slot word ``slot``.
fn checked_index(v: i32, len: i32, slot: u32) -> i32 {
    if (v >= len) {
        atomicMax(&FAULTS[slot], bitcast<u32>(v - len) + 1u);  // v - len in [0, 2^31): no overflow
        return -1;
    }
    if (v < -len) {
        atomicMax(&FAULTS[slot + 1u], 0u - bitcast<u32>(v + len));  // -(v + len) in (0, 2^31], as u32
        return -1;
    }
    return select(v, v + len, v < 0);
}

// ``v`` when it lies in [0, len) (an op that gives negative indices no meaning); otherwise -1, recorded in slot
// word ``slot``: past the end as checked_index does, below 0 as -v in the second word (IndexCheck.negative_ok).
fn checked_nonneg(v: i32, len: i32, slot: u32) -> i32 {
    if (v >= len) {
        atomicMax(&FAULTS[slot], bitcast<u32>(v - len) + 1u);
        return -1;
    }
    if (v < 0) {
        atomicMax(&FAULTS[slot + 1u], 0u - bitcast<u32>(v));  // -v in (0, 2^31], as u32
        return -1;
    }
    return v;
}

// A value a program must refuse (a NaN fed to Binarizer): flat element index ``flat`` (below 2^30) recorded in slot
// word ``slot`` so that the smallest one wins (IndexCheck.value_error turns it into the CPU kernel's error).
fn value_fault(flat: u32, slot: u32) {
    atomicMax(&FAULTS[slot], 0x40000000u - flat);
}
