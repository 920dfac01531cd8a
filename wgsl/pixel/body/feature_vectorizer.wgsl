// FeatureVectorizer: output column j reads the input whose columns it falls in (pe(0) inputs, input k's columns
// from pe(1 + 2k) for pe(2 + 2k) columns: cut to its width), zero where the input is padded out.
r = 0.0;
let j = c.c[5];
for (var k = 0u; k < pe(0u); k++) {
    let first = pe(1u + 2u * k);
    if (j >= first && j < first + pe(2u + 2u * k)) {
        var d = c;
        d.c[5] = j - first;
        r = x_at(k, d);
    }
}
