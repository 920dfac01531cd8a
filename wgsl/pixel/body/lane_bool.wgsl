// A comparison's lane: 1 where EXPR of the lane's inputs a, b holds, else 0 (bool tensors hold i32 0/1).
r = select(0, 1, {{EXPR}});
