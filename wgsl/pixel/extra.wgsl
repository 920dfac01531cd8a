// A pixel program's own parameter words, after those of its generated parts (addressing, lane parameters): word
// EXTRA + i, as u32, f32 or i32. The builder substitutes EXTRA.
fn pe(i: u32) -> u32 { return pu({{EXTRA}}u + i); }
fn pef(i: u32) -> f32 { return bitcast<f32>(pe(i)); }
fn pei(i: u32) -> i32 { return bitcast<i32>(pe(i)); }
