// The role of gather_nd.wgsl and gather_elements.wgsl in a GatherND or GatherElements: A the data, B the
// indices; element i of Y is the data's element at off.
// WINDOWED: the data passes the binding limit and A is its block [pu(18), pu(19)) (an output whose element lies
// outside is another dispatch's).
override WINDOWED: bool = false;

fn index_component(at: u32) -> i32 { return B[at]; }

fn store(i: u32, off: u32) {
    if (!WINDOWED) {
        Y[i] = A[off];
    } else if (off >= pu(18u) && off < pu(19u)) {
        Y[i] = A[off - pu(18u)];
    }
}
