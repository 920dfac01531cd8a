// Trilu's attribute (trilu.wgsl): UPPER keeps the upper triangle, else the lower.
override UPPER: bool = true;
