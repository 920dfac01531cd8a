// The role of gather_nd.wgsl and gather_elements.wgsl in a ScatterND or ScatterElements: A the indices, B the
// updates; update i is written at off of Y.
// WINDOWED: the output passes the binding limit and Y is its block [pu(18), pu(19)) (an update outside it is
// another dispatch's).
override WINDOWED: bool = false;

fn index_component(at: u32) -> i32 { return A[at]; }

fn store(i: u32, off: u32) {
    if (!WINDOWED) {
        Y[off] = B[i];
    } else if (off >= pu(18u) && off < pu(19u)) {
        Y[off - pu(18u)] = B[i];
    }
}
