// checked(v, len, slot): a data-driven index v checked against len into fault slot word slot (common/faults.wgsl):
// NEGATIVE_OK, indices count from the end (checked_index), else a negative one is out of range too (checked_nonneg).
override NEGATIVE_OK: bool = true;

fn checked(v: i32, len: i32, slot: u32) -> i32 {
    if (NEGATIVE_OK) { return checked_index(v, len, slot); }
    return checked_nonneg(v, len, slot);
}
