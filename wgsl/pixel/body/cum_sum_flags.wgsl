// CumSum's attributes (cum_sum.wgsl): EXCLUSIVE leaves each element out of its own sum, REVERSE sums from the end.
override EXCLUSIVE: bool = false;
override REVERSE: bool = false;
