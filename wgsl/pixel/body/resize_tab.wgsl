// Resize's tap table (input 1, addressing words 28-41), read lane by lane through its own accessor whatever the
// draw's form: word i of the table.
fn tab(i: u32) -> f32 { var e: Coords; e.c[5] = i; let at = locate(28u, e); return textureLoad(X1, at.xy, 0)[at.z]; }
